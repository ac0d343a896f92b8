"""What kind of workload a prepared graph is, measured from its files with bounded memory.

In-degree percentiles and maximum (the stored graph's: synthetic graphs are
stored undirected, so their out-degrees are the same), edge homophily (the
share of edges whose two ends carry the same label) and the accuracy of a
linear probe on the features alone (probe.py): a graph on which the probe
nearly matches a GNN does not exercise neighbour sampling at all. `prepare`
records them under the manifest's `synthetic` key (docs/format.md); `verify`
recomputes the graph's and compares. Every pass streams its files in chunks
of `chunk_bytes`; the counts are integers, so the results do not depend on
the chunk size.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .format import MANIFEST, Dataset
from .probe import linear_probe

PERCENTILES = (50, 90, 99, 99.9)
# Degrees below this are counted in a histogram; higher ones (at most num_edges / HIST_DEGREES nodes) one by one.
HIST_DEGREES = 1 << 16
# Peak bytes per edge of the homophily pass: its source ids, edge positions, destination slots, two labels.
HOMOPHILY_BYTES_PER_EDGE = 40


def _read(ds: Dataset, kind: str, start: int, count: int) -> np.ndarray:
    dtype = np.dtype(ds.manifest["files"][kind]["dtype"]).newbyteorder("<")
    return np.fromfile(ds.file_path(kind), dtype=dtype, count=count, offset=start * dtype.itemsize)


def in_degrees(ds: Dataset, chunk_bytes: int) -> dict:
    """Percentiles (the smallest degree that at least p % of the nodes have at most, p % of the nodes counted
    exactly), max and mean of the in-degrees, reading indptr in chunks."""
    n = ds.num_nodes
    rows = max(1, chunk_bytes // 32)  # indptr, its differences and their selections
    hist = np.zeros(HIST_DEGREES, dtype=np.int64)
    high = []
    for start in range(0, n, rows):
        deg = np.diff(_read(ds, "indptr", start, min(rows, n - start) + 1))
        hist += np.bincount(deg[deg < HIST_DEGREES], minlength=HIST_DEGREES)
        high.append(deg[deg >= HIST_DEGREES])
    high = np.sort(np.concatenate(high))
    cumulative = np.cumsum(hist)

    def at_rank(k: int) -> int:  # the k-th smallest degree, from 1
        return int(np.searchsorted(cumulative, k)) if k <= cumulative[-1] else int(high[k - cumulative[-1] - 1])

    out = {f"p{p:g}": at_rank(max(1, math.ceil(Fraction(str(p)) * n / 100))) for p in PERCENTILES}
    out["max"] = at_rank(n)
    out["mean"] = ds.num_edges / n
    return out


def edge_homophily(ds: Dataset, chunk_bytes: int) -> float | None:
    """The share of edges whose ends have the same label, over edges whose ends both have one (None if none).

    Source labels are looked up in a slice of labels.bin held in memory; where the whole file does not fit
    in a quarter of `chunk_bytes`, the edges are read once per slice."""
    n = ds.num_nodes
    span = max(1, chunk_bytes // 4 // 4)
    node_rows = max(1, chunk_bytes // 4 // 12)
    edge_rows = max(1, chunk_bytes // 2 // HOMOPHILY_BYTES_PER_EDGE)
    same = labelled = 0
    for lo in range(0, n, span):
        src_labels = _read(ds, "labels", lo, min(span, n - lo))
        for start in range(0, n, node_rows):
            count = min(node_rows, n - start)
            ptr = _read(ds, "indptr", start, count + 1)
            dst_labels = _read(ds, "labels", start, count)
            for first in range(int(ptr[0]), int(ptr[-1]), edge_rows):
                last = min(int(ptr[-1]), first + edge_rows)
                src = _read(ds, "indices", first, last - first).astype(np.int64)
                dst = dst_labels[np.searchsorted(ptr, np.arange(first, last), side="right") - 1]
                mine = (src >= lo) & (src < lo + src_labels.size)
                a, b = src_labels[src[mine] - lo], dst[mine]
                both = (a >= 0) & (b >= 0)
                labelled += int(both.sum())
                same += int((both & (a == b)).sum())
    return same / labelled if labelled else None


def measure(ds: Dataset, parameters: dict, chunk_bytes: int) -> dict:
    """The manifest's `synthetic` entry: the generator's `parameters` and what the graph measures."""
    return {
        **parameters,
        "in_degree": in_degrees(ds, chunk_bytes),
        "edge_homophily": edge_homophily(ds, chunk_bytes),
        "linear_probe": linear_probe(ds),
    }


def recheck(ds: Dataset, chunk_bytes: int) -> list[str]:
    """Problems where the manifest's recorded degrees or homophily differ from the graph's (the probe, a model
    fit, is not recomputed)."""
    recorded = ds.manifest["synthetic"]
    problems = []
    measured = {"in_degree": in_degrees(ds, chunk_bytes), "edge_homophily": edge_homophily(ds, chunk_bytes)}
    for key, value in measured.items():
        if recorded.get(key) != value:
            problems.append(f"{ds.path / MANIFEST}: synthetic.{key} is {recorded.get(key)}, the graph has {value}")
    return problems


def describe(stats: dict) -> str:
    """One line of the statistics, for prepare and verify."""
    deg = stats["in_degree"]
    homophily = stats["edge_homophily"]
    probe = stats["linear_probe"]
    parts = [f"{stats['structure']} structure, {stats['communities']} communities",
             "in-degree " + ", ".join(f"{k} {deg[k]}" for k in (*(f"p{p:g}" for p in PERCENTILES), "max"))
             + f", mean {deg['mean']:.2f} (max/median {deg['max'] / max(1, deg['p50']):.0f}x)",
             "edge homophily " + (f"{homophily:.3f}" if homophily is not None else "n/a")]
    if probe is not None:
        parts.append(f"linear probe on features alone {100 * probe['accuracy']:.1f} % "
                     f"({probe['train_rows']} train rows, {probe['eval_rows']} val/test rows)")
    return "; ".join(parts)
