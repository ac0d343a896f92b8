"""Files that matter, written so that a crash leaves the old state or the new one, and read back checked.

Every file diskgnn writes is raw little-endian data hashed as it is written
(`ArrayFileWriter`) or a JSON index carrying its own checksum (`write_index_tmp`,
`read_index`); both are written under a temporary name and renamed into place.
A whole directory (a dataset) is built in a temporary sibling and renamed
(`StagedDirectory`). A full disk or a read-only file system becomes a one-line
user error (`guard_io`).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import xxhash

from .. import defaults
from ..errors import DiskgnnError

ALIGN = 4096  # every data file starts and is padded to a 4 KiB boundary, for O_DIRECT
CHECKSUM_ALGO = "xxh3_128"


def padded(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def manifest_checksum(meta: dict) -> str:
    """Checksum of a JSON document without its own `manifest_checksum` field."""
    body = {k: v for k, v in meta.items() if k != "manifest_checksum"}
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


def read_chunks(path: Path, chunk_bytes: int = defaults.READ_CHUNK_BYTES):
    """Yields a whole file front to back as views of one reused buffer (memory stays at `chunk_bytes`)."""
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            yield view[:n]


def file_checksum(path: Path, chunk_bytes: int = defaults.READ_CHUNK_BYTES) -> str:
    """Hash of a whole file, read in chunks."""
    h = xxhash.xxh3_128()
    for chunk in read_chunks(path, chunk_bytes):
        h.update(chunk)
    return h.hexdigest()


def guard_io(path: Path, op):
    """Runs a file operation, turning a full disk into a one-line user error."""
    try:
        return op()
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskgnnError(f"{path}: no space left on device while writing") from None
        if e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise DiskgnnError(f"{path}: cannot write: {e.strerror}") from None
        raise


def fsync_path(path: Path) -> None:
    """fsync of a file or a directory (a directory's entries reach the disk with its own fsync)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        self._f = guard_io(path, lambda: open(path, "wb"))

    def write(self, array) -> None:
        a = np.ascontiguousarray(array, dtype=self.dtype)
        if a.shape[1:] != self.row_shape:
            raise AssertionError(f"{self.path.name}: rows of shape {a.shape[1:]}, expected {self.row_shape}")
        data = memoryview(a).cast("B")
        guard_io(self.path, lambda: self._f.write(data))
        self._hash.update(data)
        self.rows += a.shape[0]
        self.nbytes += a.nbytes

    def close(self) -> dict:
        pad = padded(self.nbytes) - self.nbytes
        if pad:
            zeros = bytes(pad)
            guard_io(self.path, lambda: self._f.write(zeros))
            self._hash.update(zeros)

        def finish():
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

        guard_io(self.path, finish)
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
        guard_io(self.tmp, lambda: self.tmp.mkdir())
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
            fsync_path(p)
        replace_directory(self.tmp, self.out)
        fsync_path(self.out.parent)
        self.committed = True
        return self.out
