"""Offline sampling: each epoch's mini-batches sampled before training, written to a sample file.

Node-wise uniform neighbour sampling without replacement (native, threaded):
hop h takes up to fanouts[h] in-neighbours of every node known so far, so
block h has the nodes of hop h as destinations and the nodes of hop h + 1 as
sources (destinations first). A typed graph's hop h takes, for every node of
type t known after hop h and every relation r into t, up to fanouts[h][r]
distinct sources along r (offline/batches.py says how its records read). The model runs the blocks from the last hop to
the first; the last hop's nodes are the batch's input nodes, whose features
are read. Every batch has its own random stream keyed by (seed, epoch, batch),
so a seed gives the same samples whatever the thread count.

Files (docs/format.md, "Sample files"): `epoch-NNNNN.samples` holds the batch
records back to back; `epoch-NNNNN.json` holds their offsets and checksums.
With a HagBuilder (--hag on|auto), each batch's blocks are searched for
their HAG as the batch is sampled, and the ones that pay are stored after
its record, under the same checksum: training only runs them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import defaults
from ..data.files import RecordLog, guard_io, read_chunks, temp_path, write_index_tmp
from ..data.format import Dataset
from ..errors import DiskgnnError
from .batches import SAMPLES_FORMAT, SAMPLES_VERSION, Batch, SampleFile, parse_record, parse_typed_record

SAMPLERS = ("neighbor", "labor")


@dataclass(frozen=True)
class Sampler:
    """How batches are sampled, beside their fanouts and seed: node-wise uniform (`neighbor`) or LABOR-0
    (`labor`), with layer dependency and batch dependency κ."""

    kind: str = "neighbor"
    layer_dependency: bool = False
    batch_dependency: int = 1

    def __post_init__(self):
        if self.kind not in SAMPLERS:
            raise DiskgnnError(f"sampler {self.kind!r}: expected one of {', '.join(SAMPLERS)}")
        if self.batch_dependency < 1:
            raise DiskgnnError(f"batch dependency {self.batch_dependency}: must be at least 1")
        if self.kind != "labor" and (self.layer_dependency or self.batch_dependency > 1):
            raise DiskgnnError("layer and batch dependency need the labor sampler")

    def order_epoch(self, epoch: int) -> int:
        """The epoch whose seed permutation `epoch` uses: its own, or under batch dependency one fixed for all,
        walked in windows of κ batches."""
        return epoch if self.batch_dependency == 1 else 0

    def key(self, epoch: int, b: int, num_batches: int) -> int:
        """Batch b's key: uniform sampling, its own random stream; LABOR, its step in the run's sequence of batches
        (consecutive steps share variates under batch dependency)."""
        return batch_key(epoch, b) if self.kind == "neighbor" else epoch * num_batches + b

    def native(self) -> dict:
        return {"labor": self.kind == "labor", "layer_dependency": self.layer_dependency,
                "batch_dependency": self.batch_dependency}


NEIGHBOR = Sampler()


def epoch_seeds(train_ids: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The epoch's seed batches: train ids shuffled by (seed, epoch), the last batch may be partial."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 11, epoch])))
    order = rng.permutation(np.asarray(train_ids, dtype=np.int64))
    return [order[s: s + batch_size] for s in range(0, order.size, batch_size)]


def shard_batches(num_batches: int, rank: int, world: int) -> np.ndarray:
    """The epoch's batches rank `rank` of `world` trains under data parallelism: every world-th from its rank on,
    so that step s of the group trains batches s*world .. s*world + world - 1. Every rank gets as many (the last
    num_batches mod world are dropped), so no rank waits at a step the others never reach."""
    stop = num_batches if world == 1 else num_batches - num_batches % world
    return np.arange(rank, stop, world)


def batch_order(num_batches: int, seed: int, epoch: int) -> np.ndarray:
    """Order in which a replayed sample file is visited in `epoch` (DiskGNN's replay mode)."""
    if epoch == 0:
        return np.arange(num_batches)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 13, epoch])))
    return rng.permutation(num_batches)


