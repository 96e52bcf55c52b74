"""FTS5's BM25, scored in numpy from postings held in memory.

FTS5 ranks an OR query by calling its `bm25()` for every row that matches any token, about 1 us a
row: 10-15 ms for a docstring-like query over the 58k chunks of the standard library, the largest
part of a warm `search_code`. This index keeps, per query token it has seen, the token's postings
(row ids and their column-weighted term frequency, read once from FTS5's own `fts5vocab`
instance table), and per row its token count (FTS5's docsize table). Scoring a query is then a
few vector operations over those postings.

The score is FTS5's own formula (fts5_aux.c, `fts5Bm25Function`), so both paths rank the same:

    idf(t) = log((N - n_t + 0.5) / (n_t + 0.5)), or 1e-6 where that is <= 0
    score(d) = sum over t of idf(t) * f * (k1 + 1) / (f + k1 * (1 - b + b * |d| / avgdl))

with f the column-weighted frequency of t in d, |d| its token count over all columns, N the row
count and k1 = 1.2, b = 0.75 (tested against FTS5's scores).

It follows other processes' writes through `chunk_log` (a log of inserted and
deleted rows, as `vector_log` is for vectors): row lengths are patched in place, deleted rows are
skipped when scoring, and new rows' text is counted into the cached tokens it contains. Tokens
are ASCII `[a-z0-9_]` words separated by spaces (memory/indexing/tokens.py), which is also exactly how FTS5's
`unicode61` tokenizer splits them, so counting by `str.split` agrees with FTS5.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memory.ranking import top_k
from memory.stores.row_filter import Mask, changes_since, snapshot

K1 = 1.2
B = 0.75
MIN_POSTINGS = 4_000_000
POSTINGS_PER_ROW = 16
"""Postings kept across cached tokens (8 bytes each): this many per row of the table, and at least
MIN_POSTINGS; the least recently used tokens go first. A fixed 4M held the working set of a
58k-chunk store but not of a 1M-chunk one, where a token in 2% of the chunks has 20k postings: the
BM25 side then re-read postings from FTS5 on almost every query (84 of its 89 ms)."""
WARM_MIN_INSTANCES = 2_000
"""`KeywordIndex.warm` loads tokens that occur this often or more: those take 0.5 ms or more to read
(the 58k chunks of the standard library have 390 such tokens, 0.69M postings read in 0.7 s; their
first use made the slowest 1% of warm searches 15-25 ms against a median of 8)."""


class _Postings:
    __slots__ = ("freq", "rows")

    def __init__(self, rows: npt.NDArray[np.int32], freq: npt.NDArray[np.float32]) -> None:
        self.rows = rows
        self.freq = freq


def _set_lengths(
    lengths: npt.NDArray[np.float64], present: npt.NDArray[np.bool_], rows: list[tuple[int, bytes]]
) -> None:
    """Each row's token count over all columns, from FTS5's docsize blobs (a SQLite varint per
    column: 7 bits a byte, most significant first, the high bit set on all but the last byte).
    Decoded for all rows at once: a Python loop per row took 0.5 s of the first query at 232k rows."""
    if not rows:
        return
    ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    data = np.frombuffer(b"".join(r[1] for r in rows), np.uint8).astype(np.int64)
    row_of_byte = np.repeat(np.arange(len(rows)), np.fromiter((len(r[1]) for r in rows), np.int64, len(rows)))
    ends = np.flatnonzero(data < 0x80)  # the last byte of each varint
    end_of_byte = ends[np.searchsorted(ends, np.arange(len(data)))]
    shifted = (data & 0x7F) << (7 * (end_of_byte - np.arange(len(data))))
    lengths[ids] = np.bincount(row_of_byte, weights=shifted, minlength=len(rows))
    present[ids] = True


class KeywordIndex:
    """BM25 over one SQLiteStore's FTS5 table; thread-safe; exact with respect to FTS5's scores."""

    def __init__(self, weights: Sequence[float]) -> None:
        self._weights = np.asarray(weights, np.float64)
        self._lock = threading.Lock()
        self._seq = -1  # last chunk_log entry applied; -1: nothing loaded
        self._lengths = np.zeros(0, np.float64)  # tokens per row, indexed by row id
        self._present = np.zeros(0, bool)
        self._rows = 0
        self._tokens = 0.0
        self._cache: OrderedDict[str, _Postings] = OrderedDict()
        self._held = 0

    def top(
        self, db: sqlite3.Connection, tokens: Sequence[str], k: int, allowed: Mask | None = None
    ) -> list[tuple[int, float]]:
        """The `k` best (row id, score) for an OR of `tokens`, best first, like FTS5's bm25(); only
        rows where `allowed` is true when given (scores are the unfiltered ones: the filter
        does not change a token's rarity)."""
        with self._lock:
            with snapshot(db):  # one state for the log position, the lengths and the postings
                self._refresh(db)
                if not self._rows or not tokens:
                    return []
                postings = [self._postings(db, token) for token in tokens]
            avgdl = self._tokens / self._rows
            scores = np.zeros(len(self._lengths), np.float64)
            for p in postings:
                alive = self._present[p.rows]
                rows, freq = p.rows[alive], p.freq[alive].astype(np.float64)  # FTS5 scores in double
                n = len(rows)
                if not n:
                    continue
                idf = math.log((self._rows - n + 0.5) / (n + 0.5))
                idf = idf if idf > 0 else 1e-6
                norm = K1 * (1 - B + B * self._lengths[rows] / avgdl)
                scores[rows] += idf * freq * (K1 + 1) / (freq + norm)
            if allowed is not None:
                n = min(len(allowed), len(scores))
                scores[:n] *= allowed[:n]
                scores[n:] = 0.0
            matched = np.flatnonzero(scores > 0)
            hits = matched[top_k(scores[matched], k)]
            return [(int(row), float(scores[row])) for row in hits]

    def document_frequencies(self, db: sqlite3.Connection, tokens: Sequence[str]) -> dict[str, int]:
        """Rows containing each token: from cached postings, else from FTS5's row vocabulary."""
        with self._lock:
            found = {
                t: int(self._present[self._cache[t].rows].sum()) for t in tokens if t in self._cache and self._seq >= 0
            }
        missing = [t for t in tokens if t not in found]
        if missing:
            marks = ",".join("?" * len(missing))
            found.update(db.execute(f"SELECT term, doc FROM chunks_vocab WHERE term IN ({marks})", missing).fetchall())
        return found

    # -- keeping up with the table ------------------------------------------------------------------
    def _refresh(self, db: sqlite3.Connection) -> None:
        last, changed = changes_since(db, "chunk_log", self._seq)
        if changed is None:
            self._load_lengths(db)
            self._cache.clear()
            self._held = 0
        elif changed:
            self._apply(db, changed)
        else:
            return
        self._seq = last
        self._rows = int(self._present.sum())
        self._tokens = float(self._lengths.sum())

    def _load_lengths(self, db: sqlite3.Connection) -> None:
        rows = db.execute("SELECT id, sz FROM chunks_fts_docsize").fetchall()
        size = max((r[0] for r in rows), default=0) + 1
        self._lengths = np.zeros(size, np.float64)
        self._present = np.zeros(size, bool)
        _set_lengths(self._lengths, self._present, rows)

    def _apply(self, db: sqlite3.Connection, changed: list[int]) -> None:
        """Rows inserted or deleted since the last look. A deleted row only leaves `_present`: its
        postings stay until the token is evicted or reloaded, and scoring skips absent rows (row
        ids are never reused). A new row's tokens are counted into the cached postings of those
        tokens only, so an edit costs what the edited rows hold, not what the cache holds."""
        top = max(changed) + 1
        if top > len(self._lengths):
            self._lengths = np.concatenate([self._lengths, np.zeros(top - len(self._lengths))])
            self._present = np.concatenate([self._present, np.zeros(top - len(self._present), bool)])
        ids = np.asarray(changed, np.int64)
        self._lengths[ids] = 0.0
        self._present[ids] = False
        added: dict[str, tuple[list[int], list[float]]] = {}
        for start in range(0, len(changed), 500):
            part = changed[start : start + 500]
            marks = ",".join("?" * len(part))
            found = db.execute(f"SELECT id, sz FROM chunks_fts_docsize WHERE id IN ({marks})", part).fetchall()
            _set_lengths(self._lengths, self._present, found)
            if not self._cache:
                continue
            for rowid, names, body in db.execute(
                f"SELECT rowid, names, body FROM chunks_fts WHERE rowid IN ({marks})", part
            ):
                freq: dict[str, float] = {}
                for column, text in ((0, names), (1, body)):
                    for token in text.split():
                        if token in self._cache:
                            freq[token] = freq.get(token, 0.0) + self._weights[column]
                for token, f in freq.items():
                    rows, freqs = added.setdefault(token, ([], []))
                    rows.append(rowid)
                    freqs.append(f)
        for token, (rows, freqs) in added.items():
            old = self._cache[token]
            self._cache[token] = _Postings(
                np.concatenate([old.rows, np.asarray(rows, np.int32)]),
                np.concatenate([old.freq, np.asarray(freqs, np.float32)]),
            )
            self._held += len(rows)

    def _limit(self) -> int:
        return max(MIN_POSTINGS, POSTINGS_PER_ROW * self._rows)

    def _postings(self, db: sqlite3.Connection, token: str) -> _Postings:
        hit = self._cache.get(token)
        if hit is not None:
            self._cache.move_to_end(token)
            return hit
        # Two strings built in C, parsed by numpy: 1.8x faster than a (doc, weight) tuple per row
        # grouped in SQL (11 -> 6 ms for a token in 9k of 58k chunks); the instance table's scan
        # (~0.2 us an instance) is the rest. The two lists come in the same row order.
        docs, in_names = db.execute(
            "SELECT group_concat(doc), group_concat(col = 'names') FROM chunks_instances WHERE term = ?", (token,)
        ).fetchone()
        if docs:
            rows, row_of = np.unique(np.fromstring(docs, np.int64, sep=","), return_inverse=True)
            weight = np.where(np.fromstring(in_names, np.int8, sep=",") == 1, self._weights[0], self._weights[1])
            postings = _Postings(rows.astype(np.int32), np.bincount(row_of, weight).astype(np.float32))
        else:
            postings = _Postings(np.zeros(0, np.int32), np.zeros(0, np.float32))
        self._cache[token] = postings
        self._held += len(postings.rows)
        while self._held > self._limit() and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._held -= len(old.rows)
        return postings

    def warm(self, db: sqlite3.Connection, max_rows: float, stop: threading.Event | None = None) -> int:
        """Load the postings of the tokens slowest to read (those with WARM_MIN_INSTANCES or more
        occurrences, in at most `max_rows` rows), most occurrences first, within half the cache,
        so a server's first searches do not pay for them. One token at a time under the lock: a
        search waits for one token's read at most. Returns the tokens loaded."""
        with self._lock:
            with snapshot(db):
                self._refresh(db)
            budget = self._limit() // 2 - self._held
        wanted: list[str] = []
        for term, docs in db.execute(
            "SELECT term, doc FROM chunks_vocab WHERE cnt >= ? AND doc <= ? ORDER BY cnt DESC",
            (WARM_MIN_INSTANCES, max_rows),
        ).fetchall():
            if docs > budget:
                break
            wanted.append(term)
            budget -= docs
        loaded = 0
        for term in reversed(wanted):  # the slowest to read become the most recently used: evicted last
            if stop is not None and stop.is_set():
                break
            with self._lock, snapshot(db):
                self._refresh(db)
                if term not in self._cache:
                    self._postings(db, term)
                    loaded += 1
        return loaded
