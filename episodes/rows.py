"""What the episode log's stores share about rows: how text and JSON go into a column, how an
episode row comes back out (the episode store reads episodes, the training runs read the ones
ready for SFT), and which rows a listing selects.

A listing's filters (`EpisodeQuery`) become one SQL WHERE clause, so a page of a log of 100,000
episodes is read by the database (an index scan and LIMIT/OFFSET), never sorted in Python. The
reward filter is `episodes.rewards.combine` written in SQL over the latest value of each component,
with the store's weights, so it agrees with the `reward_total` shown."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from episodes.db import Cursor, Row
from episodes.records import CurationAction, Episode, EpisodeSource, EpisodeStatus, RewardSource, from_epoch
from episodes.redaction import redact_text
from episodes.rewards import COMPONENTS, DEFAULT_WEIGHTS, EVIDENCE, RewardWeights, combine

MAX_TEXT_CHARS = 4_000
"""Longest result summary, error or comment kept per row; the log is a record, not a file store."""
MAX_TASK_CHARS = 20_000
"""Longest task or episode summary kept: what start_episode and end_episode accept, stored whole."""


def clip_text(text: str | None, limit: int = MAX_TEXT_CHARS) -> str | None:
    """Redacted, clipped text that every backend can store.

    Callers compute it before opening a write transaction, so redaction never runs under the
    database's write lock. A lone surrogate (JSON `"\\ud800"` decodes to one) cannot be encoded as
    UTF-8 by SQLite or PostgreSQL; it is kept as its backslash escape instead of failing the write.
    """
    if text is None:
        return None
    text = redact_text(text).encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} more characters not stored]"


_ENCODER = json.JSONEncoder(ensure_ascii=True, default=str)
_AS_STDLIB = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME  # str() them, as `_ENCODER` does


def json_text(value: Any) -> str:
    """JSON for a text column that decodes (`json.loads`) to what the standard library's encoder
    would give (`default=str`; ASCII escapes keep lone surrogates), in a fraction of its time, for
    the JSON-like values the log holds (a plain `Enum` member is the exception: orjson writes its
    value, not its `str`).

    orjson writes a recorded turn 5-20x faster (a 256-token choice with logprobs: ~50 µs against
    ~950 µs), but it writes NaN and ±Infinity as `null`, and it refuses lone surrogates, non-str
    keys and integers past 64 bits. So its text is kept as it is when it holds no `null`, else
    only if it decodes back to `value`; every other case takes the standard encoder."""
    try:
        text = orjson.dumps(value, default=str, option=_AS_STDLIB)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, a non-str key, a big int, deep nesting
        return _ENCODER.encode(value)
    if b"null" in text and orjson.loads(text) != value:
        return _ENCODER.encode(value)
    return text.decode()


def latest_component(source: RewardSource) -> str:
    """SQL for the latest value of one reward component of `episodes e`: a verified one for tests and
    feedback (a measured run, a person's rating); a self rating is a feedback row an agent gave,
    unverified (`give_feedback`)."""
    stored, verified = {
        RewardSource.tests: ("tests", " AND r.verified = 1"),
        RewardSource.feedback: ("feedback", " AND r.verified = 1"),
        RewardSource.self_rating: ("feedback", " AND r.verified = 0"),
    }.get(source, (source.value, ""))
    return (
        f"(SELECT r.value FROM rewards r WHERE r.episode_id = e.id AND r.source = '{stored}'{verified}"
        " ORDER BY r.id DESC LIMIT 1)"
    )


VERIFIED = (
    "EXISTS (SELECT 1 FROM rewards v WHERE v.episode_id = e.id AND v.verified = 1"
    " AND v.source IN ('tests', 'feedback'))"
)
"""SQL over `episodes e`: its reward has evidence, not only claims (a measured tests reward, a person's rating)."""
FLAGS = "(SELECT COUNT(*) FROM episode_flags f WHERE f.episode_id = e.id AND f.cleared_at IS NULL)"
"""SQL over `episodes e`: the monitor's flags no person has cleared."""
TRAINABLE = f"{VERIFIED} AND {FLAGS} = 0"
"""SQL over `episodes e`: what training reads by default: verified, and nothing flagged left uncleared."""

EPISODE_COLUMNS = (
    "e.id, e.task, e.workspace, e.client, e.source, e.status, e.summary, e.implicit, e.created_at, e.updated_at,"
    " e.ended_at, (SELECT COUNT(*) FROM steps s WHERE s.episode_id = e.id),"
    " (SELECT COUNT(*) FROM policy_turns t WHERE t.episode_id = e.id), e.excluded, "
    + ", ".join(latest_component(source) for source in COMPONENTS)
    + f", {VERIFIED}, {FLAGS}, e.batch, e.batch_size"
)
"""The SELECT list that `episode_from_row` reads, for a query over `episodes e`: the episode, its
counts, whether it is excluded, the latest value of each reward component (`episodes.rewards`),
whether it is verified, how many uncleared flags it has, and the agent run it is an attempt of."""
_COMPONENTS_AT = slice(14, 14 + len(COMPONENTS))


def episode_from_row(row: Row, weights: RewardWeights = DEFAULT_WEIGHTS) -> Episode:
    created = from_epoch(row[8])
    updated = from_epoch(row[9])
    assert created is not None and updated is not None
    values = row[_COMPONENTS_AT]
    components = {source: float(value) for source, value in zip(COMPONENTS, values, strict=True) if value is not None}
    verified, flags, batch, batch_size = row[_COMPONENTS_AT.stop : _COMPONENTS_AT.stop + 4]
    return Episode(
        id=row[0],
        task=row[1],
        workspace=row[2],
        client=row[3],
        source=EpisodeSource(row[4]),
        status=EpisodeStatus(row[5]),
        summary=row[6],
        implicit=bool(row[7]),
        created_at=created,
        updated_at=updated,
        ended_at=from_epoch(row[10]),
        step_count=int(row[11]),
        turn_count=int(row[12]),
        reward_components=components,
        reward_total=combine(components, weights),
        excluded=bool(row[13]),
        verified=bool(verified),
        flags=int(flags),
        batch=batch,
        batch_size=None if batch_size is None else int(batch_size),
    )


MAX_AUTHOR_CHARS = 200


def check_author(author: str) -> str:
    """Who did it, as the curation history keeps it: a name, stripped; ValueError when empty or long."""
    name = " ".join(author.split())
    if not name:
        raise ValueError("say who is acting: an author name is required (the CLI defaults to your user name)")
    if len(name) > MAX_AUTHOR_CHARS:
        raise ValueError(f"an author name is at most {MAX_AUTHOR_CHARS} characters, got {len(name)}")
    return name


def record_curation(cur: Cursor, episode_id: str, action: CurationAction, detail: dict[str, Any]) -> None:
    """One row of the curation history, in the caller's transaction (the change and its record land together)."""
    cur.execute(
        "INSERT INTO curation (episode_id, action, detail, created_at) VALUES (?, ?, ?, ?)",
        (episode_id, action.value, json_text(detail), time.time()),
    )


MAX_SEARCH_CHARS = 500
REWARD_BOUND_SLACK = 1e-9
"""`min_reward`/`max_reward` take totals within this of the bound: floating point must not decide
the side. A total that is 0 in exact arithmetic (0.75 - 0.25 - 0.5, weighted) comes out of
`combine` as -1.4e-17, shown as 0.00; a bound of 0 includes it."""


@dataclass(frozen=True)
class EpisodeQuery:
    status: EpisodeStatus | None = None
    source: EpisodeSource | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    text: str | None = None
    """Episodes whose task contains this text (case-insensitive)."""
    since: datetime | None = None
    until: datetime | None = None
    excluded: bool | None = None
    """True: only excluded episodes; False: only included ones; None: both."""
    ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("min_reward", "max_reward"):
            value = getattr(self, name)
            if value is not None and not -1.0 <= value <= 1.0:
                raise ValueError(f"{name} is a reward in [-1, 1], got {value}")
        if self.min_reward is not None and self.max_reward is not None and self.min_reward > self.max_reward:
            raise ValueError(f"min_reward {self.min_reward} is above max_reward {self.max_reward}")
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since is after until")
        if self.text is not None and len(self.text) > MAX_SEARCH_CHARS:
            raise ValueError(f"search text is at most {MAX_SEARCH_CHARS} characters")

    def where(self, weights: RewardWeights) -> tuple[str, list[Any]]:
        """(`WHERE ...` or "", its parameters) over `episodes e`."""
        clauses: list[str] = []
        params: list[Any] = []
        if self.status is not None:
            clauses.append("e.status = ?")
            params.append(self.status.value)
        if self.source is not None:
            clauses.append("e.source = ?")
            params.append(self.source.value)
        if self.excluded is not None:
            clauses.append("e.excluded = ?")
            params.append(int(self.excluded))
        if self.since is not None:
            clauses.append("e.created_at >= ?")
            params.append(self.since.timestamp())
        if self.until is not None:
            clauses.append("e.created_at < ?")
            params.append(self.until.timestamp())
        if self.text:
            escaped = self.text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append("LOWER(e.task) LIKE ? ESCAPE '\\'")
            params.append(f"%{escaped}%")
        if self.ids is not None:
            clauses.append(f"e.id IN ({','.join('?' * len(self.ids))})" if self.ids else "1 = 0")
            params.extend(self.ids)
        if self.min_reward is not None or self.max_reward is not None:
            total = reward_sql(weights)
            clauses.append(f"{total} IS NOT NULL")
            if self.min_reward is not None:
                clauses.append(f"{total} >= ?")
                params.append(self.min_reward - REWARD_BOUND_SLACK)
            if self.max_reward is not None:
                clauses.append(f"{total} <= ?")
                params.append(self.max_reward + REWARD_BOUND_SLACK)
        return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


def reward_sql(weights: RewardWeights) -> str:
    """`combine` in SQL: sum(w * v) / sum(w) over the evidence components an episode has, else over
    all its components; NULL without any."""
    terms = [(weights.of(source), latest_component(source)) for source in COMPONENTS if weights.of(source) > 0]
    if not terms:
        return "NULL"
    evidence = [(w, v) for (w, v), source in zip(terms, [s for s in COMPONENTS if weights.of(s) > 0], strict=True)
                if source in EVIDENCE]  # fmt: skip

    def mean(chosen: list[tuple[float, str]]) -> tuple[str, str]:
        numerator = " + ".join(f"{w!r} * COALESCE({v}, 0)" for w, v in chosen) or "0"
        denominator = " + ".join(f"(CASE WHEN {v} IS NULL THEN 0 ELSE {w!r} END)" for w, v in chosen) or "0"
        return numerator, denominator

    (all_num, all_den), (ev_num, ev_den) = mean(terms), mean(evidence)
    return f"(CASE WHEN ({ev_den}) > 0 THEN ({ev_num}) / ({ev_den}) ELSE ({all_num}) / NULLIF({all_den}, 0) END)"
