"""`diskgnn.infer --fanouts`: each selected node's output from a sample of its neighbourhood, as sampled evaluation
computes it, rather than from every neighbour (nn/inference.py).

The selected nodes are cut into batches in their order; batch b is sampled with its own stream (the key of batch
b of the inference "epoch", offline/sample.py), its rows read by id from the feature file through the online
loader's pipeline (loading/loaders.py), and the model's first k layers run on its blocks. Batch b's bytes depend
on b and its nodes only, so a rerun from a batch's start (an interrupted output taken up) computes the same
bytes. Memory is a batch's: its blocks, rows and activations.

A typed model's outputs (`typed_outputs`) are its target type's, sampled so per relation (every neighbour: -1),
each featured type's rows read by id (store/by_type.py) and the featureless types' from the run's tables, where
it learned them out of core.
"""

from __future__ import annotations

import numpy as np
import torch

from ..arrays import read_rows
from ..loading.loaders import OnlineLoader
from ..offline.sample import Sampler, open_graph
from ..store.by_type import TypedRows
from ..target import target_for
from ..train.tasks.base import EVAL_EPOCH
from .table import JoinedRows


class _Batches:
    """Batch b: the distinct nodes of nodes[b * size: (b + 1) * size], sorted (a batch's seeds are unique)."""

    def __init__(self, nodes: np.ndarray, size: int):
        self.nodes, self.size = nodes, size

    def __len__(self) -> int:
        return -(-self.nodes.size // self.size)

    def __getitem__(self, b: int) -> np.ndarray:
        return np.unique(self.nodes[b * self.size: (b + 1) * self.size])


def sampled_outputs(model, ds, nodes: np.ndarray, k: int, fanouts: list[int], batch_size: int, start: int = 0, *,
                    source, device: str, seed: int, sampler: Sampler, backend: str, read_depth: int):
    """(first row, float32 CPU outputs of layer k - 1) for nodes[start:] (duplicates allowed), from the batch
    holding row `start` on, each batch's nodes sampled `fanouts[:k]` (input hop last) and their rows read by id
    (`source`'s; an --embeddings run's, infer/table.py, its stored features by id and its learned values beside)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    batches = _Batches(nodes, batch_size)
    joined = source.rows if isinstance(source.rows, JoinedRows) else None
    if joined is not None:
        source = joined.features
    loader = OnlineLoader(ds, nodes[:0], fanouts=list(fanouts[:k]), batch_size=batch_size, seed=seed,
                          epoch=EVAL_EPOCH["infer"], labels=np.asarray(ds.labels), target=target_for(device),
                          read_depth=read_depth, backend=backend, features=source, sampler=sampler, batches=batches)
    first = start // batch_size
    for b, mb in zip(range(first, len(batches)), loader.pipeline(np.arange(first, len(batches)))):
        mb.wait()
        h = mb.x
        if joined is not None:
            values = read_rows(joined.records, mb.input_nodes)[:, : joined.dim].to(h.device)
            h = torch.cat([h, values], 1) if h.shape[1] else values
        for i in range(k):
            h = model.layer(i, mb.blocks[i], h)
        back = np.searchsorted(mb.seeds, nodes[b * batch_size: (b + 1) * batch_size])  # batch b's, sorted
        yield b * batch_size, h.float().cpu()[torch.from_numpy(back)]


def typed_outputs(model, ds, nodes: np.ndarray, k: int, fanouts: list, batch_size: int, start: int = 0, *,
                  device: str, seed: int, sampler: Sampler, backend: str, read_depth: int, variants: dict,
                  tables: dict):
    """sampled_outputs for a typed model (HeteroGNN) over target-type `nodes`: `fanouts` per hop and relation,
    `variants` each featured type's rows (data/features.py type_variants), `tables` the featureless types' learned
    values and their width (infer/table.py type_tables)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    batches = _Batches(nodes, batch_size)
    store = TypedRows(ds, backend, variants).store(None)
    loader = OnlineLoader(ds, nodes[:0], fanouts=[list(hop) for hop in fanouts[:k]], batch_size=batch_size,
                          seed=seed, epoch=EVAL_EPOCH["infer"], labels=np.asarray(ds.labels),
                          target=target_for("cpu"), read_depth=read_depth, backend=backend, graph=open_graph(ds),
                          sampler=sampler, batches=batches, store=store)
    first = start // batch_size
    try:
        for b, mb in zip(range(first, len(batches)), loader.pipeline(np.arange(first, len(batches)))):
            x = dict(mb.moved(device).x)
            for name, (records, dim) in tables.items():  # beside a type's features, or as its rows
                values = read_rows(records, mb.nodes[name])[:, :dim].to(device)
                x[name] = torch.cat([x[name], values], 1) if name in x else values
            h = model.outputs(mb.blocks, x, mb.nodes, k)
            back = np.searchsorted(mb.seeds, nodes[b * batch_size: (b + 1) * batch_size])
            yield b * batch_size, h.float().cpu()[torch.from_numpy(back)]
    finally:
        store.close()
