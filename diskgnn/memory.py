"""This process's memory as the kernel counts it, for budgets and reports."""

from __future__ import annotations


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (VmHWM).

    Unlike getrusage's ru_maxrss, VmHWM belongs to the process's own address
    space, so a child started by vfork+exec from a large parent (pytest with
    torch loaded, say) does not inherit the parent's peak.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM missing from /proc/self/status")
