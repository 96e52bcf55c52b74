"""The policy engines behind the policy endpoint (`training.gateway.app`): what samples a completion.

`PolicyEngine` is the protocol; `TransformersEngine` serves a cpu-backend run's latest checkpoint
(any causal LM, on transformers: imported when the engine is built, never by this module), and
`ProxyEngine` forwards to an upstream OpenAI-compatible server (vLLM, or another rlide gateway).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from training.backends.base import BackendConfig, BackendError, ContextTooLong, checkpoint_steps
from training.gateway.tool_calls import answered_with_tool_calls, same_tool_calls


class BadRequest(Exception):
    """A request the policy endpoint refuses, with the HTTP status and OpenAI error code it answers;
    `ProxyEngine` raises it (502) when the upstream server refuses."""

    def __init__(self, message: str, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


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
    """The previous completion's content, as stored (redacted): its text before any tool call
    parsed out of it (`tool_calls.with_tool_calls`), or all of it."""
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    tool_calls: list[dict[str, Any]] | None = None
    """The tool calls parsed out of the previous completion, as stored (redacted arguments)."""

    def continued_by(self, messages: list[dict[str, Any]]) -> bool:
        """Whether `messages`, redacted, are this turn's messages, its completion as an assistant
        message (its content, and its tool calls with arguments equal as JSON), then more. The
        caller redacts them: the stored turn is redacted, the client echoes what it was sent, so
        only redacted text compares."""
        n = len(self.messages)
        if len(messages) <= n + 1 or messages[:n] != self.messages:
            return False
        echoed = messages[n]
        return (
            echoed.get("role") == "assistant"
            and (echoed.get("content") or "") == (self.content or "")
            and same_tool_calls(echoed.get("tool_calls"), self.tool_calls)
        )


class PolicyEngine(Protocol):
    model_id: str

    @property
    def checkpoint_step(self) -> int: ...

    @property
    def context_length(self) -> int | None:
        """The model's context in tokens, prompt and answer together (vLLM's `max_model_len`);
        None when unknown."""

    def refresh(self) -> int:
        """Pick up a newer checkpoint if there is one; return the step now served."""

    def at_step(self, step: int) -> PolicyEngine | None:
        """What serves checkpoint `step` (a client's pinned `student@{step}`): this engine when it is
        the current step, the one before it during its grace period; None when it is served no more."""

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
        stop: list[str] | None = None,
        top_p: float = 1.0,
        options: dict[str, Any] | None = None,
    ) -> Completion:
        """`prior`: the episode's previous turn, given only when `messages` continue it
        (`PriorTurn.continued_by`). `stop`: strings that end a completion, left out of its text
        (OpenAI's `stop`); the tokens that spelled one stay in its token ids and logprobs, since
        the policy sampled them. `top_p`: nucleus sampling. `options`: the request's other
        options (`gateway.FORWARDED_OPTIONS`), for an engine that forwards to a server."""


MAX_BATCH = 8
"""Requests decoded together at most: past this a CPU step's cost grows with the rows, not the gain."""
PINNED_GRACE_S = 300.0
"""How long a cpu endpoint keeps answering `student@{step}` of the checkpoint it moved on from: an
agent that pinned it finishes its attempt on one policy (its turns stay comparable in a group)."""


@dataclass
class _Queued:
    """A request waiting for its batch, and what became of it."""

    prompt_ids: list[int]
    max_tokens: int
    stop: list[str] | None
    temperature: float
    top_p: float
    tools: list[dict[str, Any]] | None
    options: dict[str, Any] | None
    result: Completion | BaseException | None = None


class TransformersEngine:
    """The latest checkpoint of a cpu-backend run on its base model, on transformers (CPU); or the
    checkpoint `pinned` (a step, e.g. the run's best), never reloaded.

    Concurrent requests are decoded together: a request of one completion without a seed joins a
    queue, and whichever waiting request gets the model next decodes everything queued by then, in
    batches of up to `max_batch` of the same temperature and top_p (`cpu.sample_batch`); requests
    that arrive meanwhile form the next batch. A CPU decoding one sequence is bound by reading the
    weights, so a batch of eight costs little more per step than one. Seeded or `n` > 1 requests
    are decoded alone, as before (a seed fixes one request's draws, which a batch would share)."""

    def __init__(
        self,
        config: BackendConfig,
        *,
        reload_interval_s: float = 2.0,
        pinned: int | None = None,
        threads: int | None = None,
        max_batch: int = MAX_BATCH,
        grace_s: float = PINNED_GRACE_S,
        loaded: tuple[Any, Any, int] | None = None,
    ) -> None:
        """`threads`: the torch threads it decodes with (None: the process's setting, as `rlide eval`
        wants on a machine of its own; `serving_threads` for an endpoint beside agents).
        `max_batch`: requests decoded together at most (1: one at a time). `grace_s`: how long the
        checkpoint it moved on from still answers to its pinned name (`at_step`). `loaded`: the
        (model, tokenizer, step) it serves, already in memory, instead of loading its checkpoint."""
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        self.config = config
        self.model_id = config.model_name
        self.reload_interval_s = reload_interval_s
        self.pinned = pinned
        if loaded is None and pinned is not None and pinned not in checkpoint_steps(config.model_dir()):
            raise BackendError(f"run {config.run!r} has no checkpoint {pinned} under {config.model_dir()}")
        self.max_batch = max_batch
        self.grace_s = grace_s
        self._previous: tuple[TransformersEngine, float] | None = None
        """The checkpoint it moved on from, as an engine of its own, and until when it answers."""
        self.batch_sizes: collections.Counter[int] = collections.Counter()
        """How many batches of each size it decoded (what the tests and benchmarks read)."""
        self._lock = threading.Lock()
        self._queue: list[_Queued] = []
        self._queue_lock = threading.Lock()
        self._step = -1
        self._checked = 0.0
        self._model: Any = None
        self._tokenizer: Any = None
        if loaded is not None:
            self._model, self._tokenizer, self._step = loaded
            self._checked = time.monotonic()
        else:
            self._maybe_reload(force=True)

    @property
    def checkpoint_step(self) -> int:
        return max(self._step, 0)

    @property
    def context_length(self) -> int | None:
        return int(self._model.config.max_position_embeddings)  # what `sample_choices` holds prompts to

    def refresh(self) -> int:
        with self._lock:
            self._maybe_reload()
        return self.checkpoint_step

    def at_step(self, step: int) -> PolicyEngine | None:
        if step == self.checkpoint_step:
            return self
        previous = self._previous
        if previous is not None and previous[0].checkpoint_step == step and time.monotonic() < previous[1]:
            return previous[0]
        return None

    def _frozen(self) -> TransformersEngine:
        """This engine's current checkpoint as an engine of its own that never reloads."""
        loaded = (self._model, self._tokenizer, self._step)
        return TransformersEngine(self.config, pinned=self._step, max_batch=self.max_batch, grace_s=0.0, loaded=loaded)

    def _maybe_reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._previous is not None and now >= self._previous[1]:
            self._previous = None  # its grace is over: its weights are freed
        if not force and now - self._checked < self.reload_interval_s:
            return
        self._checked = now
        steps = checkpoint_steps(self.config.model_dir())
        latest = self.pinned if self.pinned is not None else steps[-1] if steps else 0
        if latest == self._step and self._model is not None:
            return
        from training.backends.cpu import base_model_dir, load_policy, undo_art_mask_patch

        if self._model is not None and self.grace_s > 0:
            self._previous = (self._frozen(), now + self.grace_s)

        undo_art_mask_patch()
        adapter = self.config.checkpoint_dir(latest) if latest else None
        self._model, self._tokenizer = load_policy(
            base_model_dir(self.config), adapter, trainable=False, config=self.config
        )
        self._step = latest

    def continued_prompt_ids(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, prior: PriorTurn
    ) -> list[int] | None:
        """Prompt ids that splice the previous turn's exact tokens in, or None if the chat template
        does not render `messages` as a continuation of it (then the plain chat template is used).
        `messages` continue `prior` (`PriorTurn.continued_by`): checked by the caller, which has
        the redacted messages already."""
        from training.backends.cpu import canonical_tools
        from training.data.fit import template_messages

        n = len(prior.messages)
        tok = self._tokenizer
        tools = canonical_tools(tools)
        messages = template_messages(messages)
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
        stop: list[str] | None = None,
        top_p: float = 1.0,
        options: dict[str, Any] | None = None,
    ) -> Completion:
        from training.backends.cpu import check_fits, prompt_token_ids, sample_choices

        if n == 1 and seed is None:
            prompt_ids = self.continued_prompt_ids(messages, tools, prior) if prior is not None else None
            if prompt_ids is None:
                prompt_ids = prompt_token_ids(self._tokenizer, messages, tools)
            try:
                check_fits(self.context_length or 0, prompt_ids)
            except ContextTooLong as exc:
                raise BadRequest(str(exc), 400, "context_length_exceeded") from exc
            return self._batched(_Queued(prompt_ids, max_tokens, stop, temperature, top_p, tools, options))
        with self._lock:
            self._maybe_reload()
            prompt_override = self.continued_prompt_ids(messages, tools, prior) if prior is not None else None
            try:
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
                    stop=stop,
                    top_p=top_p,
                )
            except ContextTooLong as exc:
                raise BadRequest(str(exc), 400, "context_length_exceeded") from exc
            step = self.checkpoint_step
        return Completion(
            choices=answered_with_tool_calls([c.model_dump(mode="json") for c in choices], tools, options),
            prompt_token_ids=list(prompt_ids),
            completion_token_ids=[_token_ids(c) for c in choices],
            checkpoint_step=step,
        )

    def _batched(self, job: _Queued) -> Completion:
        """`job` decoded in a batch: queued, then, once this thread has the model, everything queued
        decoded, unless a thread before it already decoded this job."""
        with self._queue_lock:
            self._queue.append(job)
        with self._lock:
            if job.result is None:
                self._maybe_reload()
                with self._queue_lock:
                    jobs, self._queue = self._queue, []
                self._decode(jobs)
        if isinstance(job.result, BaseException):
            raise job.result
        assert job.result is not None
        return job.result

    def _decode(self, jobs: list[_Queued]) -> None:
        """Every job's result: its completion, or the error its batch raised (each caller raises it)."""
        from training.backends.cpu import Asked, sample_batch

        kinds: dict[tuple[float, float], list[_Queued]] = {}
        for job in jobs:
            kinds.setdefault((job.temperature, job.top_p), []).append(job)
        size = max(1, self.max_batch)
        for (temperature, top_p), alike in kinds.items():
            for start in range(0, len(alike), size):
                batch = alike[start : start + size]
                try:
                    asked = [Asked(job.prompt_ids, job.max_tokens, job.stop) for job in batch]
                    choices = sample_batch(self._model, self._tokenizer, asked, temperature=temperature, top_p=top_p)
                except BaseException as exc:
                    for job in batch:
                        job.result = exc
                    if not isinstance(exc, Exception):
                        raise
                    continue
                self.batch_sizes[len(batch)] += 1
                for job, choice in zip(batch, choices, strict=True):
                    job.result = Completion(
                        choices=answered_with_tool_calls([choice.model_dump(mode="json")], job.tools, job.options),
                        prompt_token_ids=list(job.prompt_ids),
                        completion_token_ids=[_token_ids(choice)],
                        checkpoint_step=self.checkpoint_step,
                    )


