"""Neighbour sums over a block's CSC: on the CPU in native threads, elsewhere as CSR products; with their
transpose for backward.

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

import warnings

import torch

from .. import defaults
from ..arrays import native_view

# torch says once per process that its sparse CSR tensors are "beta"; CsrSum uses only their products.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state", category=UserWarning)


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


class CsrSum(torch.autograd.Function):
    """The same sums on other devices (a GPU): out = A @ h with A the block's CSC read as a CSR matrix
    (destinations by sources) whose entries carry the scale, plus scale * h[:num_dst] with self_loop; backward
    is A's transpose times the gradient. Sparse-dense products walk each destination's list once (cuSPARSE on
    a GPU), with neither index_add's atomic scatter nor an (edges x width) temporary; they run in float32
    (bf16 rows are widened first and the sums rounded once, as on the CPU)."""

    @staticmethod
    @torch.autocast("cuda", enabled=False)  # the products run in float32 whatever autocast would pick
    def forward(ctx, h, block, scale=None, self_loop=False):
        rows = h.detach().float()
        values = scale.repeat_interleave(block.indptr[1:] - block.indptr[:-1], output_size=block.indices.numel()) \
            if scale is not None else torch.ones(block.indices.numel(), dtype=torch.float32, device=h.device)
        a = torch.sparse_csr_tensor(block.indptr, block.indices, values, (block.num_dst, h.shape[0]),
                                    check_invariants=False)
        out = torch.sparse.mm(a, rows) if block.indices.numel() else rows.new_zeros((block.num_dst, h.shape[1]))
        if self_loop:
            out += rows[: block.num_dst] * (scale.unsqueeze(1) if scale is not None else 1)
        ctx.block, ctx.values, ctx.scale, ctx.self_loop, ctx.num_src = block, values, scale, self_loop, h.shape[0]
        return out.to(h.dtype)

    @staticmethod
    @torch.autocast("cuda", enabled=False)
    def backward(ctx, grad_out):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        block, g = ctx.block, grad_out.float()
        # A's transpose as a CSR matrix: its entries sorted by source (stable: each list keeps its order). The
        # counts by index_add, not bincount, which reads the largest id back to the host on a GPU.
        order = torch.argsort(block.indices, stable=True)
        counts = torch.zeros(ctx.num_src, dtype=torch.int64, device=g.device).index_add_(
            0, block.indices, torch.ones_like(block.indices))
        indptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        at = torch.sparse_csr_tensor(indptr, block.dst.index_select(0, order), ctx.values.index_select(0, order),
                                     (ctx.num_src, block.num_dst), check_invariants=False)
        grad = torch.sparse.mm(at, g) if block.indices.numel() else g.new_zeros((ctx.num_src, g.shape[1]))
        if ctx.self_loop:
            grad[: block.num_dst] += g * (ctx.scale.unsqueeze(1) if ctx.scale is not None else 1)
        return grad.to(grad_out.dtype), None, None, None
