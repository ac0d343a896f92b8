"""The built-in synthetic graph: homophilous, heavy-tailed degrees, class-correlated features.

Nodes have a popularity rank r in [0, N); the node id is a fixed pseudo-random
bijection of the rank, so hot nodes are spread over the id space (and over the
feature file) as in real graphs. The class of a node is its rank modulo C.
Each node sends Poisson(K/2) edges; the other end has the same class with
probability `homophily`, and its rank is drawn as floor(N * u**3), which gives
a power-law tail of degrees. Synthetic graphs are stored undirected, so the
mean degree is about K. Features are signal * mu[class] + N(0, 1) noise.

Drawing N*D fresh normals costs ~30 ns each on a small VM (minutes for the
8M x 128 benchmark graph), so the noise of a row is the normalised sum of one
row from each of three fixed pools of NOISE_POOL normal rows, picked at
random: still N(0, 1) per entry and independent across columns, with
NOISE_POOL**3 (4e12) distinct combinations, at the cost of three row gathers.

Everything is generated in fixed blocks of nodes, each from its own random
stream keyed by (seed, block), so the output depends on the seed alone, not
on the memory budget or chunk sizes.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UsageError
from .base import Source

BLOCK = 1 << 16
RANK_SKEW = 3.0
NOISE_POOL = 1 << 14


def _stream(seed: int, kind: int, block: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, kind, block])))


class SyntheticSource(Source):
    def __init__(self, nodes: int, feat_dim: int, avg_degree: float, classes: int, seed: int,
                 homophily: float = 0.8, feature_signal: float = 0.25):
        if not 0 < nodes < 2**31:
            raise UsageError(f"synthetic: --nodes must be in [1, 2^31), got {nodes}")
        if feat_dim < 1 or classes < 1 or avg_degree < 0:
            raise UsageError("synthetic: --feat-dim and --classes must be positive and --avg-degree >= 0")
        if classes > nodes:
            raise UsageError(f"synthetic: {classes} classes need at least as many nodes (got {nodes})")
        if not 0 <= homophily <= 1:
            raise UsageError(f"synthetic: --homophily must be in [0, 1], got {homophily}")
        self.avg_degree = avg_degree
        self.seed = seed
        self.homophily = homophily
        self.signal = feature_signal
        # Multiplier coprime with N for the rank -> id bijection id = (a * r + b) mod N.
        a = int(_stream(seed, 9, 0).integers(nodes // 3 + 1, max(nodes, 3))) | 1
        while math.gcd(a, nodes) != 1:
            a += 2
        self.a, self.b = a % nodes or 1, int(_stream(seed, 9, 1).integers(0, nodes))
        self.a_inv = pow(self.a, -1, nodes) if nodes > 1 else 0
        self.class_means = _stream(seed, 0, 0).standard_normal((classes, feat_dim), dtype=np.float32)
        self.noise_pools = _stream(seed, 3, 0).standard_normal((3, NOISE_POOL, feat_dim), dtype=np.float32)
        self.noise_pools /= np.sqrt(np.float32(3))
        super().__init__(name=f"synthetic(nodes={nodes}, feat_dim={feat_dim}, avg_degree={avg_degree}, "
                              f"classes={classes}, seed={seed})",
                         num_nodes=nodes, feature_dim=feat_dim, feature_dtype=np.dtype(np.float32),
                         num_classes=classes, edge_count_hint=int(nodes * avg_degree / 2))

    def node_of_rank(self, rank: np.ndarray) -> np.ndarray:
        return (self.a * rank + self.b) % self.num_nodes

    def class_of(self, node: np.ndarray) -> np.ndarray:
        rank = (self.a_inv * ((node - self.b) % self.num_nodes)) % self.num_nodes
        return rank % self.num_classes

    def _blocks(self):
        for b in range(-(-self.num_nodes // BLOCK)):
            yield b, np.arange(b * BLOCK, min(self.num_nodes, (b + 1) * BLOCK), dtype=np.int64)

    def edges(self, max_edges):
        n, c = self.num_nodes, self.num_classes
        for b, ids in self._blocks():
            rng = _stream(self.seed, 1, b)
            out_deg = rng.poisson(self.avg_degree / 2, size=ids.size)
            src = np.repeat(ids, out_deg)
            m = src.size
            same = rng.random(m) < self.homophily
            target_class = np.where(same, self.class_of(src), rng.integers(0, c, size=m))
            rank = np.floor(n * rng.random(m) ** RANK_SKEW).astype(np.int64)
            rank = rank - rank % c + target_class
            rank = np.where(rank >= n, rank - c, rank)
            dst = self.node_of_rank(rank)
            for s in range(0, m, max_edges):
                yield src[s: s + max_edges], dst[s: s + max_edges]

    def features(self, max_rows):
        piece = max(1, min(BLOCK, max_rows))
        pool_a, pool_b, pool_c = self.noise_pools
        for b, ids in self._blocks():
            pick = _stream(self.seed, 2, b).integers(0, NOISE_POOL, size=(3, ids.size))
            means = self.signal * self.class_means
            for s in range(0, ids.size, piece):
                part = slice(s, s + piece)
                x = pool_a[pick[0, part]]
                x += pool_b[pick[1, part]]
                x += pool_c[pick[2, part]]
                x += means[self.class_of(ids[part])]
                yield x

    def labels(self, max_rows):
        for _, ids in self._blocks():
            yield self.class_of(ids)
