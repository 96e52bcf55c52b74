"""Secret redaction, applied to everything before it is stored.

Tool arguments and results come from an IDE agent that happily pastes `.env` files, curl commands
with tokens and connection strings. The episode log is training data that people export and share,
so secrets are replaced with a marker naming their kind before anything reaches the store.

The patterns favour recall over precision: a false positive costs a few characters of training
text, a false negative leaks a credential.

Speed without giving up any of that: every pattern has a trigger, a short literal (or a handful)
that any text it matches must contain (`_TRIGGERS`, with the pattern's own case rule). Only the
patterns whose trigger is in the text run, each checked on the text as the patterns before it
left it; a short text without any trigger is returned after one search. A trigger is a necessary
condition of its pattern, so the result is the same as running every pattern (`tests/episodes/test_redaction.py`
checks both: every pattern is caught, and the gated and ungated results agree on a corpus built to
stress the triggers).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

REDACTED = "[REDACTED:{kind}]"


def _marker(kind: str) -> str:
    return REDACTED.format(kind=kind)


# Each entry: (kind, pattern). Patterns with a group named "secret" keep the text around it.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY"
            r"(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
    ),
    # scheme://user:password@host: keep the user, drop the password.
    ("url_password", re.compile(r"(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:(?P<secret>[^\s@/]+)@")),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}")),
    ("wandb_key", re.compile(r"(?i)(?<=WANDB_API_KEY)(?P<sep>\s*[=:]\s*)(?P<secret>[a-f0-9]{40})")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    # Generic forms last, so the specific patterns above name the kind of secret.
    ("bearer_token", re.compile(r"(?i)\b(?:bearer|token)\s+(?P<secret>[A-Za-z0-9\-._~+/]{16,}=*)")),
    ("basic_auth", re.compile(r"(?i)\bbasic\s+(?P<secret>[A-Za-z0-9+/]{12,}={0,2})")),
    # NAME=value (env files, shell, kwargs) and "name": "value" (JSON, YAML with quotes). An unquoted
    # `name: value` is left alone: in code it is usually a type annotation (`password: str`). The
    # pattern starts at the secret word, not at the start of the name: a `[\w.-]*` prefix made it
    # quadratic on long runs of name characters (20,000 characters took over a minute).
    (
        "assignment",
        re.compile(
            r"(?i)(?P<name>(?:password|passwd|pwd|secret|api[_-]?key|apikey|access[_-]?key|"
            r"auth[_-]?token|access[_-]?token|refresh[_-]?token|client[_-]?secret|private[_-]?key|token)"
            r"(?:[\"']?\s*=\s*[\"']?|[\"']?\s*:\s*[\"']))(?P<secret>(?!\[REDACTED)[^\s\"',;}{]{4,})"
        ),
    ),
]


def _replace(kind: str) -> Callable[[re.Match[str]], str]:
    def sub(match: re.Match[str]) -> str:
        groups = match.groupdict()
        if "secret" not in groups or groups["secret"] is None:
            return _marker(kind)
        start, end = match.span("secret")
        whole_start = match.start()
        text = match.group(0)
        return text[: start - whole_start] + _marker(kind) + text[end - whole_start :]

    return sub


# The trigger of each pattern: regexes, at least one of which finds a match in the folded text
# (`_fold`: lowercase, and the four non-ASCII letters that a case-insensitive `re` pattern also
# takes for ASCII letters mapped onto them) whenever the pattern matches the original text. Each
# starts with a literal, which `re` finds with a fast scan; a case-sensitive pattern's trigger is
# its literal lowercased (weaker, still necessary). Every pattern must have one (import fails).
_TRIGGERS: dict[str, tuple[str, ...]] = {
    "private_key": ("-----begin ",),
    "url_password": ("://",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "github_token": ("gh[pousr]_", "github_pat_"),
    "gitlab_token": ("glpat-",),
    "slack_token": ("xox[abposr]-",),
    "aws_access_key": ("akia", "asia", "agpa", "aida", "aroa"),
    "google_api_key": ("aiza",),
    "huggingface_token": ("hf_",),
    "stripe_key": ("k_live_", "k_test_"),
    "wandb_key": ("wandb_api_key",),
    "jwt": ("eyj",),
    "bearer_token": (r"bearer\s", r"token\s"),
    "basic_auth": (r"basic\s",),
    # Every name the pattern knows ends in one of these, followed by an optional quote, then `=`
    # or `:` and a quote (after spaces).
    "assignment": tuple(
        rf"{end}[\"']?\s*(?:=|:\s*[\"'])" for end in ("passw(?:or)?d", "pwd", "secret", "key", "token")
    ),
}
_FOLDS = (("\u0130", "i"), ("\u0131", "i"), ("\u017f", "s"), ("\u212a", "k"))
"""İ, ı, ſ and the Kelvin sign: what `re.IGNORECASE` matches to i, s and k beyond ASCII case."""


def _fold(text: str) -> str:
    if not text.isascii():
        for odd, letter in _FOLDS:
            text = text.replace(odd, letter)
    return text.lower()


_GATED: list[tuple[tuple[re.Pattern[str], ...], re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (tuple(re.compile(t) for t in _TRIGGERS[kind]), pattern, _replace(kind)) for kind, pattern in _PATTERNS
]
_ANY_TRIGGER = re.compile("|".join(t for kind, _ in _PATTERNS for t in _TRIGGERS[kind]))
"""All triggers in one pattern: one call for a short text (an alternation has no fast literal scan,
so on long text the separate triggers, each found by a fast scan, cost less)."""
_SHORT = 256


CACHED_TEXT_CHARS = 16_384
"""Texts up to this length are remembered with their redaction (the last `CACHED_TEXTS` of them):
an agent's conversation comes back whole with every turn, and only its new messages need the
patterns (a 40-message, 24 KB conversation: 1.66 ms to redact, 0.15 ms when all but its last
message are known). At most about 16 MB: a text without secrets is its own redaction, stored once."""
CACHED_TEXTS = 1024


def redact_text(text: str) -> str:
    """Return `text` with every secret this module recognises replaced by a marker."""
    return _redact_known(text) if len(text) <= CACHED_TEXT_CHARS else _redact_text(text)


@functools.lru_cache(maxsize=CACHED_TEXTS)
def _redact_known(text: str) -> str:
    return _redact_text(text)


def _redact_text(text: str) -> str:
    folded = _fold(text)
    if len(folded) <= _SHORT and _ANY_TRIGGER.search(folded) is None:
        return text  # no pattern can match
    for triggers, pattern, replace in _GATED:
        if any(t.search(folded) is not None for t in triggers):
            redacted = pattern.sub(replace, text)
            if redacted != text:
                text, folded = redacted, _fold(redacted)
    return text


# Whole key names only: `max_tokens` or `tokenizer` are not secrets, `api_key` and `db_password` are.
_SECRET_KEY = re.compile(
    r"(?i)^(?:.*[_-])?(?:password|passwd|secret|api[_-]?key|apikey|access[_-]?key|auth[_-]?token|"
    r"access[_-]?token|refresh[_-]?token|token|authorization|cookie|credentials?|private[_-]?key|"
    r"client[_-]?secret)$"
)


@functools.lru_cache(maxsize=4096)
def _is_secret_name(key: str) -> bool:
    return _SECRET_KEY.match(key) is not None


def _is_secret_key(key: str) -> bool:
    """Cached for short keys: the same few names (role, content, messages, ...) come back on every call."""
    return _is_secret_name(key) if len(key) <= 128 else _SECRET_KEY.match(key) is not None


def redact(value: Any) -> Any:
    """Redact a JSON-like value: strings are scanned, and values under secret-sounding keys are masked."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and isinstance(item, str) and item and _is_secret_key(key):
                out[key] = _marker("field")
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value
