"""Pydantic results at the package boundary (they become the MCP tools' output schemas)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CodeHit(BaseModel):
    path: str = Field(description="workspace-relative POSIX path")
    start_line: int = Field(description="1-based, inclusive")
    end_line: int = Field(description="1-based, inclusive")
    score: float = Field(description="the ranking score (fused ranks and rules): orders hits, means nothing alone")
    relevance: float = Field(
        0.0, description="the estimated probability (0-1) that this hit answers the query, from what it contains"
    )
    text: str
    symbol: str = Field("", description="the function or class; a method as Class.method")
    language: str = ""
    kind: str = Field("code", description="code | test | doc (docs, examples, changelogs), from the path")


class IndexStatus(BaseModel):
    workspace: str
    store: str
    phase: str = Field(description="idle | scanning | chunking | embedding | ready | failed")
    indexing: bool = Field(description="an index job is running (a watcher's quiet polls do not count)")
    files_changed: int = Field(description="files the current or last sync found new or changed")
    files_done: int = Field(description="of those, files chunked so far")
    files_indexed: int
    chunks_indexed: int
    vectors_indexed: int
    vectors_pending: int
    keyword_complete: bool = Field(description="every file seen by the last scan is keyword-searchable")
    complete: bool = Field(description="keyword_complete and no vectors pending")
    last_error: str | None = None


class SearchHeader(BaseModel):
    """What every search answer says besides its hits."""

    query: str
    mode: str = Field(description="hybrid | keyword | dense: what actually ranked the results")
    index: IndexStatus
    note: str | None = Field(default=None, description="what to do when the index is incomplete")


class SearchResponse(SearchHeader):
    results: list[CodeHit]
