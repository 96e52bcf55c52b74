"""The policy endpoint: OpenAI-compatible chat completions from the latest checkpoint, recorded.

    GET  /v1/models                                  the policy under its stable alias (e.g. "student")
    POST /v1/chat/completions                        a completion; not recorded
    POST /episodes                                   {"task"} -> a new `policy` episode's id
    GET  /episodes/{id}/v1/models                    same as /v1/models (for clients given a base URL)
    POST /episodes/{id}/v1/chat/completions          a completion recorded into episode {id} with its
                                                     prompt/completion token ids and per-token logprobs
    POST /episodes/{id}/end                          {"outcome": success|failure|aborted, "reward"?}

An agent pointed at `http://host:port/episodes/{id}/v1` as its OpenAI base URL produces a policy
episode whose every assistant turn is exactly what was sampled, which is what GRPO trains on.

Auth: with a token (`RLIDE_POLICY_TOKEN`) every route needs `Authorization: Bearer <token>`, which is
what an OpenAI client sends for `api_key=<token>`; without one the endpoint binds loopback only
(`training.http_auth`, the same rule and middleware as the MCP HTTP transport).

The model behind it is a `PolicyEngine`: `TransformersEngine` serves the cpu backend's checkpoints
(the tiny model) and reloads when a newer checkpoint appears. This module imports no torch; the
engine does, when it is built.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from training.backends.base import BackendConfig, checkpoint_steps
from training.codec import CHOICE_TAG, encode_choice
from training.db import EpisodeClosed, EpisodeNotFound
from training.http_auth import check_bind, protect
from training.records import EpisodeSource, EpisodeStatus, RewardSource
from training.redact import redact
from training.run_records import TurnContext
from training.store import EpisodeStore

MAX_TOKENS_LIMIT = 4096
TOKEN_ENV = "RLIDE_POLICY_TOKEN"


@dataclass
class Completion:
    choices: list[dict[str, Any]]
    """`Choice.model_dump()` dicts (index, message, finish_reason, logprobs)."""
    prompt_token_ids: list[int]
    completion_token_ids: list[list[int]]
    checkpoint_step: int


@dataclass
class PriorTurn:
    """The episode's previous turn, so a continuing conversation is fed the exact tokens sampled
    before (token in, token out) instead of a re-tokenization of their text, which for sampled
    text is often a different token sequence: the context ART rebuilds for training must be the
    context the policy actually saw."""

    messages: list[dict[str, Any]]
    """The previous request's messages, as stored (redacted)."""
    content: str | None
    """The previous completion's text, as stored (redacted)."""
    prompt_token_ids: list[int]
    completion_token_ids: list[int]


class PolicyEngine(Protocol):
    model_id: str

    @property
    def checkpoint_step(self) -> int: ...

    def refresh(self) -> int:
        """Pick up a newer checkpoint if there is one; return the step now served."""

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int,
        max_tokens: int,
        temperature: float,
        seed: int | None,
        tools: list[dict[str, Any]] | None,
        prior: PriorTurn | None = None,
    ) -> Completion: ...


