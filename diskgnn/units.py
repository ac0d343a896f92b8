"""Sizes and intervals as users write them: 512MiB, 8GiB, 2GB, 4096; 90s, 10min, 500 (batches)."""

import re
import time

from .errors import DiskgnnError, UsageError

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1000**4, "tib": 1024**4,
}


def parse_size(text, option: str | None = None, at_least: int = 0) -> int:
    """Parses a byte size; bare K/M/G/T are binary (like `dd`), KB/MB/GB decimal. With `option`
    (e.g. "--memory-budget"), a bad value, or one below `at_least`, is a UsageError naming it."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        what = "use a number with an optional unit such as 512MiB, 8GiB or 2GB"
        if option:
            raise UsageError(f"{option} {text}: cannot read as a size ({what})")
        raise DiskgnnError(f"cannot read size {text!r}: {what}")
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if size < at_least:
        raise UsageError(f"{option} {format_size(size)} is too small: at least {format_size(at_least)}")
    return size


def format_size(n: float) -> str:
    """Formats a byte count with binary units, e.g. 1.5 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


_SECONDS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}


def parse_seconds(text: str) -> float | None:
    """A positive time such as 90s, 10min or 1h in seconds; None for anything else."""
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*(s|sec|min|m|h)", str(text).strip().lower())
    return float(m.group(1)) * _SECONDS[m.group(2)] if m and float(m.group(1)) > 0 else None


def parse_interval(text: str, flag: str = "--checkpoint-every") -> tuple[str, float] | None:
    """--checkpoint-every, --val-every: ("batches", N), ("seconds", S), or None (off)."""
    t = str(text).strip().lower()
    if t in ("0", "off", "none"):
        return None
    if t.isdigit():
        return "batches", int(t)
    if parse_seconds(t) is None:
        raise UsageError(f"{flag} {text}: expected a time such as 90s, 10min or 1h, a number of batches, or off")
    return "seconds", parse_seconds(t)


class Every:
    """When something done inside an epoch is due again: every N batches (counted by the epoch's position) or S
    seconds since it was last done (`done()`); never for None."""

    def __init__(self, interval: tuple[str, float] | None):
        self.interval, self.last = interval, time.monotonic()

    def due(self, next_batch: int) -> bool:
        if self.interval is None:
            return False
        kind, n = self.interval
        return next_batch % n == 0 if kind == "batches" else time.monotonic() - self.last >= n

    def done(self) -> None:
        self.last = time.monotonic()
