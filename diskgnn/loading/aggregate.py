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


def csr_matrices(block) -> tuple[torch.Tensor, torch.Tensor, tuple]:
    """A block's CSC as sparse CSR matrices with unit entries: A (destinations by sources) and its transpose
    (sources by destinations: each source's destinations in the lists' order), and the tensors made for them.
    Nothing is read back to the host (on a GPU: a sort and a binary search, no bincount)."""
    device, edges = block.indices.device, block.indices.numel()
    by_source, order = torch.sort(block.indices, stable=True)
    t_indptr = torch.searchsorted(by_source, torch.arange(block.num_src + 1, device=device))
    t_indices, ones = block.dst.index_select(0, order), torch.ones(edges, device=device)
    a = torch.sparse_csr_tensor(block.indptr, block.indices, ones, (block.num_dst, block.num_src),
                                check_invariants=False)
    a_t = torch.sparse_csr_tensor(t_indptr, t_indices, ones, (block.num_src, block.num_dst), check_invariants=False)
    return a, a_t, (t_indptr, t_indices, ones)


class CsrSum(torch.autograd.Function):
    """The same sums on other devices (a GPU): out = scale * (A @ h, plus h[:num_dst] with self_loop), A the
    block's CSC read as a CSR matrix of destinations by sources with unit entries; backward is A's transpose
    times scale * grad. The block's matrices are made once (csr_matrices: the GPU target makes them in its copy
    stage, with the batch; other blocks at their first sum). Sparse-dense products walk each destination's list
    once (cuSPARSE on a GPU), with neither index_add's atomic scatter nor an (edges x width) temporary; they run
    in float32 (bf16 rows are widened first and the sums rounded once, as on the CPU). `product`: how a matrix
    multiplies rows (cuSPARSE's, or the captured step's kernel: target/csr_sum.py's segment_product)."""

    @staticmethod
    @torch.autocast("cuda", enabled=False)  # the products run in float32 whatever autocast would pick
    def forward(ctx, h, block, scale=None, self_loop=False, product=torch.sparse.mm):
        rows = h.detach().float()
        if not block.csr:
            block.csr = csr_matrices(block)[:2]
        out = product(block.csr[0], rows) if block.indices.numel() else rows.new_zeros((block.num_dst, rows.shape[1]))
        if self_loop:
            out = out + rows[: block.num_dst]
        if scale is not None:
            out = out * scale.unsqueeze(1)
        ctx.block, ctx.scale, ctx.self_loop, ctx.num_src, ctx.product = block, scale, self_loop, h.shape[0], product
        return out.to(h.dtype)

    @staticmethod
    @torch.autocast("cuda", enabled=False)
    def backward(ctx, grad_out):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        block, g = ctx.block, grad_out.float()
        if ctx.scale is not None:
            g = g * ctx.scale.unsqueeze(1)
        grad = ctx.product(block.csr[1], g) if block.indices.numel() else g.new_zeros((ctx.num_src, g.shape[1]))
        if ctx.self_loop:
            grad[: block.num_dst] += g
        return grad.to(grad_out.dtype), None, None, None, None
