"""An array written out of core a chunk of rows at a time and taken up again after an interruption: diskgnn.infer's
output, and layer-wise inference's layer files (nn/inference.py).

OUT (a .npy file, or a .zarr directory: a zarr array chunked by rows, zarr's default compression) is
filled at `OUT.partial` a batch of rows at a time; every DISKGNN_INFER_RECORD_S seconds the rows so far
are synced and `OUT.progress.json` records how many are done and what they are of (`identity`: the
checkpoint's checksum, the output, the nodes, the shape). A rerun with the same identity goes on from
there, a different one starts over; the finished array is checksummed (xxh3-128 of its rows' bytes, in
order, whatever the container), renamed to OUT, and described by `OUT.manifest.json`. Rows are computed
deterministically, so an interrupted and resumed output is byte-identical to an uninterrupted one.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import xxhash

from .. import defaults
from ..errors import DiskgnnError
from .files import fsync_path, guard_io, write_atomic

FORMAT, VERSION = "diskgnn-inference", 1


def kind_of(path: Path) -> str:
    if path.suffix == ".npy":
        return "npy"
    if path.suffix == ".zarr":
        return "zarr"
    raise DiskgnnError(f"--out {path}: name a .npy file or a .zarr directory")


def side(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def ids_checksum(ids: np.ndarray) -> str:
    """xxh3-128 of node ids as little-endian int64: which nodes an output is of."""
    return xxhash.xxh3_128(np.ascontiguousarray(ids, dtype="<i8").tobytes()).hexdigest()


def nodes_named(spec: str, ids: np.ndarray) -> str:
    """An output's "nodes" entry: how they were selected, how many, their checksum."""
    return f"{spec} ({ids.size} ids, xxh3_128:{ids_checksum(ids)})"


def rows_checksum(rows, chunk_rows: int = 1 << 16) -> str:
    """xxh3-128 of an array's rows in order (little-endian C order), read a chunk of rows at a time: a .npy map's
    or a zarr array's alike."""
    hashed, dtype = xxhash.xxh3_128(), np.dtype(rows.dtype).newbyteorder("<")
    for s in range(0, rows.shape[0], chunk_rows):
        hashed.update(np.ascontiguousarray(rows[s: s + chunk_rows], dtype=dtype).tobytes())
    return hashed.hexdigest()


class Output:
    """The array being written to `path`: `rows_done` rows of it already are (0 for a fresh one)."""

    def __init__(self, path: Path, shape: tuple, dtype, identity: dict, chunk_rows: int):
        self.path, self.kind = Path(path), kind_of(Path(path))
        self.shape, self.dtype, self.chunk_rows = tuple(int(s) for s in shape), np.dtype(dtype), chunk_rows
        self.partial, self.progress = side(self.path, ".partial"), side(self.path, ".progress.json")
        self.identity = {**identity, "container": self.kind, "shape": list(self.shape), "dtype": self.dtype.name}
        self._recorded = time.monotonic()
        self.rows_done = self._taken_up()
        if self.rows_done == 0:
            self._remove(self.partial)
            self.array = self._create()
            self._record(0)
        else:
            self.array = self._open()

    def _taken_up(self) -> int:
        try:
            saved = json.loads(self.progress.read_text())
        except (OSError, ValueError):
            return 0
        return int(saved["rows_done"]) if saved.get("identity") == self.identity and self.partial.exists() else 0

    def _create(self):
        if self.kind == "npy":
            return guard_io(self.partial, lambda: np.lib.format.open_memmap(self.partial, mode="w+", dtype=self.dtype,
                                                                             shape=self.shape))
        import zarr

        chunks = (max(1, min(self.chunk_rows, self.shape[0])),) + self.shape[1:]
        return zarr.open_array(str(self.partial), mode="w", shape=self.shape, chunks=chunks, dtype=self.dtype)

    def _open(self):
        if self.kind == "npy":
            return np.load(self.partial, mmap_mode="r+")
        import zarr

        return zarr.open_array(str(self.partial), mode="r+")

    def _record(self, rows: int) -> None:
        self._recorded = time.monotonic()
        write_atomic(self.progress, (json.dumps({"identity": self.identity, "rows_done": rows}) + "\n").encode())

    def write(self, start: int, rows: np.ndarray) -> None:
        """Rows [start, start + len(rows)); every INFER_RECORD_S seconds the rows so far are synced and then the
        progress recorded (a rerun takes up from the last record)."""
        end = start + len(rows)
        guard_io(self.partial, lambda: self.array.__setitem__(slice(start, end), rows))
        self.rows_done = end
        if time.monotonic() - self._recorded >= defaults.INFER_RECORD_S or end == self.shape[0]:
            if self.kind == "npy":
                self.array.flush()
            self._record(end)

    def checksum(self) -> str:
        """xxh3-128 of the rows' bytes in order (C order, little-endian), read back a chunk at a time."""
        return rows_checksum(self.array, self.chunk_rows)

    def commit(self, manifest: dict) -> dict:
        """Checksums the finished array, puts it in place and writes its manifest; returns the manifest."""
        if self.rows_done != self.shape[0]:
            raise AssertionError(f"{self.path}: {self.rows_done} of {self.shape[0]} rows written")
        manifest = {"format": FORMAT, "format_version": VERSION, **manifest, **self.identity,
                    "checksum": f"xxh3_128:{self.checksum()}"}
        if self.kind == "npy":
            self.array.flush()
            del self.array
            fsync_path(self.partial)
        self._remove(self.path)
        self.partial.replace(self.path)
        fsync_path(self.path.parent)
        write_atomic(side(self.path, ".manifest.json"), (json.dumps(manifest, indent=1) + "\n").encode())
        self.progress.unlink(missing_ok=True)
        return manifest

    @staticmethod
    def _remove(path: Path) -> None:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _opened(path: Path):
    if kind_of(path) == "npy":
        return np.load(path, mmap_mode="r")
    import zarr

    return zarr.open_array(str(path), mode="r")


def finished(path: Path, shape: tuple, dtype, identity: dict):
    """A finished .npy output's rows (mapped) where its manifest names `identity`, `shape` and `dtype` and its
    checksum holds; else None."""
    try:
        manifest = json.loads(side(path, ".manifest.json").read_text())
    except (OSError, ValueError):
        return None
    expect = {**identity, "shape": [int(s) for s in shape], "dtype": np.dtype(dtype).name}
    if any(manifest.get(key) != value for key, value in expect.items()) or not path.exists():
        return None
    rows = _opened(path)
    return rows if manifest.get("checksum") == f"xxh3_128:{rows_checksum(rows)}" else None


def read_output(path) -> np.ndarray:
    """A finished output's rows (whole, for tests and small outputs), checked against its manifest."""
    path = Path(path)
    manifest = json.loads(side(path, ".manifest.json").read_text())
    rows = _opened(path)
    if manifest["checksum"] != f"xxh3_128:{rows_checksum(rows)}":
        raise DiskgnnError(f"{path}: fails the checksum in its manifest (the output is damaged)")
    return np.asarray(rows)