class TransformersEngine:
    """The latest checkpoint of a cpu-backend run, on transformers (the tiny model; CPU)."""

    def __init__(self, config: BackendConfig, *, reload_interval_s: float = 2.0) -> None:
        self.config = config
        self.model_id = config.model_name
        self.reload_interval_s = reload_interval_s
        self._lock = threading.Lock()
        self._step = -1
        self._checked = 0.0
        self._model: Any = None
        self._tokenizer: Any = None
        self._maybe_reload(force=True)

    @property
    def checkpoint_step(self) -> int:
        return max(self._step, 0)

    def refresh(self) -> int:
        with self._lock:
            self._maybe_reload()
        return self.checkpoint_step

    def _maybe_reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self.reload_interval_s:
            return
        self._checked = now
        steps = checkpoint_steps(self.config.model_dir())
        latest = steps[-1] if steps else 0
        if latest == self._step and self._model is not None:
            return
        from training.backends.cpu import load_policy, undo_art_mask_patch
        from training.backends.tiny import ensure_base

        undo_art_mask_patch()
        base = ensure_base(self.config.model_dir() / "base", self.config.seed)
        adapter = self.config.checkpoint_dir(latest) if latest else None
        self._model, self._tokenizer = load_policy(base, adapter, trainable=False)
        self._step = latest

    def continued_prompt_ids(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, prior: PriorTurn
    ) -> list[int] | None:
        """Prompt ids that splice the previous turn's exact tokens in, or None if `messages` does not
        continue it (then the plain chat template is used)."""
        n = len(prior.messages)
        if len(messages) <= n + 1 or redact(messages[:n]) != prior.messages:
            return None
        echoed = messages[n]
        # The stored turn is redacted, the client echoes what it was sent: compare redacted text.
        if echoed.get("role") != "assistant" or redact(echoed.get("content") or "") != (prior.content or ""):
            return None
        tok = self._tokenizer
        head = tok.apply_chat_template(messages[: n + 1], tools=tools, tokenize=False)
        full = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        eos = tok.eos_token
        if not full.startswith(head) or eos not in head:
            return None
        after_eos = head.rsplit(eos, 1)[1]
        completion = list(prior.completion_token_ids)
        if not completion or completion[-1] != tok.eos_token_id:
            completion.append(tok.eos_token_id)
        tail = tok.encode(after_eos + full[len(head) :], add_special_tokens=False)
        return [*prior.prompt_token_ids, *completion, *tail]

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int,
        max_tokens: int,
        temperature: float,
        seed: int | None,
        tools: list[dict[str, Any]] | None,
        prior: PriorTurn | None = None,
    ) -> Completion:
        from training.backends.cpu import sample_choices

        with self._lock:
            self._maybe_reload()
            prompt_override = self.continued_prompt_ids(messages, tools, prior) if prior is not None else None
            choices, prompt_ids = sample_choices(
                self._model,
                self._tokenizer,
                messages,
                n=n,
                max_tokens=max_tokens,
                temperature=temperature,
                seed=seed,
                tools=tools,
                prompt_ids=prompt_override,
            )
            step = self.checkpoint_step
        return Completion(
            choices=[c.model_dump(mode="json") for c in choices],
            prompt_token_ids=list(prompt_ids),
            completion_token_ids=[_token_ids(c) for c in choices],
            checkpoint_step=step,
        )


class ProxyEngine:
    """Forwards to an upstream OpenAI-compatible server (vLLM under ART's LocalBackend, or another
    rlide gateway), asking for per-token logprobs with tokens as `token_id:N` (vLLM's
    `return_tokens_as_token_ids`), so recorded turns are trainable.

    Limits: the upstream chat API takes text, so a continued conversation is re-tokenized upstream
    (`prior` is not spliced; small logprob drift on multi-turn episodes), and prompt token ids are
    not returned. The checkpoint step is the upstream's `system_fingerprint` suffix `@N` when present.
    """

    def __init__(
        self,
        base_url: str,
        model_id: str,
        *,
        upstream_model: str | None = None,
        http_client: Any = None,
        timeout_s: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        """`api_key`: sent as `Authorization: Bearer` (an upstream rlide gateway's token, vLLM's --api-key)."""
        import httpx

        self.model_id = model_id
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.upstream_model = upstream_model or model_id
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._models_url = base_url.rstrip("/") + "/models"
        self._http = http_client or httpx.Client(timeout=timeout_s)
        self._step = 0

    @property
    def checkpoint_step(self) -> int:
        return self._step

    def refresh(self) -> int:
        resp = self._http.get(self._models_url, headers=self._headers)
        resp.raise_for_status()
        for model in resp.json().get("data") or []:
            if model.get("id") == self.upstream_model and isinstance(model.get("checkpoint_step"), int):
                self._step = model["checkpoint_step"]
        return self._step

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int,
        max_tokens: int,
        temperature: float,
        seed: int | None,
        tools: list[dict[str, Any]] | None,
        prior: PriorTurn | None = None,
    ) -> Completion:
        body: dict[str, Any] = {
            "model": self.upstream_model,
            "messages": messages,
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "logprobs": True,
            "return_tokens_as_token_ids": True,
        }
        if seed is not None:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
        resp = self._http.post(self._url, json=body, headers=self._headers)
        if resp.status_code >= 400:
            raise BadRequest(f"upstream policy server answered {resp.status_code}: {resp.text[:500]}", 502)
        data = resp.json()
        fingerprint = str(data.get("system_fingerprint") or "")
        if "@" in fingerprint and fingerprint.rsplit("@", 1)[1].isdigit():
            self._step = int(fingerprint.rsplit("@", 1)[1])
        choices = list(data.get("choices") or [])
        ids = [
            [
                int(t["token"].split(":")[1])
                for t in ((c.get("logprobs") or {}).get("content") or [])
                if str(t.get("token", "")).startswith("token_id:")
            ]
            for c in choices
        ]
        return Completion(choices=choices, prompt_token_ids=[], completion_token_ids=ids, checkpoint_step=self._step)


