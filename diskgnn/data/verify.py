"""`python -m diskgnn.verify DIR`: recompute every checksum and check the invariants.

Invariants: indptr starts at 0, never decreases and ends at num_edges; indices
in [0, num_nodes); labels in [-1, num_classes); split ids in range, unique and
disjoint; features finite unless the dataset was prepared with
--allow-nonfinite; quantized variants' params load and every code row is
valid; a synthetic graph's recorded in-degrees and edge homophily are the
graph's (graph_stats); held-out edges of an edge split are sorted, unique, in
their split and absent from the graph (edge_split). Every check streams its
file in chunks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import defaults
from ..errors import ArgumentParser, DiskgnnError
from .format import SPLITS, Dataset, checksum_problems, read_manifest
from .edge_split import check_edge_split, describe_edge_split
from .graph_stats import describe, recheck
from .hetero.format import is_hetero, read_hetero_manifest
from .quantize.variants import check_quantized


def _blocks(path: Path, dtype, count: int, row: int = 1):
    """The first `count` rows of a raw file in blocks of about defaults.VERIFY_CHUNK_BYTES."""
    dtype = np.dtype(dtype).newbyteorder("<")
    rows = max(1, defaults.VERIFY_CHUNK_BYTES // (dtype.itemsize * max(1, row)))
    with open(path, "rb") as f:
        for start in range(0, count, rows):
            n = min(rows, count - start)
            yield start, np.fromfile(f, dtype=dtype, count=n * row).reshape((n, row) if row != 1 else (n,))


def verify(path) -> list[str]:
    """Returns the problems found (empty when the dataset is sound)."""
    path = Path(path).absolute()
    m = read_manifest(path)
    problems = checksum_problems(path, m)
    n, e_count = m["num_nodes"], m["num_edges"]
    f = {k: (path / v["name"], v["dtype"], v["shape"]) for k, v in m["files"].items()}

    def bad(kind, what):
        problems.append(f"{f[kind][0]}: {what}")

    p, dt, shape = f["indptr"]
    prev = None
    if shape != [n + 1]:
        bad("indptr", f"shape {shape}, expected [{n + 1}]")
    for start, block in _blocks(p, dt, shape[0]):
        if start == 0 and block[0] != 0:
            bad("indptr", f"starts at {block[0]}, not 0")
        if (np.diff(block) < 0).any() or (prev is not None and block[0] < prev):
            bad("indptr", f"decreases near node {start}")
            break
        prev = block[-1]
    if prev is not None and prev != e_count:
        bad("indptr", f"ends at {prev}, but num_edges is {e_count}")

    p, dt, shape = f["indices"]
    for start, block in _blocks(p, dt, shape[0]):
        if block.size and (block.min() < 0 or block.max() >= n):
            bad("indices", f"node id out of range [0, {n}) near edge {start}")
            break

    p, dt, shape = f["labels"]
    for start, block in _blocks(p, dt, shape[0]):
        if block.size and (block.min() < -1 or block.max() >= m["num_classes"]):
            bad("labels", f"label out of range [-1, {m['num_classes']}) near node {start}")
            break

    all_ids = []
    for s in SPLITS:
        p, dt, shape = f[f"{s}_idx"]
        ids = np.fromfile(p, dtype=np.dtype(dt).newbyteorder("<"), count=shape[0])
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad(f"{s}_idx", f"node id out of range [0, {n})")
        elif np.unique(ids).size != ids.size:
            bad(f"{s}_idx", "lists a node more than once")
        all_ids.append(ids)
    if np.unique(np.concatenate(all_ids)).size != sum(a.size for a in all_ids):
        problems.append(f"{path}: train, val and test splits overlap")

    p, dt, shape = f["features"]
    if np.issubdtype(np.dtype(dt), np.floating) and not m["producer"]["options"].get("allow_nonfinite"):
        for start, block in _blocks(p, dt, shape[0], shape[1]):
            if not np.isfinite(block).all():
                bad("features", f"NaN or inf in row {start + int(np.flatnonzero(~np.isfinite(block).all(1))[0])}")
                break
    if "edge_split" in m and not problems:
        problems += check_edge_split(Dataset(path, m), max(1, defaults.VERIFY_CHUNK_BYTES // 16))
    if "synthetic" in m and not problems:  # statistics of a graph already found broken would say nothing more
        problems += recheck(Dataset(path, m), defaults.VERIFY_CHUNK_BYTES)
    # A corrupted params file is named by the checksum loop above already.
    return problems + [p for p in check_quantized(path, m) if p not in problems]


def main(argv=None) -> None:
    ap = ArgumentParser(prog="python -m diskgnn.verify", description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", help="dataset directory written by diskgnn.prepare")
    args = ap.parse_args(argv)
    from .hetero.verify import verify_hetero

    typed = is_hetero(read_manifest(args.dataset, None))
    problems = (verify_hetero if typed else verify)(args.dataset)
    if problems:
        raise DiskgnnError("; ".join(problems))
    if typed:
        m = read_hetero_manifest(args.dataset)
        print(f"verify: OK: {Path(args.dataset)} (heterogeneous: {len(m['hetero']['node_types'])} node types, "
              f"{len(m['hetero']['relations'])} relations, {len(m['files'])} files, checksums and invariants hold)")
        return
    m = read_manifest(args.dataset)
    print(f"verify: OK: {Path(args.dataset)} ({m['num_nodes']} nodes, {m['num_edges']} edges, "
          f"{len(m['files'])} files, checksums and invariants hold)")
    if "synthetic" in m:
        print(f"verify: {describe(m['synthetic'])}")
    if "edge_split" in m:
        print(f"verify: {describe_edge_split(m['edge_split'])}")

