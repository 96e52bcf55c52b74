"""The student's context: how many tokens a conversation takes, and what was set aside and why.

The count renders the conversation with the student's own chat template and encodes it with its
own tokenizer, as the trainers do (`apply_chat_template`, then the tokenizer without special
tokens), but with `tokenizers` and `jinja2` only: no torch or transformers import, so the
dashboard (in the MCP server process) can say at preference time whether a pair fits.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from episodes.codec import as_message

DEFAULT_MAX_SEQ_LEN = 4096
"""The longest sequence a run trains on when it names none (and the model's context is longer)."""


class TokenCounter(Protocol):
    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int: ...


class FitError(ValueError):
    """The student's tokenizer or chat template cannot be read: no length can be checked."""


class SetAsideReason(StrEnum):
    too_long = "too_long"
    """Longer than the student's max_seq_len even condensed."""
    no_variance = "no_variance"
    """A GRPO group whose remaining trajectories all earned the same reward."""
    unverified_reward = "unverified_reward"
    """Rewarded only by the agent's own claims (outcome, self-rating) or flagged: never GRPO data."""
    no_conversation = "no_conversation"
    """Nothing to learn from: no prompt, no completion, no final answer, an implicit episode."""
    no_common_prompt = "no_common_prompt"
    """A preference pair whose episodes do not start from the same prompt."""
    no_order = "no_order"
    """A preference that orders nothing (both bad)."""
    not_trainable = "not_trainable"
    """The trainer found nothing to learn from in it (no assistant token, say); the detail says why."""


@dataclass
class SetAside:
    """What a selection left out: how many per reason, and the latest detail of each reason."""

    counts: Counter[SetAsideReason] = field(default_factory=Counter)
    latest: dict[SetAsideReason, str] = field(default_factory=dict)

    def add(self, reason: SetAsideReason, detail: str, n: int = 1) -> None:
        self.counts[reason] += n
        self.latest[reason] = detail

    def update(self, other: SetAside) -> None:
        for reason, n in other.counts.items():
            self.add(reason, other.latest[reason], n)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def line(self) -> str:
        """One line for a person: 'set aside: 2 too_long (latest: ...); 1 no_variance (...)'."""
        if not self.counts:
            return "nothing set aside"
        parts = [f"{n} {reason.value} ({self.latest[reason]})" for reason, n in sorted(self.counts.items())]
        return "set aside: " + "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": {reason.value: n for reason, n in sorted(self.counts.items())},
            "latest": {reason.value: why for reason, why in sorted(self.latest.items())},
        }


T = TypeVar("T")


@dataclass
class Selection(Generic[T]):
    """What a selection kept, and what it set aside with why (counted by reason)."""

    items: list[T]
    set_aside: SetAside = field(default_factory=SetAside)


@dataclass(frozen=True)
class Unusable:
    """Why one episode, pair or trajectory cannot be trained on."""

    reason: SetAsideReason
    detail: str
    tokens: int = 0
    """For `too_long`: the tokens it needs (uncondensed)."""
    limit: int = 0
    """For `too_long`: the max_seq_len it was held against."""

    @classmethod
    def too_long(cls, detail: str, tokens: int, limit: int) -> Unusable:
        return cls(SetAsideReason.too_long, detail, tokens, limit)


def template_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat items (codec-tagged `Choice`s included) as chat templates take them: an assistant tool
    call's JSON-text `arguments` as an object, as vLLM and the trainers render it."""
    out = []
    for item in items:
        message = as_message(item)
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list) and calls:
            message = {**message, "tool_calls": [_object_arguments(call) for call in calls]}
        out.append(message)
    return out


def _object_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(arguments := function.get("arguments"), str):
        return call
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return call
    return {**call, "function": {**function, "arguments": parsed}} if isinstance(parsed, dict) else call


