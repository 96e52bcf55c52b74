"""Human preferences: a person compares two episodes of one situation and says which was better, or
that both were bad (the dashboard's "compare", `rlide episodes prefer`).

They are stored with their author and time, recorded in the curation history of both episodes, and
the DPO export and the worker's DPO steps use them before any reward-margin pair
(`training.data.export.dpo_pairs`). Only episodes of one situation can be compared: a DPO pair is
one prompt with two answers, so two different tasks make no pair.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Protocol

from episodes.db import Database, StoreError, check_episode_id
from episodes.records import (
    CurationAction,
    Episode,
    EpisodeVerifier,
    Preference,
    StateKind,
    Verdict,
    WorkspaceState,
    at_epoch,
)
from episodes.rows import check_author, clip_text, record_curation


class EpisodeLog(Protocol):
    """What preferences need of `EpisodeStore` (which holds them: a Protocol, not an import cycle)."""

    db: Database

    def get_episode(self, episode_id: str) -> Episode: ...
    def verifier(self, episode_id: str) -> EpisodeVerifier | None: ...
    def workspace_states(self, episode_id: str) -> list[WorkspaceState]: ...


def situation_key(store: EpisodeLog, episode: Episode) -> str:
    """What makes two episodes comparable (a preference, a DPO pair, an ART group): the same start
    state (commit and uncommitted files, as captured at `start_episode`) judged by the same verifier
    command, as replays and self-play share; without both, the same task text (whitespace aside), as
    two attempts at one request in real use."""
    verifier = store.verifier(episode.id)
    start = next((s for s in store.workspace_states(episode.id) if s.kind is StateKind.start), None)
    if start is not None and verifier is not None:
        key = json.dumps([start.commit, start.diff, verifier.command])
        return "state:" + hashlib.sha256(key.encode()).hexdigest()
    return "task:" + " ".join(episode.task.split())


class HumanPreferences:
    """The `preferences` table, over the store's database (the store holds one as `store.preferences`)."""

    def __init__(self, store: EpisodeLog) -> None:
        self.store = store

    def prefer(
        self, episode_a: str, episode_b: str, verdict: Verdict, *, author: str, comment: str | None = None
    ) -> Preference:
        """Record that `verdict` (a, b or both_bad) holds between two ended episodes of one situation."""
        verdict = Verdict(verdict)
        who = check_author(author)
        if episode_a == episode_b:
            raise ValueError("compare two different episodes")
        first, second = self.store.get_episode(episode_a), self.store.get_episode(episode_b)
        for episode in (first, second):
            if not episode.status.is_terminal:
                raise StoreError(f"episode {episode.id} is still open: compare ended episodes")
        if situation_key(self.store, first) != situation_key(self.store, second):
            raise ValueError(
                f"{episode_a} and {episode_b} are not of one situation (the same task, or the same start"
                " state and verifier): a preference between them cannot become a training pair"
            )
        clipped = clip_text(comment)
        now = time.time()
        with self.store.db.transaction(write=True) as cur:
            row = cur.execute(
                "INSERT INTO preferences (episode_a, episode_b, verdict, author, comment, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (episode_a, episode_b, verdict.value, who, clipped, now),
            ).fetchone()
            better = {Verdict.a: episode_a, Verdict.b: episode_b}.get(verdict)
            for this, other in ((episode_a, episode_b), (episode_b, episode_a)):
                judged = "both bad" if better is None else ("better" if better == this else "worse")
                detail = {"other": other, "judged": judged, "author": who, "comment": clipped}
                record_curation(cur, this, CurationAction.prefer, detail)
        return Preference(
            id=int(row[0]),
            episode_a=episode_a,
            episode_b=episode_b,
            verdict=verdict,
            author=who,
            comment=clipped,
            created_at=at_epoch(now),
        )

    def list(self, episode_id: str | None = None) -> list[Preference]:
        """Every preference, oldest first; those involving `episode_id` if given."""
        where, params = "", ()  # type: tuple[str, tuple[str, ...]]
        if episode_id is not None:
            check_episode_id(episode_id)
            where, params = "WHERE episode_a = ? OR episode_b = ?", (episode_id, episode_id)
        with self.store.db.transaction(write=False) as cur:
            rows = cur.execute(
                f"SELECT id, episode_a, episode_b, verdict, author, comment, created_at FROM preferences {where}"
                " ORDER BY id",
                params,
            ).fetchall()
        return [
            Preference(
                id=r[0], episode_a=r[1], episode_b=r[2], verdict=Verdict(r[3]), author=r[4], comment=r[5],
                created_at=at_epoch(r[6]),
            )
            for r in rows
        ]  # fmt: skip

    def standing(self) -> dict[frozenset[str], Preference]:
        """The latest preference of each compared pair of episodes (a person may change their mind),
        over episodes not excluded from training."""
        with self.store.db.transaction(write=False) as cur:
            excluded = {r[0] for r in cur.execute("SELECT id FROM episodes WHERE excluded = 1").fetchall()}
        latest: dict[frozenset[str], Preference] = {}
        for preference in self.list():
            if excluded.isdisjoint((preference.episode_a, preference.episode_b)):
                latest[frozenset((preference.episode_a, preference.episode_b))] = preference
        return latest
