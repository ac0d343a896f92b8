"""Dropout on the CPU by a native kernel: one pass forward, one backward, no mask kept.

torch's CPU `bernoulli_` costs ~15 ns an element here, a third of a train step; a numpy mask took four
passes (draw, compare, scale, cast). The native kernel (native/dropout.h) keeps element i where a
counter-based hash of (key, position) clears p (one 64-bit hash per two elements), so backward
recomputes the same mask from two integers, bf16 activations stay bf16, and a checkpoint keeps the
stream as (key, counter). The ReLU before it runs
in the same pass (`relu=True`), its backward from the output alone. Other devices use torch's.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import defaults
from ..errors import DiskgnnError
from ..arrays import native_view


def _flat(t: torch.Tensor):
    return native_view(t.reshape(-1))


def native_dropout(h: torch.Tensor, p: float, key: int, offset: int, relu: bool = False) -> torch.Tensor:
    """h with element i zeroed where the draw of (key, offset + i) falls below p (and, with relu, where
    h <= 0), the rest scaled by 1/(1-p)."""
    from .. import _native

    h = h.contiguous()
    out = torch.empty_like(h)
    _native.dropout(_flat(h), _flat(out), p, key, offset, relu, defaults.aggregate_threads())
    return out


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, p, key, offset):
        ctx.args = (p, key, offset)
        return native_dropout(h.detach(), p, key, offset)

    @staticmethod
    def backward(ctx, grad):
        return native_dropout(grad, *ctx.args), None, None, None  # the same mask and scale: dropout is linear


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, p, key, offset):
        out = native_dropout(h.detach(), p, key, offset, relu=True)
        ctx.p = p
        ctx.save_for_backward(out)  # the next layer keeps it anyway, as its matrix product's input
        return out

    @staticmethod
    def backward(ctx, grad):
        from .. import _native

        (out,) = ctx.saved_tensors
        grad = grad.contiguous()
        grad_in = torch.empty_like(grad)
        _native.relu_dropout_backward(_flat(grad), _flat(out), _flat(grad_in), ctx.p, defaults.aggregate_threads())
        return grad_in, None, None, None


class Dropout(nn.Module):
    """Dropout with seeded, resumable CPU masks (`reseed`, `state`)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.key, self.counter = 0, 0

    def reseed(self, seed) -> None:
        """A new stream: `seed` is anything numpy's SeedSequence takes, or one."""
        seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        self.key, self.counter = int(seq.generate_state(1, np.uint64)[0]), 0

    @property
    def state(self) -> dict:
        """Where the stream stands: a mid-epoch checkpoint keeps it, to resume the same masks."""
        return {"key": self.key, "counter": self.counter}

    @state.setter
    def state(self, state: dict) -> None:
        if not isinstance(state, dict) or set(state) != {"key", "counter"}:
            raise DiskgnnError("checkpoint: its dropout stream is an older diskgnn's (numpy's PCG64); resume from "
                               "an epoch's end (--resume with a checkpoint taken there) or start the run again")
        self.key, self.counter = int(state["key"]), int(state["counter"])

    def forward(self, h: torch.Tensor, relu: bool = False) -> torch.Tensor:
        """Dropout of h, or of ReLU(h) with relu."""
        if not self.training or self.p == 0 or h.device.type != "cpu" or h.dtype not in (torch.float32,
                                                                                          torch.bfloat16):
            h = F.relu(h) if relu else h
            return F.dropout(h, self.p, True) if self.training and self.p > 0 else h
        offset, self.counter = self.counter, self.counter + h.numel() + h.numel() % 2  # draws come in pairs
        return (_ReluDropout if relu else _Dropout).apply(h, self.p, self.key, offset)
