"""Offline sampling of a heterogeneous graph: seeds of the target type, fanouts per hop and relation.

The native sampler (`sample_hetero_batches`, native/sampler.cc) walks each relation's own CSC: hop h takes,
for every node of type t known after hop h and every relation r into t, up to fanouts[h][r] distinct sources
(uniform, without replacement, from the batch's own random stream keyed by (seed, epoch, batch), so the samples
do not depend on the thread count). Nodes are numbered per type, seeds first, each hop's new nodes after the
ones known before it: the destinations of a relation's block at hop h are a prefix of their type's nodes, as
in the homogeneous blocks.

Files: `epoch-NNNNN.samples` (the records back to back) and `epoch-NNNNN.json` (offsets and checksums), as
sample.py writes for homogeneous graphs (docs/format.md, "Hetero sample records").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.files import RecordFile, RecordLog, temp_path
from ..data.format import Dataset
from ..errors import DiskgnnError
from .sample import Block, batch_key, commit_records, epoch_seeds, write_records

HETERO_SAMPLES_FORMAT = "diskgnn-hetero-samples"
HETERO_SAMPLES_VERSION = 1
GROUP = 64  # batches sampled per native call


@dataclass
class HeteroBatch:
    """A sampled batch: `nodes[t]` the local ids of type t's nodes (the target's seeds first), `blocks[h][r]`
    relation r's block at hop h (destinations: the first n[h][dst] nodes of its destination type; sources:
    positions among its source type's nodes). The model runs the hops from the last to the first."""

    index: int
    nodes: list[np.ndarray]
    blocks: list[list[Block]]
    counts: np.ndarray  # [L + 1, T]: nodes of each type known after each hop
    num_seeds: int


def parse_hetero_record(buf, index: int, src_types, dst_types) -> HeteroBatch:
    """Decodes one record (layout in native/sampler.h); `src_types`/`dst_types`: each relation's type index."""
    layers, types, rels = (int(x) for x in np.frombuffer(buf, dtype="<i8", count=3))
    head = np.frombuffer(buf, dtype="<i8", count=3 + (layers + 1) * types + layers * rels)
    counts = head[3:3 + (layers + 1) * types].reshape(layers + 1, types)
    edges = head[3 + (layers + 1) * types:].reshape(layers, rels)
    off = head.nbytes
    nodes = []
    for t in range(types):
        nodes.append(np.frombuffer(buf, dtype="<i8", count=int(counts[-1, t]), offset=off))
        off += nodes[-1].nbytes
    blocks = []
    for h in range(layers):
        hop = []
        for r in range(rels):
            n_dst = int(counts[h, dst_types[r]])
            indptr = np.frombuffer(buf, dtype="<i4", count=n_dst + 1, offset=off)
            off += indptr.nbytes
            indices = np.frombuffer(buf, dtype="<i4", count=int(edges[h, r]), offset=off)
            off += indices.nbytes
            hop.append(Block(indptr, indices, n_dst, int(counts[h + 1, src_types[r]])))
        blocks.append(hop)
    return HeteroBatch(index, nodes, blocks, counts, int(counts[0].sum()))  # before hop 0: the seeds alone


class HeteroGraph:
    """A hetero dataset's relations mapped for the native sampler, with the type indices the records use."""

    def __init__(self, ds: Dataset):
        from .. import _native

        schema = self.schema = ds.schema
        self.views = []
        for i, r in enumerate(schema.relations):
            entry = ds.manifest["files"][f"rel/{i}/indices"]
            self.views.append(_native.CscView(str(ds.file_path(f"rel/{i}/indptr")),
                                              str(ds.file_path(f"rel/{i}/indices")), schema.type(r.dst).count,
                                              r.num_edges, np.dtype(entry["dtype"]).itemsize))
        self.src_types = [schema.type_index(r.src) for r in schema.relations]
        self.dst_types = [schema.type_index(r.dst) for r in schema.relations]
        self.target = schema.type_index(schema.target)

    def sample(self, groups: list[np.ndarray], keys: list[int], fanouts, seed: int, threads: int,
               target: int | None = None) -> list[bytes]:
        """Records of batches of seeds of type `target` (an index; default the dataset's target type)."""
        from .. import _native

        flat = np.concatenate(groups) if groups else np.empty(0, np.int64)
        bounds = np.r_[0, np.cumsum([len(g) for g in groups])].astype(np.int64).tolist()
        return _native.sample_hetero_batches(self.views, self.src_types, self.dst_types, len(self.schema.types),
                                             self.target if target is None else target, flat, bounds, keys,
                                             [list(f) for f in fanouts], seed, threads)

    def parse(self, rec, index: int) -> HeteroBatch:
        return parse_hetero_record(rec, index, self.src_types, self.dst_types)

    def sample_batch(self, seeds: np.ndarray, *, key: int, fanouts, seed: int, threads: int = 1, index: int = 0,
                     target: int | None = None) -> HeteroBatch:
        """One batch sampled now, identical to the record sample_hetero_epoch writes under the same key."""
        return self.parse(self.sample([np.asarray(seeds, np.int64)], [key], fanouts, seed, threads, target)[0], index)


class HeteroSampleFile(RecordFile):
    what = "batch"

    def __init__(self, path, graph: HeteroGraph):
        super().__init__(path, HETERO_SAMPLES_FORMAT, HETERO_SAMPLES_VERSION)
        self.graph = graph

    def __getitem__(self, b: int) -> HeteroBatch:
        if not 0 <= b < len(self):
            raise IndexError(f"{self.path}: batch {b} out of range [0, {len(self)})")
        return self.graph.parse(self.record(b), b)

    def __iter__(self):
        return (self[b] for b in range(len(self)))


def sample_hetero_epoch(ds: Dataset, graph: HeteroGraph, out_path, *, fanouts, batch_size: int, seed: int,
                        epoch: int, seeds: np.ndarray | None = None, threads: int | None = None,
                        max_batches: int | None = None) -> HeteroSampleFile:
    """Samples one epoch over `seeds` (default: the train split) into `out_path`; temporary names renamed,
    the index last."""
    if batch_size < 1:
        raise DiskgnnError(f"batch size {batch_size}: must be at least 1")
    seeds = np.asarray(ds.split("train") if seeds is None else seeds, dtype=np.int64)
    batches = epoch_seeds(seeds, batch_size, seed, epoch)[:max_batches]
    threads = threads or os.cpu_count() or 1
    out_path = Path(out_path)
    tmp = temp_path(out_path)
    log = RecordLog()

    def sample_all() -> None:
        with open(tmp, "wb") as f:
            for g in range(0, len(batches), GROUP):
                group = batches[g:g + GROUP]
                keys = [batch_key(epoch, g + i) for i in range(len(group))]
                for rec in graph.sample(group, keys, fanouts, seed, threads):
                    log.write(f, rec)
            f.flush()
            os.fsync(f.fileno())

    write_records(out_path, tmp, sample_all)
    meta = {
        "format": HETERO_SAMPLES_FORMAT, "format_version": HETERO_SAMPLES_VERSION, "dataset": ds.checksum,
        "fanouts": [list(map(int, f)) for f in fanouts], "batch_size": batch_size, "seed": seed, "epoch": epoch,
        "num_batches": len(batches), "num_seeds": int(sum(len(b) for b in batches)),
        "offsets": log.offsets, "checksums": log.checksums, "file_bytes": log.offsets[-1],
    }
    commit_records(tmp, out_path, meta)
    return HeteroSampleFile(out_path, graph)
