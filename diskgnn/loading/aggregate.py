"""Neighbour sums over a block's CSC on the CPU, in native threads, with their transpose for backward.

Plain `index_add_` over `h[indices]` makes an (edges x width) temporary in
forward and another in backward; the native kernels (native/aggregate.h)
walk the CSC directly, threads over edge-balanced ranges of destinations.
A block with a HAG (loading/hag.py) sums through its aggregation nodes
instead (native/hag.h), threads over column ranges.
"""

from __future__ import annotations

import torch

from .. import defaults


class NeighbourSum(torch.autograd.Function):
    """out[i] = sum of h[indices[indptr[i]:indptr[i+1]]] for float32 CPU rows; grad by the transpose."""

    @staticmethod
    def forward(ctx, h, block):
        from .. import _native

        h = h.detach().contiguous()
        out = torch.empty((block.num_dst, h.shape[1]), dtype=torch.float32)
        _native.csc_sum(block.indptr.numpy(), block.indices.numpy(), h.numpy(), out.numpy(),
                        defaults.aggregate_threads())
        ctx.block, ctx.num_src = block, h.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from .. import _native

        if not ctx.needs_input_grad[0]:
            return None, None
        grad = torch.empty((ctx.num_src, grad_out.shape[1]), dtype=torch.float32)
        _native.csc_sum_transpose(ctx.block.indptr.numpy(), ctx.block.indices.numpy(),
                                  grad_out.contiguous().numpy(), grad.numpy(), defaults.aggregate_threads())
        return grad, None


class HagSum(torch.autograd.Function):
    """The same sums as NeighbourSum through the block's HAG: each shared partial sum computed once."""

    @staticmethod
    def forward(ctx, h, block):
        from .. import _native

        h = h.detach().contiguous()
        out = torch.empty((block.num_dst, h.shape[1]), dtype=torch.float32)
        _native.hag_sum(block.hag, h.numpy(), out.numpy(), defaults.aggregate_threads())
        ctx.block = block
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from .. import _native

        if not ctx.needs_input_grad[0]:
            return None, None
        hag = ctx.block.hag
        grad = torch.empty((hag.num_src, grad_out.shape[1]), dtype=torch.float32)
        _native.hag_sum_transpose(hag, grad_out.contiguous().numpy(), grad.numpy(), defaults.aggregate_threads())
        return grad, None