class Graph:
    """A dataset's relations mapped for the native samplers (MADV_RANDOM), with the type indices records use: one
    relation (a homogeneous dataset), sampled node-wise uniform or by LABOR, its blocks' HAGs and a link epoch's
    partitions beside; or several (a typed dataset), node-wise uniform or by LABOR per hop and relation
    (fanouts[h][r]), each node type's variates its own."""

    def __init__(self, dataset: Dataset):
        from .. import _native

        schema = self.schema = dataset.schema
        self.typed = dataset.typed
        self.views = []
        for i, r in enumerate(schema.relations):
            indptr, indices = dataset.relation_kinds(i)
            self.views.append(_native.CscView(
                str(dataset.file_path(indptr)), str(dataset.file_path(indices)), schema.type(r.dst).count,
                r.num_edges, np.dtype(dataset.manifest["files"][indices]["dtype"]).itemsize))
        self.relations = [(schema.type_index(r.src), schema.type_index(r.dst)) for r in schema.relations]
        self.target = schema.type_index(schema.target)

    def records(self, groups: list[np.ndarray], keys: list[int], fanouts, seed: int, threads: int,
                sampler: "Sampler" = None, seed_type: int | None = None, seed_types=(), **restrict) -> list[bytes]:
        """One record per group of seeds (of type `seed_type`, default the target's; or `seed_types`, one per
        seed), batch i under keys[i]; `restrict`: a partitioned link epoch's masks and excluded positives."""
        from .. import _native

        flat = np.concatenate(groups) if groups else np.empty(0, np.int64)
        bounds = np.concatenate([[0], np.cumsum([len(g) for g in groups])]).astype(np.int64).tolist()
        if not self.typed:
            return _native.sample_batches(self.views[0], flat, bounds, keys, list(fanouts), seed, threads,
                                          **(sampler or NEIGHBOR).native(), **restrict)
        return _native.sample_hetero_batches(self.views, [s for s, _ in self.relations],
                                             [d for _, d in self.relations], len(self.schema.types),
                                             self.target if seed_type is None else seed_type, flat, bounds, keys,
                                             [list(f) for f in fanouts], seed, threads,
                                             seed_types=np.int32(seed_types), **(sampler or NEIGHBOR).native())

    def parse(self, rec, index: int, seed_type: int | None = None, fanouts=None) -> Batch:
        """A record as a Batch; a typed one's relations that `fanouts` does not follow at a hop have no block."""
        if not self.typed:
            return parse_record(rec, index)
        return parse_typed_record(rec, index, self.relations, self.target if seed_type is None else seed_type,
                                  [t.name for t in self.schema.types], fanouts)

    def index_meta(self, seed_type: int | None = None) -> dict:
        """What a sample file's index says of its records' layout (batches.py)."""
        if not self.typed:
            return {}
        return {"relations": [list(r) for r in self.relations], "types": [t.name for t in self.schema.types],
                "seed_type": self.target if seed_type is None else seed_type}


def open_graph(dataset: Dataset) -> Graph:
    """The dataset's topology, every relation's CSC, mapped for the native sampler."""
    return Graph(dataset)


def _topology_kinds(dataset: Dataset) -> list[str]:
    """Every relation's CSC files (a plain graph's one: indptr, indices)."""
    return [kind for r in range(len(dataset.schema.relations)) for kind in dataset.relation_kinds(r)]


def topology_bytes(dataset: Dataset) -> int:
    return sum(dataset.file_path(kind).stat().st_size for kind in _topology_kinds(dataset))


