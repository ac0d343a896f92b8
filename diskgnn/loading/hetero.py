"""A pass over a heterogeneous sample file: each batch's blocks as tensors and its typed feature rows read
(from its packs where the epoch was packed), in the pipeline's threads (sample -> read), so that the reads of
batch b + 1 overlap the step of batch b."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..offline.batches import Batch
from .blocks import TensorBlock
from .pipeline import Pipeline, Stage


@dataclass
class HeteroMiniBatch:
    """What a hetero pass yields: `hops[h][r]` relation r's block at hop h (None where the hop does not follow
    it), `x[type]` the featured types' input rows, `nodes[type]` every type's node ids (local to the type),
    `labels` the seeds' labels (int64 classes, or float 0/1 rows where multi-label)."""

    index: int
    hops: list[list[TensorBlock | None]]
    x: dict[str, torch.Tensor]
    nodes: dict[str, np.ndarray]
    labels: torch.Tensor
    num_seeds: int

    def to(self, device) -> "HeteroMiniBatch":
        if torch.device(device).type == "cpu":
            return self
        hops = [[None if b is None else b.to(device, non_blocking=True) for b in hop] for hop in self.hops]
        return HeteroMiniBatch(self.index, hops, {k: v.to(device, non_blocking=True) for k, v in self.x.items()},
                               self.nodes, self.labels.to(device, non_blocking=True), self.num_seeds)


def hetero_pass(samples, schema, stores: dict, labels: np.ndarray, fanouts, *, multilabel: bool, device,
                start: int = 0, stop: int | None = None, depth: int = 2) -> Pipeline:
    """Batches start..stop of `samples` (a typed SampleFile of `schema`'s graph) as HeteroMiniBatches on `device`;
    `fanouts[h][r]` says which relations each hop follows; `stores[type]`: the FeatureStore of each featured
    type's rows (store.TypedRows: its memory tier, then the batch's pack region of the type)."""
    names = [t.name for t in schema.types]

    def blocks(b: int):
        batch = samples[b]
        hops = [[TensorBlock.from_csc(blk.indptr, blk.indices, blk.num_dst, blk.num_src) if fanouts[h][r] else None
                 for r, blk in enumerate(hop)] for h, hop in enumerate(batch.hops)]
        return batch, hops

    def read(item):
        batch, hops = item
        nodes = {names[t]: batch.type_nodes[t] for t in range(len(names))}
        x = {name: stores[name].load(Batch.one_type(batch.index, ids, [], 0)) for name, ids in nodes.items()
             if name in stores}
        seeds = batch.seeds
        y = torch.from_numpy(np.asarray(labels[seeds]))
        y = y.float() if multilabel else y.long()
        return HeteroMiniBatch(batch.index, hops, x, nodes, y, batch.num_seeds).to(device)

    stop = len(samples) if stop is None else stop
    return Pipeline(range(start, stop), [Stage("sample", blocks), Stage("read", read, depth)])
