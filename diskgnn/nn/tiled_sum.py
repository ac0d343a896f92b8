"""A mean layer over inputs larger than memory: its destinations' neighbour sums taken a block at a time, the
input rows read forwards in pieces.

Gathering each chunk's in-neighbour rows reads them where they lie: on a power-law graph everywhere in the
file, a page fault (and the device's read-ahead) a row. W2's 8 M nodes took 1,587 s that way under a 4 GiB cap,
reading 2,847 GB for a 4.1 GB feature file and an 8.2 GB hidden layer. A mean layer (SAGE, GCN) needs of its
neighbours only their sum, and a sum can be taken in any order: here a block of destinations, as many as the
memory holds, takes one forward pass over the input, a piece of rows at a time, each piece's edges added into
the block's float32 sums. The bytes read are (blocks) x (input), in order.

A layer narrower than its input runs on its parts instead (`parts`: per node, what its own row contributes and
its message, the linear map its neighbours' mean goes through, taken first since it commutes with the mean);
the sums are of the messages: W2's classifier layer sums 16 columns instead of 256, and nn/inference.py writes a
layer's parts in place of the layer below's outputs, so the 256-column hidden layer is never stored.

A destination's edges are added in source order on a piece grid fixed from row 0, so its sum does not depend on
the block it fell in; the layer then runs on `grid` destinations at a time, a grid its caller fixes, so a rerun
from a grid point computes the same bytes.
"""

from __future__ import annotations

import numpy as np
import torch

from ..arrays import read_rows
from ..loading.blocks import neighbour_lists

PIECE_BYTES = (1 << 20, 64 << 20)  # a piece's decoded rows: at least (fewer passes of Python), at most
EDGE_BYTES = 8  # an edge's share of a block: its source's row and its destination's place, one int64
EDGE_STEP = 1 << 16  # destinations whose in-edges are listed at a time (their lists' temporaries)


class SummedBlock:
    """A block whose neighbour sums are taken: the destinations' float32 sums and in-degrees, what a mean layer
    reads of a TensorBlock (mean_neighbours). Where the sums are of the layer's messages (`projected`): `own`, the
    destinations' own messages (a self-loop's), and `pre`, their own rows' part of the output."""

    kernels = None  # its layer's dropout: the default kernels

    def __init__(self, sums: torch.Tensor, deg: torch.Tensor, own: torch.Tensor | None = None,
                 pre: torch.Tensor | None = None):
        self.sums, self.deg, self.own, self.pre, self.num_dst = sums, deg, own, pre, sums.shape[0]
        self.projected = own is not None

    def to(self, device) -> "SummedBlock":
        return SummedBlock(*(None if t is None else t.to(device) for t in (self.sums, self.deg, self.own, self.pre)))

    def mean_neighbours(self, h: torch.Tensor, self_loop: bool = False) -> torch.Tensor:
        """As TensorBlock's: the sums times 1 / max(deg, 1), or with self_loop (sums + own row) / (deg + 1)."""
        if self_loop:
            own = self.own if self.projected else h[: self.num_dst]
            return ((self.sums + own.float()) * (1 / (self.deg + 1))).to(h.dtype)
        return (self.sums * (1 / self.deg.clamp(min=1))).to(h.dtype)


def every_node(n: int) -> np.ndarray:
    """The ids of a graph's every node, int32 where they fit (on 55 M nodes an int64 copy is 440 MB)."""
    return np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)


