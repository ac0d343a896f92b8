"""Sums of rows over CSR lists as one operator (torch.library): a CUDA kernel (csr_sum.cu) on a GPU, index_add in
the lists' order elsewhere. The captured step's neighbour sums (graphed.py) go through it, forward over a block's
CSR and backward over its transpose (loading/aggregate.py's CsrSum with `segment_product`): unlike cuSPARSE's
product, which sizes and allocates a workspace per call, it allocates its output alone."""

from __future__ import annotations

from pathlib import Path

import torch

from ..cuda_kernels import blocks_for, launch
from .record import list_owners

KERNEL = Path(__file__).with_name("csr_sum.cu")


@torch.library.custom_op("diskgnn::csr_sum", mutates_args=())
def csr_sum(indptr: torch.Tensor, indices: torch.Tensor, h: torch.Tensor, rows: int) -> torch.Tensor:
    """float32[rows, width]: row i the sum of h's rows indices[indptr[i]:indptr[i + 1]] (int64 lists, float32 h)."""
    dst = list_owners(indptr, indices.numel())[1]
    return h.new_zeros((rows, h.shape[1])).index_add_(0, dst, h.index_select(0, indices))


@csr_sum.register_kernel("cuda")
def _csr_sum_cuda(indptr: torch.Tensor, indices: torch.Tensor, h: torch.Tensor, rows: int) -> torch.Tensor:
    import cupy

    h = h.contiguous()
    out = torch.empty((rows, h.shape[1]), dtype=torch.float32, device=h.device)
    if out.numel():
        launch(KERNEL, "csr_sum", blocks_for(32 * rows), h,
               (indptr.contiguous().data_ptr(), indices.contiguous().data_ptr(), h.data_ptr(), cupy.int64(rows),
                cupy.int64(h.shape[1]), out.data_ptr()))
    return out


@csr_sum.register_fake
def _(indptr, indices, h, rows):
    return h.new_empty((rows, h.shape[1]))


def segment_product(matrix: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """matrix @ rows for a sparse CSR `matrix` with unit entries (a block's or its transpose), by csr_sum."""
    return csr_sum(matrix.crow_indices(), matrix.col_indices(), rows, matrix.shape[0])
