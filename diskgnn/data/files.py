"""Files that matter, written so that a crash leaves the old state or the new one, and read back checked.

Every file diskgnn writes is raw little-endian data hashed as it is written
(`ArrayFileWriter`) or a JSON index carrying its own checksum (`write_index_tmp`,
`read_index`); both are written under a temporary name and renamed into place
(`write_atomic` for small whole files). A whole directory (a dataset) is built
in a temporary sibling and renamed (`StagedDirectory`). Temporary names are
`.NAME.tmp-PID` (`temp_path`), so that a later run finds what a killed one left
behind (`remove_stale_temps`) and nothing mistakes it for the real thing. A full
disk or a read-only file system becomes a one-line user error (`guard_io`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import xxhash

from .. import defaults
from ..errors import DiskgnnError

ALIGN = 4096  # every data file starts and is padded to a 4 KiB boundary, for O_DIRECT
CHECKSUM_ALGO = "xxh3_128"


_TEMP = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)$")


def temp_path(path: Path) -> Path:
    """Where `path` is written before it is renamed into place: `.NAME.tmp-PID` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def is_temp(path: Path) -> bool:
    """Whether `path` is a temporary sibling (a file or directory being written, or left by a killed run)."""
    return _TEMP.match(Path(path).name) is not None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(directory: Path, name: str | None = None, *, recursive: bool = False,
                       any_pid: bool = False) -> list[Path]:
    """Removes the temporary siblings (`.NAME.tmp-PID`, `.NAME.old-PID`) that runs killed before their rename
    left in `directory`: those of `name` only, or all; those whose process is gone, or (`any_pid`, for a
    directory this process holds a lock on) all but this process's own. Returns what it removed."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    entries = directory.rglob(".*") if recursive else directory.glob(".*")
    for p in sorted(entries):
        m = _TEMP.match(p.name)
        if not m or (name is not None and m.group("name") != name):
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid() or (not any_pid and _alive(pid)):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def write_atomic(path: Path, data: bytes) -> None:
    """Writes `data` to `path` so that a crash at any instant leaves the old file or the new one: a temporary
    sibling is written and fsynced, then renamed over it. A full disk is one line and keeps the old file."""
    path = Path(path)
    tmp = temp_path(path)

    def write():
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    try:
        guard_io(path, write)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_path(path.parent)


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


class RecordLog:
    """The offsets and checksums of records written back to back: what a records file's index holds."""

    def __init__(self):
        self.offsets, self.checksums = [0], []

    def write(self, f, rec) -> None:
        f.write(rec)
        self.offsets.append(self.offsets[-1] + len(rec))
        self.checksums.append(xxhash.xxh3_64_hexdigest(rec))


class RecordFile:
    """Records back to back (sample files, graph HAG files), indexed by a JSON beside them (`offsets`, `checksums`,
    `file_bytes`); memory-mapped, each record's checksum checked as it is read."""

    what = "record"  # how errors name one

    def __init__(self, path, fmt: str, version: int):
        self.path = Path(path)
        self.meta = read_index(self.path.with_suffix(".json"), fmt, version)
        size = self.path.stat().st_size if self.path.exists() else -1
        if size != self.meta["file_bytes"]:
            raise DiskgnnError(f"{self.path}: {size} bytes, the index says {self.meta['file_bytes']}")
        self.offsets = np.asarray(self.meta["offsets"], dtype=np.int64)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def paths(self) -> list[Path]:
        """The records and their index."""
        return [self.path, self.path.with_suffix(".json")]

    def record(self, i: int) -> memoryview:
        buf = memoryview(self._map[self.offsets[i]: self.offsets[i + 1]])
        if xxhash.xxh3_64_hexdigest(buf) != self.meta["checksums"][i]:
            raise DiskgnnError(f"{self.path}: {self.what} {i} fails its checksum (file is corrupted)")
        return buf


def write_index_tmp(path: Path, meta: dict) -> Path:
    """Adds the checksum and writes the index under its temporary name (fsynced); the caller renames it last."""
    meta["manifest_checksum"] = manifest_checksum(meta)
    tmp = temp_path(path)

    def write():
        with open(tmp, "w") as f:
            f.write(json.dumps(meta))
            f.flush()
            os.fsync(f.fileno())

    guard_io(tmp, write)
    return tmp


def read_chunks(path: Path, chunk_bytes: int = defaults.READ_CHUNK_BYTES):
    """Yields a whole file front to back as views of one reused buffer (memory stays at `chunk_bytes`)."""
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    offset = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            try:
                n = f.readinto(buf)
            except OSError as e:  # a failing device: say where, as the native reader does
                raise DiskgnnError(f"{path}: read of {chunk_bytes} bytes at offset {offset} failed: {e.strerror}") \
                    from None
            if not n:
                return
            yield view[:n]
            offset += n


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
        self.rows += a.shape[0]  # rows of no columns (a featureless dataset's features) count too
        if a.size == 0:  # nothing to write, and memoryview refuses to cast an empty 2-D array
            return
        data = memoryview(a).cast("B")
        guard_io(self.path, lambda: self._f.write(data))
        self._hash.update(data)
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


def _exchange(a: Path, b: Path) -> bool:
    """Swaps two paths in one step (renameat2 RENAME_EXCHANGE); False where the kernel or file system cannot."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def replace_directory(tmp: Path, out: Path) -> None:
    """Puts the finished directory `tmp` at `out`, replacing what is there with renames only.

    A reader sees the old directory or the new one, never a mix: the two are
    exchanged in one step where the file system can, else the old one is
    renamed aside first (a kill in between is undone by `recover_directory`).
    The old one is deleted after the swap.
    """
    if not out.exists():
        os.rename(tmp, out)
        return
    if _exchange(tmp, out):
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def recover_directory(out: Path) -> None:
    """Puts back the old `out` that a run killed between replace_directory's two renames left aside."""
    if out.exists():
        return
    for old in sorted(out.parent.glob(f".{out.name}.old-*")):
        m = _TEMP.match(old.name)
        if m and not _alive(int(m.group("pid"))):
            os.rename(old, out)
            return


class StagedDirectory:
    """An output directory built in a temporary sibling (.NAME.tmp-PID) and renamed into place by commit().

    Use as a context manager: leaving it by an exception, or without commit(),
    removes the temporary directory, so `out` is never half-written.
    """

    def __init__(self, out, overwrite: bool = False):
        self.out = Path(out).absolute()
        if not self.out.parent.is_dir():
            raise DiskgnnError(f"{self.out.parent}: the output's parent directory does not exist")
        recover_directory(self.out)
        if self.out.exists() and not overwrite:
            raise DiskgnnError(f"{self.out}: already exists (pass --overwrite to replace it)")
        self.stale_removed = remove_stale_temps(self.out.parent, self.out.name)  # what a killed run left
        self.tmp = temp_path(self.out)
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
