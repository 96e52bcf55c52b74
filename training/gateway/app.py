"""The policy endpoint: OpenAI-compatible chat completions from the latest checkpoint, recorded.

    GET  /v1/models                                  the policy under its stable alias ("student") and as
                                                     student@{step}, each with its checkpoint_step, its
                                                     episode_log (the log's URL, any password masked) and,
                                                     when the engine knows it, max_model_len (vLLM's name
                                                     for the context length)
    POST /v1/chat/completions                        a completion (or, with stream=true, its events), recorded:
                                                     into the episode whose API key it carries (or, with the
                                                     token, that an X-Rlide-Episode header names), else into
                                                     the episode of the conversation it continues
                                                     (`conversations`; n>1: not recorded)
    POST /episodes                                   {"task", "workspace"?} -> a new `policy` episode's id, its
                                                     base URL and its API key (`episode_keys`); with a
                                                     workspace, its start state is captured and its verifier
                                                     named (`workspaces`)
    GET  /episodes/{id}/v1/models                    same as /v1/models (for clients given a base URL)
    POST /episodes/{id}/v1/chat/completions          a completion recorded into episode {id} with its
                                                     prompt/completion token ids and per-token logprobs
    POST /episodes/{id}/end                          {"outcome": success|failure|aborted, "reward"?}: the outcome
                                                     is recorded as MCP's end_episode records it (+1, -1, 0);
                                                     the reward, a claim (never verified evidence); with a
                                                     workspace, its end state is captured and verified by
                                                     rlide (the answer's "verification")

An agent pointed at `http://host:port/episodes/{id}/v1` as its OpenAI base URL, or at
`http://host:port/v1` with the episode's API key, produces a policy episode whose every assistant
turn is exactly what was sampled, which is what GRPO trains on.

Auth: with a token (`RLIDE_POLICY_TOKEN`) every route needs `Authorization: Bearer <token>`, which is
what an OpenAI client sends for `api_key=<token>`; without one the endpoint binds loopback only
(`common.http_auth`, the same rule and middleware as the MCP HTTP transport). Web pages: the same
rules as the dashboard (`common.web_guard`, `common.json_body`): a request from another origin is
refused (403), so is a foreign Host on a loopback bind (DNS rebinding), a body not sent as
`application/json` (415), and no response may be framed. API clients send JSON and no Origin.

The model behind it is a `PolicyEngine` (`training.gateway.engines.policy_engine`): `TransformersEngine`
serves a cpu run's checkpoints and reloads when a newer one appears; `ProxyEngine` forwards to the
server a GPU run's worker published (ART's vLLM) or to `--upstream`. This module imports no torch;
the engine does, when it is built.
"""

from __future__ import annotations

import contextlib
import errno
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from common.allowed_folders import FolderNotAllowed
from common.http_auth import check_bind, protect
from common.json_body import JsonBodyError, read_json
from common.web_guard import ApiGuard
from episodes.codec import encode_choice
from episodes.db import EpisodeClosed, EpisodeNotFound, PolicyTurnRefused, mask_url_password
from episodes.policy_turns import EncodedTurn
from episodes.records import EpisodeSource, EpisodeStatus, EpisodeVerifier, RewardSource, StateKind
from episodes.store import EpisodeStore
from training.backends.base import BackendConfig
from training.gateway.conversations import Conversations, LastTurns, prior_turn, redacted_request
from training.gateway.engines import BadRequest, Completion, PolicyEngine, policy_engine
from training.gateway.episode_keys import EPISODE_HEADER, KEY_PATHS, episode_of, is_episode_key, mint
from training.gateway.workspaces import EpisodeWorkspaces, WorkspaceRules
from training.recording.capture import capture
from training.recording.verification_hub import describe_verifier
from training.scenarios.snapshots import GitSnapshots, Snapshot, SnapshotUnavailable

