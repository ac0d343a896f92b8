"""Tensors as the native kernels take them, for every stage that calls one (loading's sums, nn's dropout)."""

from __future__ import annotations


def native_view(t):
    """A CPU tensor as a numpy array sharing its memory: bfloat16 as its int16 bits (numpy has no bfloat16)."""
    import torch

    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()
