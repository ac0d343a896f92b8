"""Held-out edges for link prediction: `prepare --edge-split TRAIN,VAL,TEST`.

Each input edge goes to train, val or test by a keyed hash of its pair (of the
unordered pair where the graph is made undirected), so the split streams with
the edges, is fixed by its seed, and every copy of a pair (its reverse, its
duplicates) lands in the same split: no held-out edge leaks into the graph
that message passing sees, which holds the train edges only. Self-loops stay
in train (a node's link to itself is nothing to predict). The held-out pairs
are stored sorted and deduplicated as val_edges.bin and test_edges.bin, rows
(src, dst), through the topology's external sort (csc.PairSorter).
"""

from __future__ import annotations

import numpy as np

from ..errors import DiskgnnError, UsageError
from ..hashing import mix64, unit_interval
from .csc import PairSorter, checked_ids
from .format import DatasetBuilder

HELD_OUT = ("val", "test")
GOLDEN = 0x9E3779B97F4A7C15  # the seed's key: (seed + 1) * GOLDEN, modulo 2^64


def checked_shares(shares) -> tuple[float, float, float]:
    """--edge-split TRAIN,VAL,TEST (text, or three numbers): non-negative shares of the edges summing to 1, with
    train's and one held-out share above 0."""
    text = shares if isinstance(shares, str) else ",".join(f"{x:g}" for x in shares)
    try:
        shares = tuple(float(x) for x in text.split(","))
    except ValueError:
        shares = ()
    if len(shares) != 3:
        raise UsageError(f"--edge-split {text}: expected TRAIN,VAL,TEST shares of the edges, e.g. 0.85,0.05,0.1")
    if min(shares) < 0 or abs(sum(shares) - 1) > 1e-9 or shares[0] == 0 or shares[1] + shares[2] == 0:
        raise UsageError(f"--edge-split {text}: the shares must be non-negative and sum to 1, with some edges for "
                         "train and some held out")
    return shares


def pair_shares(u: np.ndarray, v: np.ndarray, num_nodes: int, seed: int) -> np.ndarray:
    """A number in [0, 1) per pair, uniform and fixed by (u, v, seed): the hash of the pair's key u * N + v."""
    with np.errstate(over="ignore"):
        key = u.astype(np.uint64) * np.uint64(num_nodes) + v.astype(np.uint64)
    return unit_interval(mix64(key, (seed + 1) * GOLDEN))


def canonical(src: np.ndarray, dst: np.ndarray, undirected: bool) -> tuple[np.ndarray, np.ndarray]:
    """The pair an edge belongs to: (min, max) where the graph is undirected, (src, dst) otherwise."""
    return (np.minimum(src, dst), np.maximum(src, dst)) if undirected else (src, dst)


def split_of(shares: np.ndarray, ratios) -> np.ndarray:
    """0 (train), 1 (val) or 2 (test) for each pair's share."""
    return np.searchsorted(np.cumsum(ratios[:2]), shares, side="right")


