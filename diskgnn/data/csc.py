"""Edge list -> CSC topology with bounded memory (an external bucket sort).

Edges arrive in chunks of (src, dst) pairs, in any order. Each chunk is
partitioned by destination range and appended to one spill file per range
(bucket). Afterwards each bucket, small enough to sort in memory, is sorted
by (dst, src), deduplicated and appended to indices.bin, while its slice of
indptr.bin is written. A bucket that turns out larger than planned (skewed
degrees) is split again by narrower ranges, so memory stays bounded whatever
the degree distribution. The held-out edges of an edge split are sorted by
the same PairSorter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DiskgnnError
from .files import guard_io
from .format import DatasetBuilder, index_dtype

# Peak bytes per pair while a bucket is sorted: the int64 key, the deduplicated
# copy, the decoded dst/src and the spill arrays read back.
SORT_BYTES_PER_EDGE = 40


class PairSorter:
    """Pairs (a, b) of node ids, spilled into one file per range of a (a bucket) and read back a range at a
    time, sorted by (a, b) and deduplicated, within `memory_bytes`.

    A bucket that turns out larger than planned (skewed degrees) is split again by narrower ranges.
    """

    def __init__(self, num_nodes: int, directory: Path, memory_bytes: int, expected_pairs: int, name: str):
        self.num_nodes, self.dir, self.name = num_nodes, directory, name
        self.spill_dtype = index_dtype(num_nodes)
        self.max_bucket_pairs = max(1024, memory_bytes // SORT_BYTES_PER_EDGE)
        nbuckets = max(1, min(num_nodes, -(-expected_pairs // self.max_bucket_pairs), 4096))
        self.nodes_per_bucket = -(-num_nodes // nbuckets)
        self._files = {}

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        bucket = a // self.nodes_per_bucket
        order = np.argsort(bucket, kind="stable")
        bucket = bucket[order]
        pairs = np.empty((a.size, 2), dtype=self.spill_dtype)
        pairs[:, 0] = a[order]
        pairs[:, 1] = b[order]
        starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        ends = np.r_[starts[1:], bucket.size]

        def spill() -> None:
            for s, e in zip(starts, ends):
                self._file(int(bucket[s])).write(pairs[s:e].tobytes())

        guard_io(self.dir, spill)

    def _file(self, b: int):
        f = self._files.get(b)
        if f is None:
            f = self._files[b] = open(self.dir / f"bucket-{b:05d}.bin", "wb")
        return f

    def ranges(self, extra=None):
        """Yields (lo, hi, keys) for consecutive ranges [lo, hi) of a covering every node: keys =
        (a - lo) * num_nodes + b, sorted and unique, `extra(lo, hi)`'s keys merged in. Each bucket file is
        deleted once read."""
        for f in self._files.values():
            f.close()
        for bucket in range(-(-self.num_nodes // self.nodes_per_bucket)):
            lo = bucket * self.nodes_per_bucket
            yield from self._range(self.dir / f"bucket-{bucket:05d}.bin", lo,
                                   min(self.num_nodes, lo + self.nodes_per_bucket), extra)

    def _range(self, path: Path, lo: int, hi: int, extra):
        npairs = path.stat().st_size // (2 * self.spill_dtype.itemsize) if path.exists() else 0
        if npairs > self.max_bucket_pairs and hi - lo > 1:
            yield from self._split_range(path, lo, hi, extra)
            return
        if npairs > self.max_bucket_pairs:
            raise DiskgnnError(f"{self.name}: node {lo} has {npairs} edges, more than the memory budget can sort "
                               f"({self.max_bucket_pairs}); raise --memory-budget")
        pairs = np.fromfile(path, dtype=self.spill_dtype).reshape(-1, 2) if npairs else \
            np.empty((0, 2), dtype=self.spill_dtype)
        path.unlink(missing_ok=True)
        key = (pairs[:, 0].astype(np.int64) - lo) * self.num_nodes
        key += pairs[:, 1]
        del pairs
        if extra is not None:
            key = np.concatenate([key, extra(lo, hi)])
        key.sort()
        if key.size:
            key = key[np.r_[True, key[1:] != key[:-1]]]
        yield lo, hi, key

    def _split_range(self, path: Path, lo: int, hi: int, extra):
        """Re-partitions an oversized bucket into 16 narrower ranges, streaming."""
        step = -(-(hi - lo) // 16)
        subpaths = [path.with_name(f"{path.stem}.{i}.bin") for i in range(16)]

        def split() -> None:
            files = [open(p, "wb") for p in subpaths]
            chunk_pairs = max(1, self.max_bucket_pairs // 4)
            with open(path, "rb") as f:
                while True:
                    pairs = np.fromfile(f, dtype=self.spill_dtype, count=2 * chunk_pairs).reshape(-1, 2)
                    if pairs.size == 0:
                        break
                    sub = (pairs[:, 0].astype(np.int64) - lo) // step
                    for i in np.unique(sub):
                        files[i].write(pairs[sub == i].tobytes())
            for f in files:
                f.close()
            path.unlink()

        guard_io(path.parent, split)
        for i, sp in enumerate(subpaths):
            slo = lo + i * step
            shi = min(hi, slo + step)
            if slo < shi:
                yield from self._range(sp, slo, shi, extra)
            sp.unlink(missing_ok=True)


class CscBuilder:
    """Collects directed edges src -> dst (dst aggregates src) and writes CSC.

    Parameters
    ----------
    num_nodes : node count; every id must be in [0, num_nodes).
    builder : the dataset under construction (files go to its temporary dir).
    memory_bytes : bytes this builder may hold at once.
    undirected : also add dst -> src for every edge.
    self_loops : add v -> v for every node.
    drop_self_loops : remove the input's v -> v edges (ignored with self_loops).
    Duplicate edges are always merged: the result is a simple graph.
    num_dst, kinds : a relation of a heterogeneous graph: destinations in [0, num_dst), sources in
        [0, num_nodes), written as the files `kinds` (indptr, indices).
    """

    def __init__(self, num_nodes: int, builder: DatasetBuilder, memory_bytes: int, *,
                 undirected: bool = False, self_loops: bool = False,
                 drop_self_loops: bool = False, edge_count_hint: int = 0,
                 source_name: str = "edges", num_dst: int | None = None, kinds=("indptr", "indices")):
        if num_nodes <= 0:
            raise DiskgnnError(f"{source_name}: the graph has no nodes")
        self.num_src, self.num_dst, self.kinds = num_nodes, num_nodes if num_dst is None else num_dst, kinds
        self.num_nodes = max(self.num_src, self.num_dst)  # the sort's key space: (dst, src) pairs
        self.builder = builder
        self.undirected = undirected
        self.self_loops = self_loops
        self.drop_self_loops = drop_self_loops and not self_loops
        self.source_name = source_name
        # keyed by destination: a range's sorted keys are its columns, in order
        self.pairs = PairSorter(self.num_nodes, builder.scratch_dir(f"csc-{kinds[0].replace('/', '-')}"),
                                memory_bytes,
                                edge_count_hint * (2 if undirected else 1), source_name)
        self.input_edges = 0

    def add(self, src, dst) -> None:
        """Adds a chunk of edges src[i] -> dst[i]; ids are validated here."""
        src, dst = checked_ids(src, dst, self.num_src, self.source_name, self.num_dst)
        if src.size == 0:
            return
        self.input_edges += src.size
        if self.drop_self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        self.pairs.add(dst, src)
        if self.undirected:
            self.pairs.add(src, dst)

    def finish(self) -> int:
        """Writes indptr and indices into the dataset; returns the edge count."""
        n = self.num_nodes
        indptr_w = self.builder.writer(self.kinds[0], np.int64)
        indices_w = self.builder.writer(self.kinds[1], index_dtype(self.num_src))
        indptr_w.write(np.zeros(1, dtype=np.int64))

        def loops(lo: int, hi: int) -> np.ndarray:
            ids = np.arange(lo, hi, dtype=np.int64)
            return (ids - lo) * n + ids

        offset = 0
        for lo, hi, key in self.pairs.ranges(loops if self.self_loops else None):
            indices_w.write(key % n)
            counts = np.bincount(key // n, minlength=hi - lo)[:max(0, min(hi, self.num_dst) - lo)]
            indptr_w.write(offset + np.cumsum(counts, dtype=np.int64))
            offset += int(key.size)
        self.builder.add(self.kinds[0], indptr_w.close())
        self.builder.add(self.kinds[1], indices_w.close())
        return offset


def checked_ids(src, dst, num_nodes: int, name: str, num_dst: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A chunk of edges as two integer arrays of one shape, every id in [0, num_nodes) (destinations in
    [0, num_dst) where given); else one line naming `name` and what is wrong."""
    src = np.asarray(src)
    dst = np.asarray(dst)
    if src.shape != dst.shape or src.ndim != 1:
        raise DiskgnnError(f"{name}: source and destination id arrays differ in shape")
    if src.size == 0:
        return src, dst
    for what, ids, count in (("source", src, num_nodes), ("destination", dst, num_nodes if num_dst is None
                                                                             else num_dst)):
        if not np.issubdtype(ids.dtype, np.integer):
            raise DiskgnnError(f"{name}: {what} ids have dtype {ids.dtype}, expected integers")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= count:
            bad = lo if lo < 0 else hi
            raise DiskgnnError(f"{name}: {what} id {bad} out of range [0, {count})")
    return src, dst