def _token_ids(choice: Any) -> list[int]:
    """The sampled token ids of a choice whose logprob tokens are vLLM-style `token_id:N`."""
    content = choice.logprobs.content if choice.logprobs is not None else None
    return [int(t.token.split(":")[1]) for t in content or []]


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status)


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def parse_request(body: Any, alias: str) -> dict[str, Any]:
    """Validate an OpenAI chat request; return the fields the engine takes."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if model not in (alias, None):
        raise BadRequest(f"model {model!r} does not exist: this endpoint serves {alias!r}", 404, "model_not_found")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise BadRequest("messages must be a non-empty list of {role, content} objects")
    n = body.get("n", 1)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 256))
    temperature = body.get("temperature", 1.0)
    seed = body.get("seed")
    tools = body.get("tools")
    if not isinstance(n, int) or not 1 <= n <= 16:
        raise BadRequest("n must be an integer from 1 to 16")
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise BadRequest(f"max_tokens must be an integer from 1 to {MAX_TOKENS_LIMIT}")
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
        raise BadRequest("temperature must be a number from 0 to 2")
    if seed is not None and not isinstance(seed, int):
        raise BadRequest("seed must be an integer")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest("tools must be a list")
    if body.get("stream"):
        raise BadRequest("stream=true is not supported by the policy endpoint; call again without it")
    return {
        "messages": messages,
        "n": n,
        "max_tokens": max_tokens,
        "temperature": float(temperature),
        "seed": seed,
        "tools": tools,
        "logprobs": bool(body.get("logprobs", False)),
    }


def completion_response(alias: str, completion: Completion, want_logprobs: bool) -> dict[str, Any]:
    choices = []
    for choice in completion.choices:
        c = dict(choice)
        if not want_logprobs:
            c["logprobs"] = None
        choices.append(c)
    n_completion = sum(len(ids) for ids in completion.completion_token_ids)
    return {
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


def _prior_turn(context: TurnContext) -> PriorTurn | None:
    """The episode's last turn as the engine continues it, if it has token ids."""
    if context.last_prompt_token_ids is None or context.last_completion_token_ids is None:
        return None
    message = ((context.last_choice or {}).get(CHOICE_TAG) or {}).get("message") or {}
    return PriorTurn(
        messages=list((context.last_request or {}).get("messages") or []),
        content=message.get("content"),
        prompt_token_ids=context.last_prompt_token_ids,
        completion_token_ids=context.last_completion_token_ids,
    )


