"""A FUSE file system that mirrors a directory and fails chosen reads with EIO: a dying disk, on demand.

    python -m bench.harness.faultfs ROOT MOUNTPOINT --fail NAME:OFFSET [--fail ...]

Every file of ROOT appears under MOUNTPOINT and reads, writes, renames and
syncs pass through, except that a read of a file called NAME (its base name)
that reaches byte OFFSET or beyond fails with EIO, as a bad sector would.
`mounted()` runs it in a child process for the length of a `with` block. It
needs libfuse 2 (Debian: libfuse2) and the fusepy binding; `available()`
says whether they are here and /dev/fuse can be opened.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import subprocess
import sys
import time
from pathlib import Path


def available() -> tuple[bool, str]:
    """Whether a fault file system can be mounted here, and why not."""
    if not os.path.exists("/dev/fuse"):
        return False, "/dev/fuse is absent (no FUSE in this kernel or container)"
    if os.geteuid() != 0:
        return False, "mounting FUSE file systems needs root here"
    try:
        import fuse  # noqa: F401 - fusepy loads libfuse.so.2 when imported
    except (ImportError, OSError, EnvironmentError) as e:
        return False, f"fusepy or libfuse2 is missing ({e}): apt-get install libfuse2; pip install fusepy"
    return True, ""


def _operations(root: Path, failures: dict[str, int]):
    from fuse import FuseOSError, Operations

    class FaultyMirror(Operations):
        def __init__(self):
            self.root = root

        def _path(self, path: str) -> str:
            return str(self.root / path.lstrip("/"))

        def getattr(self, path, fh=None):
            try:
                st = os.lstat(self._path(path))
            except OSError as e:
                raise FuseOSError(e.errno) from None
            return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink",
                                                "st_size", "st_uid", "st_blocks")}

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(self._path(path))]

        def statfs(self, path):
            st = os.statvfs(self._path(path))
            return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                                "f_files", "f_flag", "f_frsize", "f_namemax")}

        def _call(self, fn, *args):
            try:
                return fn(*args)
            except OSError as e:
                raise FuseOSError(e.errno) from None

        # the kernel hands over page-sized pieces: the mirror opens without O_DIRECT, whatever the caller asked
        def open(self, path, flags):
            return self._call(os.open, self._path(path), flags & ~os.O_DIRECT)

        def create(self, path, mode, fi=None):
            return self._call(os.open, self._path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        def read(self, path, size, offset, fh):
            limit = failures.get(os.path.basename(path))
            if limit is not None and offset + size > limit:
                raise FuseOSError(errno.EIO)
            return self._call(os.pread, fh, size, offset)

        def write(self, path, data, offset, fh):
            return self._call(os.pwrite, fh, data, offset)

        def truncate(self, path, length, fh=None):
            self._call(os.truncate, self._path(path), length)

        def flush(self, path, fh):
            return 0

        def fsync(self, path, datasync, fh):
            self._call(os.fsync, fh)

        def release(self, path, fh):
            self._call(os.close, fh)

        def unlink(self, path):
            self._call(os.unlink, self._path(path))

        def rename(self, old, new):
            self._call(os.rename, self._path(old), self._path(new))

        def mkdir(self, path, mode):
            self._call(os.mkdir, self._path(path), mode)

        def rmdir(self, path):
            self._call(os.rmdir, self._path(path))

        def chmod(self, path, mode):
            self._call(os.chmod, self._path(path), mode)

        def utimens(self, path, times=None):
            self._call(os.utime, self._path(path), times)

    return FaultyMirror()


@contextlib.contextmanager
def mounted(root: Path, mountpoint: Path, failures: dict[str, int], timeout_s: float = 20.0):
    """`root` mirrored at `mountpoint` by a child process, reads of `failures` (name: offset) failing with EIO."""
    mountpoint = Path(mountpoint)
    mountpoint.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "bench.harness.faultfs", str(root), str(mountpoint)]
    for name, offset in failures.items():
        args += ["--fail", f"{name}:{offset}"]
    proc = subprocess.Popen(args, cwd=Path(__file__).resolve().parents[2], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bench.harness.faultfs did not mount {mountpoint}: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.02)
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.harness.faultfs", description=__doc__.split("\n\n")[0])
    ap.add_argument("root")
    ap.add_argument("mountpoint")
    ap.add_argument("--fail", action="append", default=[], metavar="NAME:OFFSET",
                    help="reads of files called NAME reaching byte OFFSET fail with EIO")
    args = ap.parse_args(argv)
    from fuse import FUSE

    failures = {}
    for item in args.fail:
        name, _, offset = item.rpartition(":")
        failures[name] = int(offset)
    FUSE(_operations(Path(args.root).resolve(), failures), args.mountpoint, foreground=True, nothreads=True,
         allow_other=False)


if __name__ == "__main__":
    main()
