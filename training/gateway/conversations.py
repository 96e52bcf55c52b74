"""Which episode a chat request continues: the last turn of each recent episode, and the episodes
the policy endpoint opens for calls that name none (one per conversation).

An agent resends its whole conversation with every call, the last answer echoed back as an
assistant message. So a call that names no episode (no key, no header, no episode URL) continues
the episode whose last recorded turn it repeats and extends (`PriorTurn.continued_by`), and a call
that continues none starts a conversation, and an implicit policy episode for it, as the MCP side
opens one per client session. Matching needs no token ids (a proxied engine records none). Two
agents holding identical conversations (the same prompt, answers sampled alike) each continue an
episode of their own: an episode is claimed while its turn is sampled, and a call continues only
an episode whose last turn it repeats.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from episodes.codec import CHOICE_TAG
from episodes.policy_turns import EncodedTurn, RedactedRequest
from episodes.run_records import TurnContext
from training.gateway.engines import PriorTurn

LAST_TURNS_KEPT = 256
"""Episodes whose last turn the gateway remembers. Each entry holds that turn's whole conversation
twice (as sent and redacted) and its prompt ids, up to a few MB for a long agent session."""


def redacted_request(args: dict[str, Any], after: TurnContext | None) -> RedactedRequest:
    """A parsed chat request (`app.parse_request`) as the log stores it, redacted once."""
    params = {k: args[k] for k in ("max_tokens", "temperature", "top_p", "seed")}
    return RedactedRequest.of({"messages": args["messages"], "tools": args["tools"], "params": params}, after=after)


def prior_turn(context: TurnContext, messages: list[dict[str, Any]]) -> PriorTurn | None:
    """The episode's last turn, to be continued token in, token out: if it has token ids and
    `messages` (redacted) continue it."""
    if context.last_prompt_token_ids is None or context.last_completion_token_ids is None:
        return None
    message = ((context.last_choice or {}).get(CHOICE_TAG) or {}).get("message") or {}
    prior = PriorTurn(
        messages=list((context.last_request or {}).get("messages") or []),
        content=message.get("content"),
        prompt_token_ids=context.last_prompt_token_ids,
        completion_token_ids=context.last_completion_token_ids,
        tool_calls=message.get("tool_calls"),
    )
    return prior if prior.continued_by(messages) else None


class LastTurns:
    """The context of the last turn this process recorded into each recent episode, so a turn
    needs no read of the log before it samples: only its write, which re-checks that the episode
    is still an open policy episode. An entry goes stale only if another process records a turn
    into the same episode (two gateways serving one agent's conversation). That costs exactness,
    not consistency: the stale turn is spliced only if the request continues it
    (`PriorTurn.continued_by`), the turns after it are re-tokenized instead of spliced, the log
    records the prompt ids actually fed, and the turn's `TurnPrefix` names the stale turn it
    extends by id, so it still reads back whole."""

    def __init__(self, size: int = LAST_TURNS_KEPT) -> None:
        self._size = size
        self._turns: OrderedDict[str, TurnContext] = OrderedDict()
        self._lock = threading.Lock()  # used from the worker threads of concurrent requests

    def get(self, episode_id: str) -> TurnContext | None:
        with self._lock:
            return self._turns.get(episode_id)

    def put(self, episode_id: str, context: TurnContext) -> None:
        with self._lock:
            self._turns[episode_id] = context
            self._turns.move_to_end(episode_id)
            if len(self._turns) > self._size:
                self._turns.popitem(last=False)

    def forget(self, episode_id: str) -> None:
        with self._lock:
            self._turns.pop(episode_id, None)


def opening(messages: list[dict[str, Any]]) -> str:
    """A digest of how a conversation opens: its messages up to its first user message, which every
    later call of the conversation repeats."""
    end = next((i + 1 for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    return hashlib.sha256(json.dumps(messages[:end], sort_keys=True, default=str).encode()).hexdigest()


class Conversations:
    """The episodes opened for calls that name none: each one's opening and last recorded turn."""

    def __init__(self, turns: LastTurns, size: int = LAST_TURNS_KEPT) -> None:
        self.turns = turns
        """The last turns' contexts, used only to redact a long conversation's repeated part once."""
        self._size = size
        self._last: OrderedDict[str, tuple[str, PriorTurn | None]] = OrderedDict()
        """episode id -> its conversation's opening and its last recorded turn, oldest first."""
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def claim(self, args: dict[str, Any], open_episode: Callable[[], str]) -> str:
        """The episode a parsed chat request continues, or one `open_episode` starts for it; held
        for this request until `release`."""
        key = opening(args["messages"])
        with self._lock:
            for episode_id in reversed(self._last):
                started, prior = self._last[episode_id]
                if started != key or prior is None or episode_id in self._busy:
                    continue
                messages = redacted_request(args, self.turns.get(episode_id)).data["messages"]
                if prior.continued_by(messages):
                    self._last.move_to_end(episode_id)
                    break
            else:
                episode_id = open_episode()
                self._last[episode_id] = (key, None)
                if len(self._last) > self._size:
                    self._last.popitem(last=False)
            self._busy.add(episode_id)
            return episode_id

    def recorded(self, episode_id: str, turn: EncodedTurn) -> None:
        """`turn` was recorded into `episode_id`: the next call of its conversation repeats it."""
        message = (turn.choice.get(CHOICE_TAG) or {}).get("message") or {}
        prior = PriorTurn(
            messages=list(turn.request.data["messages"]),
            content=message.get("content"),
            prompt_token_ids=[],
            completion_token_ids=[],
            tool_calls=message.get("tool_calls"),
        )
        with self._lock:
            if episode_id in self._last:
                self._last[episode_id] = (self._last[episode_id][0], prior)

    def release(self, episode_id: str) -> None:
        with self._lock:
            self._busy.discard(episode_id)

    def drop(self, episode_id: str) -> None:
        """Never continue this episode again (it ended)."""
        with self._lock:
            self._last.pop(episode_id, None)
            self._busy.discard(episode_id)


__all__ = ["Conversations", "LastTurns", "opening", "prior_turn", "redacted_request"]
