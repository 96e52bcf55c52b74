"""Policy turns in the episode log: our student's completions, with their token ids and logprobs.

`PolicyTurns` reads and writes table `policy_turns` over the database an `EpisodeStore` opened and
migrated (the store holds one as `store.turns`); the policy endpoint (`training.gateway`) records
through it, the exporters and the group builder read it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from training.codec import CHOICE_TAG
from training.db import Database, EpisodeNotFound, PolicyTurnRefused, check_episode_id
from training.log_rows import json_text
from training.records import EpisodeSource, EpisodeStatus, at_epoch
from training.redact import redact
from training.run_records import PolicyTurn, TurnContext


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

    @classmethod
    def of(cls, request: dict[str, Any]) -> RedactedRequest:
        return cls(redact(request))


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
    columns: tuple[str, int | None, str, str, str | None, str | None]

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
    ) -> EncodedTurn:
        """`choice` is `training.codec.encode_choice` output; the request (unless it comes
        redacted already) and the choice's text are redacted, its token ids and logprobs kept
        exactly (`redact_choice` says why and what that means), as are the token id columns."""
        clean = request if isinstance(request, RedactedRequest) else RedactedRequest.of(request)
        clean_choice = redact_choice(choice)
        columns = (
            model,
            checkpoint_step,
            json_text(clean.data),
            json_text(clean_choice),
            None if prompt_token_ids is None else json_text(prompt_token_ids),
            None if completion_token_ids is None else json_text(completion_token_ids),
        )
        return cls(model, checkpoint_step, clean, clean_choice, prompt_token_ids, completion_token_ids, columns)

    def context(self) -> TurnContext:
        """What `PolicyTurns.turn_context` reads once this is its open policy episode's last turn."""
        if self.prompt_token_ids is None or self.completion_token_ids is None:
            return TurnContext(EpisodeSource.policy, EpisodeStatus.open)
        return TurnContext(
            EpisodeSource.policy,
            EpisodeStatus.open,
            last_request=self.request.data,
            last_choice=self.choice,
            last_prompt_token_ids=self.prompt_token_ids,
            last_completion_token_ids=self.completion_token_ids,
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
                " completion_token_ids, created_at) SELECT ?, ?, ?, ?, ?, ?, ?, ?"
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
        """The episode's source and status and its last policy turn's request, choice and token ids,
        in one query (the policy endpoint's read before an episode's first turn through it)."""
        check_episode_id(episode_id)
        with self.db.transaction(write=False) as cur:
            row = cur.execute(
                "SELECT e.source, e.status, t.request, t.choice, t.prompt_token_ids, t.completion_token_ids"
                " FROM episodes e LEFT JOIN policy_turns t"
                " ON t.id = (SELECT MAX(p.id) FROM policy_turns p WHERE p.episode_id = e.id) WHERE e.id = ?",
                (episode_id,),
            ).fetchone()
        if row is None:
            raise EpisodeNotFound(episode_id)
        source, status = EpisodeSource(row[0]), EpisodeStatus(row[1])
        if row[4] is None or row[5] is None:  # no turn, or one without token ids: nothing to splice
            return TurnContext(source, status)
        return TurnContext(
            source,
            status,
            last_request=json.loads(row[2]),
            last_choice=json.loads(row[3]),
            last_prompt_token_ids=json.loads(row[4]),
            last_completion_token_ids=json.loads(row[5]),
        )

    def policy_turns(self, episode_id: str, *, last_only: bool = False) -> list[PolicyTurn]:
        """The episode's policy turns in order (`last_only`: just the newest, for continuing a conversation)."""
        order = "ORDER BY id DESC LIMIT 1" if last_only else "ORDER BY id"
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT id, model, checkpoint_step, request, choice, prompt_token_ids, completion_token_ids,"
                f" created_at FROM policy_turns WHERE episode_id = ? {order}",
                (episode_id,),
            ).fetchall()
        return [
            PolicyTurn(
                id=r[0],
                episode_id=episode_id,
                model=r[1],
                checkpoint_step=r[2],
                request=json.loads(r[3]),
                choice=json.loads(r[4]),
                prompt_token_ids=None if r[5] is None else json.loads(r[5]),
                completion_token_ids=None if r[6] is None else json.loads(r[6]),
                created_at=at_epoch(r[7]),
            )
            for r in rows
        ]
