"""Policy turns in the episode log: our student's completions, with their token ids and logprobs.

`PolicyTurns` reads and writes table `policy_turns` over the database an `EpisodeStore` opened and
migrated (the store holds one as `store.turns`); the policy endpoint (`training.gateway.app`) records
through it, the exporters and the group builder read it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from episodes.codec import CHOICE_TAG
from episodes.db import Cursor, Database, EpisodeNotFound, PolicyTurnRefused, StoreError, check_episode_id
from episodes.records import EpisodeSource, EpisodeStatus, at_epoch
from episodes.redaction import redact
from episodes.rows import json_text
from episodes.run_records import PolicyTurn, TurnContext


def redact_choice(choice: dict[str, Any]) -> dict[str, Any]:
    """A codec-encoded choice with secrets redacted from its text: the message (content, refusal,
    tool-call arguments) goes through `redact`. Token ids and logprob floats are kept exactly.

    Why the token ids stay: GRPO trains on them. ART puts the choice's `token_id:N` tokens in place
    of the assistant turn, and the gateway splices a turn's exact prompt and completion ids into the
    next prompt; rewriting them would train on a sequence the policy never sampled (its logprobs
    would belong to other tokens). What it means: a secret the policy saw or wrote is still in the
    log as token ids (`prompt_token_ids`, `completion_token_ids`, the `token_id:N` logprob entries)
    and anyone with the tokenizer can decode it, and the model trains on it. Those columns (and the
    `art` export, which carries them) are as sensitive as the model's weights; the text of the log
    (`episodes show`, `sft`/`dpo` exports) is clean. Also, ART rebuilds the prompt from the redacted
    messages, so a turn whose prompt held a secret trains in a slightly different context than it
    was sampled in.

    When the message changed, the per-token `bytes` (the decoded text of each token, which would
    spell the secret next to its marker) are dropped; if the logprob tokens are text rather than
    `token_id:N` (an upstream that returns no ids), the token strings spell it too, so the
    logprobs are dropped and the turn is no longer trainable.
    """
    data = choice.get(CHOICE_TAG)
    if not isinstance(data, dict):
        return dict(choice)
    message = data.get("message")
    clean = redact(message)
    if clean == message:
        return choice
    out = {**data, "message": clean}
    logprobs = data.get("logprobs")
    if isinstance(logprobs, dict):
        entries = [e for key in ("content", "refusal") for e in (logprobs.get(key) or [])]
        if any(not str(e.get("token", "")).startswith("token_id:") for e in entries):
            out["logprobs"] = None
        else:

            def without_bytes(entry: dict[str, Any]) -> dict[str, Any]:
                top = entry.get("top_logprobs")
                kept = {**entry, "bytes": None}
                if top:
                    kept["top_logprobs"] = [{**t, "bytes": None} for t in top]
                return kept

            out["logprobs"] = {
                key: [without_bytes(e) for e in value] if isinstance(value, list) else value
                for key, value in logprobs.items()
            }
    return {**choice, CHOICE_TAG: out}


@dataclass(frozen=True)
class RedactedRequest:
    """A policy turn's chat request with its secrets redacted, as the log stores it. The policy
    endpoint needs the redacted conversation before it samples (to tell whether it continues the
    stored last turn), so it redacts once with `of` and records this value as it is."""

    data: dict[str, Any]
    sent: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The request as given, secrets included; kept in memory for the next turn's `of`, never stored."""

    @classmethod
    def of(cls, request: dict[str, Any], after: TurnContext | None = None) -> RedactedRequest:
        """`redact(request)`. `after`: the episode's last turn, recorded by this process. What the
        request repeats of it as it was sent (the leading messages it shares, unchanged tools)
        keeps its redaction instead of being scanned again: an agent resends its whole conversation
        with every turn, and redacting it again made a turn cost more the longer the session."""
        sent = after.last_request_sent if after is not None else None
        done = after.last_request if after is not None else None
        if sent is None or done is None:
            return cls(redact(request), request)
        data: dict[str, Any] = {}
        for key, value in request.items():
            before = sent.get(key, _ABSENT)
            if key == "messages" and isinstance(value, list) and isinstance(before, list):
                n = common_prefix_length(value, before)  # messages are redacted one by one
                data[key] = [*done[key][:n], *redact(value[n:])]
            elif key in done and value == before:
                data[key] = done[key]
            else:  # through a one-key dict: `redact` masks a string under a secret-sounding key
                data[key] = redact({key: value})[key]
        return cls(data, request)


_ABSENT = object()