class EdgeSplitter:
    """Routes chunks of input edges: train edges back to the topology, held-out pairs kept for finish().

    Drawn (`ratios`): by the pairs' hash, into external sorters; streaming holds a chunk at a time, and
    finish() sorts after the topology's sort, one sorter after the other, so each may use all of
    `memory_bytes`. Given (`given`, a source's own val and test edges): those pairs, checked, and any copy of
    them among the input edges is kept out of the graph (counted in the manifest)."""

    def __init__(self, num_nodes: int, undirected: bool, builder: DatasetBuilder, memory_bytes: int,
                 edge_count_hint: int, source_name: str, *, ratios=None, seed: int = 0, given=None):
        self.num_nodes, self.undirected, self.builder, self.name = num_nodes, undirected, builder, source_name
        self.ratios, self.seed = (tuple(ratios), seed) if given is None else (None, None)
        self.removed = 0
        if given is None:
            self.sorters = {s: PairSorter(num_nodes, builder.scratch_dir(f"{s}-edges"), memory_bytes,
                                          int(edge_count_hint * share), source_name)
                            for s, share in zip(HELD_OUT, self.ratios[1:])}
        else:
            self.given = {s: self._keys(given[s], f"{source_name}: {s} edges") for s in HELD_OUT}
            both = np.intersect1d(self.given["val"], self.given["test"])
            if both.size:
                u, v = divmod(int(both[0]), num_nodes)
                raise DiskgnnError(f"{source_name}: edge ({u}, {v}) is both a val and a test edge")
            self.held = np.union1d(self.given["val"], self.given["test"])

    def _keys(self, edges: np.ndarray, what: str) -> np.ndarray:
        src, dst = checked_ids(edges[:, 0], edges[:, 1], self.num_nodes, what)
        loops = np.flatnonzero(src == dst)
        if loops.size:
            raise DiskgnnError(f"{what}: ({src[loops[0]]}, {dst[loops[0]]}) is a self-loop (nothing to predict)")
        u, v = canonical(src.astype(np.int64), dst.astype(np.int64), self.undirected)
        return np.unique(u * self.num_nodes + v)

    def route(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's train edges."""
        src, dst = checked_ids(src, dst, self.num_nodes, self.name)
        if src.size == 0:
            return src, dst
        u, v = canonical(src, dst, self.undirected)
        if self.ratios is None:
            key = u.astype(np.int64) * self.num_nodes + v
            at = np.minimum(np.searchsorted(self.held, key), max(0, self.held.size - 1))
            train = self.held[at] != key if self.held.size else np.ones(src.size, dtype=bool)
            self.removed += int((~train).sum())
            return src[train], dst[train]
        which = split_of(pair_shares(u, v, self.num_nodes, self.seed), self.ratios)
        which[src == dst] = 0
        for i, s in enumerate(HELD_OUT, start=1):
            mine = which == i
            if mine.any():
                self.sorters[s].add(u[mine], v[mine])
        train = which == 0
        return src[train], dst[train]

    def finish(self) -> dict:
        """Writes val_edges and test_edges into the dataset; returns the manifest's `edge_split` entry."""
        n = self.num_nodes
        counts = {}
        for s in HELD_OUT:
            writer = self.builder.writer(f"{s}_edges", np.int64, (2,))
            ranges = self.sorters[s].ranges() if self.ratios is not None else [(0, n, self.given[s])]
            for lo, _, key in ranges:
                writer.write(np.stack([lo + key // n, key % n], axis=1))
            self.builder.add(f"{s}_edges", writer.close())
            counts[s] = writer.rows
        how = {"ratios": list(self.ratios), "seed": self.seed} if self.ratios is not None else \
            {"given": True, "removed_from_graph": self.removed}
        return {**how, "undirected": self.undirected, **counts}


def describe_edge_split(meta: dict) -> str:
    """One line for prepare and verify."""
    pairs = "unordered pairs" if meta["undirected"] else "edges"
    how = f"the source's edge split ({meta['removed_from_graph']:,} copies of them removed from the input edges)" \
        if meta.get("given") else f"edge split {'/'.join(f'{r:g}' for r in meta['ratios'])} (seed {meta['seed']})"
    return f"{how}: {meta['val']:,} val and {meta['test']:,} test {pairs} held out of the graph"


def in_graph(indptr: np.ndarray, indices: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Whether each edge src -> dst is in the CSC topology (columns sorted, as prepare writes them): a
    binary search of src in dst's in-neighbours, all edges at once."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    lo = np.asarray(indptr[dst], dtype=np.int64)
    end = np.asarray(indptr[dst + 1], dtype=np.int64)
    hi = end.copy()
    while True:
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        below = np.zeros(src.size, dtype=bool)
        below[active] = indices[mid[active]] < src[active]
        lo = np.where(active & below, mid + 1, lo)
        hi = np.where(active & ~below, mid, hi)
    found = lo < end
    found[found] = indices[lo[found]] == src[found]
    return found


def check_edge_split(ds, chunk_rows: int) -> list[str]:
    """verify's checks of the held-out edges: ids in range, sorted and unique, each pair in the split its hash
    gives (so val and test are disjoint), no self-loop, and none in the message-passing graph (nor its reverse,
    where undirected)."""
    meta = ds.manifest["edge_split"]
    n, problems = ds.num_nodes, []
    if meta.get("given"):  # no hash says where a pair belongs: val and test must not share one
        keys = [ds.held_out_edges(s)[:, 0].astype(np.int64) * n + ds.held_out_edges(s)[:, 1] for s in HELD_OUT]
        if np.intersect1d(*keys).size:
            problems.append(f"{ds.path}: a pair is both a val and a test edge")
    for i, s in enumerate(HELD_OUT, start=1):
        edges, path = ds.array(f"{s}_edges"), ds.file_path(f"{s}_edges")
        if edges.shape[0] != meta[s]:
            problems.append(f"{path}: {edges.shape[0]} edges, the manifest's edge_split says {meta[s]}")
        last = -1
        for start in range(0, edges.shape[0], chunk_rows):
            u, v = (np.asarray(c, dtype=np.int64) for c in edges[start:start + chunk_rows].T)
            where = f"{path}: near edge {start}:"
            if u.min() < 0 or max(u.max(), v.max()) >= n or v.min() < 0:
                problems.append(f"{where} node id out of range [0, {n})")
                break
            key = u * n + v
            if key[0] <= last or (np.diff(key) <= 0).any():
                problems.append(f"{where} not sorted by (src, dst) or lists a pair twice")
                break
            last = int(key[-1])
            if (u == v).any() or (meta["undirected"] and (u > v).any()):
                problems.append(f"{where} a self-loop or a pair not stored as (min, max)")
                break
            if not meta.get("given") and (split_of(pair_shares(u, v, n, meta["seed"]), meta["ratios"]) != i).any():
                problems.append(f"{where} a pair that the seed's hash puts in another split")
                break
            leaked = in_graph(ds.indptr, ds.indices, u, v)
            if meta["undirected"]:
                leaked |= in_graph(ds.indptr, ds.indices, v, u)
            if leaked.any():
                j = int(np.flatnonzero(leaked)[0])
                problems.append(f"{where} held-out edge ({u[j]}, {v[j]}) is also in the graph (leakage)")
                break
    return problems

