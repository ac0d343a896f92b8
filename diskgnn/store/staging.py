"""Host buffers a batch's rows pass through, bounded and reused: the batches' slabs and the device tier's fill.

A batch's host rows (its pack region, its segment's rows, a host tier's rows
where the CPU gathers them) are written into one `Slab`: rows taken in order
by the tiers that claim them, plus an id buffer. With CUDA the slabs are
pinned, so that a batch's host rows cross to the device as one asynchronous
copy; a slab is reused once that copy's event has passed. The pipeline holds
at most a fixed number of batches between the read stage and the end of the
copy stage, so `Slabs` makes exactly that many once and never waits for one
to be returned (only for a returned one's copy to finish): the plan counts
them in the working set.

`fill_rows` loads a placement tier into device memory through two pinned
chunks, read and copied in turns, so that filling gigabytes of device cache
takes only those chunks of host memory (kvikio reads straight into the
device tensor and needs none).
"""

from __future__ import annotations

import queue

import numpy as np
import torch

from ..errors import DiskgnnError


class Slab:
    """Host rows for one batch: `take(n)` hands out the next n rows; `ids` is scratch for the batch's ids."""

    def __init__(self, rows: int, row_bytes: int, pinned: bool, words: int = 0):
        self.row_bytes, self.pinned = row_bytes, pinned
        self.rows = self.ids = torch.empty(0)
        self._allocate(rows, words)
        self.used = 0
        self.event = None  # the device work that reads this slab, recorded by the copy stage

    def _allocate(self, rows: int, words: int) -> None:
        if rows > self.capacity:
            self.rows = torch.empty((rows, self.row_bytes), dtype=torch.uint8, pin_memory=self.pinned)
        # the positions of its rows, then the slots and positions of the rows device tiers fill, then the batch's
        # record where the GPU target sends one (target/record.py)
        if 3 * rows + words > self.ids.numel():  # records vary by batch: a quarter more, so that few grow it again
            self.ids = torch.empty(3 * rows + words * 5 // 4, dtype=torch.int64, pin_memory=self.pinned)

    @property
    def capacity(self) -> int:
        return self.rows.shape[0]

    def reset(self, rows: int, words: int = 0) -> None:
        """Ready for a batch of at most `rows` host rows and a record of `words`: grown where it is smaller (a batch
        above the plan's bound, e.g. an evaluation's wider fanouts), emptied."""
        if self.event is not None:
            self.event.synchronize()
            self.event = None
        self._allocate(rows, words)
        self.used = 0

    def take(self, n: int) -> tuple[int, np.ndarray]:
        """The next n rows: their first row's index and a (n, row_bytes) uint8 view of them."""
        first = self.used
        if first + n > self.capacity:
            raise DiskgnnError(f"a batch's host rows overflow its staging slab ({first + n} > {self.capacity} rows)")
        self.used += n
        return first, self.rows.numpy()[first: first + n]

    def view(self, first: int, n: int, dtype: torch.dtype) -> torch.Tensor:
        """Rows [first, first + n) as a (n, width) tensor of `dtype`."""
        return self.rows[first: first + n].view(dtype)


class Slabs:
    """`count` slabs, made once, handed out in turn: a slab comes back after its batch's copy was issued."""

    def __init__(self, count: int, rows: int, row_bytes: int, pinned: bool):
        self.rows, self.row_bytes, self.pinned, self.count = rows, row_bytes, pinned, count
        self._free: queue.Queue = queue.Queue()
        for _ in range(count):
            self._free.put(None)  # made at first use: a pass that stops early makes fewer

    def acquire(self, rows: int, words: int = 0) -> Slab:
        try:
            slab = self._free.get_nowait()
        except queue.Empty:
            raise RuntimeError(f"all {self.count} staging slabs are held: more batches are in flight than the "
                               "pipeline's stages hold") from None
        if slab is None:
            slab = Slab(max(rows, self.rows), self.row_bytes, self.pinned, words)
        slab.reset(rows, words)
        return slab

    def release(self, slab: Slab, event=None) -> None:
        slab.event = event
        self._free.put(slab)

    @staticmethod
    def bytes(count: int, rows: int, row_bytes: int) -> int:
        """Host memory `count` slabs of `rows` rows take (the plan's share for them)."""
        return count * rows * (row_bytes + 3 * 8)


def fill_rows(reader, ids: np.ndarray, dest: torch.Tensor, chunk_bytes: int) -> None:
    """dest[i] = stored row ids[i], for a `dest` in another memory than the reader reads into (device memory):
    chunks of at most `chunk_bytes` gathered into one of two pinned buffers while the other's copy runs.
    On a CPU `dest` (a stand-in for the device, in tests) the copies are plain ones."""
    n = int(ids.size)
    if n == 0:
        return
    if reader.backend == "kvikio":  # cuFile reads into device memory itself
        reader.gather(ids, out=dest)
        return
    rows = max(1, min(n, chunk_bytes // max(1, reader.row_bytes)))
    pinned = dest.device.type == "cuda"
    buffers = [torch.empty((rows, dest.shape[1]), dtype=dest.dtype, pin_memory=pinned)
               for _ in range(min(2, -(-n // rows)))]
    events = [None] * len(buffers)
    stream = torch.cuda.Stream(dest.device) if pinned else None
    for k, start in enumerate(range(0, n, rows)):
        i = k % len(buffers)
        if events[i] is not None:
            events[i].synchronize()  # its previous chunk has crossed
        part = buffers[i][: min(rows, n - start)]
        reader.gather(ids[start: start + part.shape[0]], out=part)
        if stream is None:
            dest[start: start + part.shape[0]].copy_(part)
            continue
        with torch.cuda.stream(stream):
            dest[start: start + part.shape[0]].copy_(part, non_blocking=True)
            events[i] = torch.cuda.Event()
            events[i].record(stream)
    if stream is not None:
        stream.synchronize()
