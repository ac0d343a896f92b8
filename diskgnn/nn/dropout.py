"""Dropout on the CPU by a native kernel: one pass forward, one backward, no mask kept.

torch's CPU `bernoulli_` costs ~15 ns an element here, a third of a train step; a numpy mask took four
passes (draw, compare, scale, cast). The native kernel (native/dropout.h) keeps an element where a
counter-based hash of (key, position) clears p (one 64-bit hash per two elements), so backward
recomputes the same mask from integers, and bf16 activations stay bf16. The ReLU before it runs in the
same pass (`relu=True`), its backward from the output alone. Other devices use torch's.

Where the rows are a batch's nodes (`rows=(salt, node ids)`: the model's layers during training), an
element's position is its node's id and its column, under a key mixed from the epoch's and the batch's
(`salt`, its first seed) and the layer: a node's mask is the same whichever rows share its tensor, so
cooperative minibatching (each rank computes the nodes it owns) and data parallelism draw exactly the
masks one process draws for the same batch, and a resumed epoch draws them again from the epoch's key
alone. Elsewhere the draws continue a stream (key, counter), which a checkpoint keeps.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import defaults
from ..hashing import GOLDEN, MIX1, MIX2
from ..errors import DiskgnnError
from ..arrays import native_view


def _flat(t: torch.Tensor):
    return native_view(t.reshape(-1))


_MASK = (1 << 64) - 1


def mix(key: int, *words: int) -> int:
    """A 64-bit key from `key` and `words` (splitmix64's finaliser over each in turn)."""
    for w in words:
        z = (key + (w + 1) * GOLDEN) & _MASK
        z = ((z ^ (z >> 30)) * MIX1) & _MASK
        z = ((z ^ (z >> 27)) * MIX2) & _MASK
        key = z ^ (z >> 31)
    return key


def row_positions(ids, width: int) -> np.ndarray:
    """Each row's first stream position for rows keyed by `ids`: id x the width rounded up to even (draws come in
    pairs, so no pair spans two rows)."""
    ids = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    return ids.astype(np.int64) * (width + width % 2)


def native_dropout(h: torch.Tensor, p: float, key: int, offset: int, relu: bool = False,
                   bases: np.ndarray | None = None) -> torch.Tensor:
    """h with an element zeroed where the draw of (key, its position) falls below p (and, with relu, where h <= 0),
    the rest scaled by 1/(1-p). Positions: offset + i in the flat tensor, or with `bases` (one per row of h) the
    row's base + its column."""
    from .. import _native

    h = h.contiguous()
    out = torch.empty_like(h)
    _native.dropout(_flat(h), _flat(out), p, key, offset, bases, h.shape[-1] if h.dim() else 1, relu,
                    defaults.aggregate_threads())
    return out


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, p, key, offset, bases):
        ctx.args = (p, key, offset, False, bases)
        return native_dropout(h.detach(), *ctx.args)

    @staticmethod
    def backward(ctx, grad):
        return native_dropout(grad, *ctx.args), None, None, None, None  # the same mask and scale: it is linear


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, p, key, offset, bases):
        out = native_dropout(h.detach(), p, key, offset, relu=True, bases=bases)
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
        return grad_in, None, None, None, None


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

    def forward(self, h: torch.Tensor, relu: bool = False, rows: tuple | None = None, kernels=None) -> torch.Tensor:
        """Dropout of h, or of ReLU(h) with relu. `rows`: (salt, node ids of h's rows) to key each row's mask by
        its node (the module's docstring); None: the stream's next draws. `kernels`: a target's (the batch's
        blocks carry them), whose `dropout` draws the same node-keyed masks where h is, from the epoch's key and
        the salt."""
        if kernels is not None and rows is not None and self.training and self.p > 0:
            return kernels.dropout(h, self.p, self.key, rows[0], rows[1], relu)
        if not self.training or self.p == 0 or h.device.type != "cpu" or h.dtype not in (torch.float32,
                                                                                          torch.bfloat16):
            h = F.relu(h) if relu else h
            return F.dropout(h, self.p, True) if self.training and self.p > 0 else h
        if rows is not None:
            salt, ids = rows
            key, offset, bases = mix(self.key, *salt), 0, row_positions(ids, h.shape[-1])
        else:
            key, offset, bases = self.key, self.counter, None
            self.counter += h.numel() + h.numel() % 2  # draws come in pairs
        return (_ReluDropout if relu else _Dropout).apply(h, self.p, key, offset, bases)


class ReseededDropout:
    """A model's one Dropout (`self.dropout`) as its random stream: seeded per epoch, so that a resumed run
    repeats the same masks, and its position kept by a mid-epoch checkpoint."""

    def reseed(self, seed) -> None:
        self.dropout.reseed(seed)

    @property
    def dropout_state(self) -> dict:
        return self.dropout.state

    @dropout_state.setter
    def dropout_state(self, state: dict) -> None:
        self.dropout.state = state
