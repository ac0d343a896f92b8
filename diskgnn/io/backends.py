"""The Python backends of FileReader: numpy memmap (the page-cache baseline) and kvikio (cuFile into GPU memory).

Both make the native reader's checks, with the same errors, so that a caller
sees one behaviour whatever the backend.
"""

from __future__ import annotations

import os

import numpy as np


def _check_ids(path: str, ids: np.ndarray, num_rows: int, row_bytes: int, base_offset: int, file_size: int) -> None:
    """The checks the native reader makes, for the Python backends, with the same errors."""
    if ids.size == 0:
        return
    bad = np.flatnonzero((ids < 0) | (ids >= num_rows))
    if bad.size:
        i = int(bad[0])
        raise IndexError(f"{path}: row id {ids[i]} (at position {i}) is out of range for {num_rows} rows")
    last = int(ids.max())
    if base_offset + (last + 1) * row_bytes > file_size:
        raise EOFError(f"{path}: row {last} of {row_bytes} bytes lies past the end of the file "
                       f"({file_size} bytes): file shorter than expected")


def _check_ranges(path: str, ranges: np.ndarray, out_bytes: int, file_size: int) -> None:
    for off, length, dst in ranges.tolist():
        if off + length > file_size:
            raise EOFError(f"{path}: range of {length} bytes at offset {off} lies past the end of the file "
                           f"({file_size} bytes): file shorter than expected")
        if dst + length > out_bytes:
            raise ValueError(f"{path}: range of {length} bytes to output offset {dst} does not fit "
                             f"the output of {out_bytes} bytes")


def _check_out(path: str, out_bytes: int, needed: int) -> None:
    if out_bytes < needed:
        raise ValueError(f"{path}: the output holds {out_bytes} bytes; the read needs {needed}")


class MmapFile:
    """Page-cache reads through numpy's memmap: the baseline the native backends beat.

    Reads happen in the submitting call (page faults), so there is no ticket.
    A file truncated after it was opened raises SIGBUS here, not an error.
    """

    backend = "mmap"
    direct = False
    fallback_reason = ""

    def __init__(self, path: str):
        self.path = path
        self.file_size = os.path.getsize(path)
        self._map = np.memmap(path, np.uint8, "r") if self.file_size else np.empty(0, np.uint8)

    def stats(self) -> dict:
        return {"reads": 0, "bytes": 0}

    def submit_gather(self, ids, row_bytes, base_offset, num_rows, out):
        _check_ids(self.path, ids, num_rows, row_bytes, base_offset, self.file_size)
        _check_out(self.path, out.size, len(ids) * row_bytes)
        if ids.size:
            rows = self._map[base_offset:base_offset + (int(ids.max()) + 1) * row_bytes].reshape(-1, row_bytes)
            # mode="clip" (ids are checked) lets numpy write into out without a temporary.
            np.take(rows, ids, axis=0, out=out[:len(ids) * row_bytes].reshape(len(ids), row_bytes), mode="clip")
        return None

    def submit_ranges(self, ranges, out):
        _check_ranges(self.path, ranges, out.size, self.file_size)
        for off, length, dst in ranges.tolist():
            out[dst:dst + length] = self._map[off:off + length]
        return None

    def close(self) -> None:
        self._map = None


class KvikioFuture:
    """The ranges of one read in flight through kvikio."""

    def __init__(self, path, futures, ranges):
        self._path = path
        self._futures = futures
        self._ranges = ranges
        self._error = None

    def done(self) -> bool:
        return all(f.done() for f in self._futures)

    def wait(self) -> None:
        if self._futures:
            for f, (off, length, _) in zip(self._futures, self._ranges):
                got = f.get()
                if got != length and self._error is None:
                    self._error = EOFError(f"{self._path}: read of {length} bytes at offset {off} returned {got}: "
                                           "file shorter than expected")
            self._futures = []
        if self._error is not None:
            raise self._error


class KvikioFile:
    """Reads straight into GPU memory through kvikio's cuFile (GPUDirect Storage where set up)."""

    backend = "kvikio"
    direct = False  # kvikio picks GDS or its own POSIX path; not ours to tell
    fallback_reason = ""

    def __init__(self, path: str):
        try:
            import kvikio
        except ImportError as e:
            raise RuntimeError(f"{path}: the kvikio backend needs CUDA and the diskgnn[gpu] extra "
                               f"(pip install kvikio-cu12): {e}") from None
        self.path = path
        self.file_size = os.path.getsize(path)
        self._file = kvikio.CuFile(path, "r")

    def stats(self) -> dict:
        return {"reads": 0, "bytes": 0}

    def submit_gather(self, ids, row_bytes, base_offset, num_rows, out):
        _check_ids(self.path, ids, num_rows, row_bytes, base_offset, self.file_size)
        n = len(ids)
        ranges = np.stack([base_offset + ids * row_bytes, np.full(n, row_bytes), np.arange(n) * row_bytes], axis=1)
        return self.submit_ranges(ranges, out)

    def submit_ranges(self, ranges, out):
        _check_ranges(self.path, ranges, out.numel(), self.file_size)
        ranges = ranges.tolist()
        futures = [self._file.pread(out[dst:dst + length], length, off) for off, length, dst in ranges]
        return KvikioFuture(self.path, futures, ranges)

    def close(self) -> None:
        self._file.close()
