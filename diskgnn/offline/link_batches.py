"""An epoch's link-prediction batches: the train graph's edges in a seeded order, `batch_size` per batch, each
batch's negatives shared per chunk of its edges, and the batch's seed nodes (the nodes whose representations
the batch needs: its edges' endpoints and its negatives).

Everything a batch holds is a function of (seed, epoch, batch index), computed in O(batch) memory from the
topology's memory maps: the edge order is a keyed permutation of the CSC's edge positions (hashing.Bijection),
not a shuffled array of every edge, so that a graph of billions of edges orders them in no memory, and the
offline sampler, the trainer and a peer given the same seed compute the same batch independently. The train
edges are the graph's (prepare --edge-split keeps the held-out ones out of it): where it is stored
undirected, each pair is a positive twice, once each way. Self-loops are no positives; a batch drops them, so
it may hold fewer than `batch_size` edges.

With EdgeBuckets (--embedding-partitions, offline/partitions.py) the epoch is its buffer states in turn, each
state's edges in their own keyed order, batches never crossing a state; a batch's negatives are its state's
nodes and it carries the state's partitions (the sampler's mask, the embedding table's buffer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.format import random_access
from ..hashing import Bijection
from .negatives import chunk_negatives
from .partitions import EdgeBuckets, buffer_negatives, epoch_states, state_positions


@dataclass
class LinkBatch:
    src: np.ndarray  # int64 [E] global ids: positives src -> dst
    dst: np.ndarray
    chunk_of: np.ndarray  # int64 [E], non-decreasing: each edge's chunk
    negatives: np.ndarray  # int64 [C, K] global ids, shared by a chunk's edges
    seeds: np.ndarray  # int64, sorted and unique: every node above
    partitions: tuple[int, ...] | None = None  # a partitioned epoch's: the buffer state it trains in
    exclude: bool = False  # its positives are left out of its sampled neighbourhoods (a partitioned train batch)

    @property
    def mask(self) -> int:
        """Its buffer's partitions as the sampler's bit mask."""
        return sum(1 << p for p in self.partitions or ())

    @property
    def excluded(self) -> np.ndarray | None:
        """The edges its sampling must not follow, [2E, 2] (source, destination): its positives, both ways."""
        if not self.exclude:
            return None
        return np.concatenate([np.stack([self.src, self.dst], 1), np.stack([self.dst, self.src], 1)])

    def local(self, ids: np.ndarray) -> np.ndarray:
        """Positions of global `ids` (all among the seeds) in `seeds`."""
        return np.searchsorted(self.seeds, ids)


@dataclass(frozen=True)
class LinkSpec:
    """How an epoch's edges are batched and corrupted (the --task link options)."""

    batch_size: int
    chunks: int = 10  # per batch (Marius's num_chunks)
    negatives: int = 100  # per chunk
    degree_fraction: float = 0.0


EVAL_CHUNK_EDGES = 1000  # held-out edges per eval batch, all sharing its negatives
EVAL_SEED = 1  # the eval negatives' own stream: the same for every training seed and every system