def read_topology_ahead(dataset: Dataset, chunk_bytes: int = defaults.READ_CHUNK_BYTES) -> None:
    """Reads every relation's indptr and indices once, front to back, so sampling finds them in the page cache.

    The sampler's accesses are random; a cold topology fetched by its page
    faults made sampling 2.5x slower than this sequential pass plus warm
    sampling (W1 at 16M nodes: 22 s against 2.6 + 6.9 s), and at 16M the
    faults' share grew faster than the graph. Worth it only where the page
    cache can keep the topology, which the caller decides.
    """
    for kind in _topology_kinds(dataset):
        for _ in read_chunks(dataset.file_path(kind), chunk_bytes):
            pass


def batch_key(epoch: int, b: int) -> int:
    """The random stream key of batch b of an epoch: the same offline and online."""
    return (epoch << 32) + b


def sample_batch(graph: Graph, seeds: np.ndarray, *, key: int, fanouts, seed: int, threads: int, index: int = 0,
                 sampler: Sampler = NEIGHBOR, seed_type: int | None = None) -> Batch:
    """One batch sampled now (online), identical to the record sample_epoch writes under the same key."""
    rec = graph.records([np.asarray(seeds, np.int64)], [key], fanouts, seed, threads, sampler, seed_type)[0]
    return graph.parse(rec, index, seed_type, fanouts)