def common_prefix_length(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items `a` and `b` share. A binary search over slice comparisons, which run
    in C: a long conversation's prompt ids are tens of thousands of items."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while low < high:  # a[:low] == b[:low] and a[:high] != b[:high]
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


@dataclass(frozen=True)
class TurnPrefix:
    """What a stored turn shares with an earlier turn of its episode (`turn_id`), and so does not
    store again: its request's first `messages` messages are that turn's, its request's `tools`
    are that turn's when the stored request has no `tools` key, and its first `tokens` prompt ids
    are that turn's prompt ids followed by its completion ids. An agent's next request is usually
    its last one plus a few messages, and its prompt ids are the last prompt and completion plus a
    few tokens: the log then grows with what each turn adds, not with the conversation's length."""

    turn_id: int
    messages: int
    tokens: int

    @staticmethod
    def between(
        after: TurnContext | None, request: dict[str, Any], prompt_token_ids: list[int] | None
    ) -> tuple[TurnPrefix | None, dict[str, Any], list[int] | None]:
        """(prefix, request to store, prompt ids to store) of a turn following `after`."""
        before = after.last_request if after is not None else None
        if after is None or after.last_turn_id is None or before is None:
            return None, request, prompt_token_ids
        if "tools" in before and "tools" not in request:  # an absent key would read back as the prefix's
            return None, request, prompt_token_ids
        stored = dict(request)
        messages, earlier = request.get("messages"), before.get("messages")
        shared = 0
        if isinstance(messages, list) and isinstance(earlier, list):
            shared = common_prefix_length(messages, earlier)
            stored["messages"] = messages[shared:]
        same_tools = "tools" in before and request["tools"] == before["tools"]
        if same_tools:
            del stored["tools"]
        tokens = 0
        if prompt_token_ids is not None and after.last_prompt_token_ids is not None:
            tokens = common_prefix_length(
                prompt_token_ids, [*after.last_prompt_token_ids, *(after.last_completion_token_ids or [])]
            )
        if not shared and not tokens and not same_tools:
            return None, request, prompt_token_ids
        rest = None if prompt_token_ids is None else prompt_token_ids[tokens:]
        return TurnPrefix(after.last_turn_id, shared, tokens), stored, rest

    def apply(
        self, earlier: PolicyTurn, request: dict[str, Any], prompt_token_ids: list[int] | None
    ) -> tuple[dict[str, Any], list[int] | None]:
        """The whole request and prompt ids of a stored turn with this prefix; `earlier` whole."""
        whole = dict(request)
        if self.messages:
            whole["messages"] = [*earlier.request["messages"][: self.messages], *request.get("messages", [])]
        if "tools" not in whole and "tools" in earlier.request:
            whole["tools"] = earlier.request["tools"]
        if prompt_token_ids is not None and self.tokens:
            sequence = [*(earlier.prompt_token_ids or []), *(earlier.completion_token_ids or [])]
            prompt_token_ids = [*sequence[: self.tokens], *prompt_token_ids]
        return whole, prompt_token_ids


@dataclass(frozen=True)
class EncodedTurn:
    """One policy turn redacted and encoded into its column values, and the context it leaves for
    the next turn (`context`), which the policy endpoint keeps instead of reading it back."""

    model: str
    checkpoint_step: int | None
    request: RedactedRequest
    choice: dict[str, Any]
    """Codec-encoded and redacted (`redact_choice`)."""
    prompt_token_ids: list[int] | None
    completion_token_ids: list[int] | None
    prefix: TurnPrefix | None
    columns: tuple[str, int | None, str, str, str | None, str | None, int | None, int, int]

    @classmethod
    def of(
        cls,
        *,
        model: str,
        request: dict[str, Any] | RedactedRequest,
        choice: dict[str, Any],
        checkpoint_step: int | None = None,
        prompt_token_ids: list[int] | None = None,
        completion_token_ids: list[int] | None = None,
        after: TurnContext | None = None,
    ) -> EncodedTurn:
        """`choice` is `episodes.codec.encode_choice` output; the request (unless it comes
        redacted already) and the choice's text are redacted, its token ids and logprobs kept
        exactly (`redact_choice` says why and what that means), as are the token id columns.
        `after`: the episode's last turn, whose conversation this turn's columns leave out
        (`TurnPrefix`); it must be that episode's, as `PolicyTurns.turn_context` or `context` give it."""
        clean = request if isinstance(request, RedactedRequest) else RedactedRequest.of(request, after)
        clean_choice = redact_choice(choice)
        prefix, stored, prompt_rest = TurnPrefix.between(after, clean.data, prompt_token_ids)
        columns = (
            model,
            checkpoint_step,
            json_text(stored),
            json_text(clean_choice),
            None if prompt_rest is None else json_text(prompt_rest),
            None if completion_token_ids is None else json_text(completion_token_ids),
            None if prefix is None else prefix.turn_id,
            0 if prefix is None else prefix.messages,
            0 if prefix is None else prefix.tokens,
        )
        return cls(model, checkpoint_step, clean, clean_choice, prompt_token_ids, completion_token_ids, prefix, columns)

    def context(self, turn_id: int) -> TurnContext:
        """What `PolicyTurns.turn_context` reads once this, recorded as `turn_id`, is its open policy
        episode's last turn."""
        if self.prompt_token_ids is None or self.completion_token_ids is None:
            return TurnContext(EpisodeSource.policy, EpisodeStatus.open)
        return TurnContext(
            EpisodeSource.policy,
            EpisodeStatus.open,
            last_request=self.request.data,
            last_choice=self.choice,
            last_prompt_token_ids=self.prompt_token_ids,
            last_completion_token_ids=self.completion_token_ids,
            last_turn_id=turn_id,
            last_request_sent=self.request.sent,
        )


class PolicyTurns:
    """Table `policy_turns`, over a database `EpisodeStore` has migrated."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add_policy_turn(self, episode_id: str, turn: EncodedTurn, *, open_policy_only: bool = False) -> int:
        """Record one completion sampled from the policy (`EncodedTurn.of` says what is redacted);
        returns its id once committed. `open_policy_only`: only into an open policy episode, else
        `PolicyTurnRefused` (the policy endpoint checks this here, in the write, instead of reading
        the episode before every turn)."""
        check_episode_id(episode_id)
        now = time.time()
        condition = " AND source = 'policy' AND status = 'open'" if open_policy_only else ""
        with self.db.transaction(write=True) as cur:
            row = cur.execute(
                "INSERT INTO policy_turns (episode_id, model, checkpoint_step, request, choice, prompt_token_ids,"
                " completion_token_ids, prefix_turn_id, prefix_messages, prefix_tokens, created_at)"
                " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
                f" WHERE EXISTS (SELECT 1 FROM episodes WHERE id = ?{condition}) RETURNING id",
                (episode_id, *turn.columns, now, episode_id),
            ).fetchone()
            if row is None:
                found = cur.execute("SELECT source, status FROM episodes WHERE id = ?", (episode_id,)).fetchone()
                if found is None:
                    raise EpisodeNotFound(episode_id)
                raise PolicyTurnRefused(episode_id, EpisodeSource(found[0]), EpisodeStatus(found[1]))
            cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))
        return int(row[0])

    def turn_context(self, episode_id: str) -> TurnContext:
        """The episode's source and status and its last policy turn's request, choice, token ids and
        id (the policy endpoint's read before an episode's first turn through it)."""
        check_episode_id(episode_id)
        with self.db.transaction(write=False) as cur:
            found = cur.execute("SELECT source, status FROM episodes WHERE id = ?", (episode_id,)).fetchone()
            if found is None:
                raise EpisodeNotFound(episode_id)
            turns = self._read(cur, episode_id)
        source, status = EpisodeSource(found[0]), EpisodeStatus(found[1])
        last = turns[-1] if turns else None
        if last is None or last.prompt_token_ids is None or last.completion_token_ids is None:
            return TurnContext(source, status)  # no turn, or one without token ids: nothing to splice
        return TurnContext(
            source,
            status,
            last_request=last.request,
            last_choice=last.choice,
            last_prompt_token_ids=last.prompt_token_ids,
            last_completion_token_ids=last.completion_token_ids,
            last_turn_id=last.id,
        )

    def policy_turns(self, episode_id: str) -> list[PolicyTurn]:
        """The episode's policy turns in order, each whole (its `TurnPrefix` filled in)."""
        with self.db.transaction(write=False) as cur:
            return self._read(cur, episode_id)

    @staticmethod
    def _read(cur: Cursor, episode_id: str) -> list[PolicyTurn]:
        rows = cur.execute(
            "SELECT id, model, checkpoint_step, request, choice, prompt_token_ids, completion_token_ids,"
            " created_at, prefix_turn_id, prefix_messages, prefix_tokens FROM policy_turns WHERE episode_id = ?"
            " ORDER BY id",
            (episode_id,),
        ).fetchall()
        turns: list[PolicyTurn] = []
        by_id: dict[int, PolicyTurn] = {}
        for r in rows:
            request = json.loads(r[3])
            prompt_token_ids = None if r[5] is None else json.loads(r[5])
            if r[8] is not None:
                earlier = by_id.get(r[8])
                if earlier is None:
                    raise StoreError(
                        f"policy turn {r[0]} of episode {episode_id} extends turn {r[8]}, which is not an earlier"
                        " turn of that episode: the log was edited by hand?"
                    )
                request, prompt_token_ids = TurnPrefix(r[8], r[9], r[10]).apply(earlier, request, prompt_token_ids)
            turn = PolicyTurn(
                id=r[0],
                episode_id=episode_id,
                model=r[1],
                checkpoint_step=r[2],
                request=request,
                choice=json.loads(r[4]),
                prompt_token_ids=prompt_token_ids,
                completion_token_ids=None if r[6] is None else json.loads(r[6]),
                created_at=at_epoch(r[7]),
            )
            turns.append(turn)
            by_id[turn.id] = turn
        return turns
