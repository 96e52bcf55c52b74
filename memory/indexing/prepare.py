"""One file made ready for the store: read, hashed, chunked, tokenized. What the indexer's worker
processes run, so this module imports only what that needs: each worker is a fresh interpreter
(spawn), and importing `memory.indexing.sync` there (numpy, the embedder, structlog and rich) took 0.3-0.4 s
of a ~10 s whole-stdlib index before the first file was chunked."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memory.indexing.chunking import ChunkSpan, chunk_id, chunk_text
from memory.indexing.files import UNREADABLE, SourceFile, content_hash, decode_source, language_for, text_hash
from memory.indexing.tokens import token_string
from memory.stores.base import ChunkRecord, FileState


def make_records(path: str, language: str, spans: Iterable[ChunkSpan]) -> list[ChunkRecord]:
    """Turn chunk spans into store records with BM25 tokens and the text the embedder sees."""
    records: list[ChunkRecord] = []
    path_tokens = token_string(path)
    for span in spans:
        # Methods and windows of long definitions carry their enclosing signature: the code
        # alone rarely says which class it belongs to.
        context = span.signature if span.kind in {"method", "part", "header"} else ""
        embed_text = f"{context}\n{span.text}" if context else span.text
        records.append(
            ChunkRecord(
                chunk_id=chunk_id(path, span),
                path=path,
                start_line=span.start_line,
                end_line=span.end_line,
                language=language,
                kind=span.kind,
                symbol=span.symbol,
                text=span.text,
                name_tokens=f"{path_tokens} {token_string(span.symbol)}",
                tokens=token_string(embed_text),
                embed_text=embed_text,
                embed_hash=text_hash(embed_text),
            )
        )
    return records


@dataclass(frozen=True)
class PreparedFile:
    source: SourceFile
    state: FileState | None  # None: the file vanished or could not be read
    records: list[ChunkRecord]
    skipped: bool  # binary, generated or minified: remembered in the manifest with no chunks


def prepare_file(root: str, source: SourceFile) -> PreparedFile:
    """Read, hash, chunk and tokenize one file; pure, so it can run in a worker process."""
    try:
        data = (Path(root) / source.path).read_bytes()
    except UNREADABLE:
        return PreparedFile(source, None, [], False)
    language = language_for(source.path)
    state = FileState(source.path, len(data), source.mtime_ns, content_hash(data), language)
    text = decode_source(data)
    if text is None:
        return PreparedFile(source, state, [], True)
    return PreparedFile(source, state, make_records(source.path, language, chunk_text(text, language)), False)


def keep_stdout_clean() -> None:
    """Initializer of the indexer's worker processes. They inherit the parent's stdout, which
    carries data (`rlide index --json`) or an MCP stdio transport; a worker's log line (structlog
    unconfigured there prints to stdout) would go into it. Point fd 1 at stderr instead. Its twin is
    `envpool._vector.stdout_to_stderr`: envpool and memory import none of the other packages."""
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
