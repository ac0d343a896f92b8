"""A sampled block as tensors, and the transforms that make blocks: from a sample file's batch or from the CSC.

A block maps `num_src` source rows to `num_dst` destination rows, the first
`num_dst` sources being the destinations themselves (so a layer computes only
the nodes the next one needs). Loaders build blocks in their pipeline stages;
the models only run them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .aggregate import CsrSum, NeighbourSum


@dataclass
class TensorBlock:
    """A block as tensors: dst i aggregates src[indices[indptr[i]:indptr[i+1]]]."""

    num_dst: int
    num_src: int
    indptr: torch.Tensor  # int64[num_dst + 1]
    indices: torch.Tensor  # int64[E], source local ids
    dst: torch.Tensor  # int64[E], destination of each edge (indptr expanded)
    inv_deg: torch.Tensor  # float32[num_dst], 1 / max(deg, 1): a mean's scale (0 neighbours: a zero mean)
    inv_deg_self: torch.Tensor  # float32[num_dst], 1 / (deg + 1): the scale of a mean with the node itself
    hag: object = None  # its HAG (loading/hag.py), summed through on the CPU where it pays
    # the kernels its sums and its layer's dropout run by where a target made it (diskgnn/target/); None: the
    # CPU's native kernels on CPU rows, CSR products elsewhere
    kernels: object = None
    csr: tuple = ()  # (A, A's transpose) as sparse CSR matrices for CsrSum (aggregate.py), made once
    made: tuple = ()  # the GPU target's: the tensors made on the device beside the views of the batch's record
    projected = False  # its sums are of the rows as given (a tiled pass's may be of a layer's projection)

    @classmethod
    def from_csc(cls, indptr: np.ndarray, indices: np.ndarray, num_dst: int, num_src: int) -> "TensorBlock":
        indptr = np.asarray(indptr, dtype=np.int64)
        counts = np.diff(indptr)
        dst = np.repeat(np.arange(num_dst, dtype=np.int64), counts)
        deg = counts.astype(np.float32)
        return cls(num_dst, num_src, torch.from_numpy(indptr), torch.from_numpy(np.asarray(indices, dtype=np.int64)),
                   torch.from_numpy(dst), torch.from_numpy(1 / np.maximum(deg, np.float32(1))),
                   torch.from_numpy(1 / (deg + np.float32(1))))

    @property
    def deg(self) -> torch.Tensor:
        """float32[num_dst, 1], each destination's in-degree."""
        return (self.indptr[1:] - self.indptr[:-1]).to(torch.float32).unsqueeze(1)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.indptr, self.indices, self.dst, self.inv_deg, self.inv_deg_self

    def _map(self, fn) -> "TensorBlock":
        return TensorBlock(self.num_dst, self.num_src, *map(fn, self.tensors()), self.hag)

    def to(self, device, non_blocking: bool = False) -> "TensorBlock":
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "TensorBlock":
        return self._map(lambda t: t.pin_memory())

    def sum_neighbours(self, h: torch.Tensor) -> torch.Tensor:
        """Row i: the sum of h over dst i's sources (native kernels on the CPU), in h's dtype. bf16 rows (a
        layer under autocast) are summed in float32, as autocast reduces, on any device."""
        return self._aggregate(h, None, False)

    def mean_neighbours(self, h: torch.Tensor, self_loop: bool = False) -> torch.Tensor:
        """Row i: the mean of h over dst i's sources (0 where it has none), or with self_loop over them and dst
        i itself (GCN's), in h's dtype, rounded once."""
        return self._aggregate(h, self.inv_deg_self if self_loop else self.inv_deg, self_loop)

    def _aggregate(self, h: torch.Tensor, scale: torch.Tensor | None, self_loop: bool) -> torch.Tensor:
        if h.dim() == 2 and h.dtype in (torch.float32, torch.bfloat16):
            if self.kernels is not None:
                return self.kernels.aggregate(self, h, scale, self_loop)
            return (NeighbourSum if h.device.type == "cpu" else CsrSum).apply(h, self, scale, self_loop)
        wide = torch.float32 if h.dtype in (torch.bfloat16, torch.float16) else h.dtype
        total = torch.zeros((self.num_dst,) + tuple(h.shape[1:]), dtype=wide, device=h.device)
        total = total.index_add(0, self.dst, h[self.indices].to(wide))
        if self_loop:
            total = total + h[: self.num_dst].to(total.dtype)
        if scale is not None:
            total = total * scale.view((-1,) + (1,) * (h.dim() - 1)).to(total.dtype)
        return total.to(h.dtype)


def sampled_blocks(batch) -> list:
    """A sampled batch's blocks in the order the model runs them (input hop first); a typed batch's per hop a list
    per relation (None where the hop does not follow it)."""
    if batch.typed:
        return [[None if b is None else TensorBlock.from_csc(b.indptr, b.indices, b.num_dst, b.num_src) for b in hop]
                for hop in batch.hops[::-1]]
    return [TensorBlock.from_csc(b.indptr, b.indices, b.num_dst, b.num_src) for b in batch.blocks[::-1]]


def neighbour_lists(indptr: np.ndarray, indices: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The in-neighbours of `dst` in CSC order: (local indptr, global neighbour ids)."""
    dst = np.asarray(dst, dtype=np.int64)
    starts = np.asarray(indptr[dst], dtype=np.int64)
    counts = np.asarray(indptr[dst + 1], dtype=np.int64) - starts
    local = np.concatenate([[0], np.cumsum(counts)])
    flat = np.repeat(starts - local[:-1], counts) + np.arange(local[-1], dtype=np.int64)
    return local, np.asarray(indices[flat], dtype=np.int64)


def full_block(indptr: np.ndarray, indices: np.ndarray, dst: np.ndarray) -> tuple[TensorBlock, np.ndarray]:
    """A block over all in-neighbours of `dst` (unique ids); returns it and its source ids, dst first."""
    dst = np.asarray(dst, dtype=np.int64)
    local_ptr, nbrs = neighbour_lists(indptr, indices, dst)
    others = np.setdiff1d(nbrs, dst)
    src = np.concatenate([dst, others])
    order = np.argsort(src, kind="stable")
    local = order[np.searchsorted(src[order], nbrs)]
    return TensorBlock.from_csc(local_ptr, local, dst.size, src.size), src