class ChatTemplateCounter:
    """Tokens of a rendered conversation for the model in `folder` (its tokenizer.json and chat
    template: `chat_template.jinja`, else tokenizer_config.json's `chat_template`)."""

    def __init__(self, folder: Path) -> None:
        try:
            import jinja2
            import jinja2.ext
            from jinja2.sandbox import ImmutableSandboxedEnvironment
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise FitError(f"counting tokens needs {exc.name}: pip install 'rlide[training]'") from exc
        tokenizer_file, config_file = folder / "tokenizer.json", folder / "tokenizer_config.json"
        template_file = folder / "chat_template.jinja"
        if not tokenizer_file.is_file():
            raise FitError(f"{folder} holds no tokenizer.json: no token count for this model")
        try:
            self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
            raise FitError(f"cannot read {tokenizer_file}: {exc}") from exc
        try:
            config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
            source = (
                template_file.read_text(encoding="utf-8") if template_file.is_file() else config.get("chat_template")
            )
        except (OSError, ValueError) as exc:
            raise FitError(f"cannot read the chat template in {folder}: {exc}") from exc
        if not isinstance(source, str):
            raise FitError(f"{folder} has no chat template (chat_template.jinja or tokenizer_config.json)")

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        # The environment transformers renders chat templates in, so the text is the trainers' text.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self.template = env.from_string(source)
        self.special = {k: v for k, v in config.items() if k.endswith("_token") and isinstance(v, str)}
        self.template_error = jinja2.exceptions.TemplateError

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return self.template.render(
            messages=template_messages(messages), tools=tools or None, add_generation_prompt=False, **self.special
        )

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        try:
            text = self.render(messages, tools)
        except self.template_error as exc:
            raise FitError(f"the chat template refused this conversation: {exc}") from exc
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@dataclass(frozen=True)
class StudentFit:
    """The student's context: conversations of at most `max_tokens` tokens by `count` train."""

    max_tokens: int
    count: TokenCounter
    model: str = "the student"

    def too_long(self, items: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str | None:
        """Why `items` (chat items, choices included) do not fit as they are, or None."""
        tokens = self.count(items, tools)
        if tokens <= self.max_tokens:
            return None
        return f"{tokens} tokens, longer than max_seq_len={self.max_tokens} of {self.model}"

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise FitError(f"max_seq_len must be at least 1, got {self.max_tokens}")

    @classmethod
    def of_folder(cls, folder: Path, max_seq_len: int | None = None, *, model: str | None = None) -> StudentFit:
        """The fit of the model in `folder`: `max_seq_len`, else its context capped at
        DEFAULT_MAX_SEQ_LEN (what a run that names no limit trains on)."""
        if max_seq_len is None:
            try:
                config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise FitError(f"cannot read {folder / 'config.json'}: {exc}") from exc
            context = int(config.get("max_position_embeddings") or DEFAULT_MAX_SEQ_LEN)
            max_seq_len = min(context, DEFAULT_MAX_SEQ_LEN)
        return cls(max_seq_len, ChatTemplateCounter(folder), model or folder.name)


def student_fit(base_model: str, max_seq_len: int | None = None) -> StudentFit:
    """The fit of a `base_model` setting (a packaged model's name, a folder, an org/name already
    downloaded); never downloads or builds a model. Raises FitError saying why it cannot."""
    from training.models.registry import PACKAGED, ModelError
    from training.models.resolve import TINY, resolve_base_model

    if base_model == TINY:
        raise FitError(
            f"{TINY!r} builds its tokenizer per run: set training_base_model to the student you train"
            " (e.g. qwen2.5-coder-0.5b-instruct) to have pairs checked against its context"
        )
    folder = Path(base_model).expanduser()
    try:
        if base_model in PACKAGED or folder.is_dir():
            folder = resolve_base_model(base_model, fetch=False)
        else:  # a hub id: only what is already in the local cache, never a download at preference time
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(base_model, local_files_only=True))
    except (ValueError, ModelError, OSError) as exc:
        raise FitError(f"student {base_model!r}: {exc}") from exc
    return StudentFit.of_folder(folder, max_seq_len, model=base_model)
