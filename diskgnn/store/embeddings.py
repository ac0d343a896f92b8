"""Learnable node embeddings larger than memory (--embeddings D): a table on disk, trained in place.

Each node's record is its D float32 values and its optimizer state, so one read and one write serve
both: row-wise Adagrad (one float32, the sum of its gradients' mean squares: PyTorch-BigGraph's
optimizer for embedding tables) or lazy Adam (its 2 x D moments, updated only where a batch has the
row, as torch.optim.SparseAdam, whose operations it repeats). Records are served from three places,
newest first:

- the hot rows, held in memory for the run: the rows the known future reads most (the access counts of
  epoch 0's offline samples, as for the feature tiers), updated in memory and written at checkpoints; or,
  partitioned (`use_partitions`: MariusGNN's buffer, offline/partitions.py), the rows of the partitions the
  current buffer state holds, each partition read whole when it enters and written back when it leaves;
- rows waiting to be written: a batch's updated cold rows, queued to the writer thread, read from the
  queue until their write is done (so a batch never reads an older copy than the step before wrote);
- the table file, read through the page cache (the writes go there, and O_DIRECT reads would each wait
  for the written range to reach the disk).

The writer writes each batch's rows in id order, coalescing neighbours (reads and writes then run
forwards), after their pre-images since the last checkpoint are in the undo journal (store/journal.py):
a kill -9 or a full disk at any instant leaves a table that `recover` rolls back to the checkpoint, and
the resumed run repeats the rest exactly. `flush` (at each checkpoint) drains the writer, writes the
dirty hot rows and syncs the table; `committed` then starts the next interval's journal.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path

import numpy as np
import torch

from ..data.files import guard_io, temp_path, write_atomic
from ..errors import DiskgnnError
from ..io.reader import FileReader
from .journal import UndoJournal
from .records import UPDATES, coalesced, init_rows, row_bytes, state_width

FORMAT = "diskgnn-embeddings"
WRITE_QUEUE = 2  # batches of rows waiting for the writer at most: bounds the memory they take
FLUSH_BYTES = 16 << 20  # dirty hot rows written (and their pre-images journaled) at a time


def working_bytes(num_nodes: int, dim: int, optimizer: str, rows: int) -> int:
    """The table's memory besides its hot rows or buffer: per node a slot, a queue mark and a journal bit; a
    batch's records, values, gradient and input, and the writer's queued batches and pre-images (`rows`: a
    batch's input rows at most)."""
    if not dim:
        return 0
    return num_nodes * 13 + (WRITE_QUEUE + 5) * rows * (row_bytes(dim, optimizer) + 8)


class EmbeddingTable:
    """The table of a run's workdir (`directory`): create it (`create=True`, a fresh run) or open it and roll
    it back to checkpoint `generation` (--resume); see the module's docstring."""

    def __init__(self, directory: Path, num_nodes: int, dim: int, *, seed: int, lr: float, create: bool,
                 generation: int = 0, optimizer: str = "adagrad", steps: int = 0, init_bytes: int = 64 << 20):
        """`steps`: the optimizer steps taken so far (a checkpoint's; Adam's bias correction counts them)."""
        self.dir, self.num_nodes, self.dim, self.lr = Path(directory), num_nodes, dim, lr
        self.optimizer, self.steps, self.state = optimizer, steps, state_width(dim, optimizer)
        self.row_bytes = row_bytes(dim, optimizer)
        self.path = self.dir / "table.bin"
        meta = {"format": FORMAT, "num_nodes": num_nodes, "dim": dim, "seed": seed, "row_bytes": self.row_bytes,
                "optimizer": optimizer}
        guard_io(self.dir, lambda: self.dir.mkdir(parents=True, exist_ok=True))
        self.journal = UndoJournal(self.dir / "journal.bin", self.row_bytes)
        if create:
            self._create(meta, max(1, init_bytes // self.row_bytes))
            generation = 0
        else:
            self._check(meta)
        self.fd = guard_io(self.path, lambda: os.open(self.path, os.O_RDWR))
        # Page-cache reads (direct=False): see the module's docstring.
        self.reader = FileReader(self.path, "pread", direct=False)
        self.stats = {"rows_hot": 0, "rows_queued": 0, "rows_disk": 0, "bytes_read": 0, "bytes_written": 0,
                      "journal_bytes": 0, "rows_rolled_back": 0, "write_s": 0.0, "write_wait_s": 0.0,
                      "partitions_read": 0, "partitions_written": 0, "buffer_s": 0.0}
        self.logged = np.zeros(num_nodes, bool)  # rows whose pre-image this interval's journal holds
        self.generation = generation
        self._recover(generation)
        self.journal.start(generation)
        self.slot = np.full(num_nodes, -1, np.int32)  # hot row -> its slot in self.hot
        self.hot = torch.zeros((0, dim + self.state))
        self.hot_ids = np.zeros(0, np.int64)
        self.hot_dirty = np.zeros(0, bool)
        self.part_rows, self.held = 0, []  # partitioned: rows a partition, the partition in each buffer block
        self.queued_at = np.full(num_nodes, -1, np.int64)  # row -> the last queued batch holding it
        self._queued: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()
        self._seq = 0
        self._error: BaseException | None = None
        self._todo: queue.Queue = queue.Queue(WRITE_QUEUE)
        self._writer = threading.Thread(target=self._write_loop, name="embedding-writer", daemon=True)
        self._writer.start()

    @property
    def table_bytes(self) -> int:
        return self.num_nodes * self.row_bytes

    # -- the file ---------------------------------------------------------------------------------
    def _create(self, meta: dict, block_rows: int) -> None:
        tmp = temp_path(self.path)

        def write():
            with open(tmp, "wb") as f:
                for first in range(0, self.num_nodes, block_rows):
                    f.write(init_rows(meta["seed"], first, min(block_rows, self.num_nodes - first), self.dim,
                                      self.state).data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        guard_io(self.path, write)
        # A journal of an earlier run in this directory must not roll the new table back.
        guard_io(self.journal.path, lambda: self.journal.path.unlink(missing_ok=True))
        write_atomic(self.dir / "table.json", (json.dumps(meta) + "\n").encode())

    def _check(self, meta: dict) -> None:
        try:
            saved = json.loads((self.dir / "table.json").read_text())
        except (OSError, ValueError):
            raise DiskgnnError(f"{self.dir / 'table.json'}: missing or unreadable: the checkpoint's embedding table "
                               "is gone (start without --resume)") from None
        if saved != meta:
            raise DiskgnnError(f"{self.dir / 'table.json'}: a table of {saved.get('num_nodes')} x {saved.get('dim')} "
                               f"(seed {saved.get('seed')}, {saved.get('optimizer')}), not {meta['num_nodes']} x "
                               f"{meta['dim']} (seed {meta['seed']}, {meta['optimizer']}): resume with the options "
                               "that made it")
        size = self.path.stat().st_size if self.path.exists() else -1
        if size != self.table_bytes:
            raise DiskgnnError(f"{self.path}: {size} bytes, a table of {self.num_nodes} x {self.dim} has "
                               f"{self.table_bytes}")

    def _recover(self, generation: int) -> None:
        """Rolls the table back to checkpoint `generation` with the journal's pre-images, and syncs it."""
        for ids, rows in self.journal.entries(generation):
            self._pwrite(ids, rows)
            self.stats["rows_rolled_back"] += int(ids.size)
        guard_io(self.path, lambda: os.fsync(self.fd))

    def _pwrite(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """rows[i] over row ids[i] (sorted, unique), one write per run of consecutive ids."""
        if ids.size == 0:
            return
        rows = np.ascontiguousarray(rows).view(np.uint8).reshape(ids.size, self.row_bytes)
        cuts = np.flatnonzero(np.diff(ids) != 1) + 1
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, ids.size].tolist()):
            data = memoryview(rows[a:b]).cast("B")
            guard_io(self.path, lambda: os.pwrite(self.fd, data, int(ids[a]) * self.row_bytes))
        self.stats["bytes_written"] += rows.nbytes

    def _read(self, ids: np.ndarray) -> np.ndarray:
        out = np.empty((ids.size, self.dim + self.state), np.float32)
        if ids.size:
            self.reader.gather_rows(ids, self.row_bytes, out=out.view(np.uint8).reshape(ids.size, self.row_bytes))
            self.stats["bytes_read"] += out.nbytes
        return out

    def _log(self, ids: np.ndarray, current: np.ndarray) -> None:
        """Journals the rows' pre-images (`current`: their bytes on disk) not yet logged this interval."""
        fresh = ~self.logged[ids]
        if fresh.any():
            self.journal.append(ids[fresh], current if fresh.all() else current[fresh])
            self.stats["journal_bytes"] += int(fresh.sum()) * (8 + self.row_bytes)
            self.logged[ids[fresh]] = True

    def _write(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Journals the pre-images of rows not yet logged this interval, then writes the rows in place. Row by row,
        the rows are read first, all of them, by the reader's parallel reads: their pages are then in the page
        cache, and each write copies into one instead of waiting for its page to be read (measured on a 9M-row
        table under a 1 GiB cap: 3 s a batch of 25k rows, every one a synchronous page read). A leaving partition's
        dirty rows are mostly long runs of whole pages, so only the unlogged ones are read, for their pre-images."""
        if self.part_rows:
            fresh = ids[~self.logged[ids]]
            self._log(fresh, self._read(fresh))
        else:
            self._log(ids, self._read(ids))
        self._pwrite(ids, rows)

    def _write_loop(self) -> None:
        while (seq := self._todo.get()) is not None:
            ids, rows = self._queued[seq]
            try:
                if self._error is None:  # after a failure, nothing more is written: the journal ends there
                    start = time.perf_counter()
                    self._write(ids, rows)
                    self.stats["write_s"] += time.perf_counter() - start
                    with self._lock:
                        done = ids[self.queued_at[ids] == seq]
                        self.queued_at[done] = -1
                        del self._queued[seq]
            except BaseException as e:  # reported to the training thread at its next call
                self._error = e
            finally:
                self._todo.task_done()

    def _raise_failed(self) -> None:
        if self._error is not None:
            e = self._error
            raise e if isinstance(e, DiskgnnError) else DiskgnnError(f"{self.path}: write-back failed: {e}")

    # -- serving and training ---------------------------------------------------------------------
    def place(self, hot_ids: np.ndarray) -> None:
        """Holds rows `hot_ids` in memory from now on (once, before training)."""
        hot_ids = np.unique(np.asarray(hot_ids, np.int64))
        self.hot = self.gather(hot_ids)
        self.stats["rows_disk"] -= int(hot_ids.size)  # the rows_ counts are the batches' (bytes_read counts these)
        self.hot_ids, self.hot_dirty = hot_ids, np.zeros(hot_ids.size, bool)
        self.slot[hot_ids] = np.arange(hot_ids.size, dtype=np.int32)

    def use_partitions(self, rows: int, capacity: int) -> None:
        """Partitioned from now on (once, before training): a buffer of `capacity` partitions of `rows` rows,
        filled by `hold`."""
        self.part_rows, self.held = rows, [-1] * capacity
        self.hot = torch.zeros((capacity * rows, self.dim + self.state))
        self.hot_ids = np.full(capacity * rows, -1, np.int64)
        self.hot_dirty = np.zeros(capacity * rows, bool)

    def hold(self, partitions) -> None:
        """Makes the buffer hold `partitions` (at most its capacity): each one it lacks takes the block of one it
        holds but is not asked for, whose dirty rows are written back first, then is read whole, its rows'
        pre-images journaled as they arrive where this interval has not logged them."""
        wanted = set(partitions)
        missing = [p for p in partitions if p not in self.held]
        if not missing:
            return
        start = time.perf_counter()
        self._todo.join()  # nothing queued is newer than what is read now
        self._raise_failed()
        free = [k for k, p in enumerate(self.held) if p not in wanted]
        for part, block in zip(missing, free):
            self._evict(block)
            self._load(part, block)
        self.stats["buffer_s"] += time.perf_counter() - start

    def _block(self, block: int) -> slice:
        return slice(block * self.part_rows, (block + 1) * self.part_rows)

    def _evict(self, block: int) -> None:
        if self.held[block] < 0:
            return
        span = self._block(block)
        ids = self.hot_ids[span]
        dirty = coalesced(np.flatnonzero(self.hot_dirty[span]), ids)
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

    def gather(self, ids: np.ndarray) -> torch.Tensor:
        """Records [len(ids), D + state] (values, optimizer state), newest copies; ids unique."""
        self._raise_failed()
        ids = np.asarray(ids, np.int64)
        slots = self.slot[ids]
        hot = np.flatnonzero(slots >= 0)
        self.stats["rows_hot"] += int(hot.size)
        if hot.size == ids.size:  # every row in memory (a partitioned batch): one index_select, half a copy-in's time
            return self.hot.index_select(0, torch.from_numpy(slots.astype(np.int64)))
        out = torch.empty((ids.size, self.dim + self.state))
        out.index_copy_(0, torch.from_numpy(hot),
                        self.hot.index_select(0, torch.from_numpy(slots[hot].astype(np.int64))))
        rest = np.flatnonzero(slots < 0)
        with self._lock:
            seqs = self.queued_at[ids[rest]]
            for seq in np.unique(seqs[seqs >= 0]).tolist():
                mine = rest[seqs == seq]
                qids, qrows = self._queued[seq]
                out[torch.from_numpy(mine)] = torch.from_numpy(qrows[np.searchsorted(qids, ids[mine])])
        cold = rest[seqs < 0]
        out[torch.from_numpy(cold)] = torch.from_numpy(self._read(ids[cold]))
        self.stats["rows_queued"] += int(rest.size - cold.size)
        self.stats["rows_disk"] += int(cold.size)
        return out

    def step(self, ids: np.ndarray, records: torch.Tensor, grad: torch.Tensor) -> None:
        """One optimizer step on the gathered `records` of `ids` with their values' gradient, then stores them:
        hot rows in memory, the others queued for the writer (waiting while WRITE_QUEUE batches are ahead)."""
        self._raise_failed()
        ids = np.asarray(ids, np.int64)
        self.steps += 1
        UPDATES[self.optimizer](records, grad.float(), self.lr, self.steps)
        slots = self.slot[ids]
        hot = np.flatnonzero(slots >= 0)
        self.hot.index_copy_(0, torch.from_numpy(slots[hot].astype(np.int64)),
                             records if hot.size == ids.size else records.index_select(0, torch.from_numpy(hot)))
        self.hot_dirty[slots[hot]] = True
        cold = np.flatnonzero(slots < 0)
        if cold.size == 0:
            return
        order = cold[np.argsort(ids[cold], kind="stable")]
        qids, qrows = ids[order], records[torch.from_numpy(order)].numpy()
        self._seq += 1
        with self._lock:
            self._queued[self._seq] = (qids, qrows)
            self.queued_at[qids] = self._seq
        start = time.perf_counter()
        self._todo.put(self._seq)
        self.stats["write_wait_s"] += time.perf_counter() - start

    # -- checkpoints -------------------------------------------------------------------------------
    def flush(self) -> None:
        """Everything trained so far on disk and synced (the writer drained, the dirty hot rows written): the
        table as the checkpoint about to be saved has it."""
        self._todo.join()
        self._raise_failed()
        dirty = coalesced(np.flatnonzero(self.hot_dirty), self.hot_ids)
        step = max(1, FLUSH_BYTES // self.row_bytes)
        for part in (dirty[i: i + step] for i in range(0, dirty.size, step)):
            self._write(self.hot_ids[part], self.hot[torch.from_numpy(part)].numpy())
        self.hot_dirty[dirty] = False
        guard_io(self.path, lambda: os.fsync(self.fd))

    def committed(self, generation: int) -> None:
        """The checkpoint `generation` is saved (after flush): the journal starts over from it."""
        self.generation = generation
        self.journal.start(generation)
        self.logged[:] = False

    def close(self) -> None:
        """Stops the writer (what it has is written) and closes the files; the table is as the last flush left
        it plus any queued rows, which the next --resume rolls back if no checkpoint followed."""
        if self._writer.is_alive():
            self._todo.put(None)
            self._writer.join()
        self.reader.close()
        self.journal.close()
        os.close(self.fd)
