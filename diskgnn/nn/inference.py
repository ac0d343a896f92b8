"""Layer-wise full-neighbour inference: every layer over every node, one chunk of nodes at a time.

Sampled evaluation estimates each node's output from a few neighbours;
layer-wise inference computes it exactly, with all neighbours, at the cost of
one pass per layer over the graph. Layer l's outputs for all nodes go to a
memory-mapped file in the workdir before layer l + 1 reads them, so memory
stays at one chunk's rows whatever the graph's size; the last layer is
computed for the requested nodes only. The first layer reads the stored rows
of the run's FeatureSource (a quantized variant's codes, decoded on the device).
With a stored whole-graph HAG (loading/graph_hag.py) the layers over every
node take its chunks (their size is the HAG's) and sum through each chunk's
HAG where it pays, on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .. import defaults
from ..data.features import FeatureSource, feature_source
from ..data.format import Dataset
from ..loading.blocks import full_block


def _rows(source: np.ndarray, ids: np.ndarray) -> torch.Tensor:
    order = np.argsort(ids)  # read the map forwards
    rows = np.empty((ids.size,) + source.shape[1:], dtype=source.dtype)
    rows[order] = source[ids[order]]
    return torch.from_numpy(rows)


@torch.no_grad()
def full_neighbour_logits(model, ds: Dataset, nodes: np.ndarray, workdir, *,
                          batch_size: int = defaults.INFERENCE_CHUNK,
                          device: str = "cpu", features: FeatureSource | None = None, hag=None) -> torch.Tensor:
    """The model's outputs for `nodes` with every neighbour of every layer (model in eval mode);
    `features`: the first layer's stored rows (default: features.bin); `hag`: the dataset's GraphHag (its
    kernels are the CPU's)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    indptr, indices = ds.indptr, ds.indices
    source = features or feature_source(ds)
    h, decode = source.rows, source.decode_torch
    layers = len(model.layers)
    chunk = max(batch_size, defaults.INFERENCE_CHUNK)
    bounds = hag.bounds if hag is not None else list(range(0, ds.num_nodes, chunk)) + [ds.num_nodes]
    paths = []
    try:
        for i in range(layers - 1):
            out = None
            for c, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
                dst = np.arange(lo, hi)
                block, src = full_block(indptr, indices, dst)
                if hag is not None:
                    block.hag = hag[c]
                y = model.layer(i, block.to(device), decode(_rows(h, src).to(device))).float().cpu().numpy()
                if out is None:
                    paths.append(workdir / f"layer-{i}.f32")
                    out = np.lib.format.open_memmap(paths[-1], mode="w+", dtype=np.float32,
                                                    shape=(ds.num_nodes, y.shape[1]))
                out[lo: lo + dst.size] = y
            out.flush()
            h, decode = out, (lambda x: x)  # layer outputs are float32 model values already
        nodes = np.asarray(nodes, dtype=np.int64)
        parts = []
        for s in range(0, nodes.size, batch_size):
            block, src = full_block(indptr, indices, nodes[s: s + batch_size])
            parts.append(model.layer(layers - 1, block.to(device), decode(_rows(h, src).to(device))).float().cpu())
        return torch.cat(parts) if parts else torch.empty(0)
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
