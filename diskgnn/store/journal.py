"""The undo journal of a table updated in place: what makes a kill -9 or a full disk mid-write lose no row
and tear none.

Before rows of the table are overwritten, their bytes as of the last checkpoint (each row once per
checkpoint interval) are appended here and fsynced: SQLite's rollback journal, per row. A resumed run
rolls the table back to its checkpoint by writing those bytes back, then repeats the interval exactly.
The file is a header (magic, the checkpoint generation the entries undo to, the row size), then entries
of (count, row ids, rows, XXH3-64 of all three); an entry cut short by a kill or a full disk fails its
checksum and ends the journal, and its rows were not yet overwritten (the in-place write waits for it).
A checkpoint starts a new journal by renaming a fresh header over the file, so a journal always names
the generation it undoes to, and one of an older generation than the checkpoint being resumed from is
stale (the crash fell between the checkpoint and the new journal) and is dropped.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import xxhash

from ..data.files import guard_io, write_atomic
from ..errors import DiskgnnError

MAGIC = b"DGNNUNDO"
_HEAD = struct.Struct("<8sQQ")  # magic, generation, row bytes
_COUNT = struct.Struct("<Q")
_SUM = struct.Struct("<Q")


class UndoJournal:
    """Appends pre-images of rows; `entries(generation)` reads them back for a rollback."""

    def __init__(self, path: Path, row_bytes: int):
        self.path, self.row_bytes = Path(path), row_bytes
        self._f = None

    def start(self, generation: int) -> None:
        """An empty journal undoing to `generation` (a checkpoint's), in place of the old one, atomically."""
        self.close()
        write_atomic(self.path, _HEAD.pack(MAGIC, generation, self.row_bytes))
        # unbuffered: a write the full disk refused leaves nothing behind to fail again at close
        self._f = guard_io(self.path, lambda: open(self.path, "ab", buffering=0))

    def append(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Logs rows' current bytes (rows[i] is row ids[i]'s); durable when it returns."""
        ids = np.ascontiguousarray(ids, dtype="<i8")
        rows = np.ascontiguousarray(rows).view(np.uint8)
        if ids.size == 0:
            return
        parts = [_COUNT.pack(ids.size), memoryview(ids).cast("B"), memoryview(rows).cast("B")]  # no copies
        h = xxhash.xxh3_64()
        for p in parts:
            h.update(p)

        def write():
            for p in parts + [_SUM.pack(h.intdigest())]:
                self._f.write(p)
            os.fsync(self._f.fileno())
        guard_io(self.path, write)

    def entries(self, generation: int):
        """Yields (ids, rows) logged since checkpoint `generation`, entry by entry (a journal can be as large as
        the table): none where the journal is missing or older (stale); refused where it is newer (the
        checkpoint being resumed from is not the last one this table saw)."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return
        with f:
            head = f.read(_HEAD.size)
            if len(head) < _HEAD.size or head[:8] != MAGIC:
                raise DiskgnnError(f"{self.path}: not an undo journal (or a damaged one); the table beside it cannot "
                                   "be rolled back: start the run again in a fresh --workdir")
            _, gen, row_bytes = _HEAD.unpack(head)
            if row_bytes != self.row_bytes:
                raise DiskgnnError(f"{self.path}: rows of {row_bytes} bytes, the table's are {self.row_bytes}")
            if gen > generation:
                raise DiskgnnError(f"{self.path}: undoes to checkpoint {gen}, newer than the one resumed from "
                                   f"({generation}): the checkpoint and the table do not belong together")
            if gen < generation:
                return
            size = os.fstat(f.fileno()).st_size
            while len(count := f.read(_COUNT.size)) == _COUNT.size:
                (n,) = _COUNT.unpack(count)
                if n == 0 or f.tell() + n * (8 + row_bytes) + _SUM.size > size:
                    return  # cut short by a kill or a full disk (a torn count): its rows were never overwritten
                body = f.read(n * (8 + row_bytes))
                if xxhash.xxh3_64_intdigest(count + body) != _SUM.unpack(f.read(_SUM.size))[0]:
                    return  # the same, torn inside
                yield (np.frombuffer(body, "<i8", n),
                       np.frombuffer(body, np.uint8, n * row_bytes, 8 * n).reshape(n, row_bytes))

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
