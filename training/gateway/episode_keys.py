"""Per-episode API keys: one base URL (`/v1`) for every agent, its calls recorded into its episode.

`POST /episodes` mints a key for the episode it starts. An agent that takes only a base URL and an
API key (aider, mini-swe-agent, the OpenAI Agents SDK) is given `<root>/v1` and that key; its client
sends `Authorization: Bearer <key>`, and every chat completion it asks for is recorded into the
episode, as one under `/episodes/{id}/v1` is.

With a token (`RLIDE_POLICY_TOKEN`) a key is a capability: `rk-<episode id>.<signature>`, the
signature an HMAC of the episode id under the token, so no key can be made without the token. It
reaches that episode's `/v1` routes only (`KEY_PATHS`): it cannot start, end or read any episode,
nor record into another. Without a token the endpoint serves loopback only and any local caller can
already name an episode in the URL, so the key (`rk-<episode id>`) only says which episode: a
signature would protect nothing.

A caller holding the token may instead name the episode in the `X-Rlide-Episode` header.
"""

from __future__ import annotations

import hashlib
import hmac
import re

KEY_PREFIX = "rk-"
EPISODE_HEADER = "x-rlide-episode"
KEY_PATHS = frozenset({"/v1/models", "/v1/chat/completions"})
"""What an episode key may reach: the routes an OpenAI client calls under its base URL."""
_EPISODE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _signature(episode_id: str, token: str) -> str:
    return hmac.new(token.encode(), f"rlide-episode-key:{episode_id}".encode(), hashlib.sha256).hexdigest()[:40]


def mint(episode_id: str, token: str | None) -> str:
    """The API key that records into `episode_id` through `/v1`."""
    if not _EPISODE_ID.fullmatch(episode_id):
        raise ValueError(f"not an episode id: {episode_id!r}")
    return KEY_PREFIX + episode_id + (f".{_signature(episode_id, token)}" if token else "")


def is_episode_key(key: str) -> bool:
    """Whether `key` claims to be an episode key (it may still be a forged or stale one)."""
    return key.startswith(KEY_PREFIX)


def episode_of(key: str, token: str | None) -> str | None:
    """The episode `key` records into, or None when it is not a key this endpoint minted (a wrong
    signature, one minted under another token, or no signature where the endpoint has a token)."""
    if not is_episode_key(key):
        return None
    episode_id, _, signature = key.removeprefix(KEY_PREFIX).partition(".")
    if not _EPISODE_ID.fullmatch(episode_id):
        return None
    if token is None:
        return episode_id if not signature else None
    return episode_id if hmac.compare_digest(signature, _signature(episode_id, token)) else None


__all__ = ["EPISODE_HEADER", "KEY_PATHS", "episode_of", "is_episode_key", "mint"]
