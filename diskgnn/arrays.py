"""Tensors as the native kernels take them, for every stage that calls one (loading's sums, nn's dropout), and
rows of a memory map read in id order."""

from __future__ import annotations

import numpy as np


def native_view(t):
    """A CPU tensor as a numpy array sharing its memory: bfloat16 as its int16 bits (numpy has no bfloat16)."""
    import torch

    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


def read_rows(source: np.ndarray, ids: np.ndarray):
    """source[ids] read in id order (a map forwards), as a tensor."""
    import torch

    order = np.argsort(ids)  # read the map forwards
    rows = np.empty((ids.size,) + source.shape[1:], dtype=source.dtype)
    rows[order] = source[ids[order]]
    return torch.from_numpy(rows)