def in_degrees(indptr: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The in-degrees of `targets` as int32, a slice at a time (no graph-sized int64 temporaries)."""
    out = np.empty(targets.size, dtype=np.int32)
    for a in range(0, targets.size, 1 << 22):
        t = np.asarray(targets[a: a + (1 << 22)], dtype=np.int64)
        out[a: a + t.size] = np.asarray(indptr[t + 1]) - np.asarray(indptr[t])
    return out


def is_mean_layer(layer) -> bool:
    """Whether a layer's neighbours enter it only through block.mean_neighbours (what the tiled pass gives)."""
    return getattr(layer, "MEAN_OF_NEIGHBOURS", False)


def piece_rows(memory: int, width: int) -> int:
    """Input rows a piece holds: its decoded float32 rows and their gathered copies, an eighth of `memory`."""
    return max(1, int(np.clip(memory // 8, *PIECE_BYTES)) // (8 * width))


def blocks(degrees: np.ndarray, grid: int, memory: int, width: int, out_width: int) -> list[int]:
    """Positions [b[j], b[j+1]) of destination blocks: whole grid steps (at least one), each block's float32 sums
    and its edges within what `memory` leaves beside a piece and a grid step's own rows, mean and outputs."""
    step = 4 * min(grid, degrees.size) * (2 * width + 2 * out_width)
    room = max(1, memory - 8 * width * piece_rows(memory, width) - step)
    cuts = list(range(0, degrees.size, grid)) + [degrees.size]
    step_cost = [4 * width * (b - a) + EDGE_BYTES * int(degrees[a:b].sum()) for a, b in zip(cuts[:-1], cuts[1:])]
    bounds, used = [0], 0
    for j, cost in enumerate(step_cost):
        if used and used + cost > room:
            bounds.append(cuts[j])
            used = 0
        used += cost
    return bounds + [degrees.size] if degrees.size else [0]


def passes(degrees: np.ndarray, grid: int, memory: int, width: int, out_width: int) -> int:
    """The forward passes over its input a tiled pass of `width` summed columns takes: one a block."""
    return len(blocks(degrees, grid, memory, width, out_width)) - 1


def projects_first(layer, width: int) -> bool:
    """Whether a layer runs on its parts (nn/inference.py): a mean layer with a message narrower than its input."""
    return hasattr(layer, "parts") and layer.d_out < width


def positions(index: np.ndarray | None, ids: np.ndarray) -> np.ndarray:
    """Where nodes `ids` lie in rows kept for the sorted nodes `index` only (None: every node, row i node i)."""
    return ids if index is None else np.searchsorted(index, ids)


def mean_layer_outputs(run, indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, decode, targets: np.ndarray,
                       grid: int, memory: int, out_width: int, device: str = "cpu", own_cols: int | None = None,
                       index: np.ndarray | None = None):
    """Yields (position in targets, float32 CPU outputs) of `run(block, h)` (a mean layer's forward and what
    follows it) for sorted unique `targets`, `grid` of them at a time. `rows`: the layer's input (stored rows,
    `decode` making them float32), or with `own_cols` its parts (float32: `own_cols` columns of the own rows'
    part, then the messages); `index`: the nodes whose rows they are (sorted; None: every node)."""
    if own_cols is not None:
        decode = lambda x: x[:, own_cols:]  # noqa: E731 - the messages are what is summed
    width = int(decode(torch.from_numpy(np.array(rows[:1]))).shape[1])
    piece = piece_rows(memory, width)
    degrees = in_degrees(indptr, targets)
    bounds = blocks(degrees, grid, memory, width, out_width)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        sums = _block_sums(indptr, indices, rows, decode, targets[lo:hi], degrees[lo:hi], width, piece, index)
        deg = torch.from_numpy(degrees[lo:hi].astype(np.float32)).unsqueeze(1)
        for s in range(lo, hi, grid):
            e = min(hi, s + grid)
            own = read_rows(rows, positions(index, targets[s:e]))
            if own_cols is None:
                block = SummedBlock(sums[s - lo: e - lo], deg[s - lo: e - lo])
                own = decode(own).float()
            else:
                block = SummedBlock(sums[s - lo: e - lo], deg[s - lo: e - lo], own[:, own_cols:], own[:, :own_cols])
                own = own[:, :own_cols]
            yield s, run(block.to(device), own.to(device)).float().cpu()
        del sums, deg, block  # before the next block's are taken: two blocks' sums are twice the memory planned


def _block_sums(indptr, indices, rows, decode, targets: np.ndarray, counts: np.ndarray, width: int, piece: int,
                index) -> torch.Tensor:
    """float32 sums of `rows` (decoded) over each target's in-neighbours (`counts` of them), the input read forwards
    a piece at a time."""
    # an edge is (its source's row << 32 | its destination's place): sorted in place, 8 bytes each, they come in
    # source order, a source's in destination order
    edges = np.empty(int(counts.sum()), dtype=np.int64)
    at = 0
    for a in range(0, targets.size, EDGE_STEP):
        local_ptr, src = neighbour_lists(indptr, indices, targets[a: a + EDGE_STEP])
        places = np.repeat(np.arange(a, a + local_ptr.size - 1, dtype=np.int64), np.diff(local_ptr))
        edges[at: at + src.size] = (positions(index, src) << 32) | places
        at += src.size
    edges.sort()
    sums = torch.zeros((targets.size, width), dtype=torch.float32)
    if edges.size == 0:
        return sums
    for a in range(int(edges[0] >> 32) // piece * piece, int(edges[-1] >> 32) + 1, piece):
        first, last = np.searchsorted(edges, [a << 32, (a + piece) << 32])
        if first == last:
            continue
        values = decode(torch.from_numpy(np.array(rows[a: a + piece]))).float()
        for e in range(first, last, piece):  # the gathered rows at most a piece's
            part = edges[e: min(last, e + piece)]
            sums.index_add_(0, torch.from_numpy(part & 0xFFFFFFFF), values[torch.from_numpy((part >> 32) - a)])
    return sums
