"""Batched packing: each batch's cold feature rows written contiguously, in one sequential pass.

For every batch of a sample file, the input nodes that no memory tier holds
(the cold rows) are written into the batch's own region of a pack file, in
ascending node id, so that training reads one contiguous range per batch
instead of one random 4 KiB block per row. Packing never reads a row at
random: it scans the feature file front to back in large chunks and, for each
chunk, appends to every region the rows of that chunk it needs (DiskGNN's
batched packing). Regions start on 4 KiB boundaries for O_DIRECT.

With `recent` = W > 0, a cold row that one of the W batches before it (in
training order) also read is not packed again: the store's recent-rows tier
copies it from that batch's assembled rows, which it keeps in memory (the
overlap dependent minibatches create: LABOR with batch dependency). Otherwise
a row used by several batches is packed once per batch: the disk blow-up is
packed rows / num_nodes. With `max_blowup`, consecutive batches are grouped
into segments (the smallest size that meets the cap) and a cold row used by
two or more batches of a segment is stored once, in the segment's shared
region, which training reads through the page cache with coalesced reads
(DiskGNN's disk cache).

Rows are the stored rows of a FeatureSource: features.bin's, or a quantized
variant's code rows (any number of bytes), so packs of codes are as many
times smaller as the codes are.

Files: `X.packs` (batch regions, then segment regions), `X.packs.json` (the
index: offsets, row counts, XXH3-64 of every region, which feature rows were
packed), `X.packs.pos` (int32: per batch, the batch positions of its own rows,
then of its shared rows and their slots in the segment region, then of its
recent rows, how many batches back each was read and its position there).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from .. import defaults
from ..data.features import FeatureSource, feature_source
from ..data.files import guard_io, padded, read_index, temp_path, write_index_tmp
from ..data.format import Dataset
from ..errors import DiskgnnError, UsageError
from .placement import Placement

PACKS_FORMAT = "diskgnn-packs"
PACKS_VERSION = 3  # 2: the index names the feature rows packed; 3: rows served by the recent-rows tier


@dataclass
class PackPlan:
    """Regions to write (sorted node ids each) and where each batch's rows come from.

    Held flat, in as few arrays as the packs have files: an epoch plans tens
    of millions of rows, and one small array per batch left the freed plan
    scattered through the heap, where it stayed resident beside training.
    """

    ids: np.ndarray  # every region's node ids, batch regions first, then segment regions
    starts: np.ndarray  # region r is ids[starts[r]:starts[r + 1]]; batch b's own region is region b
    index: np.ndarray  # the .pos file (int32; the module's docstring gives its layout)
    shared_rows: np.ndarray  # per batch: rows it takes from its segment region
    recent_rows: np.ndarray  # per batch: rows the recent-rows tier serves
    window: int  # batches back the recent-rows tier reaches; 0 = none
    segment_batches: int  # batches per segment; 0 = no segments

    @property
    def regions(self) -> list[np.ndarray]:
        return [self.ids[a:b] for a, b in zip(self.starts[:-1].tolist(), self.starts[1:].tolist())]

    @property
    def packed_rows(self) -> int:
        return int(self.starts[-1])

    @property
    def positions(self) -> BatchRows:
        return split_index(self.index, np.diff(self.starts)[: self.shared_rows.size], self.shared_rows,
                           self.recent_rows, self.window)


@dataclass
class BatchRows:
    """Per batch, views of a .pos index: where its rows come from besides the memory tiers."""

    own_pos: list[np.ndarray]  # positions of the rows in its own region
    shared_pos: list[np.ndarray]  # positions of the rows its segment region holds
    shared_slot: list[np.ndarray]  # their slots in that region
    recent_pos: list[np.ndarray]  # positions of the rows an earlier batch read
    recent_back: list[np.ndarray]  # how many batches back (1..window)
    recent_slot: list[np.ndarray]  # their positions in that batch
    window: int


def split_index(index: np.ndarray, own_rows, shared_rows, recent_rows, window: int) -> BatchRows:
    own_rows, shared_rows, recent_rows = (np.asarray(a, np.int64) for a in (own_rows, shared_rows, recent_rows))
    sizes = np.stack([own_rows, shared_rows, shared_rows, recent_rows, recent_rows, recent_rows], 1).ravel()
    if not sizes.size:
        return BatchRows([], [], [], [], [], [], window)
    parts = np.split(index, np.cumsum(sizes)[:-1])
    return BatchRows(*(parts[k::6] for k in range(6)), window)


def _bounds(sizes) -> np.ndarray:
    starts = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    return starts


def _cold_rows(sample_file, placement: Placement, threads: int, window: int = 0):
    """Every batch's rows that neither a memory tier nor (window > 0) the recent-rows tier serves: their
    node ids, each batch's sorted, flat with the batches' bounds; and the .pos index without shared rows
    (per batch: those rows' positions, then its recent rows' positions, batches back and slots there),
    with each batch's count of recent rows.

    Counted first, then written into arrays of that size, so nothing is
    concatenated or held per batch. Without a window, in `threads` threads:
    numpy's lookups and sorts release the GIL, and the plan was one core's
    work while the other idled (0.2-0.3 s per million nodes on W1). With one,
    in batch order, through a table of the batch and position where each
    node was last read.
    """
    split, own, recent = _count(sample_file, placement, threads, window)
    n = len(sample_file)
    starts, index_starts = _bounds(own), _bounds(own + 3 * recent)
    ids, index = np.empty(starts[-1], np.int64), np.empty(index_starts[-1], np.int32)

    def fill(b: int) -> None:
        nodes, p, r = split(b)
        p = p[np.argsort(nodes[p])]
        ids[starts[b]:starts[b + 1]] = nodes[p]
        at = index_starts[b]
        index[at:at + p.size] = p
        if r is not None:
            index[at + p.size:index_starts[b + 1]] = np.concatenate(r)

    if window:
        for b in range(n):
            fill(b)
    else:
        with ThreadPoolExecutor(max(1, threads)) as pool:
            list(pool.map(fill, range(n)))
    return ids, starts, index, recent


def pack_counts(sample_file, placement: Placement, threads: int, window: int = 0) -> tuple[int, int]:
    """Rows an epoch's packs will hold (before any blow-up cap) and rows the recent-rows tier will serve."""
    _, own, recent = _count(sample_file, placement, threads, window)
    return int(own.sum()), int(recent.sum())


