"""Memory of past solutions: a successful episode becomes a searchable document."""

from __future__ import annotations

import hashlib
from datetime import datetime

from pydantic import BaseModel, Field

from memory.embedding.embedders import CachedEmbedder
from memory.indexing.files import text_hash
from memory.indexing.tokens import code_tokens
from memory.search import Mode, search
from memory.stores.base import ChunkRecord, FileState, Filters, Store


class SolvedEpisode(BaseModel):
    """What the lead adapts an episode record to; only `episode_id`, `task` and `summary` are needed."""

    episode_id: str
    task: str
    summary: str
    files_touched: list[str] = Field(default_factory=list)
    outcome: str = "success"
    reward: float = 1.0
    created_at: datetime | None = None
    tags: list[str] = Field(default_factory=list)


class SolutionHit(BaseModel):
    episode: SolvedEpisode
    score: float


def _document(episode: SolvedEpisode) -> str:
    files = "\n".join(episode.files_touched)
    return f"Task: {episode.task}\nSolution: {episode.summary}\nFiles:\n{files}".strip()


class SolutionMemory:
    """Episodes live in their own store (one "file" per episode), so code syncs never touch them."""

    def __init__(self, store: Store, embedder: CachedEmbedder | None) -> None:
        self.store = store
        self.embedder = embedder

    def record(self, episode: SolvedEpisode) -> str:
        text = _document(episode)
        path = f"episodes/{episode.episode_id}"
        chunk_id = hashlib.sha1(f"{path}\0{text}".encode()).hexdigest()[:24]
        record = ChunkRecord(
            chunk_id=chunk_id,
            path=path,
            start_line=1,
            end_line=text.count("\n") + 1,
            language="episode",
            kind="solution",
            symbol=episode.episode_id,
            text=text,
            name_tokens=" ".join(code_tokens(" ".join(episode.files_touched + episode.tags))),
            tokens=" ".join(code_tokens(f"{episode.task}\n{episode.summary}")),
            embed_text=text,
            embed_hash=text_hash(text),
            meta=episode.model_dump_json(),
        )
        state = FileState(path, len(text), 0, text_hash(text), "episode")
        self.store.replace_file(state, [record])
        if self.embedder is not None:  # one short text: embed now so recall is hybrid at once
            self.store.set_vectors([chunk_id], self.embedder.embed([text]))
        return chunk_id

    def forget(self, episode_id: str) -> None:
        self.store.delete_files([f"episodes/{episode_id}"])

    def recall(self, query: str, k: int = 5, *, min_reward: float | None = None) -> list[SolutionHit]:
        hits, _ = search(
            self.store,
            self.embedder,
            query,
            k * 3 if min_reward is not None else k,
            Filters(),
            mode=Mode.HYBRID if self.embedder else Mode.KEYWORD,
        )
        out: list[SolutionHit] = []
        for hit in hits:
            episode = SolvedEpisode.model_validate_json(hit.meta)
            if min_reward is not None and episode.reward < min_reward:
                continue
            out.append(SolutionHit(episode=episode, score=hit.score))
        return out[:k]