class ProxyEngine:
    """Forwards to an upstream OpenAI-compatible server shaped like vLLM under ART's LocalBackend
    (or another rlide gateway, which is shaped the same): the upstream serves each checkpoint as
    `{upstream_model}@{step}`, and this engine asks for the newest one the log has committed
    (`committed`: the run's committed step; None: the newest listed), so after a crash that left
    the server a step ahead of the log both agree on the older step. Each request asks for
    per-token logprobs with tokens as `token_id:N` and for the prompt's and completion's token ids
    (vLLM's `return_tokens_as_token_ids`, `return_token_ids`), so recorded turns are trainable.

    Limit: the upstream chat API takes text, so a continued conversation is re-tokenized upstream
    (`prior` is not spliced; small logprob drift on multi-turn episodes).
    """

    def __init__(
        self,
        base_url: str,
        model_id: str,
        *,
        upstream_model: str | None = None,
        committed: Callable[[], int | None] | None = None,
        http_client: Any = None,
        timeout_s: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        """`api_key`: sent as `Authorization: Bearer` (an upstream rlide gateway's token, vLLM's --api-key)."""
        import httpx

        self.model_id = model_id
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.upstream_model = upstream_model or model_id
        self._committed = committed or (lambda: None)
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._models_url = base_url.rstrip("/") + "/models"
        self._http = http_client or httpx.Client(timeout=timeout_s)
        self._step: int | None = None
        self._context_length: int | None = None

    @property
    def checkpoint_step(self) -> int:
        return self._step or 0

    @property
    def context_length(self) -> int | None:
        """As the upstream's `/v1/models` gives it for the model served (vLLM: `max_model_len`)."""
        return self._context_length

    def refresh(self) -> int:
        """Serve the newest checkpoint the upstream lists that the log has committed."""
        resp = self._http.get(self._models_url, headers=self._headers)
        if resp.status_code >= 400:
            raise _upstream_refusal(resp)
        prefix = f"{self.upstream_model}@"
        models = [model for model in resp.json().get("data") or [] if isinstance(model, dict)]
        listed = sorted(
            int(name[len(prefix) :])
            for name in (str(model.get("id", "")) for model in models)
            if name.startswith(prefix) and name[len(prefix) :].isdigit()
        )
        lengths = [m.get("max_model_len") for m in models if str(m.get("id", "")).startswith(prefix)]
        self._context_length = next((n for n in lengths if isinstance(n, int) and not isinstance(n, bool)), None)
        committed = self._committed()
        usable = [step for step in listed if committed is None or step <= committed]
        if not usable:
            served = ", ".join(f"{prefix}{step}" for step in listed) or "no checkpoint of it"
            raise BadRequest(
                f"the upstream policy server serves {served}, and the log's run is at step {committed}:"
                " restart the training worker (it rolls back checkpoints the log never committed)",
                502,
            )
        self._step = usable[-1]
        return self._step

    def at_step(self, step: int) -> PolicyEngine | None:
        # The upstream names its checkpoints; this endpoint forwards the one it serves now.
        return self if step == self.checkpoint_step else None

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
        stop: list[str] | None = None,
        top_p: float = 1.0,
        options: dict[str, Any] | None = None,
    ) -> Completion:
        step = self.refresh() if self._step is None else self._step
        body: dict[str, Any] = {
            "model": f"{self.upstream_model}@{step}",
            "messages": messages,
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "logprobs": True,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        }
        if seed is not None:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
        if stop:
            body["stop"] = stop
        if top_p != 1.0:
            body["top_p"] = top_p
        body.update(options or {})
        resp = self._http.post(self._url, json=body, headers=self._headers)
        if resp.status_code == 404:  # the upstream moved on (a newer committed step): follow it once
            step = self.refresh()
            resp = self._http.post(
                self._url, json={**body, "model": f"{self.upstream_model}@{step}"}, headers=self._headers
            )
        if resp.status_code >= 400:
            raise _upstream_refusal(resp)
        data = resp.json()
        choices = [dict(choice) for choice in data.get("choices") or []]
        ids = [_upstream_token_ids(choice) for choice in choices]
        prompt_ids = [int(i) for i in data.get("prompt_token_ids") or []]
        # vLLM's hermes parser read the tagged calls; calls written in a code fence it leaves as text.
        answered = answered_with_tool_calls(choices, tools, options)
        return Completion(choices=answered, prompt_token_ids=prompt_ids, completion_token_ids=ids, checkpoint_step=step)


