"""What the peer exporters and runners share: an atomic output directory, streamed
array writes within a memory budget, the dataset's edges in chunks, and the row a
capped run of a peer reports."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from diskgnn.errors import DiskgnnError
from diskgnn.units import format_size, parse_size

# Written beside each export: which dataset it came from and the run options chosen, for runners
# and for whoever wonders later where the directory came from.
EXPORT_INFO = "diskgnn-export.json"
# Small enough that the tests exercise chunk boundaries with a few KiB, large enough to stream.
MIN_BUDGET = 4096


def budget_bytes(memory_budget) -> int:
    """The working memory an export may use for its chunks."""
    budget = parse_size(memory_budget)
    if budget < MIN_BUDGET:
        raise DiskgnnError(f"--memory-budget {format_size(budget)} is too small: at least {MIN_BUDGET} bytes")
    return budget


def _io_error(path: Path, e: OSError) -> DiskgnnError:
    return DiskgnnError(f"{path}: cannot write ({e.strerror})")


def write_array(path: Path, chunks, dtype) -> int:
    """Writes arrays one after another as raw little-endian `dtype`; returns the bytes written.

    Nothing is padded: each peer reads its files by element count.
    """
    dtype = np.dtype(dtype).newbyteorder("<")
    nbytes = 0
    try:
        with open(path, "wb") as f:
            for chunk in chunks:
                a = np.ascontiguousarray(chunk, dtype=dtype)
                f.write(a.data)
                nbytes += a.nbytes
    except OSError as e:
        raise _io_error(path, e) from None
    return nbytes


def write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        raise _io_error(path, e) from None


def row_chunks(array: np.ndarray, budget: int, out_itemsize: int):
    """Slices of a (memory-mapped) array, a block of rows at a time, each converted block within `budget`."""
    n = array.shape[0]
    per_row = max(1, int(np.prod(array.shape[1:], dtype=np.int64))) * (array.dtype.itemsize + out_itemsize)
    step = max(1, budget // per_row)
    for r0 in range(0, n, step):
        yield np.asarray(array[r0:r0 + step])


def csc_edges(ds, max_edges: int):
    """The dataset's edges as (src, dst) int64 arrays in stored order (by destination, then source),
    at most `max_edges` at a time: edge ranges, so a node of huge in-degree does not break the budget."""
    indptr, indices = ds.indptr, ds.indices
    for e0 in range(0, ds.num_edges, max_edges):
        e1 = min(ds.num_edges, e0 + max_edges)
        # side="right": among nodes with equal indptr (no in-edges) the last one owns the edge
        v0 = int(np.searchsorted(indptr, e0, side="right")) - 1
        v1 = int(np.searchsorted(indptr, e1 - 1, side="right"))
        if v1 - v0 <= 2 * (e1 - e0):
            bounds = np.clip(np.asarray(indptr[v0:v1 + 1], dtype=np.int64), e0, e1)
            dst = np.repeat(np.arange(v0, v1, dtype=np.int64), np.diff(bounds))
        else:  # a long run of nodes without in-edges: per-node arrays would outgrow the chunk
            dst = np.searchsorted(indptr, np.arange(e0, e1, dtype=np.int64), side="right").astype(np.int64) - 1
        yield np.asarray(indices[e0:e1], dtype=np.int64), dst


def pwrite_all(fd: int, data: np.ndarray, offset: int, path: Path) -> None:
    """Writes all of a contiguous array at `offset` (pwrite may write less than asked)."""
    view = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n
    except OSError as e:
        raise _io_error(path, e) from None


def write_export_info(path: Path, ds, peer: str, options: dict) -> None:
    info = {"peer": peer, "source": str(ds.path), "source_manifest_checksum": ds.manifest["manifest_checksum"],
            "options": options}
    write_text(path, json.dumps(info, indent=2, sort_keys=True) + "\n")


def read_export_info(out) -> dict:
    path = Path(out) / EXPORT_INFO
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DiskgnnError(f"{path}: cannot read the export's description ({e}); export again") from None


def not_run(system: str, status: str, why: str) -> dict:
    """The row of a peer that did not run: `status` is "not installed" or "unavailable"."""
    return {"system": system, "status": status, "why": why}


def capped_row(system: str, argv: list[str], cap, epoch_pattern: str, epoch_unit_s: float, *,
               cwd=None, env=None, timeout=None, metrics=None, log: Path | None = None, stamped=None) -> dict:
    """Runs a peer under a cgroup memory cap and reports its epoch times, parsed from its output.

    `epoch_pattern` is a regex whose first group is one epoch's time in units of
    `epoch_unit_s` seconds. A run that exits 0 without such a line is still "ok"
    (the peer trained) but says why it has no times. `metrics(output)`, where
    given, adds what the peer reported it learned (accuracy, MRR) to the row.
    `stamped(lines)`, where given, adds what the peer's stdout lines say with when
    each came: a list of (seconds from the start, line).
    `log`: where its whole output is kept (the row holds its last lines only).
    """
    from bench.harness.memcap import CapUnavailable, run_capped

    try:
        r = run_capped(argv, cap, cwd=cwd, env=env, timeout=timeout, stamp_lines=stamped is not None)
    except CapUnavailable as e:
        return not_run(system, "unavailable", f"cannot apply the memory cap: {e}")
    output = (r.stdout or "") + (r.stderr or "")
    if log is not None:
        write_text(Path(log), output)
    times = [float(t) * epoch_unit_s for t in re.findall(epoch_pattern, output)]
    row = {"system": system, "status": "ok", "epoch_times_s": times, "argv": argv, "cap_bytes": r.cap_bytes,
           "cgroup_peak_bytes": r.peak_bytes, "oom_killed": r.oom_killed, "timed_out": r.timed_out,
           "wall_s": r.wall_s}
    if metrics is not None:
        row.update(metrics(output))
    if stamped is not None:
        row.update(stamped(list(zip(r.line_times, (r.stdout or "").splitlines()))))
    tail = " | ".join(output.strip().splitlines()[-3:])
    if r.returncode != 0 or r.timed_out:
        row["status"] = "failed"
        why = "OOM-killed" if r.oom_killed else "timed out" if r.timed_out else f"exit {r.returncode}"
        row["why"] = f"{why}: {tail}"
    elif not times:
        row["why"] = f"no epoch time in the output (expected /{epoch_pattern}/): {tail}"
    return row