def _count(sample_file, placement: Placement, threads: int, window: int):
    """Per batch, the rows its own pack region holds and the rows the recent-rows tier serves, and the
    function that splits a batch so (called in batch order where window > 0)."""
    placement.tier(np.empty(0, np.int64))  # builds the lookup table once, before the threads share it
    n = len(sample_file)
    if window:
        last = np.empty(0, np.int32)

        def split(b: int):
            nonlocal last
            if b == 0:
                last = np.full((2, placement.num_nodes), -(window + 1), np.int32)  # batch, position
            nodes = sample_file[b].nodes
            cold = np.flatnonzero(placement.tier(nodes) < 0)
            back = b - last[0, nodes[cold]]
            near = back <= window
            recent = (cold[near], back[near], last[1, nodes[cold[near]]])
            last[0, nodes], last[1, nodes] = b, np.arange(nodes.size, dtype=np.int32)
            return nodes, cold[~near], recent

        counts = [(a.size, r[0].size) for _, a, r in map(split, range(n))]
    else:
        def split(b: int):
            nodes = sample_file[b].nodes
            return nodes, np.flatnonzero(placement.tier(nodes) < 0), None

        with ThreadPoolExecutor(max(1, threads)) as pool:
            counts = [(a.size, 0) for _, a, _ in pool.map(split, range(n))]
    own = np.array([c for c, _ in counts], np.int64).reshape(-1)
    recent = np.array([r for _, r in counts], np.int64).reshape(-1)
    return split, own, recent


