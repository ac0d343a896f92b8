"""Edge list -> CSC topology with bounded memory (an external bucket sort).

Edges arrive in chunks of (src, dst) pairs, in any order. Each chunk is
partitioned by destination range and appended to one spill file per range
(bucket). Afterwards each bucket, small enough to sort in memory, is sorted
by (dst, src), deduplicated and appended to indices.bin, while its slice of
indptr.bin is written. A bucket that turns out larger than planned (skewed
degrees) is split again by narrower ranges, so memory stays bounded whatever
the degree distribution.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DiskgnnError
from .files import guard_io
from .format import DatasetBuilder, index_dtype

# Peak bytes per edge while a bucket is sorted: the int64 key, the deduplicated
# copy, the decoded dst/src and the spill arrays read back.
SORT_BYTES_PER_EDGE = 40


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
    """

    def __init__(self, num_nodes: int, builder: DatasetBuilder, memory_bytes: int, *,
                 undirected: bool = False, self_loops: bool = False,
                 drop_self_loops: bool = False, edge_count_hint: int = 0,
                 source_name: str = "edges"):
        if num_nodes <= 0:
            raise DiskgnnError(f"{source_name}: the graph has no nodes")
        self.num_nodes = num_nodes
        self.builder = builder
        self.undirected = undirected
        self.self_loops = self_loops
        self.drop_self_loops = drop_self_loops and not self_loops
        self.source_name = source_name
        self.spill_dtype = index_dtype(num_nodes)
        self.max_bucket_edges = max(1024, memory_bytes // SORT_BYTES_PER_EDGE)
        expected = edge_count_hint * (2 if undirected else 1)
        nbuckets = max(1, min(num_nodes, -(-expected // self.max_bucket_edges), 4096))
        self.nodes_per_bucket = -(-num_nodes // nbuckets)
        self.dir = builder.scratch_dir("csc")
        self._files = {}
        self.input_edges = 0

    def add(self, src, dst) -> None:
        """Adds a chunk of edges src[i] -> dst[i]; ids are validated here."""
        src = np.asarray(src)
        dst = np.asarray(dst)
        if src.shape != dst.shape or src.ndim != 1:
            raise DiskgnnError(f"{self.source_name}: source and destination id arrays differ in shape")
        if src.size == 0:
            return
        for name, ids in (("source", src), ("destination", dst)):
            if not np.issubdtype(ids.dtype, np.integer):
                raise DiskgnnError(f"{self.source_name}: {name} ids have dtype {ids.dtype}, expected integers")
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.num_nodes:
                bad = lo if lo < 0 else hi
                raise DiskgnnError(f"{self.source_name}: {name} id {bad} out of range [0, {self.num_nodes})")
        self.input_edges += src.size
        if self.drop_self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        self._spill(src, dst)
        if self.undirected:
            self._spill(dst, src)

    def _spill(self, src, dst) -> None:
        bucket = dst // self.nodes_per_bucket
        order = np.argsort(bucket, kind="stable")
        bucket = bucket[order]
        pairs = np.empty((src.size, 2), dtype=self.spill_dtype)
        pairs[:, 0] = dst[order]
        pairs[:, 1] = src[order]
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

    def finish(self) -> int:
        """Writes indptr and indices into the dataset; returns the edge count."""
        for f in self._files.values():
            f.close()
        indptr_w = self.builder.writer("indptr", np.int64)
        indices_w = self.builder.writer("indices", index_dtype(self.num_nodes))
        indptr_w.write(np.zeros(1, dtype=np.int64))
        offset = 0
        for b in range(-(-self.num_nodes // self.nodes_per_bucket)):
            lo = b * self.nodes_per_bucket
            hi = min(self.num_nodes, lo + self.nodes_per_bucket)
            path = self.dir / f"bucket-{b:05d}.bin"
            offset = self._emit_range(path, lo, hi, offset, indptr_w, indices_w)
            path.unlink(missing_ok=True)
        self.builder.add("indptr", indptr_w.close())
        self.builder.add("indices", indices_w.close())
        return offset

    def _emit_range(self, path: Path, lo: int, hi: int, offset: int, indptr_w, indices_w) -> int:
        """Sorts the edges of dst range [lo, hi) from `path` and appends them."""
        nedges = path.stat().st_size // (2 * self.spill_dtype.itemsize) if path.exists() else 0
        if nedges > self.max_bucket_edges and hi - lo > 1:
            return guard_io(path.parent, lambda: self._split_range(path, lo, hi, offset, indptr_w, indices_w))
        if nedges > self.max_bucket_edges:
            raise DiskgnnError(f"{self.source_name}: node {lo} has {nedges} in-edges, more than the memory "
                               f"budget can sort ({self.max_bucket_edges}); raise --memory-budget")
        pairs = np.fromfile(path, dtype=self.spill_dtype).reshape(-1, 2) if nedges else \
            np.empty((0, 2), dtype=self.spill_dtype)
        key = (pairs[:, 0].astype(np.int64) - lo) * self.num_nodes
        key += pairs[:, 1]
        del pairs
        if self.self_loops:
            loops = np.arange(lo, hi, dtype=np.int64)
            key = np.concatenate([key, (loops - lo) * self.num_nodes + loops])
        key.sort()
        if key.size:
            key = key[np.r_[True, key[1:] != key[:-1]]]
        dst_local = key // self.num_nodes
        counts = np.bincount(dst_local, minlength=hi - lo)
        del dst_local
        indices_w.write(key % self.num_nodes)
        indptr_w.write(offset + np.cumsum(counts, dtype=np.int64))
        return offset + int(key.size)

    def _split_range(self, path: Path, lo: int, hi: int, offset: int, indptr_w, indices_w) -> int:
        """Re-partitions an oversized bucket into 16 narrower ranges, streaming."""
        step = -(-(hi - lo) // 16)
        subpaths = [path.with_name(f"{path.stem}.{i}.bin") for i in range(16)]
        files = [open(p, "wb") for p in subpaths]
        chunk_pairs = max(1, self.max_bucket_edges // 4)
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
        for i, sp in enumerate(subpaths):
            slo = lo + i * step
            shi = min(hi, slo + step)
            if slo < shi:
                offset = self._emit_range(sp, slo, shi, offset, indptr_w, indices_w)
            sp.unlink(missing_ok=True)
        return offset
