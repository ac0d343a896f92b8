"""Layer-wise full-neighbour inference: every layer over every node, one chunk of nodes at a time.

Sampled evaluation estimates each node's output from a few neighbours;
layer-wise inference computes it exactly, with all neighbours, at the cost of
one pass per layer over the graph. Layer l's outputs for all nodes go to a
memory-mapped file in the workdir before layer l + 1 reads them, so memory
stays at one chunk's rows whatever the graph's size; the last layer is
computed for the requested nodes only. The first layer reads the stored rows
of the run's FeatureSource (a quantized variant's codes, decoded on the device).
"""

from __future__ import annotations

import numpy as np
import torch

from .format import Dataset, FeatureSource
from .models import TensorBlock

CHUNK = 4096  # destination nodes per block


def neighbour_lists(indptr: np.ndarray, indices: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The in-neighbours of `dst` in CSC order: (local indptr, global neighbour ids)."""
    dst = np.asarray(dst, dtype=np.int64)
    starts = np.asarray(indptr[dst], dtype=np.int64)
    counts = np.asarray(indptr[dst + 1], dtype=np.int64) - starts
    local = np.concatenate([[0], np.cumsum(counts)])
    flat = np.repeat(starts - local[:-1], counts) + np.arange(local[-1], dtype=np.int64)
    return local, np.asarray(indices[flat], dtype=np.int64)


def full_block(indptr: np.ndarray, indices: np.ndarray, dst: np.ndarray) -> tuple[TensorBlock, np.ndarray]:
    """A block over all in-neighbours of `dst` (unique ids); returns it and its source ids, dst first."""
    dst = np.asarray(dst, dtype=np.int64)
    local_ptr, nbrs = neighbour_lists(indptr, indices, dst)
    others = np.setdiff1d(nbrs, dst)
    src = np.concatenate([dst, others])
    order = np.argsort(src, kind="stable")
    local = order[np.searchsorted(src[order], nbrs)]
    return TensorBlock.from_csc(local_ptr, local, dst.size, src.size), src


def _rows(source: np.ndarray, ids: np.ndarray) -> torch.Tensor:
    order = np.argsort(ids)  # read the map forwards
    rows = np.empty((ids.size,) + source.shape[1:], dtype=source.dtype)
    rows[order] = source[ids[order]]
    return torch.from_numpy(rows)


@torch.no_grad()
def full_neighbour_logits(model, ds: Dataset, nodes: np.ndarray, workdir, *, batch_size: int = CHUNK,
                          device: str = "cpu", features: FeatureSource | None = None) -> torch.Tensor:
    """The model's outputs for `nodes` with every neighbour of every layer (model in eval mode);
    `features`: the first layer's stored rows (default: features.bin)."""
    from pathlib import Path

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    indptr, indices = ds.indptr, ds.indices
    source = features or ds.feature_source()
    h, decode = source.rows, source.decode_torch
    layers = len(model.layers)
    paths = []
    try:
        for i in range(layers - 1):
            out = None
            for lo in range(0, ds.num_nodes, max(batch_size, CHUNK)):
                dst = np.arange(lo, min(ds.num_nodes, lo + max(batch_size, CHUNK)))
                block, src = full_block(indptr, indices, dst)
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
