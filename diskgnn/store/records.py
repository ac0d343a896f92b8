"""A learnable table's records (store/embeddings.py): their layout, their first values, the optimizers' updates in
place on a batch of them, and which buffered ones a write-back takes."""

from __future__ import annotations

import math

import numpy as np
import torch

OPTIMIZERS = ("adagrad", "adam")
EPS = 1e-10  # Adagrad's, added to the root of the state
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch.optim.SparseAdam's defaults
INIT_BLOCK = 1 << 16  # rows initialised per random stream (the table is the same whatever the memory)
# Clean rows written with the dirty ones around them, rather than a write each side of them: a row of 64 values
# and Adagrad's state is 260 bytes, and the page cache writes whole 4 KiB pages anyway (a flush of a 2 GiB
# buffer after 200 batches of the 9M-node table made a million 260-byte writes, 4.7 s of 5.6).
GAP_ROWS = 16


def state_width(dim: int, optimizer: str) -> int:
    """float32 values of optimizer state per row (none without a table)."""
    return 0 if dim == 0 else 1 if optimizer == "adagrad" else 2 * dim


def row_bytes(dim: int, optimizer: str) -> int:
    """A record's bytes: its values and optimizer state."""
    return 4 * (dim + state_width(dim, optimizer))


def init_rows(seed: int, first: int, count: int, dim: int, state: int = 1) -> np.ndarray:
    """Records first..first+count of a new table: values N(0, 1/D) (rows of about unit norm), `state` zeros;
    each block of INIT_BLOCK rows from its own stream, so any range is the same however it is written."""
    out = np.zeros((count, dim + state), np.float32)
    for b in range(first // INIT_BLOCK, -(-(first + count) // INIT_BLOCK)):
        lo, hi = max(first, b * INIT_BLOCK), min(first + count, (b + 1) * INIT_BLOCK)
        # the stream's first rows, as many as needed: a prefix of the block's whatever is drawn
        block = np.random.default_rng([seed, 23, b]).standard_normal((hi - b * INIT_BLOCK, dim), np.float32)
        out[lo - first: hi - first, :dim] = block[lo - b * INIT_BLOCK: hi - b * INIT_BLOCK] / np.float32(np.sqrt(dim))
    return out


def coalesced(dirty: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Buffer positions `dirty` (sorted) with the clean positions between two of them added where fewer than
    GAP_ROWS lie between and their row ids `ids[position]` run on across the gap: each such run is then one
    write (a clean row holds what the file holds)."""
    if dirty.size < 2:
        return dirty
    gap = np.diff(dirty)
    fill = (gap > 1) & (gap <= GAP_ROWS) & (np.diff(ids[dirty]) == gap)
    counts = gap[fill] - 1
    if counts.size == 0:
        return dirty
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    lo = int(dirty[0])
    taken = np.zeros(int(dirty[-1]) - lo + 1, bool)  # a mask: np.union1d took 4 s for 1M of 3.6M rows
    taken[dirty - lo] = True
    taken[np.repeat(dirty[:-1][fill], counts) + 1 + within - lo] = True
    return np.flatnonzero(taken) + lo


def adagrad(records: torch.Tensor, grad: torch.Tensor, lr: float, step: int = 0) -> None:
    """Row-wise Adagrad, in place on records [n, D + 1] (values, state): state += mean(g^2) of the row;
    values -= lr * g / (sqrt(state) + EPS)."""
    dim = grad.shape[1]
    records[:, dim] += grad.pow(2).mean(1)
    records[:, :dim] -= lr * grad / (records[:, dim:].sqrt() + EPS)


def sparse_adam(records: torch.Tensor, grad: torch.Tensor, lr: float, step: int) -> None:
    """torch.optim.SparseAdam's update at its step `step` (1, 2, ...), in place on records [n, 3D] (values,
    first and second moments) of the rows with gradient `grad`, with its operations in its order (so the two
    agree bit for bit)."""
    d = grad.shape[1]
    values, m, v = records[:, :d], records[:, d: 2 * d], records[:, 2 * d:]
    b1, b2 = ADAM_BETAS
    m += grad.sub(m).mul_(1 - b1)
    v += grad.pow(2).sub_(v).mul_(1 - b2)
    size = lr * math.sqrt(1 - b2**step) / (1 - b1**step)
    values += -size * m.div(v.sqrt().add_(ADAM_EPS))


UPDATES = {"adagrad": adagrad, "adam": sparse_adam}
