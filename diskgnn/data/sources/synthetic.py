"""The built-in synthetic graphs: `--structure uniform` (W1, the default) and `powerlaw` (powerlaw.py).

What both share lives here: the flags checked, class-conditional features and
labels by node id. Features are signal * mu[class] + N(0, 1) noise.

Drawing N*D fresh normals costs ~30 ns each on a small VM (minutes for the
8M x 128 benchmark graph), so the noise of a row is the normalised sum of one
row from each of three fixed pools of NOISE_POOL normal rows, picked at
random: still N(0, 1) per entry and independent across columns, with
NOISE_POOL**3 (4e12) distinct combinations, at the cost of three row gathers.

`uniform`: nodes have a popularity rank r in [0, N); the node id is a fixed
pseudo-random bijection of the rank, so hot nodes are spread over the id
space (and over the feature file) as in real graphs. The class of a node is
its rank modulo C. Each node sends Poisson(K/2) edges; the other end has the
same class with probability `homophily`, and its rank is drawn as
floor(N * u**3), which gives a power-law tail of in-degrees. Synthetic graphs
are stored undirected, so the mean degree is about K. Its features nearly
give the class (class means ~4 sigma apart at signal 0.25 over 128 values),
so every system learns it to 99.6 % in one epoch.

Everything is generated in fixed blocks of nodes, each from its own random
stream keyed by (seed, kind, block), so the output depends on the seed alone,
not on the memory budget or chunk sizes.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UsageError
from .base import Source

BLOCK = 1 << 16
RANK_SKEW = 3.0
NOISE_POOL = 1 << 14
STRUCTURES = ("uniform", "powerlaw")


def stream(seed: int, kind: int, *block: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, kind, *block])))


def check_fraction(value: float, flag: str) -> None:
    if not 0 <= value <= 1:
        raise UsageError(f"synthetic: {flag} must be in [0, 1], got {value}")


class SyntheticSource(Source):
    """Class-conditional features and labels of nodes whose class `class_of` says; subclasses add the edges."""

    structure = ""

    def __init__(self, name: str, nodes: int, feat_dim: int, avg_degree: float, classes: int, seed: int,
                 homophily: float, feature_signal: float):
        if not 0 < nodes < 2**31:
            raise UsageError(f"synthetic: --nodes must be in [1, 2^31), got {nodes}")
        if feat_dim < 0 or classes < 1 or avg_degree < 0:
            raise UsageError("synthetic: --feat-dim must be >= 0, --classes positive and --avg-degree >= 0")
        if classes > nodes:
            raise UsageError(f"synthetic: {classes} classes need at least as many nodes (got {nodes})")
        check_fraction(homophily, "--homophily")
        if not feature_signal >= 0:
            raise UsageError(f"synthetic: --feature-signal must be >= 0, got {feature_signal}")
        self.avg_degree = avg_degree
        self.seed = seed
        self.homophily = homophily
        self.signal = feature_signal
        self.class_means = stream(seed, 0, 0).standard_normal((classes, feat_dim), dtype=np.float32)
        self.noise_pools = stream(seed, 3, 0).standard_normal((3, NOISE_POOL, feat_dim), dtype=np.float32)
        self.noise_pools /= np.sqrt(np.float32(3))
        super().__init__(name=name, num_nodes=nodes, feature_dim=feat_dim, feature_dtype=np.dtype(np.float32),
                         num_classes=classes, edge_count_hint=int(nodes * avg_degree / 2))

    def class_of(self, node: np.ndarray) -> np.ndarray:
        """The label of each node id, a pure function of the id (features and labels are drawn in different
        pieces)."""
        raise NotImplementedError

    def parameters(self) -> dict:
        """The generator's settings, for the manifest's `synthetic` key (docs/format.md)."""
        return {"structure": self.structure, "homophily": self.homophily, "feature_signal": self.signal}

    def _blocks(self):
        for b in range(-(-self.num_nodes // BLOCK)):
            yield b, np.arange(b * BLOCK, min(self.num_nodes, (b + 1) * BLOCK), dtype=np.int64)

    def features(self, max_rows):
        piece = max(1, min(BLOCK, max_rows))
        pool_a, pool_b, pool_c = self.noise_pools
        for b, ids in self._blocks():
            pick = stream(self.seed, 2, b).integers(0, NOISE_POOL, size=(3, ids.size))
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


class UniformSource(SyntheticSource):
    structure = "uniform"

    def __init__(self, nodes: int, feat_dim: int, avg_degree: float, classes: int, seed: int,
                 homophily: float = 0.8, feature_signal: float = 0.25):
        super().__init__(f"synthetic(nodes={nodes}, feat_dim={feat_dim}, avg_degree={avg_degree}, "
                         f"classes={classes}, seed={seed})",
                         nodes, feat_dim, avg_degree, classes, seed, homophily, feature_signal)
        # Multiplier coprime with N for the rank -> id bijection id = (a * r + b) mod N.
        a = int(stream(seed, 9, 0).integers(nodes // 3 + 1, max(nodes, 3))) | 1
        while math.gcd(a, nodes) != 1:
            a += 2
        self.a, self.b = a % nodes or 1, int(stream(seed, 9, 1).integers(0, nodes))
        self.a_inv = pow(self.a, -1, nodes) if nodes > 1 else 0

    def parameters(self) -> dict:
        return {**super().parameters(), "communities": self.num_classes}

    def node_of_rank(self, rank: np.ndarray) -> np.ndarray:
        return (self.a * rank + self.b) % self.num_nodes

    def class_of(self, node: np.ndarray) -> np.ndarray:
        rank = (self.a_inv * ((node - self.b) % self.num_nodes)) % self.num_nodes
        return rank % self.num_classes

    def edges(self, max_edges):
        n, c = self.num_nodes, self.num_classes
        for b, ids in self._blocks():
            rng = stream(self.seed, 1, b)
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