def sample_epoch(dataset: Dataset, out_path, *, fanouts, batch_size: int, seed: int, epoch: int,
                 seeds: np.ndarray | None = None, threads: int | None = None, graph=None,
                 max_batches: int | None = None, sampler: Sampler = NEIGHBOR,
                 shard: tuple[int, int] = (0, 1), every_batch: bool = False, hag=None,
                 batches=None, partition_rows: int = 0, first_batch: int = 0) -> SampleFile:
    """Samples one epoch over `seeds` (default: the train split) into `out_path` (.samples).

    `batches` instead: a sequence of link batches (LinkEpoch), read a group at a time, whose seeds are their
    edges' endpoints and negatives; a partitioned epoch's (`partition_rows`) sample only among their buffer's
    partitions, and a train batch's never along its own positives (LinkBatch.excluded).

    `shard` = (rank, world) keeps the batches that rank trains (shard_batches),
    each sampled as the whole epoch's would be. `max_batches` then keeps the
    first batches only (runs that stop early need not sample, or pack, the rest). With `every_batch` (an eval
    set) no batch is dropped to even the ranks out, `max_batches` counts the whole epoch's, and `first_batch` skips
    the batches before it (a chunk of the set: each batch is sampled as in the whole set). `hag` (a HagBuilder, see
    loading/hag.py) searches each batch's HAGs as it is sampled, in `threads` threads, and stores them after its
    record. A typed graph's `fanouts` are per hop and relation (0: not followed at that hop). Writes to temporary
    names and renames, index last, so a reader never sees half a file.
    """
    graph = graph or open_graph(dataset)
    if graph.typed:
        fanouts = [[int(f) for f in hop] if isinstance(hop, (list, tuple)) else [] for hop in fanouts]
        if not fanouts or any(len(hop) != len(graph.relations) or min(hop) < -1 for hop in fanouts):
            raise DiskgnnError(f"fanouts {fanouts}: per hop, a count >= -1 for each of the "
                               f"{len(graph.relations)} relations")
        if partition_rows:
            raise DiskgnnError("a typed graph's batches have no partitions: they are one relation's")
    else:
        fanouts = [int(f) for f in fanouts]
        if not fanouts or any(f == 0 or f < -1 for f in fanouts):
            raise DiskgnnError(f"fanouts {fanouts}: each must be positive or -1 (all neighbours)")
    if batch_size < 1:
        raise DiskgnnError(f"batch size {batch_size}: must be at least 1")
    link_batches = batches is not None
    if batches is None:
        seeds = np.asarray(dataset.split("train") if seeds is None else seeds, dtype=np.int64)
        batches = epoch_seeds(seeds, batch_size, seed, sampler.order_epoch(epoch))

    def restriction(links) -> dict:
        """The sampler's options for a partitioned epoch's group of batches: their masks and (train) positives."""
        out = {"partition_rows": partition_rows, "batch_masks": [b.mask for b in links]}
        excluded = [b.excluded for b in links]
        if links and excluded[0] is not None:  # an epoch's batches all exclude theirs, or none does
            out.update(exclude_pairs=np.concatenate(excluded),
                       exclude_offsets=np.r_[0, np.cumsum([len(e) for e in excluded])].tolist())
        return out
    num_batches = len(batches)
    if every_batch:
        stop = min(num_batches, num_batches if max_batches is None else max_batches)
        index = np.arange(first_batch + (shard[0] - first_batch) % shard[1], stop, shard[1])
    else:
        index = shard_batches(num_batches, *shard)[:max_batches]
    threads = threads or os.cpu_count() or 1
    out_path = Path(out_path)
    tmp = temp_path(out_path)
    log = RecordLog()
    seen_seeds = 0

    def write(f, records) -> None:
        for rec in records:
            log.write(f, rec)

    def with_hags(pool, records: list) -> list:
        if hag is None or not hag.active:
            return records
        return list(pool.map(lambda rec: rec + hag.encode(graph.parse(rec, 0, fanouts=fanouts)), records))

    def sample_all() -> None:
        nonlocal seen_seeds
        # Group g is written while group g + 1 is sampled (both release the GIL): written after
        # sampling, the page cache's write throttling added W1 16M's 0.9 GB in 1.4 s to 4.7 s of sampling.
        with open(tmp, "wb") as f, ThreadPoolExecutor(1, thread_name_prefix="diskgnn-samples") as writer, \
                ThreadPoolExecutor(threads, thread_name_prefix="diskgnn-hag") as searchers:
            written = None
            for g in range(0, len(index), defaults.SAMPLE_GROUP):
                links = [batches[int(k)] for k in index[g: g + defaults.SAMPLE_GROUP]]
                group = [b.seeds for b in links] if link_batches else links
                seen_seeds += sum(len(b) for b in group)
                keys = [sampler.key(epoch, int(index[g + i]), num_batches) for i in range(len(group))]
                restrict = restriction(links) if partition_rows else {}
                records = with_hags(searchers, graph.records(group, keys, fanouts, seed, threads, sampler,
                                                             **restrict))
                if written is not None:
                    written.result()  # one group in flight: its records are the memory this holds
                written = writer.submit(write, f, records)
            if written is not None:
                written.result()
            f.flush()
            os.fsync(f.fileno())

    write_records(out_path, tmp, sample_all)
    meta = {
        "format": SAMPLES_FORMAT, "format_version": SAMPLES_VERSION,
        "dataset": dataset.manifest["manifest_checksum"],
        "fanouts": fanouts, "batch_size": batch_size, "seed": seed, "epoch": epoch,
        "sampler": sampler.kind, "layer_dependency": sampler.layer_dependency,
        "batch_dependency": sampler.batch_dependency,
        "num_batches": len(index), "num_seeds": seen_seeds, "shard": list(shard), "batch_ids": index.tolist(),
        "offsets": log.offsets, "checksums": log.checksums, "file_bytes": log.offsets[-1],
        "hag": {"mode": hag.mode if hag is not None else "off"},
        "partition_rows": partition_rows or None, **graph.index_meta(),
    }
    commit_records(tmp, out_path, meta)
    return SampleFile(out_path)


def write_records(out_path: Path, tmp: Path, write) -> None:
    """`write()` fills the temporary records file `tmp` of `out_path`; a full disk is one line, and whatever
    fails leaves no temporary file behind."""
    try:
        guard_io(out_path, write)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def commit_records(tmp: Path, out_path: Path, meta: dict) -> None:
    """A records file written at `tmp` and its index `meta` put in place, the records first and the index last,
    so that a reader never finds an index without its records."""
    meta_tmp = write_index_tmp(out_path.with_suffix(".json"), meta)
    os.replace(tmp, out_path)
    os.replace(meta_tmp, out_path.with_suffix(".json"))
