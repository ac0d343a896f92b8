"""Partitioned link epochs (--embedding-partitions P): MariusGNN's buffer order, for an embedding table larger
than memory.

Node v belongs to partition v // R (R = ceil(N / P) rows; ids are contiguous ranges of the table, so each
partition is one sequential read and one sequential write). An edge src -> dst falls in bucket (src's
partition, dst's). The epoch is a sequence of buffer states, each `capacity` partitions held in memory,
consecutive ones a partition apart (one partition written back and one read, whole); each pair of
partitions' buckets train in one state that holds both, so every train edge is a positive once an epoch. A
batch then needs only buffered rows: its negatives are drawn from the buffered partitions' nodes and its
neighbours are sampled among them (the sampler's per-batch partition masks), which is what MariusGNN trains
on too (its in-memory subgraph is the buffer's); and its own positives are left out of its neighbourhoods,
or else a positive's endpoints, which always see each other, would be told from negatives, which in a small
buffer mostly see no one (measured on a 500k-node graph, 4 of 64 partitions held: the loss fell to 0.34 and
val MRR stayed at chance, AUC 0.41; left out, val MRR rises over 3 epochs).

The states come from a greedy cover of the partition pairs (each step swaps in the partition that covers the
most uncovered pairs, as MariusGNN's BETA ordering aims to); each epoch relabels the partitions with its own
permutation and gives each pair to a state drawn among those that hold both, so that a state's positives do
not all touch the partition it brought in (as MariusGNN's COMET ordering draws them; on that graph, val MRR
0.032 against 0.028 with the first state that covers the pair). `EdgeBuckets` holds the train graph's edge
positions sorted by bucket, in a file of the workdir (int32 or int64 positions, one pass over the topology to
build); everything else is a function of (seed, epoch).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.files import guard_io, temp_path
from ..data.format import random_access
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
    """The train graph's CSC edge positions in bucket order: `positions[offsets[b]:offsets[b + 1]]` are bucket
    b's, b = dst_partition * P + src_partition (`train` writes them once per run to a workdir file, read through
    a memory map)."""

    def __init__(self, partitions: int, num_nodes: int, counts: np.ndarray, positions: np.ndarray):
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise DiskgnnError(f"--embedding-partitions {partitions}: must be 1 to {MAX_PARTITIONS}")
        self.partitions, self.num_nodes, self.rows = partitions, num_nodes, partition_rows(num_nodes, partitions)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.positions = positions

    @classmethod
    def train(cls, indptr: np.ndarray, indices: np.ndarray, partitions: int, path: Path) -> "EdgeBuckets":
        n, path = len(indptr) - 1, Path(path)
        rows = partition_rows(n, partitions)
        dtype = np.int32 if int(indptr[-1]) < 2**31 else np.int64
        counts = np.zeros(partitions * partitions, np.int64)
        tmp = temp_path(path)

        def build():
            with open(tmp, "wb") as f:
                for j in range(partitions):  # a destination partition's edges are one range of the CSC
                    lo, hi = int(indptr[min(n, j * rows)]), int(indptr[min(n, (j + 1) * rows)])
                    src_part = np.asarray(indices[lo:hi], np.int64) // rows
                    order = np.argsort(src_part, kind="stable")
                    counts[j * partitions: (j + 1) * partitions] = np.bincount(src_part, minlength=partitions)
                    f.write((order + lo).astype(dtype).data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        guard_io(path, build)
        # a state's edges are read in a keyed order: at random within its buckets
        return cls(partitions, n, counts, random_access(np.memmap(path, dtype, "r")) if counts.sum() else
                   np.zeros(0, dtype))

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
    rng = np.random.default_rng([seed, 31, epoch])
    perm = rng.permutation(buckets.partitions)
    states = buffer_states(buckets.partitions, capacity)
    holders: dict = {}
    for k, (held, _) in enumerate(states):
        for i, a in enumerate(sorted(held)):
            for b in sorted(held)[i:]:
                holders.setdefault((a, b), []).append(k)
    assigned: list[list] = [[] for _ in states]
    for pair, ks in sorted(holders.items()):
        assigned[ks[int(rng.integers(len(ks)))]].append(pair)
    out = []
    for (held, _), pairs in zip(states, assigned):
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


def buffer_negatives(rng: np.random.Generator, state: BufferState, rows: int, num_nodes: int, shape) -> np.ndarray:
    """Nodes drawn uniformly among the state's partitions' (a batch's negatives, as MariusGNN's)."""
    sizes = np.array([max(0, min(num_nodes, (p + 1) * rows) - p * rows) for p in state.partitions], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    draws = rng.integers(0, max(1, int(starts[-1])), shape)
    which = np.searchsorted(starts, draws, side="right") - 1
    return np.asarray(state.partitions, np.int64)[which] * rows + (draws - starts[which])