class Gateway:
    """The ASGI app and what it holds: the engine, the episode log, the served alias.

    `token`: when set, `app` refuses (401, OpenAI error shape) every request without
    `Authorization: Bearer <token>`; `routes` is the unprotected Starlette app underneath."""

    def __init__(self, engine: PolicyEngine, store: EpisodeStore, *, token: str | None = None) -> None:
        self.engine = engine
        self.store = store
        self.alias = engine.model_id
        self.routes = Starlette(
            routes=[
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/episodes", self.new_episode, methods=["POST"]),
                Route("/episodes/{episode_id}/v1/models", self.models, methods=["GET"]),
                Route("/episodes/{episode_id}/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/episodes/{episode_id}/end", self.end_episode, methods=["POST"]),
            ]
        )
        self.app = protect(self.routes, token, token_env=TOKEN_ENV)

    async def models(self, request: Request) -> JSONResponse:
        step = await anyio.to_thread.run_sync(self.engine.refresh)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.alias,
                        "object": "model",
                        "created": 0,
                        "owned_by": "rlide",
                        "checkpoint_step": step,
                    }
                ],
            }
        )

    async def chat(self, request: Request) -> JSONResponse:
        episode_id = request.path_params.get("episode_id")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not valid JSON")
        try:
            args = parse_request(body, self.alias)
            if episode_id is not None and args["n"] != 1:
                raise BadRequest("a recorded episode follows one path: call with n=1")
            want_logprobs = args.pop("logprobs")
            # One trip off the event loop per request: check, sample, record (committed before we answer).
            completion = await anyio.to_thread.run_sync(self._complete, episode_id, args)
        except BadRequest as exc:
            return _error(exc.status, str(exc), code=exc.code)
        except EpisodeNotFound as exc:
            return _error(404, f"{exc}: POST /episodes to start one", code="episode_not_found")
        return JSONResponse(completion_response(self.alias, completion, want_logprobs))

    def _complete(self, episode_id: str | None, args: dict[str, Any]) -> Completion:
        if episode_id is None:
            return self.engine.complete(**args)
        context = self.store.turns.turn_context(episode_id)  # one read query
        if context.source is not EpisodeSource.policy:
            raise BadRequest(
                f"episode {episode_id} records the IDE's own model; POST /episodes for a policy episode", 409
            )
        if context.status is not EpisodeStatus.open:
            raise BadRequest(
                f"episode {episode_id} has ended ({context.status.value}); POST /episodes for a new one", 409
            )
        completion = self.engine.complete(**args, prior=_prior_turn(context))
        # The client gets the completion as sampled; the log gets it redacted (messages, content,
        # tool-call arguments), with token ids and logprobs exact: see `policy_turns.redact_choice`.
        self.store.turns.add_policy_turn(
            episode_id,
            model=f"{self.alias}@{completion.checkpoint_step}",
            request={
                "messages": args["messages"],
                "tools": args["tools"],
                "params": {k: args[k] for k in ("max_tokens", "temperature", "seed")},
            },
            choice=encode_choice(completion.choices[0]),
            checkpoint_step=completion.checkpoint_step,
            prompt_token_ids=completion.prompt_token_ids or None,
            completion_token_ids=completion.completion_token_ids[0],
        )
        return completion

    async def new_episode(self, request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        task = body.get("task") if isinstance(body, dict) else None
        if not isinstance(task, str) or not task.strip():
            return _error(400, 'send {"task": "what the agent is asked to do"}')
        episode = await anyio.to_thread.run_sync(
            lambda: self.store.start_episode(
                task, source=EpisodeSource.policy, client=str(body.get("client") or "gateway")
            )
        )
        base = str(request.base_url).rstrip("/")
        return JSONResponse({"episode_id": episode.id, "base_url": f"{base}/episodes/{episode.id}/v1"}, status_code=201)

    async def end_episode(self, request: Request) -> JSONResponse:
        episode_id = request.path_params["episode_id"]
        try:
            body = await request.json()
        except ValueError:
            body = None
        outcome = body.get("outcome") if isinstance(body, dict) else None
        reward = body.get("reward") if isinstance(body, dict) else None
        if outcome not in ("success", "failure", "aborted"):
            return _error(400, 'send {"outcome": "success" | "failure" | "aborted", "reward": -1..1 (optional)}')
        if reward is not None and (not isinstance(reward, int | float) or not -1 <= reward <= 1):
            return _error(400, "reward must be a number from -1 to 1")
        try:
            episode = await anyio.to_thread.run_sync(self.store.end_episode, episode_id, EpisodeStatus(outcome))
            if reward is not None:
                await anyio.to_thread.run_sync(
                    lambda: self.store.add_reward(episode_id, RewardSource.tests, float(reward), "gateway")
                )
                episode = await anyio.to_thread.run_sync(self.store.get_episode, episode_id)
        except EpisodeNotFound as exc:
            return _error(404, str(exc), code="episode_not_found")
        except EpisodeClosed as exc:
            return _error(409, str(exc))
        return JSONResponse(episode.model_dump(mode="json"))


def build_gateway(config: BackendConfig, database_url: str, *, token: str | None = None) -> Gateway:
    """The gateway for a cpu-backend run (the engine loads the latest checkpoint)."""
    return Gateway(TransformersEngine(config), EpisodeStore.open(database_url), token=token)


def serve(
    config: BackendConfig,
    database_url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8766,
    token: str | None = None,
) -> None:
    """Run the policy endpoint (wired as `rlide policy serve`). Off loopback a token is required:
    `InsecureBind` is raised before the model loads."""
    import uvicorn

    check_bind(host, token, token_env=TOKEN_ENV)
    gateway = build_gateway(config, database_url, token=token)
    uvicorn.run(gateway.app, host=host, port=port, log_level="warning")


def base_url_path(episode_id: str) -> str:
    return f"/episodes/{episode_id}/v1"


__all__ = ["Completion", "Gateway", "PolicyEngine", "ProxyEngine", "TransformersEngine", "build_gateway", "serve"]
