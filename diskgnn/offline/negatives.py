"""Negative nodes for link prediction, drawn for each chunk of a batch's edges and shared by the chunk's edges
(MariusGNN's protocol: a batch of E edges in C chunks scores E x K pairs from C x K nodes' representations,
not E x K nodes').

`uniform` draws node ids uniformly; `degree` draws them in proportion to their degree: the source of a
uniformly drawn edge of the topology (the CSC's `indices`), a node appearing there once per out-edge
(per edge, where the graph is stored undirected). `degree_fraction` of each chunk's negatives are drawn the
second way, the rest the first (Marius's `degree_fraction`).
"""

from __future__ import annotations

import numpy as np


def chunk_negatives(rng: np.random.Generator, num_edges: int, *, chunks: int, per_chunk: int, num_nodes: int,
                    indices: np.ndarray | None = None, degree_fraction: float = 0.0,
                    uniform=None) -> tuple[np.ndarray, np.ndarray]:
    """(chunk_of, negatives): each of the `num_edges` edges' chunk (consecutive edges, as even as can be), and
    every chunk's `per_chunk` negative node ids, int64 [C, per_chunk] with C = min(chunks, num_edges) (at
    least 1). `uniform(rng, chunk_of, shape)` draws the not-by-degree ones in place of uniform ids in
    [0, num_nodes) (a partitioned epoch's, among its buffer's nodes: offline/partitions.py, whose `indices` are
    then the sources of the state's edges).""" 
    chunks = max(1, min(chunks, num_edges))
    chunk_of = np.arange(num_edges, dtype=np.int64) * chunks // max(1, num_edges)
    by_degree = int(round(per_chunk * degree_fraction)) if indices is not None and len(indices) else 0
    negatives = np.empty((chunks, per_chunk), dtype=np.int64)
    shape = (chunks, per_chunk - by_degree)
    negatives[:, by_degree:] = rng.integers(0, num_nodes, shape) if uniform is None else uniform(rng, chunk_of, shape)
    if by_degree:
        picks = np.sort(rng.integers(0, len(indices), chunks * by_degree))  # sorted: a memory map reads ahead
        negatives[:, :by_degree] = rng.permutation(np.asarray(indices[picks], dtype=np.int64)).reshape(
            chunks, by_degree)
    return chunk_of, negatives
