"""Runs a command under a cgroup memory cap, so out-of-core benchmarks are held to the memory they claim.

"Trains under a 2 GiB cap" means something only if the kernel enforced the
2 GiB: `ulimit -v` caps address space, not resident memory, and ignores the
page cache. A memory cgroup charges the child's anonymous memory and the page
cache it creates (reclaimed under pressure, which is the point), kills it when
it cannot stay under the cap, and counts its peak usage and OOM kills.

    python -m bench.harness.memcap --cap 2GiB --drop-caches -- python -m bench.offline ...

The child's output passes through; the last line printed is the result as
JSON, and the exit status is the child's (128 + signal when it was killed).
Uses cgroup v2 where the memory controller is on the unified hierarchy, else
cgroup v1; where neither can be used (not root, not mounted) run_capped raises
CapUnavailable saying why. Swap is not capped (these VMs run without it).
"""

from __future__ import annotations

import argparse
import errno
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from diskgnn.errors import DiskgnnError
from diskgnn.units import parse_size

from .common import drop_caches

_names = itertools.count()


class CapUnavailable(DiskgnnError):
    """No memory cgroup can be made here; the message says why, for callers to skip or report."""


@dataclass
class CapResult:
    returncode: int
    stdout: str | None
    stderr: str | None
    wall_s: float
    peak_bytes: int | None  # cgroup peak usage, page cache included; None on cgroup v2 kernels before 5.19
    oom_killed: bool
    cap_hits: int  # times usage reached the cap (v1 memory.failcnt, v2 memory.events max): reclaim it forced
    timed_out: bool
    cap_bytes: int
    cgroup_version: int
    cgroup_path: str
    line_times: list[float] | None = None  # with stamp_lines: when each stdout line came, seconds from the start

    def summary(self) -> dict:
        """The result without the child's output, for one JSON line."""
        return {k: v for k, v in asdict(self).items() if k not in ("stdout", "stderr", "line_times")}


def _cgroup_mounts():
    """(fstype, mount root, mount point, super options) of each cgroup mount, from /proc/self/mountinfo."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fields, fstype = left.split(), right.split()[0]
            if fstype in ("cgroup", "cgroup2"):
                yield fstype, fields[3], Path(fields[4]), right.split()[2].split(",")


def _own_dir(mount_root: str, mount_point: Path, version: int) -> Path:
    """Directory of this process's own cgroup in a hierarchy (the mount point if it lies outside the mount)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
            if (hierarchy == "0") if version == 2 else ("memory" in controllers.split(",")):
                rel = os.path.relpath(path, mount_root)
                if not rel.startswith(".."):
                    return mount_point / rel
    return mount_point


def _read_int(path: Path) -> int:
    return int(path.read_text().split()[0])


def _keyed(path: Path) -> dict[str, int]:
    """A flat keyed file such as memory.events or memory.oom_control."""
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


class _Cgroup:
    """A fresh child cgroup with the cap set; counters read after the run; emptied and removed."""

    def __init__(self, parent: Path, version: int, cap_bytes: int):
        self.version = version
        # pid + counter: concurrent runs, from this process or others, never share a group.
        self.path = parent / f"diskgnn-memcap-{os.getpid()}-{next(_names)}"
        try:
            self.path.mkdir()
        except OSError as e:
            raise CapUnavailable(f"cannot create cgroup {self.path} ({e.strerror})") from e
        try:
            if version == 2:
                (self.path / "memory.max").write_text(str(cap_bytes))
            else:
                (self.path / "memory.limit_in_bytes").write_text(str(cap_bytes))
                # A v1 group inherits oom_kill_disable: with it set, a child over the cap would hang, not die.
                (self.path / "memory.oom_control").write_text("0")
        except OSError as e:
            self.remove()
            raise CapUnavailable(f"cannot set the memory cap on {self.path} ({e.strerror})") from e

    def counters(self) -> tuple[int | None, bool, int]:
        """Peak usage, whether the OOM killer fired, and how often usage reached the cap."""
        if self.version == 2:
            events = _keyed(self.path / "memory.events")
            peak = self.path / "memory.peak"
            return (_read_int(peak) if peak.exists() else None), events.get("oom_kill", 0) > 0, events["max"]
        return (_read_int(self.path / "memory.max_usage_in_bytes"),
                _keyed(self.path / "memory.oom_control").get("oom_kill", 0) > 0,
                _read_int(self.path / "memory.failcnt"))

    def kill(self) -> None:
        """SIGKILLs every process in the group, including ones the child left behind."""
        if (self.path / "cgroup.kill").exists():
            (self.path / "cgroup.kill").write_text("1")
            return
        for pid in (self.path / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kills what is left and removes the group; killed tasks take a moment to leave it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.kill()
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)


