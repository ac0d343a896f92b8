"""The partition buffer of an embedding table (--embedding-partitions; MariusGNN's, offline/partitions.py).

The table's rows are cut into partitions of consecutive ids and the buffer holds whole partitions in blocks of
memory: `hold(state)` makes it hold a buffer state's partitions, writing back the dirty rows of a partition that
leaves and reading one that enters whole (sequential reads, its rows' pre-images journaled as they arrive).

The known future says which partition the next state brings, so with a spare block `hold(state, then)` reads it
ahead: a thread writes back the spare block's partition (neither state needs it) and reads the next one into it
while this state trains. On the 9M-row table under a 1110 MiB cap the turns took 423 of 815 s done in line.
While the thread runs it alone touches the file, the journal and the rows of that block: training reads only the
state's partitions, and `hold`, `settle` (before rows outside the buffer are read) and `flush` wait for it first.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import torch

from ..data.files import guard_io
from ..errors import DiskgnnError

FLUSH_BYTES = 16 << 20  # rows written or read (and journaled) at a time


class PartitionBuffer:
    """The buffer's half of EmbeddingTable: its rows in `hot` (slot[id] >= 0 where held), written with `_write`,
    journaled with `_log`, read from `fd`."""

    _ahead: threading.Thread | None = None  # the read-ahead running, if any
    _ahead_error: BaseException | None = None

    def use_partitions(self, rows: int, capacity: int, spare: int = 0) -> None:
        """Partitioned from now on (once, before training): `capacity` partitions of `rows` rows a state, and
        `spare` blocks (0 or 1) to read the next state's partition into, filled by `hold`."""
        blocks = capacity + spare
        self.part_rows, self.held = rows, [-1] * blocks
        self.hot = torch.zeros((blocks * rows, self.dim + self.state))
        self.hot_ids = np.full(blocks * rows, -1, np.int64)
        self.hot_dirty = np.zeros(blocks * rows, bool)

    def hold(self, partitions, then=None) -> None:
        """Makes the buffer hold `partitions` (at most its capacity): each one it lacks takes the block of one it
        holds but is not asked for, whose dirty rows are written back first, then is read whole. `then`: the
        next state's partitions, the first of which the buffer lacks is read ahead into a block neither needs."""
        start = time.perf_counter()
        if self._ahead is not None and not self._ahead.is_alive():
            self.settle()
        wanted, coming = set(partitions), set(then or ())
        if any(p not in self.held for p in partitions):
            self.settle()  # the partition on its way in may be one of them, and the file is this thread's again
            self._todo.join()  # nothing queued is newer than what is read now
            self._raise_failed()
            free = sorted((k for k, p in enumerate(self.held) if p not in wanted), key=lambda k: self.held[k] in coming)
            for part, block in zip([p for p in partitions if p not in self.held], free):
                self._turn(block, part)
        if self._ahead is None:
            ahead = [p for p in then or () if p not in self.held]
            spare = [k for k, p in enumerate(self.held) if p not in wanted and p not in coming]
            if ahead and spare:
                self._ahead = threading.Thread(target=self._read_ahead, args=(spare[0], ahead[0]),
                                               name="embedding-read-ahead", daemon=True)
                self._ahead.start()
        self.stats["buffer_s"] += time.perf_counter() - start

    def settle(self) -> None:
        """Waits for the partition being read ahead, if any (its failure raised here)."""
        if self._ahead is None:
            return
        self._ahead.join()
        self._ahead = None
        if self._ahead_error is not None:
            e, self._ahead_error = self._ahead_error, None
            raise e if isinstance(e, DiskgnnError) else DiskgnnError(f"{self.path}: reading a partition ahead "
                                                                     f"failed: {e}")

    def _read_ahead(self, block: int, part: int) -> None:
        start = time.perf_counter()
        try:
            self._turn(block, part)
        except BaseException as e:  # raised to the training thread by settle
            self._ahead_error = e
        self.stats["ahead_s"] += time.perf_counter() - start

    def _turn(self, block: int, part: int) -> None:
        """Block `block` gives up its partition (dirty rows written back) and takes partition `part`."""
        self._evict(block)
        self._load(part, block)

    def _block(self, block: int) -> slice:
        return slice(block * self.part_rows, (block + 1) * self.part_rows)

    def _evict(self, block: int) -> None:
        if self.held[block] < 0:
            return
        span = self._block(block)
        ids, dirty = self.hot_ids[span], np.flatnonzero(self.hot_dirty[span])
        step = max(1, FLUSH_BYTES // self.row_bytes)
        for part in (dirty[i: i + step] for i in range(0, dirty.size, step)):
            self._write(ids[part], self.hot[span][torch.from_numpy(part)].numpy())
        self.stats["partitions_written"] += int(dirty.size > 0)
        self.slot[ids[ids >= 0]] = -1
        self.hot_ids[span], self.hot_dirty[span], self.held[block] = -1, False, -1

    def _load(self, part: int, block: int) -> None:
        first = part * self.part_rows
        count = max(0, min(self.num_nodes, first + self.part_rows) - first)
        rows = self.hot.numpy()[self._block(block)][:count]
        view = rows.view(np.uint8).reshape(-1)
        step = max(1, FLUSH_BYTES // self.row_bytes)
        for at in range(0, count, step):  # sequential reads into the buffer itself, pre-images journaled
            chunk = view[at * self.row_bytes: (at + step) * self.row_bytes]
            done = guard_io(self.path, lambda: os.preadv(self.fd, [chunk], (first + at) * self.row_bytes))
            if done != chunk.size:
                raise DiskgnnError(f"{self.path}: {done} of {chunk.size} bytes read at row {first + at}: the table "
                                   "is short")
            self._log(np.arange(first + at, first + at + chunk.size // self.row_bytes), rows[at: at + step])
        span = self._block(block)
        self.hot_ids[span.start: span.start + count] = np.arange(first, first + count)
        self.slot[first: first + count] = np.arange(span.start, span.start + count, dtype=np.int32)
        self.held[block] = part
        self.stats["bytes_read"] += view.size
        self.stats["partitions_read"] += 1