def _union(sorted_ids: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ids of sorted, duplicate-free arrays and in how many arrays each occurs.

    A stable sort (timsort) merges the already sorted runs in near-linear time;
    np.unique's hash path was 40x slower on W1's segments.
    """
    merged = np.sort(np.concatenate(sorted_ids), kind="stable")
    if merged.size == 0:
        return merged, np.empty(0, np.int64)
    starts = np.flatnonzero(np.concatenate([[True], merged[1:] != merged[:-1]]))
    return merged[starts], np.diff(np.append(starts, merged.size))


def _segment_rows(cold_ids, size: int) -> int:
    """Rows stored when segments of `size` batches keep each of their cold rows once."""
    return sum(_union(cold_ids[s: s + size])[0].size for s in range(0, len(cold_ids), size))


def plan(sample_file, placement: Placement, num_nodes: int, max_blowup: float | None = None,
         threads: int = 1, recent: int = 0) -> PackPlan:
    ids, starts, index, recent_rows = _cold_rows(sample_file, placement, threads, recent)
    nb = len(starts) - 1
    none = np.zeros(nb, np.int64)
    if max_blowup is None or ids.size <= max_blowup * num_nodes or not nb:
        return PackPlan(ids, starts, index, none, recent_rows, recent, 0)
    cold_ids = [ids[a:b] for a, b in zip(starts[:-1].tolist(), starts[1:].tolist())]
    rows = split_index(index, np.diff(starts), none, recent_rows, recent)
    size = 2
    while _segment_rows(cold_ids, size) > max_blowup * num_nodes:
        if size >= nb:
            least = _segment_rows(cold_ids, nb) / num_nodes
            raise UsageError(f"--max-blowup {max_blowup:g} cannot be met: even one segment of all "
                               f"{nb} batches stores {least:.2f} x num_nodes rows (raise the cap "
                               f"or the cache budgets)")
        size = min(2 * size, nb)
    own_ids, parts, segments = [], [], []
    for s in range(0, nb, size):
        members = range(s, min(s + size, nb))
        union, counts = _union([cold_ids[b] for b in members])
        shared = union[counts > 1]
        segments.append(shared)
        for b in members:
            slot = np.searchsorted(shared, cold_ids[b])
            in_shared = (slot < shared.size) & (shared[np.minimum(slot, shared.size - 1)] == cold_ids[b]) \
                if shared.size else np.zeros(cold_ids[b].size, bool)
            own_ids.append(cold_ids[b][~in_shared])
            pos = rows.own_pos[b]
            parts += [pos[~in_shared], pos[in_shared], slot[in_shared].astype(np.int32),
                      rows.recent_pos[b], rows.recent_back[b], rows.recent_slot[b]]
    regions = own_ids + segments
    return PackPlan(np.concatenate(regions), _bounds([r.size for r in regions]), np.concatenate(parts),
                    np.array([parts[i].size for i in range(1, len(parts), 6)], np.int64), recent_rows, recent, size)


def _default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, defaults.PACK_MAX_THREADS))


def pack_epoch(dataset: Dataset | None, sample_file, placement: Placement, out_path, *,
               max_blowup: float | None = None, chunk_bytes: int = defaults.PACK_CHUNK_BYTES,
               pack_memory: int = defaults.PACK_MEMORY, threads: int | None = None,
               features: FeatureSource | None = None, recent: int = 0) -> "PackFile":
    """Writes the packs of one sample file; returns them opened.

    `features`: the rows to pack (default: `dataset`'s features.bin as stored; a heterogeneous graph passes a
    node type's rows, without a dataset, and a view of its sample file whose batches' `nodes` are that type's).
    `recent`: leave out the cold rows one of the `recent` batches before read (served by
    the store's recent-rows tier; the batches must train in file order). The native
    packer (native/packer.h) reads them once, front to back, gathering with
    `threads` threads (default: the cores, at most defaults.PACK_MAX_THREADS).
    Memory: `pack_memory` bytes for its chunk and staging buffers (the run's
    plan gives the packer this share of its budget), plus the pack plan
    (defaults.PACK_PLAN_BYTES_PER_ROW per packed row).
    """
    from .. import _native

    out_path = Path(out_path)
    source = features or feature_source(dataset)
    row = source.row_bytes
    threads = _default_threads() if threads is None else threads
    if threads < 1:
        raise DiskgnnError(f"threads must be at least 1, got {threads}")
    start = time.perf_counter()
    p = plan(sample_file, placement, source.num_rows, max_blowup, threads, recent)
    plan_s = time.perf_counter() - start
    sizes = np.diff(p.starts)
    offsets = _bounds([padded(int(n) * row) for n in sizes])
    packed_rows, nb = p.packed_rows, p.shared_rows.size
    tmp = temp_path(out_path)
    start = time.perf_counter()
    try:
        if row == 0:  # a featureless dataset's rows: nothing to read or write, every region empty
            guard_io(out_path, lambda: tmp.write_bytes(b""))
            stats = {"checksums": [xxhash.xxh3_64_intdigest(b"")] * (offsets.size - 1), "buffer_wait_s": 0.0,
                     "read_wait_s": 0.0, "bytes_written": 0}
        else:
            stats = guard_io(out_path, lambda: _native.pack_regions(
                str(source.path), source.num_rows, row, p.ids, p.starts, offsets, str(tmp), chunk_bytes=chunk_bytes,
                pack_memory=pack_memory, max_write_bytes=defaults.PACK_MAX_WRITE_BYTES, threads=threads,
                write_depth=defaults.PACK_WRITE_DEPTH, direct="auto"))
    except _native.PackMemoryError as e:
        tmp.unlink(missing_ok=True)
        raise DiskgnnError(f"{out_path}: {e}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    p.ids = None  # the largest part of the plan, no longer needed
    stats.update(plan_s=plan_s, write_s=time.perf_counter() - start)
    checksums = [f"{c:016x}" for c in stats.pop("checksums")]
    index = p.index.astype("<i4", copy=False)
    pos_path = out_path.with_name(out_path.name + ".pos")
    pos_tmp = temp_path(pos_path)
    guard_io(pos_path, lambda: index.tofile(pos_tmp))
    meta = {
        "format": PACKS_FORMAT, "format_version": PACKS_VERSION,
        "samples": sample_file.meta["manifest_checksum"], "features": source.name,
        "features_checksum": source.checksum, "row_bytes": row, "num_batches": nb,
        "offsets": offsets.tolist(), "rows": sizes.tolist(),
        "shared_rows": p.shared_rows.tolist(), "segment_batches": p.segment_batches,
        "recent_batches": p.window, "recent_rows": p.recent_rows.tolist(),
        "checksums": checksums, "index_checksum": xxhash.xxh3_64_hexdigest(index),
        "packed_rows": packed_rows, "blowup": packed_rows / max(1, source.num_rows), "max_blowup": max_blowup,
        "tiers": {name: int(ids.size) for name, ids in zip(placement.tier_names, placement.tier_ids)},
    }
    del p, index
    meta_tmp = write_index_tmp(out_path.with_name(out_path.name + ".json"), meta)
    os.replace(tmp, out_path)
    os.replace(pos_tmp, pos_path)
    os.replace(meta_tmp, out_path.with_name(out_path.name + ".json"))
    packs = PackFile(out_path)
    packs.packing = stats
    return packs


class PackFile:
    """An epoch's packs: per batch, the regions to read and where their rows go."""

    def __init__(self, path):
        self.path = Path(path)
        self.packing: dict | None = None  # the packer's statistics, where pack_epoch just wrote these packs
        self.meta = read_index(self.path.with_name(self.path.name + ".json"), PACKS_FORMAT, PACKS_VERSION)
        self.offsets = np.asarray(self.meta["offsets"], dtype=np.int64)
        size = self.path.stat().st_size if self.path.exists() else -1
        if size != self.offsets[-1]:
            raise DiskgnnError(f"{self.path}: {size} bytes, the index says {int(self.offsets[-1])}")
        pos_path = self.path.with_name(self.path.name + ".pos")
        # Mapped, not read: tens of millions of positions an epoch, paged in batch by batch as training
        # reaches them, and reclaimable page cache rather than the run's own memory.
        try:
            index = np.memmap(pos_path, dtype="<i4", mode="r") if pos_path.stat().st_size else np.zeros(0, "<i4")
        except (FileNotFoundError, ValueError):
            index = None
        if index is None or xxhash.xxh3_64_hexdigest(index) != self.meta["index_checksum"]:
            raise DiskgnnError(f"{pos_path}: missing or fails its checksum")
        self.rows = np.asarray(self.meta["rows"], dtype=np.int64)
        nb = self.meta["num_batches"]
        self.batch_rows = split_index(index, self.rows[:nb], self.meta["shared_rows"], self.meta["recent_rows"],
                                      self.meta["recent_batches"])
        self.own_pos, self.shared_pos, self.shared_slot = (self.batch_rows.own_pos, self.batch_rows.shared_pos,
                                                           self.batch_rows.shared_slot)

    @property
    def row_bytes(self) -> int:
        return self.meta["row_bytes"]

    @property
    def paths(self) -> list[Path]:
        """The pack file and its index and positions, as pack_epoch writes them."""
        return [self.path, self.path.with_name(self.path.name + ".json"), self.path.with_name(self.path.name + ".pos")]

    def __len__(self) -> int:
        return self.meta["num_batches"]

    def region(self, r: int) -> tuple[int, int]:
        """Byte offset and length of region r's rows (batch b is region b)."""
        return int(self.offsets[r]), int(self.rows[r]) * self.row_bytes

    def segment_region(self, b: int) -> int:
        """The region holding batch b's shared rows."""
        return len(self) + b // self.meta["segment_batches"]

    def check_features(self, source: FeatureSource) -> None:
        """Refuses to serve rows of another feature variant (or of a re-encoded one) than was packed."""
        if self.meta["features"] != source.name:
            raise DiskgnnError(f"{self.path}: packed from features {self.meta['features']}, not {source.name}; "
                               f"pack again for {source.name}")
        if self.meta["features_checksum"] != source.checksum:
            raise DiskgnnError(f"{self.path}: packed from an earlier {source.path} (its checksum changed since); "
                               "pack again")

    def check(self, r: int, data) -> None:
        if xxhash.xxh3_64_hexdigest(data) != self.meta["checksums"][r]:
            raise DiskgnnError(f"{self.path}: region {r}'s packed rows fail their checksum (file is corrupted)")
