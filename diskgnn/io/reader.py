"""Reads feature rows and byte ranges from disk: io_uring, pread, mmap or kvikio.

Two levels:

* :class:`FileReader` reads any file: ``gather_rows`` (fixed-size rows by id)
  and ``read_ranges`` (file_offset, length, dst_offset triples), each with an
  ``_async`` variant returning a :class:`ReadHandle`.
* :func:`open_features` opens a dataset directory's feature matrix and
  returns a :class:`FeatureReader` whose ``gather`` yields torch tensors.

Backends:

``io_uring``  O_DIRECT reads through io_uring (native; the fast path on Linux).
``pread``     a thread pool of blocking preads, O_DIRECT where possible (native).
``mmap``      numpy memmap fancy indexing through the page cache (a baseline;
              its ``_async`` calls finish before they return).
``kvikio``    cuFile reads straight into GPU memory (extra ``diskgnn[gpu]``).
``auto``      io_uring when the kernel allows it and O_DIRECT works on the
              file's file system, else pread; ``reader.backend`` says which and
              ``reader.fallback_reason`` why.

torch is imported only where tensors are made (FeatureReader, kvikio
outputs): FileReader with numpy arrays never loads it.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .. import defaults
from ..data.features import RAW_FEATURES, feature_source
from ..data.format import open_dataset
from .backends import KvikioFile, MmapFile

BACKENDS = ("auto", "io_uring", "pread", "mmap", "kvikio")


class ReadHandle:
    """A read in flight. ``wait()`` blocks until it is done and returns the output.

    The handle keeps the output alive; dropping it unwaited still waits, so
    the memory is never written after it could have been reused.
    """

    __slots__ = ("_ticket", "_result")

    def __init__(self, ticket, result):
        self._ticket = ticket  # None when the read already finished
        self._result = result

    def done(self) -> bool:
        return self._ticket is None or self._ticket.done()

    def wait(self):
        """Returns the output; raises the read's error (OSError, EOFError)."""
        if self._ticket is not None:
            self._ticket.wait()
        return self._result

    def __del__(self):
        # Waits without holding the GIL (unlike the native ticket's own destructor, which still waits if this
        # one is cut short). Under the commands, a Ctrl-C is not raised in a finalizer (errors._on_sigint records
        # it for the loops); under Python's default handler (the library in a notebook) it may land in the wait,
        # and the wait goes on until the read is done.
        while self._ticket is not None:
            try:
                self._ticket.wait()
                return
            except KeyboardInterrupt:
                continue
            except Exception:
                return


