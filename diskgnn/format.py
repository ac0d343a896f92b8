"""On-disk dataset format v1 (specified byte for byte in docs/format.md).

A dataset is a directory::

    manifest.json    what is here: sizes, dtypes, one checksum per file, its own checksum
    indptr.bin       int64[num_nodes + 1], CSC: in-neighbours of v are indices[indptr[v]:indptr[v+1]]
    indices.bin      int32 (num_nodes < 2**31) or int64 [num_edges]
    features.bin     feature_dtype[num_nodes, feature_dim], row-major, zero-padded to 4 KiB
    labels.bin       int32[num_nodes], -1 where a node has no label
    train_idx.bin    int64 node ids, and likewise val_idx.bin and test_idx.bin
    features.<spec>.bin, features.<spec>.params.bin
                     optional quantized variants of the features (docs/quantization.md)

Every file is raw little-endian data starting at byte 0 (so 4 KiB-aligned for
O_DIRECT) and padded with zeros to a multiple of 4 KiB; nothing needs pickle.
This module writes datasets atomically (build in a temporary directory beside
the target, then rename) and opens them with the cheap checks done on open.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from . import __version__
from .errors import DiskgnnError

FORMAT_NAME = "diskgnn-dataset"
FORMAT_VERSION = 1
ALIGN = 4096
MANIFEST = "manifest.json"
CHECKSUM_ALGO = "xxh3_128"
# Files at most this large are checksummed on every open; larger ones by `verify`
# (re-hashing gigabytes of features at every open would defeat out-of-core training).
VERIFY_ON_OPEN_BYTES = 64 << 20

FILE_NAMES = {
    "indptr": "indptr.bin",
    "indices": "indices.bin",
    "features": "features.bin",
    "labels": "labels.bin",
    "train_idx": "train_idx.bin",
    "val_idx": "val_idx.bin",
    "test_idx": "test_idx.bin",
}
SPLITS = ("train", "val", "test")
FEATURE_DTYPES = ("float32", "float16", "float64", "int8", "uint8")


def index_dtype(num_nodes: int) -> np.dtype:
    """Dtype of `indices`: int32 while every node id fits, else int64."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


