"""bench.harness.memcap: a real cgroup cap holds the child, the OOM killer fires past it, and no group is left behind."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from bench.harness.memcap import CapUnavailable, run_capped

from conftest import run_module

MiB = 1 << 20


def capped(argv, cap, **kw):
    try:
        return run_capped(argv, cap, **kw)
    except CapUnavailable as e:
        pytest.skip(f"no memory cgroup here: {e}")


def touch(mib: int) -> list[str]:
    """A child python writing every page of `mib` MiB (a bytes repeat, not calloc, which leaves pages untouched)."""
    return [sys.executable, "-c", f"x = b'x' * ({mib} << 20); print(len(x))"]


def swap_on() -> bool:
    return len(Path("/proc/swaps").read_text().splitlines()) > 1


def leftovers(parent: Path) -> list[Path]:
    return list(parent.glob(f"diskgnn-memcap-{os.getpid()}-*"))


def test_child_under_cap_succeeds_and_reports_its_peak():
    r = capped(touch(64), "512MiB")
    assert r.returncode == 0 and r.stdout.strip() == str(64 * MiB), r.stderr
    assert not r.oom_killed and not r.timed_out
    assert r.cap_bytes == 512 * MiB and r.cgroup_version in (1, 2)
    if r.peak_bytes is not None:  # None only on cgroup v2 before Linux 5.19
        assert 64 * MiB <= r.peak_bytes <= r.cap_bytes
    assert not Path(r.cgroup_path).exists()


def test_child_over_cap_is_oom_killed():
    r = capped(touch(400), 128 * MiB)
    if r.peak_bytes is not None:
        assert r.peak_bytes <= 128 * MiB
    if swap_on():  # the child may swap its way through instead of dying
        return
    assert r.oom_killed and r.returncode != 0
    assert not Path(r.cgroup_path).exists()


def test_group_removed_after_timeout_leftovers_and_errors():
    r = capped([sys.executable, "-c", "import time; time.sleep(30)"], "256MiB", timeout=0.5)
    assert r.timed_out and r.returncode < 0 and r.wall_s < 5
    parent = Path(r.cgroup_path).parent
    assert leftovers(parent) == []

    # A background grandchild outlives the child; removing the group kills it.
    r = capped(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], "256MiB")
    pid = int(r.stdout)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z":
                break
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.01)
    else:
        pytest.fail(f"grandchild {pid} still running after its group was removed")

    with pytest.raises(FileNotFoundError):
        run_capped(["/nonexistent/command"], "256MiB")
    assert leftovers(parent) == []


def test_cli_prints_json_and_exits_with_childs_code():
    proc = run_module("bench.harness.memcap", "--cap", "256MiB", "--", sys.executable, "-c",
                      "print('hello'); raise SystemExit(3)")
    if proc.returncode == 1 and "bench.harness.memcap: error:" in proc.stderr:  # CapUnavailable
        pytest.skip(proc.stderr.strip())
    lines = proc.stdout.splitlines()
    assert proc.returncode == 3 and lines[0] == "hello", proc.stderr
    result = json.loads(lines[-1])
    assert result["returncode"] == 3 and result["cap_bytes"] == 256 * MiB and "peak_bytes" in result


def test_stamped_lines_come_with_when_they_were_printed_and_leftovers_do_not_hold_the_pipes():
    """A child that prints no clock is timed by when its lines came; one that leaves a process behind holding its
    stdout (as a peer's sampler workers would) still ends the run, as does a timeout."""
    child = ("import subprocess, sys, time; print('a', flush=True); time.sleep(0.4); print('b', flush=True); "
             "print('err', file=sys.stderr); subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])")
    r = capped([sys.executable, "-c", child], "256MiB", stamp_lines=True)
    assert r.returncode == 0 and r.stdout.splitlines() == ["a", "b"] and r.stderr.strip() == "err", r
    assert len(r.line_times) == 2 and r.line_times[1] - r.line_times[0] >= 0.35 and r.wall_s < 30
    assert "line_times" not in r.summary() and not Path(r.cgroup_path).exists()
    slow = capped([sys.executable, "-c", "import time; print('x', flush=True); time.sleep(30)"], "256MiB",
                  timeout=1.0, stamp_lines=True)
    assert slow.timed_out and slow.stdout == "x\n" and len(slow.line_times) == 1 and slow.wall_s < 10
