"""The SQLite store's vectors, in two flat files beside the database, so that a process opening the
store reads them with one sequential read instead of a row per vector (20-70 s at 1M chunks).

`<index>.vectors-<generation>.f32` holds float32 vectors one after another (slot i at byte
i * dim * 4) and `.ids` the chunk row id of each slot (int64, -1 once the vector was deleted or
replaced). Slots are only appended. The database says which slots are committed (`counts`:
`slots`, and `vectors(id, slot)`), so the files need no transaction of their own:

- a writer appends inside its SQLite write transaction (writers are serialised by it); slots past
  the committed count are garbage that the next writer overwrites;
- deletions are marked in `.ids` after the transaction commits: a crash in between leaves a dead
  vector marked alive, which costs a search at most a result whose chunk is gone (dropped when
  the hit is read) or a duplicate of a replaced vector (a load keeps the last slot of an id);
- a new generation (another model, or a compaction) is written to new files, which readers
  notice through `counts` (`vector_generation`); the old files are removed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

Ids = npt.NDArray[np.int64]
Matrix = npt.NDArray[np.float32]


class VectorFile:
    """One generation's files of one store."""

    def __init__(self, index_path: Path, generation: int, dim: int) -> None:
        self.dim = dim
        stem = f"{index_path.name}.vectors-{generation}"
        self.vectors_path = index_path.with_name(stem + ".f32")
        self.ids_path = index_path.with_name(stem + ".ids")

    def append(self, slot: int, ids: Ids, vectors: Matrix) -> None:
        """Write `vectors` (and their row ids) from `slot` on."""
        for path, data, width in ((self.vectors_path, vectors, self.dim * 4), (self.ids_path, ids, 8)):
            with path.open("r+b" if path.exists() else "w+b") as fh:
                fh.seek(slot * width)
                fh.write(np.ascontiguousarray(data).tobytes())

    def mark_dead(self, slots: list[int]) -> None:
        if not slots or not self.ids_path.exists():
            return
        dead = np.full(1, -1, np.int64).tobytes()
        with self.ids_path.open("r+b") as fh:
            for slot in slots:
                fh.seek(slot * 8)
                fh.write(dead)

    def ids(self, slots: int) -> Ids:
        """Row id per slot for the first `slots` slots (-1: dead)."""
        if not slots:
            return np.zeros(0, np.int64)
        return np.fromfile(self.ids_path, np.int64, count=slots)

    def read(self, slots: int) -> Matrix:
        """The first `slots` vectors, memory-mapped (read-only): the caller copies what it keeps."""
        if not slots:
            return np.zeros((0, self.dim), np.float32)
        return np.memmap(self.vectors_path, np.float32, mode="r", shape=(slots, self.dim))

    def read_slots(self, slots: npt.NDArray[np.int64]) -> Matrix:
        """The vectors at `slots` (a few: an incremental refresh)."""
        if not len(slots):
            return np.zeros((0, self.dim), np.float32)
        mapped = np.memmap(self.vectors_path, np.float32, mode="r")
        return np.asarray(mapped.reshape(-1, self.dim)[slots])

    def remove(self) -> None:
        self.vectors_path.unlink(missing_ok=True)
        self.ids_path.unlink(missing_ok=True)