def _upstream_token_ids(choice: dict[str, Any]) -> list[int]:
    """A choice's sampled ids: vLLM's `token_ids` (taken off the choice, which the client gets as an
    OpenAI choice), else its logprob tokens' `token_id:N`."""
    given = choice.pop("token_ids", None)
    if isinstance(given, list):
        return [int(i) for i in given]
    return [
        int(t["token"].split(":")[1])
        for t in ((choice.get("logprobs") or {}).get("content") or [])
        if str(t.get("token", "")).startswith("token_id:")
    ]


def serving_threads(cores: int | None = None) -> int:
    """The torch threads a cpu endpoint decodes with by default: half the cores, at least one. The
    agents it serves run their tools and tests in sandboxes on the same machine, and torch's default
    (every core, its OpenMP threads spinning while they wait) leaves them, and the endpoint, starved."""
    return max(1, (cores if cores is not None else os.cpu_count() or 1) // 2)


def policy_engine(
    config: BackendConfig,
    *,
    committed: Callable[[], int | None] | None = None,
    upstream: str | None = None,
    checkpoint: int | None = None,
    threads: int | None = None,
) -> PolicyEngine:
    """The one engine choice of `rlide policy serve` and `rlide eval`: `upstream` when given (an
    OpenAI-compatible server serving the run's model as `{model}@{step}`); else a cpu run's latest
    checkpoint on transformers (or its `checkpoint`, a step; `threads`, the torch threads it decodes
    with); else the policy server the run's worker published (ART's vLLM). `committed`: the run's
    committed step in the log, which a forwarded request never passes."""
    from training.backends.served import published

    if checkpoint is not None:
        if upstream is not None or config.backend != "cpu":
            raise BackendError(
                "a fixed checkpoint is served from a cpu run's own folder; a GPU run's server serves"
                f" `{config.run_model_name}@STEP`: ask it for that model name (--upstream URL)"
            )
        return TransformersEngine(config, pinned=checkpoint, threads=threads)
    if upstream is not None:
        return ProxyEngine(upstream, config.model_name, upstream_model=config.run_model_name, committed=committed)
    if config.backend == "cpu":
        return TransformersEngine(config, threads=threads)
    served = published(config.model_dir())
    if served is None:
        raise BackendError(
            f"the {config.backend} run {config.run!r} has published no policy server in {config.model_dir()}:"
            f" start its worker (`rlide train --daemon --run {config.run}`), or pass --upstream URL"
        )
    return ProxyEngine(
        served.base_url, config.model_name, upstream_model=served.model, committed=committed, api_key=served.api_key
    )


def _upstream_refusal(resp: Any) -> BadRequest:
    """The error a client gets for an upstream error answer. A request the upstream finds invalid
    (a prompt past its context, an option it does not take) is the client's to fix, so it keeps its
    400 and its OpenAI error code (agents shorten their history on `context_length_exceeded`);
    anything else (the upstream's auth, its crash) is a 502."""
    status = 400 if resp.status_code in (400, 422) else 502
    try:
        code = resp.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    message = f"upstream policy server answered {resp.status_code}: {resp.text[:500]}"
    return BadRequest(message, status, code if isinstance(code, str) else None)


def _token_ids(choice: Any) -> list[int]:
    """The sampled token ids of a choice whose logprob tokens are vLLM-style `token_id:N`."""
    content = choice.logprobs.content if choice.logprobs is not None else None
    return [int(t.token.split(":")[1]) for t in content or []]


__all__ = [
    "BadRequest",
    "Completion",
    "PolicyEngine",
    "PriorTurn",
    "ProxyEngine",
    "TransformersEngine",
    "policy_engine",
]