MAX_TOKENS_LIMIT = 4096
FORWARDED_OPTIONS = (
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "top_k",
    "min_p",
    "repetition_penalty",
)
"""OpenAI (and vLLM) request options an engine that forwards to a server passes on as sent, for that
server to honor or refuse; an engine that samples itself (the cpu one) ignores them."""
TOKEN_ENV = "RLIDE_POLICY_TOKEN"
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Largest request body read. A 128k-token conversation is well under 1 MB of JSON."""
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
B = TypeVar("B", bound=BaseModel)


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status)


async def _json_body(request: Request, *, unique_keys: bool = True) -> Any:
    """The request's body as strict JSON (`common.json_body`: `application/json` only, at most
    `MAX_REQUEST_BYTES`, no NaN, invalid UTF-8, lone surrogate (a 500 from deep inside `tokenizers`
    later) or deep nesting), else BadRequest with the status to answer (400, 413, 415)."""
    try:
        return await read_json(request, MAX_REQUEST_BYTES, unique_keys=unique_keys)
    except JsonBodyError as exc:
        raise BadRequest(str(exc), exc.status) from exc


def _message(message: Any, index: int) -> dict[str, Any]:
    """One chat message as the chat template can render it, or BadRequest naming what is wrong: the
    template renders a wrong type as its Python repr (or fails), which the policy would be sampled
    and trained on and a recorded episode would keep. Content given as a list of text parts (what
    newer OpenAI clients send) is joined into one string, as vLLM does; any other part is refused:
    the model reads text."""
    where = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise BadRequest(f"{where} must be an object whose role is one of {', '.join(sorted(ROLES))}")
    checked: dict[str, Any] = message
    content = checked.get("content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise BadRequest(f"a content part of type {kind!r}: this endpoint serves a text model; send text")
            texts.append(part["text"])
        checked = {**checked, "content": "\n".join(texts)}
    elif not (isinstance(content, str) or (content is None and checked["role"] == "assistant")):
        raise BadRequest(f"{where}.content must be a string or a list of text parts (null only for an assistant)")
    calls = checked.get("tool_calls")
    if calls is not None and not (isinstance(calls, list) and all(_is_call(call) for call in calls)):
        raise BadRequest(
            f"{where}.tool_calls must be a list of"
            ' {"type": "function", "function": {"name": "...", "arguments": "JSON text"}} objects'
        )
    return checked


def _is_call(call: Any) -> bool:
    """An assistant's tool call: OpenAI's shape; `arguments` as an object too, which templates take."""
    return _is_function(call, default_type="function") and isinstance(call["function"].get("arguments"), str | dict)


def _is_tool(tool: Any) -> bool:
    return _is_function(tool, default_type=None)


def _is_function(value: Any, *, default_type: str | None) -> bool:
    """`{"type": "function", "function": {"name": str, ...}}`; `type` may be left out when it defaults."""
    if not isinstance(value, dict):
        return False
    function = value.get("function")
    return (
        value.get("type", default_type) == "function"
        and isinstance(function, dict)
        and isinstance(function.get("name"), str)
    )


def served_names(alias: str, step: int) -> tuple[str, str]:
    """The names the endpoint answers to: the stable alias, and the checkpoint served now as ART's
    vLLM names it (`alias@step`)."""
    return alias, f"{alias}@{step}"


def parse_request(body: Any, alias: str, step: int) -> dict[str, Any]:
    """Validate an OpenAI chat request; return the fields the engine takes. The model is the stable
    alias, or the checkpoint served now by its vLLM name (`alias@step`, as ART's vLLM serves it)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in served_names(alias, step):
        raise BadRequest(
            f"model {model!r} does not exist: this endpoint serves {alias!r} ({alias}@{step})", 404, "model_not_found"
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of {role, content} objects")
    # OpenAI's options are nullable: a client that writes every field (`"temperature": null`) means
    # the default, as the OpenAI and vLLM servers read it.
    n = _given(body, "n", 1)
    max_tokens = _given(body, "max_completion_tokens", _given(body, "max_tokens", 256))
    temperature = _given(body, "temperature", 1.0)
    top_p = _given(body, "top_p", 1.0)
    seed = body.get("seed")
    tools = body.get("tools")
    if not isinstance(n, int) or not 1 <= n <= 16:
        raise BadRequest("n must be an integer from 1 to 16")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("max_tokens must be a positive integer")
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
        raise BadRequest("temperature must be a number from 0 to 2")
    if not isinstance(top_p, int | float) or isinstance(top_p, bool) or not 0 < top_p <= 1:
        raise BadRequest("top_p must be a number above 0 and at most 1")
    if seed is not None and not (isinstance(seed, int) and -(2**63) <= seed < 2**63):
        raise BadRequest("seed must be a 64-bit integer")
    if tools is not None and not (isinstance(tools, list) and all(_is_tool(tool) for tool in tools)):
        raise BadRequest('tools must be a list of {"type": "function", "function": {"name": "...", ...}} objects')
    stream, include_usage = _streaming(body)
    return {
        "messages": [_message(m, i) for i, m in enumerate(messages)],
        "n": n,
        # A bound, not a demand: agents ask for their own model's limit (16k, 32k), which a refusal
        # would turn into no episode at all; a capped answer says so with finish_reason "length".
        "max_tokens": min(max_tokens, MAX_TOKENS_LIMIT),
        "temperature": float(temperature),
        "top_p": float(top_p),
        "seed": seed,
        "tools": tools,
        "stop": _stop_strings(body.get("stop")),
        "options": {k: body[k] for k in FORWARDED_OPTIONS if k in body},
        "logprobs": bool(body.get("logprobs", False)),
        "return_token_ids": bool(body.get("return_token_ids", False)),
        "stream": stream,
        "include_usage": include_usage,
    }


def _given(body: dict[str, Any], key: str, default: Any) -> Any:
    value = body.get(key)
    return default if value is None else value


def _stop_strings(stop: Any) -> list[str] | None:
    """OpenAI's `stop`: a string or up to 4 of them."""
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and not (
        isinstance(stop, list) and len(stop) <= 4 and all(isinstance(x, str) and x for x in stop)
    ):
        raise BadRequest("stop must be a string or a list of up to 4 non-empty strings")
    return stop or None


def _streaming(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, include the usage chunk) of a request."""
    stream, options = _given(body, "stream", False), body.get("stream_options") or {}
    if not isinstance(stream, bool) or not isinstance(options, dict):
        raise BadRequest("stream must be true or false, stream_options an object")
    return stream, stream and bool(options.get("include_usage", False))


def completion_response(
    alias: str, completion: Completion, want_logprobs: bool, want_token_ids: bool = False
) -> dict[str, Any]:
    """The OpenAI response; with `want_token_ids` (vLLM's `return_token_ids`) also the prompt's
    token ids and each choice's, where vLLM puts them."""
    choices = []
    for choice, ids in zip(completion.choices, completion.completion_token_ids, strict=True):
        c = dict(choice)
        if not want_logprobs:
            c["logprobs"] = None
        if want_token_ids:
            c["token_ids"] = ids
        choices.append(c)
    n_completion = sum(len(ids) for ids in completion.completion_token_ids)
    extra = {"prompt_token_ids": completion.prompt_token_ids} if want_token_ids else {}
    return {
        **extra,
        "id": "chatcmpl-" + uuid.uuid4().hex[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": alias,
        "system_fingerprint": f"{alias}@{completion.checkpoint_step}",
        "choices": choices,
        "usage": {
            "prompt_tokens": len(completion.prompt_token_ids),
            "completion_tokens": n_completion,
            "total_tokens": len(completion.prompt_token_ids) + n_completion,
        },
    }


def completion_events(response: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """`response` (`completion_response`'s) as the server-sent events of a streamed completion:
    per choice, one chunk with the whole message and its logprobs, then one with its finish
    reason; the usage chunk if asked for (`stream_options.include_usage`); then `[DONE]`. The
    completion is sampled (and recorded) before the first event, so a client that streams gets
    exactly what a client that does not gets, only framed as chunks."""
    head = {k: response[k] for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"
    if include_usage:
        head["usage"] = None

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        chunk = {**head, "choices": choices, **extra}
        # As JSONResponse writes a completion: compact, UTF-8, no NaN.
        text = json.dumps(chunk, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return b"data: " + text.encode() + b"\n\n"

    for choice in response["choices"]:
        message, index = choice["message"], choice["index"]
        delta = {"role": "assistant", "content": message.get("content")}
        if message.get("refusal") is not None:
            delta["refusal"] = message["refusal"]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        yield event([{"index": index, "delta": delta, "logprobs": choice["logprobs"], "finish_reason": None}])
        yield event([{"index": index, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}])
    if include_usage:
        yield event([], usage=response["usage"])
    yield b"data: [DONE]\n\n"


def _refusal(episode_id: str, source: EpisodeSource, status: EpisodeStatus) -> str | None:
    """Why a turn cannot be recorded into this episode, or None when it can."""
    if source is not EpisodeSource.policy:
        return f"episode {episode_id} records the IDE's own model; POST /episodes for a policy episode"
    if status is not EpisodeStatus.open:
        return f"episode {episode_id} has ended ({status.value}); POST /episodes for a new one"
    return None


class NewEpisode(BaseModel):
    """`POST /episodes`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    task: str = Field(min_length=1, pattern=r"\S", description="what the agent is asked to do")
    client: str | None = Field(None, max_length=200, description="the agent's name (default: gateway)")
    workspace: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="the project folder the agent works in (under the endpoint's --workspace roots): its state is"
        " captured at the start and the end, and its own tests verify the end",
    )
    batch: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="the agent run (`rlide agent run`) it is an attempt of"
    )
    batch_size: int | None = Field(None, ge=2, le=256, description="that run's number of attempts")

    @model_validator(mode="after")
    def _batch_whole(self) -> NewEpisode:
        if (self.batch is None) != (self.batch_size is None):
            raise ValueError("batch and batch_size go together: the run's id and its number of attempts")
        return self


class EndEpisode(BaseModel):
    """`POST /episodes/{id}/end`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    outcome: Literal["success", "failure", "aborted"]
    reward: float | None = Field(None, ge=-1.0, le=1.0, description="the caller's own judgement: a claim")


def _validated(model: type[B], body: Any) -> B:
    """`body` as `model`, or BadRequest naming each wrong field and the shape to send."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        fields = ", ".join(
            f'"{name}"' + ("" if f.is_required() else " (optional)") for name, f in model.model_fields.items()
        )
        raise BadRequest(f"{problems}. Send a JSON object with {fields}") from exc


class EpisodeKeyAuth:
    """ASGI middleware: a request whose bearer is an episode key (`episode_keys`) goes to the `/v1`
    routes it may reach, as that episode's (`scope["state"]["episode_id"]`), without the token; a
    key this endpoint did not mint is refused (401), as is a key sent anywhere else (403). Every
    other request goes to `protected` (the token's check, when there is a token)."""

    def __init__(self, protected: ASGIApp, routes: ASGIApp, token: str | None) -> None:
        self.protected = protected
        self.routes = routes
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            supplied = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            scheme, _, key = supplied.partition(" ")
            if scheme.lower() == "bearer" and is_episode_key(key.strip()):
                episode_id = episode_of(key.strip(), self.token)
                if episode_id is None:
                    refused = _error(
                        401,
                        "not an episode key this endpoint minted (for another token, or altered): POST /episodes"
                        " for a new episode and its api_key",
                        code="invalid_api_key",
                    )
                    return await refused(scope, receive, send)
                if scope["path"] not in KEY_PATHS:
                    refused = _error(
                        403,
                        f"an episode key reaches {', '.join(sorted(KEY_PATHS))} only: starting and ending"
                        " episodes needs the endpoint's token",
                        code="episode_key_scope",
                    )
                    return await refused(scope, receive, send)
                scope = {**scope, "state": {**scope.get("state", {}), "episode_id": episode_id}}
                return await self.routes(scope, receive, send)
        await self.protected(scope, receive, send)


def _episode_named(request: Request) -> str | None:
    """The episode a request records into: its URL's, its episode key's, or the `X-Rlide-Episode`
    header's (BadRequest when the key and the header disagree)."""
    by_path = request.path_params.get("episode_id")
    if by_path is not None:
        return str(by_path)
    by_key = request.scope.get("state", {}).get("episode_id")
    by_header = request.headers.get(EPISODE_HEADER) or None
    if by_key is not None and by_header not in (None, by_key):
        raise BadRequest(f"the API key is episode {by_key}'s, the {EPISODE_HEADER} header names another", 403)
    return by_key or by_header


class Gateway:
    """The ASGI app and what it holds: the engine, the episode log, the served alias.

    `token`: when set, `app` refuses (401, OpenAI error shape) every request without
    `Authorization: Bearer <token>`. Whatever the token, `app` refuses what a web page could send
    (`common.web_guard.ApiGuard`: another origin; on a loopback `bind_host`, a foreign Host) and
    forbids framing; `routes` is the unprotected Starlette app underneath."""

    def __init__(
        self,
        engine: PolicyEngine,
        store: EpisodeStore,
        *,
        token: str | None = None,
        recorded_model: str | None = None,
        bind_host: str | None = None,
        workspaces: WorkspaceRules | None = None,
    ) -> None:
        """`recorded_model`: the name a recorded turn gives its model, `{recorded_model}@{step}`: the run's
        (`BackendConfig.run_model_name`), so the run's worker trains on its own episodes only.
        `bind_host`: the address `app` is served on (`serve`); whoever serves `app` on a socket
        passes it, so that a loopback bind refuses a DNS-rebinding Host. None: served in-process.
        `workspaces`: the folders whose episodes are captured and verified (`gateway.workspaces`)."""
        self.engine = engine
        self.store = store
        self.alias = engine.model_id
        self.recorded_model = recorded_model or self.alias
        self.episode_log = mask_url_password(store.url)
        """The episode log recorded into, as /v1/models shows it (a password in its URL masked)."""
        self.last_turns = LastTurns()
        self.conversations = Conversations(self.last_turns)
        self.workspaces = EpisodeWorkspaces(store, workspaces or WorkspaceRules())
        self.routes = Starlette(
            lifespan=self._lifespan,
            routes=[
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/episodes", self.new_episode, methods=["POST"]),
                Route("/episodes/{episode_id}/v1/models", self.models, methods=["GET"]),
                Route("/episodes/{episode_id}/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/episodes/{episode_id}/end", self.end_episode, methods=["POST"]),
            ],
        )
        self.token = token
        self.app = ApiGuard(
            EpisodeKeyAuth(protect(self.routes, token, token_env=TOKEN_ENV), self.routes, token),
            bind_host=bind_host,
            refuse=lambda status, message: _error(status, message, code="cross_site_request"),
        )

    async def models(self, request: Request) -> JSONResponse:
        """The stable alias, and the checkpoint it serves now by the name ART's vLLM gives it; each
        model says its checkpoint step and the episode log its recorded calls go to (`episode_log`:
        fields OpenAI's clients keep as extras). For an episode's calls (its base URL, key or header),
        the episode must exist."""
        try:
            episode_id = _episode_named(request)
            if episode_id is not None:
                await anyio.to_thread.run_sync(self.store.get_episode, episode_id)
            step = await anyio.to_thread.run_sync(self.engine.refresh)
        except EpisodeNotFound as exc:
            return _error(404, f"{exc}: POST /episodes to start one", code="episode_not_found")
        except BadRequest as exc:  # an upstream that serves nothing usable (`ProxyEngine`)
            return _error(exc.status, str(exc), code=exc.code)
        listed = [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "rlide",
                "checkpoint_step": step,
                "episode_log": self.episode_log,
                **({"max_model_len": context} if (context := self.engine.context_length) is not None else {}),
            }
            for name in served_names(self.alias, step)
        ]
        return JSONResponse({"object": "list", "data": listed})

    async def chat(self, request: Request) -> Response:
        try:
            episode_id = _episode_named(request)
            # Keys seen twice are let through here: a chat body is the hot path and large, and the value
            # recorded is the one sampled from (no reward rides on it).
            body = await _json_body(request, unique_keys=False)
            step = self.engine.checkpoint_step
            if isinstance(body, dict) and body.get("model") not in (None, *served_names(self.alias, step)):
                step = await anyio.to_thread.run_sync(self.engine.refresh)  # asked for a newer checkpoint?
            engine, step = self._pinned(body, step)
            args = parse_request(body, self.alias, step)
            if episode_id is not None and args["n"] != 1:
                raise BadRequest("a recorded episode follows one path: call with n=1")
            want_logprobs, want_ids = args.pop("logprobs"), args.pop("return_token_ids")
            stream, include_usage = args.pop("stream"), args.pop("include_usage")
            # One trip off the event loop per request: sample and record (committed before we answer).
            client = request.headers.get("user-agent")
            completion = await anyio.to_thread.run_sync(self._complete, engine, episode_id, args, client)
        except BadRequest as exc:
            return _error(exc.status, str(exc), code=exc.code)
        except EpisodeNotFound as exc:
            return _error(404, f"{exc}: POST /episodes to start one", code="episode_not_found")
        response = completion_response(self.alias, completion, want_logprobs, want_ids)
        if stream:
            return StreamingResponse(completion_events(response, include_usage), media_type="text/event-stream")
        return JSONResponse(response)

    def _pinned(self, body: Any, step: int) -> tuple[PolicyEngine, int]:
        """The engine that answers the model a request names, and its step: the current checkpoint,
        or the one a client pinned as `alias@N` while it is still served (`PolicyEngine.at_step`)."""
        model = body.get("model") if isinstance(body, dict) else None
        prefix = f"{self.alias}@"
        if not isinstance(model, str) or not model.startswith(prefix) or not model[len(prefix) :].isdigit():
            return self.engine, step
        engine = self.engine.at_step(int(model[len(prefix) :]))
        if engine is None:
            raise BadRequest(
                f"model {model!r} is served no more: this endpoint serves {self.alias!r} ({self.alias}@{step}); a"
                " checkpoint it moved on from answers to its name for a grace period only",
                404,
                "model_not_found",
            )
        return engine, engine.checkpoint_step

    def _complete(
        self, engine: PolicyEngine, episode_id: str | None, args: dict[str, Any], client: str | None
    ) -> Completion:
        """Sample from `engine` and record: into `episode_id`, or (a call naming none) into the
        episode of the conversation it continues, opened for it if it continues none (`conversations`)."""
        if episode_id is not None:
            return self._record(engine, episode_id, args)[0]
        if args["n"] != 1:
            return engine.complete(**args)  # several answers are no one path to record
        return self._converse(engine, args, client)

    def _converse(
        self, engine: PolicyEngine, args: dict[str, Any], client: str | None, *, again: bool = True
    ) -> Completion:
        episode_id = self.conversations.claim(args, lambda: self._open_conversation(args, client))
        try:
            completion, turn = self._record(engine, episode_id, args)
            self.conversations.recorded(episode_id, turn)
            return completion
        except BadRequest as exc:
            if exc.status != 409 or not again:
                raise
            self.conversations.drop(episode_id)  # it ended since its last turn (idle, or by hand)
        finally:
            self.conversations.release(episode_id)
        return self._converse(engine, args, client, again=False)

    def _open_conversation(self, args: dict[str, Any], client: str | None) -> str:
        first = next((m.get("content") for m in args["messages"] if m.get("role") == "user"), None)
        episode = self.store.start_episode(
            str(first or "").strip() or "a conversation through the policy endpoint",
            source=EpisodeSource.policy,
            client=f"gateway: {client or 'a client'} (no episode key)",
            implicit=True,
        )
        return episode.id

    def _record(self, engine: PolicyEngine, episode_id: str, args: dict[str, Any]) -> tuple[Completion, EncodedTurn]:
        context = self.last_turns.get(episode_id)
        if context is None:  # the episode's first turn through this process: one read
            context = self.store.turns.turn_context(episode_id)
            if (refused := _refusal(episode_id, context.source, context.status)) is not None:
                raise BadRequest(refused, 409)
        # Redacted once: the conversation is compared with the stored (redacted) last turn, and the
        # same value is what the log stores; the engine samples from the messages as sent.
        request = redacted_request(args, context)
        completion = engine.complete(**args, prior=prior_turn(context, request.data["messages"]))
        # The client gets the completion as sampled; the log gets it redacted (messages, content,
        # tool-call arguments), with token ids and logprobs exact: see `policy_turns.redact_choice`.
        turn = EncodedTurn.of(
            model=f"{self.recorded_model}@{completion.checkpoint_step}",
            request=request,
            choice=encode_choice(completion.choices[0]),
            checkpoint_step=completion.checkpoint_step,
            prompt_token_ids=completion.prompt_token_ids or None,
            completion_token_ids=completion.completion_token_ids[0],
            after=context,
        )
        try:
            turn_id = self.store.turns.add_policy_turn(episode_id, turn, open_policy_only=True)
        except PolicyTurnRefused as exc:  # ended, say, through the MCP server since our last turn
            self.last_turns.forget(episode_id)
            raise BadRequest(_refusal(episode_id, exc.source, exc.status) or str(exc), 409) from exc
        self.last_turns.put(episode_id, turn.context(turn_id))
        return completion, turn

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: Starlette) -> AsyncIterator[None]:
        """While served: the verifier finishes what a stopped endpoint left and times out idle episodes."""
        try:
            async with anyio.create_task_group() as tasks:
                self.workspaces.hub.start(tasks)
                yield
                tasks.cancel_scope.cancel()  # a verification left pending is resumed by the next start
        finally:
            await anyio.to_thread.run_sync(self.workspaces.close)

    async def new_episode(self, request: Request) -> JSONResponse:
        try:
            body = _validated(NewEpisode, await _json_body(request))
            root = None if body.workspace is None else await anyio.to_thread.run_sync(self._workspace, body.workspace)
        except BadRequest as exc:
            return _error(exc.status, str(exc), code=exc.code)
        episode = await anyio.to_thread.run_sync(
            lambda: self.store.start_episode(
                body.task,
                source=EpisodeSource.policy,
                client=body.client or "gateway",
                workspace=None if root is None else str(root),
                batch=None if body.batch is None or body.batch_size is None else (body.batch, body.batch_size),
            )
        )
        base = str(request.base_url).rstrip("/")
        started: dict[str, Any] = {
            "episode_id": episode.id,
            "base_url": f"{base}/episodes/{episode.id}/v1",
            "api_key": mint(episode.id, self.token),
            "shared_base_url": f"{base}/v1",
        }
        if root is not None:
            started |= {"workspace": str(root), "verifier": describe_verifier(await self._begin(episode.id, root))}
        return JSONResponse(started, status_code=201)

    def _workspace(self, path: str) -> Path:
        try:
            return self.workspaces.resolve(path)
        except FolderNotAllowed as exc:
            raise BadRequest(str(exc), code="workspace_not_allowed") from exc

    async def _begin(self, episode_id: str, root: Path) -> EpisodeVerifier:
        """The episode's start state, captured, and its verifier, whose start run goes on meanwhile."""
        hub = self.workspaces.hub
        await anyio.to_thread.run_sync(capture, self.store, root, episode_id, StateKind.start)
        try:
            start = await anyio.to_thread.run_sync(GitSnapshots().working_tree, root)
        except SnapshotUnavailable as exc:  # not a git working tree, too large to send: said with the episode
            return await hub.refuse(episode_id, root, str(exc))
        return await hub.begin(episode_id, root, start)

    async def end_episode(self, request: Request) -> JSONResponse:
        episode_id = request.path_params["episode_id"]
        try:
            body = _validated(EndEpisode, await _json_body(request))
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        self.last_turns.forget(episode_id)
        try:
            end = await anyio.to_thread.run_sync(self._end, episode_id, EpisodeStatus(body.outcome), body.reward)
        except EpisodeNotFound as exc:
            return _error(404, str(exc), code="episode_not_found")
        except EpisodeClosed as exc:
            return _error(409, str(exc))
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        # The caller waits for rlide's own judgement of the end state, as end_episode's caller does over MCP.
        verdict = await self.workspaces.hub.verify_end(episode_id, end)
        episode = await anyio.to_thread.run_sync(self.store.get_episode, episode_id)
        verification = None if verdict is None else verdict.model_dump(mode="json")
        return JSONResponse(episode.model_dump(mode="json") | {"verification": verification})

    def _end(self, episode_id: str, status: EpisodeStatus, reward: float | None) -> Snapshot | None:
        """End a policy episode with its outcome reward, as MCP's `end_episode` records it
        (`EpisodeStore.end_with_outcome`), then the caller's own reward, as a claim; its workspace's
        end state captured first (the returned snapshot, for the verifier). An IDE episode is the MCP
        server's to end: its verified reward is rlide's own run of the project's tests, which a number
        sent here must never stand over."""
        episode = self.store.get_episode(episode_id)
        if (refused := _refusal(episode_id, episode.source, EpisodeStatus.open)) is not None:
            raise BadRequest(refused.replace("; POST", ", ended through the MCP server's end_episode; POST"), 409)
        end = None
        root = self.workspaces.hub.root(episode_id)
        if root is not None and episode.status is EpisodeStatus.open:
            capture(self.store, root, episode_id, StateKind.end)
            try:
                end = GitSnapshots().working_tree(root)
            except SnapshotUnavailable:
                end = None  # the last recorded state is judged
        self.store.end_with_outcome(episode_id, status)
        if reward is not None:
            # Whoever calls over HTTP is no verifier rlide trusts (a web page could be the caller): its
            # number is a claim, weighed like an agent's rating of itself and never verified evidence.
            # A trusted in-process judge writes its verified reward through the store.
            self.store.add_reward(episode_id, RewardSource.self_rating, float(reward), "gateway: the caller's reward")
        return end


def build_gateway(
    config: BackendConfig,
    database_url: str,
    *,
    token: str | None = None,
    upstream: str | None = None,
    bind_host: str | None = None,
    checkpoint: int | None = None,
    workspaces: WorkspaceRules | None = None,
    threads: int | None = None,
) -> Gateway:
    """The gateway for a run: its engine is `engines.policy_engine`'s choice (`checkpoint`: a fixed
    step; `threads`, a cpu engine's), never past the step the log committed for the run; `bind_host`
    and `workspaces` as `Gateway` takes them."""
    store = EpisodeStore.open(database_url)

    try:
        engine = policy_engine(
            config,
            committed=lambda: store.runs.committed_step(config.run),
            upstream=upstream,
            checkpoint=checkpoint,
            threads=threads,
        )
    except BaseException:
        store.close()
        raise
    return Gateway(
        engine, store, token=token, recorded_model=config.run_model_name, bind_host=bind_host, workspaces=workspaces
    )


class AddressUnavailable(Exception):
    """The endpoint cannot listen where it was asked to (the port is taken, say); raised before the
    model loads."""


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host`:`port` (port 0: one the system picks), or `AddressUnavailable`
    naming the port. Bound before the model loads, so a busy port fails at once, and held while it
    loads, so nothing takes the port meanwhile (a client that connects then waits for the model)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise AddressUnavailable(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: restarts reuse the port
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressUnavailable(
                f"port {port} on {host} is already in use (another `rlide policy serve`?): stop what"
                " listens there, or pick another port with --port or RLIDE_POLICY_PORT"
            ) from exc
        raise AddressUnavailable(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def listening_url(sock: socket.socket) -> str:
    """The endpoint's root URL on `sock` (its OpenAI base URL is this + /v1)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    config: BackendConfig,
    database_url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8766,
    token: str | None = None,
    upstream: str | None = None,
    on_listening: Callable[[str, Gateway], None] | None = None,
    checkpoint: int | None = None,
    workspaces: WorkspaceRules | None = None,
    threads: int | None = None,
) -> None:
    """Run the policy endpoint (wired as `rlide policy serve`; `checkpoint`: a fixed step of a cpu
    run, else its latest). Off loopback a token is required:
    `InsecureBind` is raised before the model loads, and `AddressUnavailable` when the port is
    taken. `on_listening(url, gateway)` is called once it accepts requests."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_listening is not None:
                on_listening(listening_url(sock), gateway)

    check_bind(host, token, token_env=TOKEN_ENV)
    sock = listen(host, port)
    try:
        gateway = build_gateway(
            config,
            database_url,
            token=token,
            upstream=upstream,
            bind_host=host,
            checkpoint=checkpoint,
            workspaces=workspaces,
            threads=threads,
        )
        try:
            Server(uvicorn.Config(gateway.app, log_level="warning")).run(sockets=[sock])
        finally:
            gateway.store.close()
    finally:
        sock.close()


__all__ = ["AddressUnavailable", "Gateway", "build_gateway", "listen", "serve"]
