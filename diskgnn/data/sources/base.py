"""What every input source provides, and streaming readers shared by several.

A source yields its graph in chunks so that prepare's memory stays bounded:
edges as (src, dst) id arrays (src -> dst: dst aggregates src), features as
row blocks in node order, labels as blocks in node order (-1 = no label).
"""

from __future__ import annotations

import gzip
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ...errors import DiskgnnError


@dataclass
class Source:
    """Base class: subclasses fill the fields and implement the generators."""

    name: str
    num_nodes: int
    feature_dim: int
    feature_dtype: np.dtype
    num_classes: int | None = None
    edge_count_hint: int = 0

    @property
    def feature_name(self) -> str:
        """Where the features come from, for error messages."""
        files = getattr(self, "files", None)
        return str(files.feat.path) if files is not None else self.name

    def edges(self, max_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        raise NotImplementedError

    def features(self, max_rows: int) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def labels(self, max_rows: int) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def splits(self) -> dict[str, np.ndarray] | None:
        """Node ids of train/val/test when the source defines them, else None."""
        return None

    def edge_splits(self) -> dict[str, np.ndarray] | None:
        """Held-out val and test edges, int64 [E, 2] rows (src, dst), when the source ships a link split (its
        edges() are then the train graph's), else None."""
        return None


class NpyArray:
    """A .npy file read in slices with plain reads (no mmap, so RSS stays small).

    The header is parsed once and the file size checked against it, so a
    truncated file is reported before anything is read. C- and Fortran-ordered
    files and either byte order are read (writers produce all of them:
    `a.T`, `np.unique(..., axis=1)`, other platforms); blocks come out in the
    stored dtype, byte order included, and numpy converts them where used.
    """

    def __init__(self, path, stream_factory=None, expected_bytes=None):
        self.path = Path(path)
        self._open = stream_factory or (lambda: open(self.path, "rb"))
        try:
            with self._open() as f:
                version = np.lib.format.read_magic(f)
                read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                               (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                if read_header is None:
                    raise ValueError(f"unsupported .npy version {version}")
                shape, fortran, dtype = read_header(f)
                self.offset = f.tell()
        except (ValueError, EOFError, OSError) as e:
            raise DiskgnnError(f"{self.path}: not a readable .npy file ({e})") from None
        if dtype.hasobject:
            raise DiskgnnError(f"{self.path}: holds Python objects (dtype {dtype}); only numeric arrays are read")
        self.shape, self.dtype = tuple(shape), dtype
        self.fortran = fortran and len(shape) > 1
        self.size = int(np.prod(shape, dtype=np.int64))
        size = expected_bytes if expected_bytes is not None else self.path.stat().st_size
        if size < self.offset + self.size * dtype.itemsize:
            raise DiskgnnError(f"{self.path}: truncated: header says {shape} {dtype} "
                               f"({self.offset + self.size * dtype.itemsize} bytes) but the file has {size}")

    def read_flat(self, start: int, count: int, f=None) -> np.ndarray:
        """Elements [start, start + count) in storage order."""
        count = max(0, min(count, self.size - start))
        own = f is None
        f = self._open() if own else f
        try:
            f.seek(self.offset + start * self.dtype.itemsize)
            data = f.read(count * self.dtype.itemsize)
        finally:
            if own:
                f.close()
        if len(data) != count * self.dtype.itemsize:
            raise DiskgnnError(f"{self.path}: truncated while reading")
        return np.frombuffer(data, dtype=self.dtype)

    def rows(self, max_rows: int) -> Iterator[np.ndarray]:
        """Blocks of whole rows (axis 0) in order."""
        row = int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 else 1
        max_rows = max(1, max_rows)
        with self._open() as f:
            for r in range(0, self.shape[0], max_rows):
                n = min(max_rows, self.shape[0] - r)
                if not self.fortran:
                    yield self.read_flat(r * row, n * row, f).reshape((n, *self.shape[1:]))
                else:
                    yield self._fortran_rows(r, n, row, f)

    def _fortran_rows(self, first: int, n: int, row: int, f) -> np.ndarray:
        """Rows [first, first + n) of a Fortran-ordered array: axis 0 varies fastest in the file, so the block
        is `row` runs of n elements, one per position in the trailing axes (their first varying fastest)."""
        runs = np.empty((n, row), dtype=self.dtype)
        for k in range(row):
            runs[:, k] = self.read_flat(k * self.shape[0] + first, n, f)
        trailing = self.shape[1:]
        return runs.reshape((n, *trailing[::-1])).transpose((0, *range(len(trailing), 0, -1)))

    def load(self) -> np.ndarray:
        """The whole array (for small arrays: split ids, adjacency of small graphs)."""
        a = self.read_flat(0, self.size)
        if self.fortran:
            return a.reshape(self.shape[::-1]).T
        return a.reshape(self.shape)


def npz_member(archive, key: str) -> NpyArray:
    """A member of an .npz archive, read in slices when it is stored uncompressed."""
    archive = Path(archive)
    with zipfile.ZipFile(archive) as z:
        name = f"{key}.npy"
        if name not in z.namelist():
            raise DiskgnnError(f"{archive}: has no array {key!r} (has {sorted(n[:-4] for n in z.namelist())})")
        info = z.getinfo(name)

    def stream():
        return _ZipMemberStream(archive, name)

    return NpyArray(f"{archive}:{key}", stream, expected_bytes=info.file_size)


class _ZipMemberStream(io.RawIOBase):
    """Seekable reader of one zip member; forward seeks skip, backward seeks reopen."""

    def __init__(self, archive, name):
        self._zip = zipfile.ZipFile(archive)
        self._name = name
        self._f = self._zip.open(name)
        self._pos = 0

    def seek(self, pos, whence=0):
        assert whence == 0
        if pos < self._pos:
            self._f.close()
            self._f = self._zip.open(self._name)
            self._pos = 0
        while self._pos < pos:
            skipped = len(self._f.read(min(pos - self._pos, 1 << 24)))
            if not skipped:
                break
            self._pos += skipped
        return self._pos

    def tell(self):
        return self._pos

    def read(self, n=-1):
        data = self._f.read(n)
        self._pos += len(data)
        return data

    def readinto(self, b):
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def readable(self):
        return True

    def close(self):
        self._f.close()
        self._zip.close()
        super().close()


def open_text(path: Path):
    """Opens a text file, transparently decompressing .gz."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def text_rows(path: Path, ncols: int | None, dtype, max_rows: int, delimiter=",",
              skip_header: bool = False) -> Iterator[np.ndarray]:
    """Numeric CSV/TSV rows in blocks of at most `max_rows`, lines starting '#' skipped."""
    path = Path(path)
    line_no = 0
    with open_text(path) as f:
        if skip_header:
            f.readline()
            line_no = 1
        while True:
            lines = f.readlines(max(1 << 16, max_rows * 16))
            if not lines:
                return
            lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
            first = line_no + 1
            line_no += len(lines)
            if not lines:
                continue
            try:
                block = np.loadtxt(lines, dtype=dtype, delimiter=delimiter, ndmin=2)
            except ValueError as e:
                raise DiskgnnError(f"{path}: cannot parse lines {first}-{line_no}: {e}") from None
            if ncols is not None and block.shape[1] != ncols:
                raise DiskgnnError(f"{path}: expected {ncols} columns, found {block.shape[1]} near line {first}")
            yield block


def require(path: Path, what: str) -> Path:
    if not path.exists():
        raise DiskgnnError(f"{path}: missing ({what})")
    return path