class FileReader:
    """Reads rows and byte ranges of one file (any size, dtype or row length).

    Args:
        path: the file.
        backend: one of BACKENDS.
        queue_depth: reads in flight per ring (io_uring) or threads (pread).
        num_rings: io_uring rings, each with a worker thread.
        submit_batch: io_uring reads handed to the kernel together (small keeps the device busy).
        direct: pread only: None tries O_DIRECT, True requires it, False uses the page cache.
        max_request_bytes: largest single read (multiple of 4096).
        max_gap_bytes: unneeded bytes a read may span to merge two reads.
        register_buffers: register bounce buffers and the file with io_uring.
    """

    def __init__(self, path, backend: str = "auto", *, queue_depth: int = defaults.QUEUE_DEPTH,
                 num_rings: int = defaults.NUM_RINGS, submit_batch: int = defaults.SUBMIT_BATCH,
                 direct: bool | None = None, max_request_bytes: int = defaults.MAX_REQUEST_BYTES,
                 max_gap_bytes: int = defaults.MAX_GAP_BYTES, register_buffers: bool = defaults.REGISTER_BUFFERS):
        self.path = os.fspath(path)
        self._on_gpu = backend == "kvikio"
        if backend == "mmap":
            self._impl = MmapFile(self.path)
        elif backend == "kvikio":
            self._impl = KvikioFile(self.path)
        elif backend in ("auto", "io_uring", "pread"):
            from .. import _native

            self._impl = _native.FileReader(
                self.path, backend, {None: "auto", True: "on", False: "off"}[direct], queue_depth, num_rings,
                submit_batch, max_request_bytes, max_gap_bytes, register_buffers)
        else:
            raise ValueError(f"{self.path}: unknown backend {backend!r} (use one of {', '.join(BACKENDS)})")

    @property
    def backend(self) -> str:
        """The backend in use: never "auto"."""
        return self._impl.backend

    @property
    def direct(self) -> bool:
        """Whether reads bypass the page cache (O_DIRECT)."""
        return self._impl.direct

    @property
    def fallback_reason(self) -> str:
        """Why ``auto`` did not get io_uring with O_DIRECT; empty when it did."""
        return self._impl.fallback_reason

    @property
    def file_size(self) -> int:
        return self._impl.file_size

    def stats(self) -> dict:
        """Reads issued (after coalescing) and bytes they returned; zeros for mmap and kvikio."""
        return self._impl.stats()

    def gather_rows(self, ids, row_bytes: int, base_offset: int = 0, out=None, num_rows: int | None = None):
        """Rows ``ids`` (row r at ``base_offset + r * row_bytes``), row i of the output from ids[i].

        ``out``: a C-contiguous array or tensor (CUDA for kvikio, else numpy or
        CPU) of at least ``len(ids) * row_bytes`` bytes; by default a new uint8
        array of shape (len(ids), row_bytes). ``num_rows`` (default: as many as
        the file holds) bounds the ids. Returns ``out``.
        """
        return self.gather_rows_async(ids, row_bytes, base_offset, out, num_rows).wait()

    def gather_rows_async(self, ids, row_bytes: int, base_offset: int = 0, out=None,
                          num_rows: int | None = None) -> ReadHandle:
        ids = as_ids(ids)
        if row_bytes <= 0:
            raise ValueError(f"{self.path}: row_bytes must be positive, got {row_bytes}")
        if num_rows is None:
            num_rows = max(0, self.file_size - base_offset) // row_bytes
        if out is None:
            shape = (len(ids), row_bytes)
            if self._on_gpu:
                import torch

                out = self.empty_tensor(shape, torch.uint8)
            else:
                out = np.empty(shape, np.uint8)
        ticket = self._impl.submit_gather(ids, row_bytes, base_offset, num_rows, self._byte_view(out))
        return ReadHandle(ticket, out)

    def read_ranges(self, ranges, out):
        """Reads ``ranges`` (rows of file_offset, length, dst_offset) into the bytes of ``out``; returns ``out``."""
        return self.read_ranges_async(ranges, out).wait()

    def read_ranges_async(self, ranges, out) -> ReadHandle:
        ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 3)
        if (ranges < 0).any():
            raise ValueError(f"{self.path}: negative offset or length in ranges")
        ticket = self._impl.submit_ranges(ranges.view(np.uint64), self._byte_view(out))
        return ReadHandle(ticket, out)

    def empty_tensor(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """A tensor this backend can read into: in GPU memory for kvikio, else in CPU memory."""
        import torch

        return torch.empty(shape, dtype=dtype, device="cuda" if self._on_gpu else "cpu")

    def _byte_view(self, out):
        return _cuda_byte_view(out) if self._on_gpu else _cpu_byte_view(out)

    def close(self) -> None:
        """Finishes reads in flight and releases the file."""
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"FileReader({self.path!r}, backend={self.backend!r}, direct={self.direct})"


class FeatureReader:
    """A dataset's stored feature rows (a FeatureSource: features.bin or a quantized variant's
    codes); ``gather`` returns them as torch tensors of the stored dtype."""

    def __init__(self, source, backend: str = "auto", **options):
        import torch

        self.path = str(source.path)
        self.num_rows = source.num_rows
        self.width = source.width
        self.numpy_dtype = np.dtype(source.dtype)
        self.row_bytes = source.row_bytes
        self.dtype = torch.from_numpy(np.empty(0, self.numpy_dtype)).dtype
        needed = self.num_rows * self.row_bytes
        size = os.path.getsize(self.path)
        if size < needed:
            raise EOFError(f"{self.path}: {size} bytes, but {self.num_rows} rows of {self.row_bytes} bytes "
                           f"need {needed} (file shorter than expected)")
        self._file = FileReader(self.path, backend, **options)

    @property
    def backend(self) -> str:
        return self._file.backend

    @property
    def fallback_reason(self) -> str:
        return self._file.fallback_reason

    @property
    def file(self) -> FileReader:
        """The underlying reader, e.g. for ``stats()``."""
        return self._file

    def gather(self, ids, out=None) -> torch.Tensor:
        """Stored rows ``ids`` as a (len(ids), width) tensor of the file's dtype."""
        return self.gather_async(ids, out).wait()

    def gather_async(self, ids, out=None) -> ReadHandle:
        ids = as_ids(ids)
        shape = (len(ids), self.width)
        if out is None:
            out = self._file.empty_tensor(shape, self.dtype)
        elif tuple(out.shape) != shape or out.dtype != self.dtype:
            raise ValueError(f"{self.path}: out must be a {self.dtype} tensor of shape {shape}, "
                             f"got {out.dtype} {tuple(out.shape)}")
        return self._file.gather_rows_async(ids, self.row_bytes, 0, out, self.num_rows)

    def read_ranges(self, ranges, out):
        """Raw byte ranges of the feature file; see FileReader.read_ranges."""
        return self._file.read_ranges(ranges, out)

    def read_ranges_async(self, ranges, out) -> ReadHandle:
        return self._file.read_ranges_async(ranges, out)

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_features(dataset_dir, backend: str = "auto", queue_depth: int = defaults.QUEUE_DEPTH,
                  features: str = RAW_FEATURES, **options) -> FeatureReader:
    """Opens the feature matrix of a dataset directory (see docs/format.md), or with ``features``
    a stored quantized variant's code rows (docs/quantization.md).

    ``options`` go to FileReader (num_rings, direct, max_request_bytes, ...).
    """
    return FeatureReader(feature_source(open_dataset(dataset_dir), features), backend, queue_depth=queue_depth,
                         **options)


def as_ids(ids) -> np.ndarray:
    """Row ids as a contiguous int64 array (from a list, numpy array or tensor)."""
    if _is_tensor(ids):
        ids = ids.detach().cpu().numpy()
    ids = np.asarray(ids)
    if ids.size == 0:
        return np.empty(0, np.int64)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"row ids must be integers, got {ids.dtype}")
    if ids.ndim != 1:
        raise ValueError(f"row ids must be one-dimensional, got shape {ids.shape}")
    return np.ascontiguousarray(ids, dtype=np.int64)


def _cpu_byte_view(out) -> np.ndarray:
    """The bytes of a C-contiguous, writable numpy array or CPU tensor, as a flat uint8 array sharing memory."""
    if _is_tensor(out):
        if out.device.type != "cpu":
            raise ValueError(f"out must be in CPU memory for this backend, got a tensor on {out.device}")
        if not out.is_contiguous():
            raise ValueError("out must be contiguous")
        import torch  # loaded already: out is a tensor

        return out.detach().reshape(-1).view(torch.uint8).numpy()
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array or a torch tensor, got {type(out).__name__}")
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    if not out.flags.writeable:
        raise ValueError("out must be writable")
    return out.reshape(-1).view(np.uint8)


def _is_tensor(x) -> bool:
    # Without torch loaded nothing can be a tensor, and loading it to find out costs seconds.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _cuda_byte_view(out) -> torch.Tensor:
    if not _is_tensor(out) or out.device.type != "cuda":
        raise ValueError("the kvikio backend reads into CUDA tensors; out must be one")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    import torch  # loaded already: out is a tensor

    return out.detach().reshape(-1).view(torch.uint8)
