"""`DiskgnnSampler`: diskgnn's native neighbour sampler (uniform or LABOR, κ) as a PyG BaseSampler, for either kind
of graph.

PyG's NodeLoader picks each mini-batch's seeds (input_nodes, batch_size,
shuffle) and asks its sampler for the subgraph; this one samples it from the
dataset's memory-mapped CSC with the same native sampler `diskgnn.train`
uses offline (no pyg-lib, torch-sparse or torch-scatter; the topology is
never loaded whole), and lays it out as NeighborLoader does (diskgnn/loading/subgraph.py).
Each call has its own random stream: the sampler's seed, the process's
DataLoader worker and the call's number, so a run repeats.

LinkLoader (LinkNeighborLoader's way to a custom sampler) gets edge batches:
PyG's own edge_sample draws their negatives and makes their ends the seeds,
and this sampler samples around them.

On a typed dataset it samples around the seeds of NodeLoader's input type (`input_nodes=(type, ids)`), or
LinkLoader's edge type's two ends (`edge_label_index=((src, rel, dst), pairs)`) at once, a count per hop for
every relation or per relation (`"writes=10,cites=5"`, as `relation_fanouts` reads them), and returns
HeteroSamplerOutput: HeteroData with x per featured type, y of the target, edge_index per relation and n_id.

NodeLoader and LinkLoader choose the seeds while they iterate, so these batches cannot be
sampled or packed ahead: their features come from the feature store's memory
tier and by-id reads. The faster path, with offline samples, packs and the
pipeline, is `DiskgnnLoader` (loader.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch_geometric.sampler import (BaseSampler, EdgeSamplerInput, HeteroSamplerOutput, NodeSamplerInput,
                                     SamplerOutput)
from torch_geometric.sampler.neighbor_sampler import edge_sample

from ..data.format import open_dataset
from ..data.schema import relation_fanouts
from ..errors import DiskgnnError
from ..offline.sample import Sampler, open_graph, sample_batch
from ..loading.blocks import neighbour_lists
from ..loading.subgraph import hop_edges


class DiskgnnSampler(BaseSampler):
    """Samples `fanouts` neighbours per hop (seeds' hop first; -1: all; a typed graph's per relation too) around
    each batch of seeds."""

    def __init__(self, dataset_dir, fanouts=(10, 5), seed: int = 0, *, sampler: str = "neighbor",
                 layer_dependency: bool = False, batch_dependency: int = 1, threads: int | None = None):
        self.path = Path(dataset_dir)
        self.ds = open_dataset(self.path, typed=True)
        if self.ds.typed:
            self.fanouts = relation_fanouts(list(fanouts), self.ds.schema, "DiskgnnSampler: fanouts")
        else:
            self.fanouts = [int(f) for f in fanouts]
            if not self.fanouts or any(f == 0 or f < -1 for f in self.fanouts):
                raise DiskgnnError(f"DiskgnnSampler: fanouts {list(fanouts)}: each must be positive or -1 (all)")
        self.seed, self.threads = int(seed), threads or max(1, os.cpu_count() or 1)
        self.spec = Sampler(sampler, layer_dependency, batch_dependency)
        self.graph = open_graph(self.ds)
        self.calls = 0

    def __getstate__(self):
        # A DataLoader worker started with spawn gets the sampler pickled: it maps the topology again.
        return {k: v for k, v in self.__dict__.items() if k != "graph"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.graph = open_graph(self.ds)

    def _key(self) -> int:
        worker = torch.utils.data.get_worker_info()
        key = ((worker.id + 1 if worker is not None else 0) << 40) + self.calls
        self.calls += 1
        return key

    def sample_from_nodes(self, inputs: NodeSamplerInput) -> SamplerOutput | HeteroSamplerOutput:
        given = np.asarray(inputs.node.cpu(), dtype=np.int64).reshape(-1)
        if self.ds.typed:
            return self._typed({inputs.input_type or self.ds.schema.target: given}, (inputs.input_id, inputs.time))
        n = self.ds.num_nodes
        if given.size and (given.min() < 0 or given.max() >= n):
            raise DiskgnnError(f"{self.path}: seed {int(given[(given < 0) | (given >= n)][0])} out of range [0, {n})")
        unique, first, inverse = np.unique(given, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # the unique seeds in the order they were given
        seeds = unique[order]
        batch = sample_batch(self.graph, seeds, key=self._key(), fanouts=self.fanouts, seed=self.seed,
                             threads=self.threads, sampler=self.spec)
        row, col, num_nodes, num_edges = hop_edges(batch)
        node = batch.nodes
        if seeds.size != given.size:
            node, row, col, num_nodes, num_edges = _repeat_seeds(batch, row, col, num_nodes, num_edges,
                                                                 np.argsort(order)[inverse])
        return SamplerOutput(node=torch.from_numpy(np.array(node, dtype=np.int64)), row=torch.from_numpy(row),
                             col=torch.from_numpy(col), edge=None, num_sampled_nodes=num_nodes,
                             num_sampled_edges=num_edges, metadata=(inputs.input_id, inputs.time))

    def _typed(self, seeds: dict, metadata) -> HeteroSamplerOutput:
        """The batch around seeds of one or more types ({type: ids}), its edges per relation hop by hop."""
        s = self.ds.schema
        for kind, ids in seeds.items():
            if kind not in [t.name for t in s.types]:
                raise DiskgnnError(f"{self.path}: input nodes of type {kind!r}: the graph's types are "
                                   + ", ".join(t.name for t in s.types))
            if np.unique(ids).size != len(ids):
                raise DiskgnnError(f"{self.path}: a batch lists a seed twice (give each input node once)")
        kinds = [s.type_index(k) for k in seeds]  # each seed's type: the native sampler starts from several
        rec = self.graph.records([np.concatenate([np.asarray(v, np.int64) for v in seeds.values()])], [self._key()],
                                 self.fanouts, self.seed, self.threads, self.spec, kinds[0],
                                 np.repeat(np.int32(kinds), [len(v) for v in seeds.values()]))[0]
        b = self.graph.parse(rec, 0, kinds[0], self.fanouts)
        node = {t.name: torch.from_numpy(np.array(b.type_nodes[i], dtype=np.int64)) for i, t in enumerate(s.types)}
        row, col, edges = {}, {}, {}
        for r, rel in enumerate(s.relations):
            blocks = [hop[r] for hop in b.hops]  # None: a relation a hop does not follow (no edges)
            row[rel.key] = torch.from_numpy(np.concatenate(
                [np.empty(0, np.int64)] + [np.asarray(k.indices, np.int64) for k in blocks if k is not None]))
            col[rel.key] = torch.from_numpy(np.concatenate([np.empty(0, np.int64)] + [
                np.repeat(np.arange(k.num_dst, dtype=np.int64), np.diff(k.indptr)) for k in blocks if k is not None]))
            edges[rel.key] = [0 if k is None else int(k.indices.size) for k in blocks]
        c = b.counts
        sampled = {t.name: [int(c[0, i])] + [int(c[h, i] - c[h - 1, i]) for h in range(1, len(c))]
                   for i, t in enumerate(s.types)}
        return HeteroSamplerOutput(node=node, row=row, col=col, edge={k: None for k in row}, batch=None,
                                   num_sampled_nodes=sampled, num_sampled_edges=edges, metadata=metadata)

    def sample_from_edges(self, inputs: EdgeSamplerInput, neg_sampling=None) -> SamplerOutput:
        """A batch of edges (and PyG's negatives for it, binary or triplet) as the subgraph around their ends,
        with edge_label_index (or the triplet's indices) in its metadata, as LinkNeighborLoader's."""
        if inputs.time is not None:
            raise DiskgnnError("DiskgnnSampler: temporal link sampling (edge_label_time) is not supported")
        if self.ds.typed:  # both ends' types sampled around at once, as PyG's hetero sampler does
            counts = {t.name: t.count for t in self.ds.schema.types}
            if not set((inputs.input_type or ())[::2]) <= set(counts):
                raise DiskgnnError(f"{self.path}: edge type {inputs.input_type!r}: its ends are not types of the graph")
            return edge_sample(inputs, lambda seeds, _: self._typed(seeds, None), counts, disjoint=False,
                               neg_sampling=neg_sampling)
        return edge_sample(inputs, lambda seeds, _: self.sample_from_nodes(NodeSamplerInput(None, seeds)),
                           self.ds.num_nodes, disjoint=False, neg_sampling=neg_sampling)

    @property
    def edge_permutation(self):
        return None


def _repeat_seeds(batch, row, col, num_nodes, num_edges, where):
    """The subgraph with a seed given k times present k times, each copy with the seed's hop-0 edges, as
    NeighborLoader's rows for its input nodes: `where[j]` is the sampled position of given seed j."""
    s, given = batch.num_seeds, where.size
    # Position of each sampled node in the new node list: seeds at their first copy, the rest after the copies.
    first_copy = np.empty(s, dtype=np.int64)
    first_copy[where[::-1]] = np.arange(given - 1, -1, -1)  # of repeated indices the last assignment stays
    remap = np.concatenate([first_copy, given + np.arange(batch.nodes.size - s, dtype=np.int64)])
    seed_edges = col < s
    hop0 = np.flatnonzero(seed_edges)
    by_seed = hop0[np.argsort(col[hop0], kind="stable")]
    # hop 0's edges as a CSC over the sampled seeds: each given copy takes its seed's list
    local, take = neighbour_lists(np.searchsorted(col[by_seed], np.arange(s + 1)), by_seed, where)
    counts = np.diff(local)
    new_row = np.concatenate([remap[row[take]], remap[row[~seed_edges]]])
    new_col = np.concatenate([np.repeat(np.arange(given, dtype=np.int64), counts), remap[col[~seed_edges]]])
    node = np.concatenate([batch.nodes[where], batch.nodes[s:]])
    return node, new_row, new_col, [given, *num_nodes[1:]], [int(counts.sum()), *num_edges[1:]]