def _v2_parent(mount_root: str, mount_point: Path) -> Path:
    """Nearest cgroup, from our own up, whose children get the memory controller (enabling it if we may).

    Our own group holds processes, so v2 forbids enabling controllers for its
    children (EBUSY); its parent usually has memory enabled already.
    """
    tried = []
    d = _own_dir(mount_root, mount_point, 2)
    while True:
        control = d / "cgroup.subtree_control"
        if "memory" in control.read_text().split():
            return d
        try:
            control.write_text("+memory")
            return d
        except OSError as e:
            tried.append(f"{d} ({e.strerror})")
        if d == mount_point or mount_point not in d.parents:
            raise CapUnavailable("cgroup v2: cannot enable the memory controller for children of "
                                 + ", ".join(tried))
        d = d.parent


def _make_cgroup(cap_bytes: int) -> _Cgroup:
    """A capped cgroup on v2 where memory is a v2 controller, else on v1's memory hierarchy."""
    v1 = None
    for fstype, root, point, options in _cgroup_mounts():
        if fstype == "cgroup2" and "memory" in (point / "cgroup.controllers").read_text().split():
            return _Cgroup(_v2_parent(root, point), 2, cap_bytes)
        if fstype == "cgroup" and "memory" in options and v1 is None:
            v1 = root, point
    if v1 is None:
        raise CapUnavailable("no cgroup memory controller is mounted (neither a v1 memory hierarchy "
                             "nor cgroup2 with memory in cgroup.controllers)")
    return _Cgroup(_own_dir(*v1, 1), 1, cap_bytes)


def _stamped(proc, t0: float) -> tuple[list, list, list]:
    """Readers of the child's stdout, line by line with the time each came, and of its stderr, started: a peer
    that prints no clock (Ginex) is timed by when it says what it did."""
    lines, times, err = [], [], []

    def out():
        for line in proc.stdout:
            times.append(time.perf_counter() - t0)
            lines.append(line)

    readers = [threading.Thread(target=t, daemon=True) for t in (out, lambda: err.append(proc.stderr.read()))]
    for r in readers:
        r.start()
    return lines, times, err, readers


def run_capped(argv: list[str], cap_bytes, *, env=None, cwd=None, timeout: float | None = None,
               capture: bool = True, stamp_lines: bool = False) -> CapResult:
    """Runs `argv` in a fresh memory cgroup capped at `cap_bytes` (int or size text such as "2GiB").

    The child joins the group before it execs, so every allocation counts. On
    timeout the whole group is killed and the result says timed_out. The group
    is removed afterwards whatever happens, killing anything left in it. With
    capture=False the child's output passes through and stdout/stderr are None;
    with stamp_lines, `line_times` holds when each line of its stdout came.
    """
    cap_bytes = parse_size(cap_bytes)
    group = _make_cgroup(cap_bytes)
    procs = str(group.path / "cgroup.procs")

    def join():
        # Runs in the forked child: "0" is the writer itself, and nothing here
        # allocates much, which matters when the parent has threads.
        fd = os.open(procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    pipe = subprocess.PIPE if capture else None
    timed_out = False
    try:
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=pipe, stderr=pipe, text=True,
                                    errors="replace", preexec_fn=join)
        except subprocess.SubprocessError as e:  # only join() fails this way; a bad argv raises OSError
            raise CapUnavailable(f"the child could not join cgroup {group.path}: {e}") from e
        stamped = _stamped(proc, t0) if stamp_lines and capture else None
        with proc:
            try:
                if stamped is None:
                    out, err = proc.communicate(timeout=timeout)
                else:
                    proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                group.kill()
                out, err = proc.communicate() if stamped is None else (None, None)
            except BaseException:
                group.kill()  # else leaving `with proc` would wait for the child to finish
                raise
            if stamped is not None:  # the pipes read to their end before `with proc` closes them
                group.kill()  # what the child left running (sampler workers) holds them open
                for reader in stamped[3]:
                    reader.join()
                out, err = "".join(stamped[0]), "".join(stamped[2])
        wall_s = time.perf_counter() - t0
        peak, oom_killed, cap_hits = group.counters()
    finally:
        group.remove()
    return CapResult(returncode=proc.returncode, stdout=out, stderr=err, wall_s=wall_s,
                     peak_bytes=peak, oom_killed=oom_killed, cap_hits=cap_hits, timed_out=timed_out,
                     cap_bytes=cap_bytes, cgroup_version=group.version, cgroup_path=str(group.path),
                     line_times=stamped[1] if stamped is not None else None)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m bench.harness.memcap",
                                 usage="%(prog)s --cap SIZE [options] -- COMMAND ...",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap", required=True, help="memory cap, e.g. 2GiB (page cache included)")
    ap.add_argument("--timeout", type=float, help="seconds before the whole group is killed")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache first, so the child starts cold")
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        ap.error("give the command after --")
    split = argv.index("--")
    args, command = ap.parse_args(argv[:split]), argv[split + 1:]
    cold_note = drop_caches() if args.drop_caches else None
    result = run_capped(command, args.cap, timeout=args.timeout, capture=False)
    print(json.dumps({"command": command, **result.summary(),
                      "cold_cache": args.drop_caches and cold_note is None, "cold_cache_note": cold_note}),
          flush=True)
    return result.returncode if result.returncode >= 0 else 128 - result.returncode


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DiskgnnError as e:
        sys.exit(f"python -m bench.harness.memcap: error: {e}")
