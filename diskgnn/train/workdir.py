"""A run's workdir, held by one process at a time."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..data.files import guard_io, remove_stale_temps
from ..errors import DiskgnnError


def hold_workdir(workdir: Path):
    """Creates and locks the workdir for this process (two runs in one workdir would overwrite each other's
    files), then removes the temporary files a killed run left there. Returns the lock's file."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        lock = open(workdir / ".lock", "a+")
    except OSError as e:
        raise DiskgnnError(f"--workdir {workdir}: cannot create or write it ({e.strerror})") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        raise DiskgnnError(f"--workdir {workdir}: in use by another run (pid {lock.read().strip() or '?'}); wait "
                           "for it or use another --workdir") from None
    lock.seek(0)
    lock.truncate()
    guard_io(workdir / ".lock", lambda: (lock.write(f"{os.getpid()}\n"), lock.flush()))
    remove_stale_temps(workdir, recursive=True, any_pid=True)
    return lock
