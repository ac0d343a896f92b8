"""Partitioned link epochs (--embedding-partitions P): MariusGNN's buffer order, for an embedding table larger
than memory.

Node v belongs to partition v // R (R = ceil(N / P) rows; ids are contiguous ranges of the table, so each
partition is one sequential read and one sequential write). An edge src -> dst falls in bucket (src's
partition, dst's). The epoch is a sequence of buffer states, each `capacity` partitions held in memory; a
state trains the buckets among its partitions that no earlier state trained, so every train edge is a
positive once an epoch, and consecutive states differ by one partition (one partition written back and one
read, whole). A batch then needs only buffered rows: its negatives are drawn from the buffered partitions'
nodes and its neighbours are sampled among them (the sampler's per-batch partition masks), which is what
MariusGNN trains on too (its in-memory subgraph is the buffer's). The states come from a greedy cover of
the partition pairs (each step swaps in the partition that trains the most untrained buckets, as
MariusGNN's BETA ordering aims to); each epoch relabels the partitions with its own permutation, so the
order in which buckets and partners meet changes between epochs.

`EdgeBuckets` holds the train graph's edge positions sorted by bucket, in a file of the workdir (int32 or
int64 positions, one pass over the topology to build); everything else is a function of (seed, epoch).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.files import guard_io, temp_path
from ..errors import DiskgnnError, UsageError
from ..units import format_size

MAX_PARTITIONS = 64  # a batch's partitions are one 64-bit mask for the sampler


def partition_rows(num_nodes: int, partitions: int) -> int:
    return max(1, -(-num_nodes // partitions))


def buffer_plan(partitions: int, num_nodes: int, table_bytes: int, memory: int) -> tuple[int, int]:
    """(P, the partitions `memory` holds at once, at most P) for a table of `table_bytes`; refused below two."""
    one = partition_rows(num_nodes, partitions) * (table_bytes // max(1, num_nodes))
    if memory // one < min(2, partitions):
        raise UsageError(f"--embedding-partitions {partitions}: a partition is {format_size(one)} and the buffer "
                         f"gets {format_size(memory)}, less than two (raise --embedding-partitions, --embedding-cache "
                         "or --memory-budget)")
    return partitions, min(partitions, memory // one)


def buffer_states(partitions: int, capacity: int) -> list[tuple[tuple[int, ...], list[tuple[int, int]]]]:
    """[(the state's partitions, the partition pairs {a, b} (a <= b) it is the first to hold)], covering every
    pair once: the first state holds partitions 0..capacity-1, each next one swaps one partition for another,
    greedily the swap that covers the most uncovered pairs (ties: the partition with the most uncovered pairs
    left, then the lowest numbers)."""
    p, c = partitions, min(capacity, partitions)
    uncovered = np.ones((p, p), bool)
    buf = list(range(c))
    states = []

    def take(members):
        new = [(a, b) for i, a in enumerate(sorted(members)) for b in sorted(members)[i:] if uncovered[a, b]]
        for a, b in new:
            uncovered[a, b] = uncovered[b, a] = False
        states.append((tuple(buf), new))

    take(buf)
    while uncovered.any():
        outside = np.setdiff1d(np.arange(p), buf)
        held = uncovered[np.ix_(outside, buf)]  # [outside, held]: pair still uncovered
        # swapping `out` (column) for `inn` (row) covers inn's pairs with the others held, and {inn, inn}
        gain = held.sum(1, keepdims=True) - held + uncovered[outside, outside][:, None]
        left = uncovered[outside].sum(1)[:, None] + np.zeros_like(gain)
        score = gain * (p * p + 1) + left
        i, j = np.unravel_index(np.argmax(score), score.shape)
        buf[j] = int(outside[i])
        take(buf)
    return states


class EdgeBuckets:
    """The train graph's CSC edge positions in bucket order, `positions[offsets[b]:offsets[b + 1]]` bucket
    b = dst_partition * P + src_partition (written once per run to `path`, read through a memory map)."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, partitions: int, path: Path):
        n = len(indptr) - 1
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise DiskgnnError(f"--embedding-partitions {partitions}: must be 1 to {MAX_PARTITIONS}")
        self.partitions, self.rows, self.path = partitions, partition_rows(n, partitions), Path(path)
        self.num_nodes = n
        dtype = np.int32 if int(indptr[-1]) < 2**31 else np.int64
        counts = np.zeros(partitions * partitions, np.int64)
        tmp = temp_path(self.path)

        def build():
            with open(tmp, "wb") as f:
                for j in range(partitions):  # a destination partition's edges are one range of the CSC
                    lo, hi = int(indptr[min(n, j * self.rows)]), int(indptr[min(n, (j + 1) * self.rows)])
                    src_part = np.asarray(indices[lo:hi], np.int64) // self.rows
                    order = np.argsort(src_part, kind="stable")
                    counts[j * partitions: (j + 1) * partitions] = np.bincount(src_part, minlength=partitions)
                    f.write((order + lo).astype(dtype).data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        guard_io(self.path, build)
        self.offsets = np.concatenate([[0], np.cumsum(counts)])
        self.positions = np.memmap(self.path, dtype, "r") if self.offsets[-1] else np.zeros(0, dtype)

    def size(self, src: int, dst: int) -> int:
        b = dst * self.partitions + src
        return int(self.offsets[b + 1] - self.offsets[b])

    def bucket_ids(self, pairs) -> list[int]:
        """The buckets of partition pairs {a, b}: (a, b) and (b, a), once where a == b."""
        out = []
        for a, b in pairs:
            out += [b * self.partitions + a] + ([a * self.partitions + b] if a != b else [])
        return out


@dataclass
class BufferState:
    """One state of an epoch: the partitions in memory, and its edges: the buckets it trains."""

    partitions: tuple[int, ...]
    buckets: np.ndarray  # int64 bucket ids
    starts: np.ndarray  # int64 [len(buckets) + 1]: its edges' running count over them

    @property
    def num_edges(self) -> int:
        return int(self.starts[-1])

    @property
    def mask(self) -> int:
        return sum(1 << p for p in self.partitions)


def epoch_states(buckets: EdgeBuckets, capacity: int, *, seed: int, epoch: int) -> list[BufferState]:
    """The epoch's buffer states, its partitions relabelled by the epoch's permutation; states with no edges
    to train are left out."""
    perm = np.random.default_rng([seed, 31, epoch]).permutation(buckets.partitions)
    out = []
    for held, pairs in buffer_states(buckets.partitions, capacity):
        ids = np.asarray(buckets.bucket_ids([(int(perm[a]), int(perm[b])) for a, b in pairs]), np.int64)
        sizes = buckets.offsets[ids + 1] - buckets.offsets[ids]
        if sizes.sum():
            out.append(BufferState(tuple(sorted(int(perm[a]) for a in held)), ids,
                                   np.concatenate([[0], np.cumsum(sizes)])))
    return out


def state_positions(buckets: EdgeBuckets, state: BufferState, at: np.ndarray) -> np.ndarray:
    """CSC edge positions of the state's edges number `at` (0 <= at < state.num_edges) in its bucket order."""
    which = np.searchsorted(state.starts, at, side="right") - 1
    where = buckets.offsets[state.buckets[which]] + (at - state.starts[which])
    order = np.argsort(where)  # the memory map read forwards
    out = np.empty(at.size, np.int64)
    out[order] = buckets.positions[where[order]]
    return out


def buffer_nodes(state: BufferState, rows: int, num_nodes: int, draws: np.ndarray) -> np.ndarray:
    """Node ids of `draws` uniform in [0, the state's node count): the k-th node of its partitions in order."""
    sizes = np.array([max(0, min(num_nodes, (p + 1) * rows) - p * rows) for p in state.partitions], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    which = np.searchsorted(starts, draws, side="right") - 1
    return np.asarray(state.partitions, np.int64)[which] * rows + (draws - starts[which])


def state_node_count(state: BufferState, rows: int, num_nodes: int) -> int:
    return int(sum(max(0, min(num_nodes, (p + 1) * rows) - p * rows) for p in state.partitions))
