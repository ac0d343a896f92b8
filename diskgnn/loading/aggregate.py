"""Neighbour sums over a block's CSC on the CPU, in native threads, with their transpose for backward.

Plain `index_add_` over `h[indices]` makes an (edges x width) temporary in
forward and another in backward; the native kernels (native/aggregate.h)
walk the CSC directly, threads over edge-balanced ranges of destinations.
They take float32 rows or bfloat16 ones (a layer under autocast: summed in
float32, returned in bfloat16, with no float32 copy of the layer's input),
and fold an optional per-destination scale (a mean's 1/degree) into the pass.
A block with a HAG (loading/hag.py) runs the same sums through its
aggregation nodes (native/hag.h): each level of partial sums once, then the
rewritten lists by the same kernel, scale and self row folded in as before.
"""

from __future__ import annotations

import torch

from .. import defaults


def native_view(t: torch.Tensor):
    """A CPU tensor as the native kernels take it: bfloat16 as its int16 bits (numpy has no bfloat16)."""
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


class NeighbourSum(torch.autograd.Function):
    """out[i] = scale[i] * (sum of h[indices[indptr[i]:indptr[i+1]]], plus h[i] with self_loop) for float32 or
    bfloat16 CPU rows (out in h's dtype; scale None: 1), through the block's HAG where it has one; grad by the
    transpose."""

    @staticmethod
    def forward(ctx, h, block, scale=None, self_loop=False):
        from .. import _native

        h = h.detach().contiguous()
        out = torch.empty((block.num_dst, h.shape[1]), dtype=h.dtype)
        scale_rows = None if scale is None else scale.numpy()
        if block.hag is not None:
            _native.hag_sum(block.hag, native_view(h), native_view(out), defaults.aggregate_threads(), scale_rows,
                            self_loop)
        else:
            _native.csc_sum(block.indptr.numpy(), block.indices.numpy(), native_view(h), native_view(out),
                            defaults.aggregate_threads(), scale_rows, self_loop)
        ctx.block, ctx.num_src, ctx.scale, ctx.self_loop = block, h.shape[0], scale_rows, self_loop
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from .. import _native

        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        grad_out = grad_out.contiguous()
        grad = torch.empty((ctx.num_src, grad_out.shape[1]), dtype=grad_out.dtype)
        block, threads = ctx.block, defaults.aggregate_threads()
        if block.hag is not None:
            _native.hag_sum_transpose(block.hag, native_view(grad_out), native_view(grad), threads, ctx.scale,
                                      ctx.self_loop)
        else:
            _native.csc_sum_transpose(block.indptr.numpy(), block.indices.numpy(), native_view(grad_out),
                                      native_view(grad), threads, ctx.scale, ctx.self_loop)
        return grad, None, None, None
