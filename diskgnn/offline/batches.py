"""A sampled batch and its record: what the sampler writes and the packer, the store and the loaders read.

A batch holds, per node type, the ids of its nodes (the seeds first among their type's, each hop's new nodes after
the ones known before it) and, per hop and relation, a block: the destinations of a relation's block at hop h are
a prefix of their type's nodes, its sources positions among its source type's. A homogeneous graph's batch is the
case of one type and one relation; `nodes` and `blocks` are its accessors.

Records come in two layouts (docs/format.md, "Sample files"): the one-relation sampler's, which the HAGs of its
blocks may follow, and the typed sampler's, over several relations. A sample file's index says which: a typed
file lists each relation's source and destination type (`relations`) and the seeds' type (`seed_type`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.files import RecordFile

SAMPLES_FORMAT = "diskgnn-samples"
SAMPLES_VERSION = 1


@dataclass
class Block:
    """One hop of one relation as a CSC adjacency over local ids: dst i aggregates indices[indptr[i]:indptr[i+1]]."""

    indptr: np.ndarray  # int32[num_dst + 1]
    indices: np.ndarray  # int32[num_edges], local ids < num_src
    num_dst: int
    num_src: int


@dataclass
class Batch:
    """A sampled mini-batch: `type_nodes[t]` the ids of its nodes of type t (`seed_type`'s seeds first),
    `hops[h][r]` relation r's block at hop h (hop 0 computes the seeds; the model runs the hops from the last),
    `counts[h][t]` the nodes of type t known after hop h (None where the record does not keep them)."""

    index: int
    type_nodes: list[np.ndarray]
    hops: list[list[Block]]
    num_seeds: int
    hag_bytes: memoryview | None = None  # its blocks' stored HAGs (loading/hag.py's encode), if searched
    counts: np.ndarray | None = None
    seed_type: int = 0
    type_names: tuple[str, ...] | None = None  # a typed batch's (its schema's types, in order); None: one type

    @property
    def typed(self) -> bool:
        return self.type_names is not None

    @classmethod
    def one_type(cls, index: int, nodes: np.ndarray, blocks: list[Block], num_seeds: int,
                 hag_bytes: memoryview | None = None) -> "Batch":
        """A batch of a graph with one node type and one relation: its nodes (global ids in local-id order: the
        input nodes), its blocks (blocks[0] computes the seeds)."""
        return cls(index, [nodes], [[b] for b in blocks], num_seeds, hag_bytes)

    @property
    def nodes(self) -> np.ndarray:
        """A one-type batch's nodes: every node of it, in local-id order (the input nodes)."""
        if len(self.type_nodes) != 1:
            raise TypeError(f"batch {self.index} has {len(self.type_nodes)} node types: ask type_nodes[t]")
        return self.type_nodes[0]

    @property
    def blocks(self) -> list[Block]:
        """A one-relation batch's blocks, hop 0 first."""
        if self.hops and len(self.hops[0]) != 1:
            raise TypeError(f"batch {self.index} has {len(self.hops[0])} relations: ask hops[h][r]")
        return [hop[0] for hop in self.hops]

    @property
    def seeds(self) -> np.ndarray:
        return self.type_nodes[self.seed_type][: self.num_seeds]


def parse_record(buf: memoryview | bytes, index: int) -> Batch:
    """Decodes one record of the one-relation sampler (layout in native/sampler.h)."""
    head = np.frombuffer(buf, dtype="<i8", count=1)
    layers = int(head[0])
    header = np.frombuffer(buf, dtype="<i8", count=2 * layers + 2)
    counts = header[1: layers + 2]
    edges = header[layers + 2:]
    off = header.nbytes
    nodes = np.frombuffer(buf, dtype="<i8", count=int(counts[-1]), offset=off)
    off += nodes.nbytes
    hops = []
    for h in range(layers):
        n_dst = int(counts[h])
        indptr = np.frombuffer(buf, dtype="<i4", count=n_dst + 1, offset=off)
        off += indptr.nbytes
        indices = np.frombuffer(buf, dtype="<i4", count=int(edges[h]), offset=off)
        off += indices.nbytes
        hops.append([Block(indptr, indices, n_dst, int(counts[h + 1]))])
    end = -(-off // 8) * 8  # records are padded to 8 bytes; stored HAGs follow
    return Batch(index, [nodes], hops, int(counts[0]), memoryview(buf)[end:] if len(buf) > end else None,
                 counts.reshape(-1, 1))


def parse_typed_record(buf, index: int, relations, seed_type: int, type_names, fanouts=None) -> Batch:
    """Decodes one record of the typed sampler (layout in native/sampler.h); `relations`: each relation's
    (source type, destination type) indices; `fanouts[h][r]`, where given: a relation a hop does not follow (0)
    has no block there (None)."""
    layers, types, rels = (int(x) for x in np.frombuffer(buf, dtype="<i8", count=3))
    head = np.frombuffer(buf, dtype="<i8", count=3 + (layers + 1) * types + layers * rels)
    counts = head[3:3 + (layers + 1) * types].reshape(layers + 1, types)
    edges = head[3 + (layers + 1) * types:].reshape(layers, rels)
    off = head.nbytes
    nodes = []
    for t in range(types):
        nodes.append(np.frombuffer(buf, dtype="<i8", count=int(counts[-1, t]), offset=off))
        off += nodes[-1].nbytes
    hops = []
    for h in range(layers):
        hop = []
        for r, (src, dst) in enumerate(relations):
            n_dst = int(counts[h, dst])
            indptr = np.frombuffer(buf, dtype="<i4", count=n_dst + 1, offset=off)
            off += indptr.nbytes
            indices = np.frombuffer(buf, dtype="<i4", count=int(edges[h, r]), offset=off)
            off += indices.nbytes
            followed = fanouts is None or fanouts[h][r] != 0
            hop.append(Block(indptr, indices, n_dst, int(counts[h + 1, src])) if followed else None)
        hops.append(hop)
    end = -(-off // 8) * 8  # as parse_record's; counts[0]: the seeds alone
    return Batch(index, nodes, hops, int(counts[0].sum()), memoryview(buf)[end:] if len(buf) > end else None,
                 counts, seed_type, tuple(type_names))


class SampleFile(RecordFile):
    """An epoch's sampled batches, of either record layout; checksums are checked as each batch is read."""

    what = "batch"

    def __init__(self, path):
        super().__init__(path, SAMPLES_FORMAT, SAMPLES_VERSION)
        relations = self.meta.get("relations")
        self._relations = None if relations is None else [tuple(r) for r in relations]

    @property
    def fanouts(self) -> list:
        """Per hop: the neighbours sampled (a typed file's: per relation)."""
        return self.meta["fanouts"]

    @property
    def hag_mode(self) -> str:
        """The --hag mode its HAGs were searched under ("off": none stored)."""
        return self.meta.get("hag", {}).get("mode", "off")

    def batch_id(self, b: int) -> int:
        """Record b's batch in the whole epoch or eval set (a rank's share or a chunk holds some of them): what
        its sampler key and its link batch are indexed by. (Batch.index is b: its pack region's too.)"""
        ids = self.meta.get("batch_ids")
        return b if ids is None else ids[b]

    def __getitem__(self, b: int) -> Batch:
        if not 0 <= b < len(self):
            raise IndexError(f"{self.path}: batch {b} out of range [0, {len(self)})")
        if self._relations is None:
            return parse_record(self.record(b), b)
        return parse_typed_record(self.record(b), b, self._relations, self.meta["seed_type"], self.meta["types"],
                                  self.meta["fanouts"])

    def __iter__(self):
        return (self[b] for b in range(len(self)))


class SampleView:
    """A sample file as some of its readers see it: batch b is `view(samples[b])`, a one-type batch of the rows
    they read (its path and index as the file's)."""

    def __init__(self, samples):
        self.samples = samples

    @property
    def path(self):
        return self.samples.path

    @property
    def meta(self) -> dict:
        return self.samples.meta

    def __len__(self) -> int:
        return len(self.samples)

    def view(self, batch: Batch) -> Batch:
        raise NotImplementedError

    def __getitem__(self, b: int) -> Batch:
        return self.view(self.samples[b])

    def __iter__(self):
        return (self[b] for b in range(len(self)))


class TypeView(SampleView):
    """A sample file as one node type's rows see it: batch b's nodes are its nodes of type `t` (the packer's, the
    placement's and the feature store's view of a typed batch: what they read of a one-type batch)."""

    def __init__(self, samples, t: int):
        super().__init__(samples)
        self.t = t

    def view(self, batch: Batch) -> Batch:
        return Batch.one_type(batch.index, batch.type_nodes[self.t], [], 0)
