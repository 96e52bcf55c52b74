"""What the episode log's stores share about rows: how text and JSON go into a column, and how an
episode row comes back out (the episode store reads episodes, the training runs read the ones
ready for SFT)."""

from __future__ import annotations

import json
from typing import Any

import orjson

from episodes.db import Row
from episodes.records import Episode, EpisodeSource, EpisodeStatus, RewardSource, from_epoch
from episodes.redaction import redact_text
from episodes.rewards import COMPONENTS, DEFAULT_WEIGHTS, RewardWeights, combine

MAX_TEXT_CHARS = 4_000
"""Longest result summary, error or comment kept per row; the log is a record, not a file store."""


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


def _latest(source: RewardSource) -> str:
    verified = " AND r.verified = 1" if source is RewardSource.tests else ""
    return (
        f"(SELECT r.value FROM rewards r WHERE r.episode_id = e.id AND r.source = '{source.value}'{verified}"
        " ORDER BY r.id DESC LIMIT 1)"
    )


EPISODE_COLUMNS = (
    "e.id, e.task, e.workspace, e.client, e.source, e.status, e.summary, e.implicit, e.created_at, e.updated_at,"
    " e.ended_at, (SELECT COUNT(*) FROM steps s WHERE s.episode_id = e.id),"
    " (SELECT COUNT(*) FROM policy_turns t WHERE t.episode_id = e.id), e.excluded, "
    + ", ".join(_latest(source) for source in COMPONENTS)
)
"""The SELECT list that `episode_from_row` reads, for a query over `episodes e`: the episode, its
counts, whether it is excluded, and the latest value of each reward component (`episodes.rewards`)."""


def episode_from_row(row: Row, weights: RewardWeights = DEFAULT_WEIGHTS) -> Episode:
    created = from_epoch(row[8])
    updated = from_epoch(row[9])
    assert created is not None and updated is not None
    components = {source: float(value) for source, value in zip(COMPONENTS, row[14:], strict=True) if value is not None}
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
    )
