"""Dropout keyed by node on any device: the masks the CPU's native kernel draws (native/dropout.h), made by torch.

Element c of a row whose stream position is `base` draws from pair (base + c) / 2 of the stream `key`:
splitmix64's finaliser of key + pair * golden, its low half for even positions and its high half for odd
ones; it is kept where the draw is at least p * 2^32 (rounded). A node's mask is a function of (key, its id,
the column), so a GPU run drops exactly what a CPU run drops for the same batch, and a resumed epoch repeats
it. `keep_mask` is one operator (torch.library): a CUDA kernel (keyed_dropout.cu, compiled by CuPy) on a GPU,
the same arithmetic in torch's int64 operations elsewhere (wrapping multiplies, shifts made logical by a mask),
which the tests check bit for bit against the native kernel. Its key is a device scalar, read by the kernel: a
captured step (graphed.py) mixes it there from the epoch's key and the batch's first seed (`device_mix`), so that
replays draw each batch's masks without the host.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .. import hashing
from ..cuda_kernels import blocks_for, launch

KERNEL = Path(__file__).with_name("keyed_dropout.cu")
_MASK64 = (1 << 64) - 1


def _signed(v: int) -> int:
    """A 64-bit pattern as the int64 torch holds it."""
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


GOLDEN, MIX1, MIX2 = (_signed(c) for c in (hashing.GOLDEN, hashing.MIX1, hashing.MIX2))


def threshold(p: float) -> int:
    """The draw a kept element reaches at least (native/dropout.cc's rounding)."""
    return min(int(p * 4294967296.0 + 0.5), 0xFFFFFFFF)


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    return (z >> s) & ((1 << (64 - s)) - 1)  # int64's >> is arithmetic: clear what the sign shifted in


def _finalised(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (hashing.py's, wrapping)."""
    z = (z ^ _shr(z, 30)) * MIX1
    z = (z ^ _shr(z, 27)) * MIX2
    return z ^ _shr(z, 31)


def device_mix(key: torch.Tensor, *words) -> torch.Tensor:
    """nn/dropout.py's `mix` where `key` is an int64 scalar tensor and `words` ints or int64 scalar tensors: the
    same 64-bit key, computed where the tensors are."""
    for w in words:
        step = (w + 1) * GOLDEN if isinstance(w, torch.Tensor) else _signed((w + 1) * hashing.GOLDEN)
        key = _finalised(key + step)
    return key


def reference_mask(bases: torch.Tensor, width: int, key, p: float) -> torch.Tensor:
    """bool[rows, width]: element c of row r kept (torch's integer operations; any device). `key`: an int, or an
    int64 scalar tensor holding its pattern."""
    pairs = (bases // 2).unsqueeze(1) + torch.arange((width + 1) // 2, device=bases.device)
    z = _finalised(pairs * GOLDEN + (key if isinstance(key, torch.Tensor) else _signed(key)))
    draws = torch.stack([z & 0xFFFFFFFF, _shr(z, 32)], 2).reshape(bases.numel(), 2 * pairs.shape[1])[:, :width]
    return draws >= threshold(p)


@torch.library.custom_op("diskgnn::keep_mask", mutates_args=())
def keep_mask(bases: torch.Tensor, width: int, key: torch.Tensor, p: float) -> torch.Tensor:
    """bool[rows, width]: which of each row's elements dropout keeps (`key`: an int64 scalar tensor on bases'
    device, the 64-bit key's pattern)."""
    return reference_mask(bases, width, key, p)


@keep_mask.register_kernel("cuda")
def _keep_mask_cuda(bases: torch.Tensor, width: int, key: torch.Tensor, p: float) -> torch.Tensor:
    import cupy

    out = torch.empty((bases.numel(), width), dtype=torch.bool, device=bases.device)
    n = out.numel()
    if n:
        launch(KERNEL, "keep_mask", blocks_for(n), bases, (bases.contiguous().data_ptr(), cupy.int64(n),
                                                            cupy.int64(width), key.data_ptr(),
                                                            cupy.uint32(threshold(p)), out.data_ptr()))
    return out


@keep_mask.register_fake
def _(bases, width, key, p):
    return bases.new_empty((bases.numel(), width), dtype=torch.bool)


def key_tensor(key: int, device) -> torch.Tensor:
    """A 64-bit key as keep_mask takes it, made on `device` by a fill (no copy from the host)."""
    return torch.full((), _signed(key), dtype=torch.int64, device=device)


class KeyedDropout(torch.autograd.Function):
    """h (or ReLU(h)) with the elements the keyed mask drops zeroed, the rest scaled by 1/(1-p); backward by the
    same mask (saved as the output's sign with relu, as the native kernel's backward reads it)."""

    @staticmethod
    def forward(ctx, h, p, key, bases, relu):
        """`key`: an int64 scalar tensor on h's device (`key_tensor`)."""
        keep = keep_mask(bases, h.shape[1], key, p)
        if relu:
            keep = keep & (h > 0)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return h * keep * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None, None, None, None