def padded(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def manifest_checksum(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return xxhash.xxh3_128_hexdigest(text.encode())


def read_index(path: Path, fmt: str, version: int) -> dict:
    """Loads a JSON index of a derived file (samples, packs): format, version, own checksum."""
    try:
        meta = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DiskgnnError(f"{path}: cannot read the index ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt or meta.get("format_version") != version:
        raise DiskgnnError(f"{path}: not a {fmt} v{version} index")
    if meta.get("manifest_checksum") != manifest_checksum(meta):
        raise DiskgnnError(f"{path}: checksum mismatch (the index was modified or corrupted)")
    return meta


def write_index_tmp(path: Path, meta: dict) -> Path:
    """Adds the checksum and writes the index under its temporary name; the caller renames it last."""
    meta["manifest_checksum"] = manifest_checksum(meta)
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    tmp.write_text(json.dumps(meta))
    return tmp


def read_chunks(path: Path, chunk_bytes: int = 16 << 20):
    """Yields a whole file front to back as views of one reused buffer (memory stays at `chunk_bytes`)."""
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            yield view[:n]


def file_checksum(path: Path, chunk_bytes: int = 16 << 20) -> str:
    """Hash of a whole file, read in chunks."""
    h = xxhash.xxh3_128()
    for chunk in read_chunks(path, chunk_bytes):
        h.update(chunk)
    return h.hexdigest()


class ArrayFileWriter:
    """Appends arrays of one dtype to a file, hashing as it goes.

    `close()` pads the file with zeros to a multiple of ALIGN and fsyncs it.
    """

    def __init__(self, path: Path, dtype, row_shape=()):
        self.path = path
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.row_shape = tuple(row_shape)
        self.rows = 0
        self.nbytes = 0
        self._hash = xxhash.xxh3_128()
        self._f = _guard_io(path, lambda: open(path, "wb"))

    def write(self, array) -> None:
        a = np.ascontiguousarray(array, dtype=self.dtype)
        if a.shape[1:] != self.row_shape:
            raise AssertionError(f"{self.path.name}: rows of shape {a.shape[1:]}, expected {self.row_shape}")
        data = memoryview(a).cast("B")
        _guard_io(self.path, lambda: self._f.write(data))
        self._hash.update(data)
        self.rows += a.shape[0]
        self.nbytes += a.nbytes

    def close(self) -> dict:
        pad = padded(self.nbytes) - self.nbytes
        if pad:
            zeros = bytes(pad)
            _guard_io(self.path, lambda: self._f.write(zeros))
            self._hash.update(zeros)

        def finish():
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

        _guard_io(self.path, finish)
        return {
            "name": self.path.name,
            "dtype": self.dtype.name,
            "shape": [self.rows, *self.row_shape],
            "bytes": self.nbytes,
            "file_bytes": self.nbytes + pad,
            "checksum": f"{CHECKSUM_ALGO}:{self._hash.hexdigest()}",
        }

    def abort(self) -> None:
        self._f.close()


def _guard_io(path: Path, op):
    """Runs a file operation, turning a full disk into a one-line user error."""
    try:
        return op()
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskgnnError(f"{path}: no space left on device while writing") from None
        if e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise DiskgnnError(f"{path}: cannot write: {e.strerror}") from None
        raise


def _write_manifest_file(path: Path, manifest: dict) -> None:
    def write():
        with open(path, "w") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())

    _guard_io(path, write)


def _fsync_path(path: Path) -> None:
    """fsync of a file or a directory (a directory's entries reach the disk with its own fsync)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(path, manifest: dict) -> None:
    """Replaces an existing dataset's manifest atomically (a temporary file renamed over it),
    with its checksum recomputed; for files added to a dataset after prepare (quantized features)."""
    path = Path(path)
    manifest["manifest_checksum"] = manifest_checksum(manifest)
    tmp = path / f".{MANIFEST}.tmp-{os.getpid()}"
    try:
        _write_manifest_file(tmp, manifest)
        os.rename(tmp, path / MANIFEST)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_path(path)


def replace_directory(tmp: Path, out: Path) -> None:
    """Puts the finished directory `tmp` at `out`, replacing what is there with renames only.

    A reader sees the old directory or the new one, never a mix; the old one
    is deleted after the swap.
    """
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)


class StagedDirectory:
    """An output directory built in a temporary sibling (.NAME.tmp-PID) and renamed into place by commit().

    Use as a context manager: leaving it by an exception, or without commit(),
    removes the temporary directory, so `out` is never half-written.
    """

    def __init__(self, out, overwrite: bool = False):
        self.out = Path(out).absolute()
        if self.out.exists() and not overwrite:
            raise DiskgnnError(f"{self.out}: already exists (pass --overwrite to replace it)")
        if not self.out.parent.is_dir():
            raise DiskgnnError(f"{self.out.parent}: the output's parent directory does not exist")
        self.tmp = self.out.parent / f".{self.out.name}.tmp-{os.getpid()}"
        self.committed = False

    def __enter__(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
        _guard_io(self.tmp, lambda: self.tmp.mkdir())
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.committed:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False

    def path(self, rel: str) -> Path:
        """Where the file `rel` is written now (its parent directories made)."""
        p = self.tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def commit(self) -> Path:
        """Every file and directory reaches the disk, then the rename makes the whole directory visible."""
        for p in sorted([*self.tmp.rglob("*"), self.tmp], reverse=True):
            _fsync_path(p)
        replace_directory(self.tmp, self.out)
        _fsync_path(self.out.parent)
        self.committed = True
        return self.out


class DatasetBuilder(StagedDirectory):
    """Builds a dataset directory: its array files, then finish() writes the manifest and commits."""

    def __init__(self, out_dir, overwrite: bool = False):
        super().__init__(out_dir, overwrite)
        self.files: dict[str, dict] = {}

    def scratch_dir(self, name: str) -> Path:
        """A directory for temporary files on the same file system as the output."""
        d = self.tmp / f"scratch-{name}"
        d.mkdir(exist_ok=True)
        return d

    def writer(self, kind: str, dtype, row_shape=()) -> ArrayFileWriter:
        return ArrayFileWriter(self.tmp / FILE_NAMES[kind], dtype, row_shape)

    def add(self, kind: str, entry: dict) -> None:
        self.files[kind] = entry

    def write_array(self, kind: str, array, dtype) -> dict:
        array = np.asarray(array)
        w = self.writer(kind, dtype, array.shape[1:])
        w.write(array)
        self.files[kind] = w.close()
        return self.files[kind]

    def finish(self, meta: dict) -> Path:
        """Writes the manifest and moves the dataset into place."""
        for d in self.tmp.glob("scratch-*"):
            shutil.rmtree(d)
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            **meta,
            "files": self.files,
            "producer": {"name": "diskgnn", "version": __version__, **meta.get("producer", {})},
        }
        manifest["manifest_checksum"] = manifest_checksum(manifest)
        _write_manifest_file(self.tmp / MANIFEST, manifest)
        return self.commit()


RAW_FEATURES = "fp32"  # the name (--features) of features.bin as stored, whatever its dtype


class AsFloat32:
    """Decoder of features.bin rows: their values as float32 (a no-op for float32 features)."""

    @staticmethod
    def decode_torch(rows):
        return rows.float()

    @staticmethod
    def decode_bytes(rows: int) -> int:
        """Temporary memory beside the output: none."""
        return 0


@dataclass(eq=False)
class FeatureSource:
    """The feature rows training moves: a file of fixed-size rows and the decoder that turns
    them into the model's float32 input.

    `fp32` is features.bin as stored; a quantized variant (docs/quantization.md) is its code
    file, uint8 rows of code_bytes, decoded by its quantizer. Everything below the model works
    on stored rows of `row_bytes` (placement budgets, packs, memory tiers, reads), so another
    encoding needs only a file of fixed-size rows and a decoder (decode_torch, decode_bytes).
    """

    name: str  # RAW_FEATURES or a canonical quantize spec; recorded in pack files
    path: Path
    rows: np.ndarray  # read-only memory map [num_rows, width] of the stored rows
    decoder: object
    checksum: str  # the manifest's checksum of `path`: packs of other rows are refused
    dim: int  # values per decoded row

    @property
    def num_rows(self) -> int:
        return self.rows.shape[0]

    @property
    def width(self) -> int:
        """Elements per stored row."""
        return self.rows.shape[1]

    @property
    def dtype(self) -> np.dtype:
        return self.rows.dtype

    @property
    def row_bytes(self) -> int:
        return self.width * self.dtype.itemsize

    @property
    def decoded_row_bytes(self) -> int:
        return self.dim * 4

    def decode_torch(self, rows):
        """Stored rows as a tensor [n, width] on any device -> float32 [n, dim] on that device."""
        return self.decoder.decode_torch(rows)

    def decode_bytes(self, rows: int) -> int:
        """Temporary memory a decode of `rows` rows takes beside its float32 output."""
        return self.decoder.decode_bytes(rows)


@dataclass
class Dataset:
    """An opened dataset: metadata from the manifest, arrays memory-mapped on demand."""

    path: Path
    manifest: dict

    @property
    def num_nodes(self) -> int:
        return self.manifest["num_nodes"]

    @property
    def num_edges(self) -> int:
        return self.manifest["num_edges"]

    @property
    def feature_dim(self) -> int:
        return self.manifest["feature_dim"]

    @property
    def feature_dtype(self) -> np.dtype:
        return np.dtype(self.manifest["feature_dtype"])

    @property
    def num_classes(self) -> int:
        return self.manifest["num_classes"]

    @property
    def row_bytes(self) -> int:
        return self.feature_dim * self.feature_dtype.itemsize

    @property
    def features_path(self) -> str:
        return str(self.file_path("features"))

    def file_path(self, kind: str) -> Path:
        return self.path / self.manifest["files"][kind]["name"]

    def array(self, kind: str) -> np.ndarray:
        """Read-only memory map of one file's data (without its padding)."""
        entry = self.manifest["files"][kind]
        shape = tuple(entry["shape"])
        if entry["bytes"] == 0:
            return np.zeros(shape, dtype=entry["dtype"])
        return np.memmap(self.file_path(kind), dtype=np.dtype(entry["dtype"]).newbyteorder("<"),
                         mode="r", shape=shape)

    @property
    def indptr(self) -> np.ndarray:
        return self.array("indptr")

    @property
    def indices(self) -> np.ndarray:
        return self.array("indices")

    @property
    def features(self) -> np.ndarray:
        return self.array("features")

    @property
    def labels(self) -> np.ndarray:
        return self.array("labels")

    def split(self, name: str) -> np.ndarray:
        return self.array(f"{name}_idx")

    @property
    def quantized_specs(self) -> list[str]:
        """Specs of the quantized feature variants stored beside the features (docs/quantization.md)."""
        return list(self.manifest.get("quantized", {}))

    def quantized(self, spec: str):
        """One quantized variant: `QuantizedFeatures(quantizer, codes, path)`, the codes a read-only
        uint8 [num_nodes, code_bytes] memory map of `path` (fixed-size rows, like features.bin)."""
        from .quantize import load_quantized

        return load_quantized(self, spec)

    def feature_source(self, name: str = RAW_FEATURES) -> FeatureSource:
        """The rows training reads: features.bin for `fp32`, else the stored quantized variant `name`."""
        if name == RAW_FEATURES:
            entry = self.manifest["files"]["features"]
            return FeatureSource(RAW_FEATURES, self.file_path("features"), self.features,
                                 AsFloat32(), entry["checksum"], self.feature_dim)
        q = self.quantized(name)
        kind = self.manifest["quantized"][q.quantizer.spec]["codes"]
        return FeatureSource(q.quantizer.spec, q.path, q.codes, q.quantizer, self.manifest["files"][kind]["checksum"],
                             self.feature_dim)


def read_manifest(path) -> dict:
    """Loads and checks manifest.json: format, version, its own checksum."""
    path = Path(path)
    mpath = path / MANIFEST
    if not path.is_dir():
        raise DiskgnnError(f"{path}: not a dataset directory (does not exist or is not a directory)")
    if not mpath.is_file():
        raise DiskgnnError(f"{mpath}: missing; not a diskgnn dataset (create one with python -m diskgnn.prepare)")
    try:
        manifest = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DiskgnnError(f"{mpath}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise DiskgnnError(f"{mpath}: not a {FORMAT_NAME} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DiskgnnError(f"{mpath}: format version {manifest.get('format_version')} is not supported "
                           f"(this diskgnn reads version {FORMAT_VERSION})")
    if manifest.get("manifest_checksum") != manifest_checksum(manifest):
        raise DiskgnnError(f"{mpath}: checksum mismatch (the manifest was modified or corrupted)")
    return manifest


def check_file_sizes(path: Path, manifest: dict) -> None:
    for kind, entry in manifest["files"].items():
        fpath = path / entry["name"]
        if not fpath.is_file():
            raise DiskgnnError(f"{fpath}: missing ({kind} file named in the manifest)")
        size = fpath.stat().st_size
        if size != entry["file_bytes"]:
            raise DiskgnnError(f"{fpath}: {size} bytes, the manifest says {entry['file_bytes']} (truncated or replaced)")


def check_file_checksum(path: Path, entry: dict) -> None:
    fpath = path / entry["name"]
    algo, _, expected = entry["checksum"].partition(":")
    if algo != CHECKSUM_ALGO:
        raise DiskgnnError(f"{fpath}: unknown checksum algorithm {algo!r}")
    if file_checksum(fpath) != expected:
        raise DiskgnnError(f"{fpath}: checksum mismatch (file is corrupted)")


def open_dataset(path) -> Dataset:
    """Opens a dataset directory.

    Checks on open: the manifest (format, version, own checksum), every file's
    size, and the checksum of each file up to VERIFY_ON_OPEN_BYTES. Larger files
    are checked by `python -m diskgnn.verify`.
    """
    path = Path(path).absolute()
    manifest = read_manifest(path)
    check_file_sizes(path, manifest)
    for entry in manifest["files"].values():
        if entry["file_bytes"] <= VERIFY_ON_OPEN_BYTES:
            check_file_checksum(path, entry)
    return Dataset(path, manifest)
