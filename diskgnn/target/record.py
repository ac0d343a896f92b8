"""A batch's structure as one int64 record: what crosses to the device beside its rows, in the same copy as their ids.

Layout, in int64 words: the seeds' labels, the input rows' node ids, then for each block in the model's order
its indptr (num_dst + 1) and its indices (edges). The sample stage writes it in one pass over the sampled
batch; the store's assemble stage appends it to the pinned slab's id buffer, so the batch crosses in two
copies (its rows and that buffer) however many layers it has; `blocks` makes the blocks from the record on
the device: views of it, plus what follows from them there (each edge's destination, the mean's scales, the
transpose that backward sums over), with no host synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class BatchRecord:
    """The record (`words`, host) and the sizes its views are cut by."""

    words: np.ndarray  # int64
    seeds: int
    nodes: int
    shapes: tuple[tuple[int, int, int], ...]  # per block, model order: (num_dst, num_src, edges)

    @classmethod
    def of(cls, batch, labels: np.ndarray) -> "BatchRecord":
        """The record of a sampled batch (offline/sample.py's Batch) and its seeds' labels."""
        blocks = batch.blocks[::-1]
        shapes = tuple((b.num_dst, b.num_src, int(b.indices.size)) for b in blocks)
        size = labels.size + batch.nodes.size + sum(nd + 1 + e for nd, _, e in shapes)
        words = np.empty(size, dtype=np.int64)
        at = 0
        for part in (labels, batch.nodes, *(a for b in blocks for a in (b.indptr, b.indices))):
            words[at: at + part.size] = part
            at += part.size
        return cls(words, int(labels.size), int(batch.nodes.size), shapes)

    def split(self, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """`words` (this record, anywhere) cut into (labels, node ids, [(indptr, indices) per block])."""
        labels, nodes = words[: self.seeds], words[self.seeds: self.seeds + self.nodes]
        at, blocks = self.seeds + self.nodes, []
        for nd, _, e in self.shapes:
            blocks.append((words[at: at + nd + 1], words[at + nd + 1: at + nd + 1 + e]))
            at += nd + 1 + e
        return labels, nodes, blocks


def list_owners(indptr: torch.Tensor, entries: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR lists' lengths and, for each of their `entries`, the list it is in (no read back: the total is given)."""
    counts = indptr[1:] - indptr[:-1]
    rows = torch.arange(counts.numel(), device=indptr.device)
    return counts, torch.repeat_interleave(rows, counts, output_size=entries)


def device_block(indptr: torch.Tensor, indices: torch.Tensor, num_dst: int, num_src: int, kernels):
    """A TensorBlock from its CSC on the device: each edge's destination, the mean's scales and the sums' matrices
    (loading/aggregate.py's csr_matrices), computed there without reading anything back."""
    from ..loading.aggregate import csr_matrices
    from ..loading.blocks import TensorBlock

    counts, dst = list_owners(indptr, indices.numel())
    deg = counts.to(torch.float32)
    block = TensorBlock(num_dst, num_src, indptr, indices, dst, 1 / deg.clamp(min=1), 1 / (deg + 1), kernels=kernels)
    a, a_t, made = csr_matrices(block)
    block.csr, block.made = (a, a_t), (dst, block.inv_deg, block.inv_deg_self, *made)
    return block