class LinkEpoch:
    """An epoch's train batches (`LinkEpoch(indptr, indices, spec, seed=, epoch=)`), or a split's held-out
    edges in eval batches (`LinkEpoch.held_out`): a sequence of LinkBatch."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, spec: LinkSpec, *, seed: int, epoch: int,
                 buckets: EdgeBuckets | None = None, capacity: int = 0):
        self.indptr, self.indices, self.spec = random_access(indptr), random_access(indices), spec
        self.num_nodes = len(indptr) - 1
        self.num_edges = int(indptr[-1])
        self.keys = (seed, 23, epoch)
        self.held = None
        keys = np.random.default_rng([seed, 19, epoch]).integers(0, 2**63, Bijection.ROUNDS)
        self.order = Bijection(max(1, self.num_edges), keys)
        self._partition(buckets, capacity, (seed, 37, epoch))

    @classmethod
    def held_out(cls, edges: np.ndarray, indptr: np.ndarray, indices: np.ndarray, *, negatives: int,
                 split_key: int) -> "LinkEpoch":
        """`edges` [E, 2] in their stored order, EVAL_CHUNK_EDGES a batch, each batch one chunk of `negatives`
        uniform nodes drawn from (EVAL_SEED, split_key, batch). (A partitioned run evaluates so too: its model,
        trained without its positives in their neighbourhoods, scores whole neighbourhoods, and all systems'
        evaluations stay alike.)"""
        self = cls.__new__(cls)
        self.indptr, self.indices, self.held = random_access(indptr), random_access(indices), edges
        self.spec = LinkSpec(EVAL_CHUNK_EDGES, chunks=1, negatives=negatives)
        self.num_nodes, self.num_edges = len(indptr) - 1, len(edges)
        self.keys = (EVAL_SEED, 29, split_key)
        self.buckets = None
        return self

    def _partition(self, buckets: EdgeBuckets | None, capacity: int, order_key) -> None:
        """A partitioned epoch's buffer states, each one's first batch and its edges' keyed order."""
        self.buckets = buckets
        if buckets is None:
            return
        seed, _, epoch = order_key
        self.states = epoch_states(buckets, capacity, seed=seed, epoch=epoch)
        per_state = [-(-st.num_edges // self.spec.batch_size) for st in self.states]
        self.first_batch = np.concatenate([[0], np.cumsum(per_state)]).astype(np.int64)
        self.orders = [Bijection(st.num_edges, np.random.default_rng([*order_key, s]).integers(
            0, 2**63, Bijection.ROUNDS)) for s, st in enumerate(self.states)]

    def __len__(self) -> int:
        if self.buckets is not None:
            return int(self.first_batch[-1])
        return -(-self.num_edges // self.spec.batch_size)

    def state_of(self, b: int) -> int:
        """A partitioned epoch's batch b's buffer state (an index into `states`)."""
        return int(np.searchsorted(self.first_batch, b, side="right") - 1)

    def _positions(self, b: int) -> np.ndarray:
        """Batch b's edges: CSC positions, or rows of the held-out edges."""
        size = self.spec.batch_size
        if self.buckets is None:
            at = np.arange(b * size, min(self.num_edges, (b + 1) * size))
            return at if self.held is not None else self.order(at)
        s = self.state_of(b)
        state, first = self.states[s], (b - int(self.first_batch[s])) * size
        return state_positions(self.buckets, state, self.orders[s](np.arange(first, min(state.num_edges,
                                                                                      first + size))))

    def _edges(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        positions = self._positions(b)
        if self.held is not None:
            rows = np.array(self.held[np.sort(positions)], dtype=np.int64).reshape(-1, 2)  # sorted: read forwards
            return rows[:, 0], rows[:, 1]
        by_position = np.argsort(positions)  # memory maps read in order
        src, dst = np.empty_like(positions), np.empty_like(positions)
        sorted_positions = positions[by_position]
        src[by_position] = np.asarray(self.indices[sorted_positions], dtype=np.int64)
        dst[by_position] = np.searchsorted(np.asarray(self.indptr), sorted_positions, side="right") - 1
        keep = src != dst
        return src[keep], dst[keep]

    def __getitem__(self, b: int) -> LinkBatch:
        if not 0 <= b < len(self):
            raise IndexError(f"batch {b} of {len(self)}")
        src, dst = self._edges(b)
        rng = np.random.default_rng([*self.keys, b])
        draw = {"num_nodes": self.num_nodes, "indices": self.indices}
        state = None
        if self.buckets is not None:
            state = self.states[self.state_of(b)]
            rows, n = self.buckets.rows, self.num_nodes
            draw = {**draw, "indices": _StateSources(self, state),
                    "uniform": lambda r, chunk_of, shape: buffer_negatives(r, state, rows, n, shape)}
        chunk_of, negatives = chunk_negatives(rng, src.size, chunks=self.spec.chunks, per_chunk=self.spec.negatives,
                                              degree_fraction=self.spec.degree_fraction, **draw)
        seeds = np.unique(np.concatenate([src, dst, negatives.ravel()]))
        return LinkBatch(src, dst, chunk_of, negatives, seeds, None if state is None else state.partitions,
                         exclude=state is not None)


class _StateSources:
    """The sources of a buffer state's edges as a sequence (degree-drawn negatives among the buffered nodes)."""

    def __init__(self, epoch: LinkEpoch, state):
        self.epoch, self.state = epoch, state

    def __len__(self) -> int:
        return self.state.num_edges

    def __getitem__(self, picks: np.ndarray) -> np.ndarray:
        return np.asarray(self.epoch.indices[state_positions(self.epoch.buckets, self.state, picks)], np.int64)
