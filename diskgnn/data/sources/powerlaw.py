"""`--structure powerlaw`: a degree-corrected stochastic block model, shaped like a citation graph.

W1 (`uniform`) is learned to 99.6 % in one epoch because its features nearly
give the class. Here the features only hint at it and the graph carries the
rest, as in ogbn-papers100M, so a GNN beats a model of the features alone.

- Communities: node rank r in [0, N) belongs to community r mod K and sits at
  position j = r div K in it. Community k's class is k mod C; a node's label
  is its community's class except, with probability `label_noise`, another
  class drawn uniformly (a function of the node id, so features and labels
  agree whatever pieces they are drawn in).
- Features follow the label, with a signal weak enough that classes overlap
  (a linear probe on the features alone gets ~30 % of 16 classes), while
  averaging a node's neighbours, mostly of its community, recovers the class.
  Real node features (text embeddings) spread their variance unevenly over
  correlated directions, so features and class means share one: standard
  deviations falling as 1/i along random orthogonal directions. The classes
  are as separable as with isotropic noise, but a GNN's optimiser needs
  several epochs for the weak directions (with isotropic features it
  converged within a few hundred batches), as on real graphs.
- Degrees: position j of a community of n nodes has weight
  w_j = ((j+1)/n)^b - (j/n)^b, b = (g-2)/(g-1), the mass an inverse-CDF draw
  x = u^(1/b) puts on [j/n, (j+1)/n): a power law whose degree density falls
  as d^-g (g = `degree_exponent`). A node sends Poisson(K/2 * n * w_j) edges
  and receives edges in proportion to w_j, so its expected degree once the
  graph is stored undirected is proportional to w_j and the mean is about K.
- Mixing: an edge stays in its source's community with probability
  `homophily`, else goes to one of the other communities, uniformly; its
  destination there is an inverse-CDF draw, so hubs attract edges from
  everywhere.
- Ids: rank -> id is a seeded Feistel permutation (`Bijection`), so hubs and
  communities have no locality in the id space or the feature file.

Edges are drawn per block of BLOCK source ranks (their out-degrees from one
stream) and, inside a block, in pieces of EDGE_BLOCK edges, each from its own
stream keyed by (seed, kind, block, piece): a block holding hubs sends
millions of edges, yet memory stays bounded and the output depends on the
seed alone. Self-loops are dropped; duplicate edges are merged by prepare.
"""

from __future__ import annotations

import numpy as np

from ...errors import UsageError
from ...hashing import U64, Bijection, mix64, unit_interval
from .synthetic import SyntheticSource, check_fraction, stream

EDGE_BLOCK = 1 << 18
FEATURE_DECAY = 1.0
MIXING_ROWS = 2048  # noise rows mixed at a time: the float64 products of a whole pool would take 2 x 16 MiB more
# Stream kinds beside synthetic.py's 0-3 and 9.
DEGREES, EDGES, KEYS = 4, 5, 6


def feature_mixing(seed: int, dim: int) -> np.ndarray:
    """A symmetric map with standard deviations (i + 1)^-FEATURE_DECAY along random orthogonal directions, scaled
    to keep the mean variance 1: the uneven, correlated spectrum of real node features (text embeddings).
    Computed in float64 and rounded once."""
    basis, _ = np.linalg.qr(stream(seed, KEYS, 2).standard_normal((dim, dim)))
    spectrum = (np.arange(dim) + 1.0) ** -FEATURE_DECAY
    if dim:  # a featureless graph (--feat-dim 0) has no spectrum to scale
        spectrum /= np.sqrt((spectrum**2).mean())
    return (basis * spectrum) @ basis.T


class PowerLawSource(SyntheticSource):
    structure = "powerlaw"

    def __init__(self, nodes: int, feat_dim: int, avg_degree: float, classes: int, seed: int,
                 homophily: float = 0.8, feature_signal: float = 0.1, communities: int | None = None,
                 label_noise: float = 0.1, degree_exponent: float = 2.5):
        communities = 4 * classes if communities is None else communities
        name = (f"synthetic(structure=powerlaw, nodes={nodes}, feat_dim={feat_dim}, avg_degree={avg_degree}, "
                f"classes={classes}, seed={seed}, communities={communities}, homophily={homophily}, "
                f"label_noise={label_noise}, degree_exponent={degree_exponent}, feature_signal={feature_signal})")
        super().__init__(name, nodes, feat_dim, avg_degree, classes, seed, homophily, feature_signal)
        if not classes <= communities <= nodes:
            raise UsageError(f"synthetic: --communities must be in [--classes, --nodes] = [{classes}, {nodes}] "
                             f"(every class needs a community), got {communities}")
        check_fraction(label_noise, "--label-noise")
        if label_noise > 0 and classes < 2:
            raise UsageError("synthetic: --label-noise needs at least 2 classes")
        if not 2 < degree_exponent <= 10:
            raise UsageError(f"synthetic: --degree-exponent must be in (2, 10] (at 2 and below the mean degree "
                             f"diverges), got {degree_exponent}")
        self.communities = communities
        self.label_noise = label_noise
        self.degree_exponent = degree_exponent
        self.b = (degree_exponent - 2) / (degree_exponent - 1)
        self.sizes = (nodes - np.arange(communities, dtype=np.int64) + communities - 1) // communities
        self.node_of_rank = Bijection(nodes, stream(seed, KEYS, 0).integers(0, 2**63, Bijection.ROUNDS))
        self.noise_keys = [int(k) for k in stream(seed, KEYS, 1).integers(0, 2**63, 2)]
        # Both sides of x = (signal * mu + noise) @ mixing: classes stay as separable as before (the probe whitens
        # them), but the weak directions a first-order optimiser needs converge slowly.
        mixing = feature_mixing(seed, feat_dim)
        self.class_means = (self.class_means @ mixing).astype(np.float32)
        for pool in self.noise_pools:
            for first in range(0, len(pool), MIXING_ROWS):
                pool[first: first + MIXING_ROWS] = pool[first: first + MIXING_ROWS] @ mixing

    def parameters(self) -> dict:
        return {**super().parameters(), "communities": self.communities, "label_noise": self.label_noise,
                "degree_exponent": self.degree_exponent}

    def community_of(self, node: np.ndarray) -> np.ndarray:
        return self.node_of_rank.inverse(node) % self.communities

    def class_of(self, node: np.ndarray) -> np.ndarray:
        node = np.asarray(node, dtype=np.int64)
        label = self.community_of(node) % self.num_classes
        if self.label_noise > 0:
            flip = unit_interval(mix64(node, self.noise_keys[0])) < self.label_noise
            other = 1 + mix64(node[flip], self.noise_keys[1]) % U64(self.num_classes - 1)
            label[flip] = (label[flip] + other.astype(np.int64)) % self.num_classes
        return label

    def weights(self, rank: np.ndarray) -> np.ndarray:
        """n * w_j of each rank: its expected share of its community's edge ends, times the community's size."""
        n = self.sizes[rank % self.communities].astype(np.float64)
        j = (rank // self.communities).astype(np.float64)
        return n * (((j + 1) / n) ** self.b - (j / n) ** self.b)

    def edges(self, max_edges):
        k_count = self.communities
        for b, ranks in self._blocks():
            out_deg = stream(self.seed, DEGREES, b).poisson(self.avg_degree / 2 * self.weights(ranks))
            ends = np.cumsum(out_deg)
            ids = self.node_of_rank(ranks)
            for piece, first in enumerate(range(0, int(ends[-1]), EDGE_BLOCK)):
                rng = stream(self.seed, EDGES, b, piece)
                local = np.searchsorted(ends, np.arange(first, min(int(ends[-1]), first + EDGE_BLOCK)), side="right")
                m = local.size
                community = ranks[local] % k_count
                if k_count > 1:
                    leave = rng.random(m) >= self.homophily
                    community[leave] = (community[leave] + rng.integers(1, k_count, size=int(leave.sum()))) % k_count
                n = self.sizes[community]
                j = np.minimum(np.floor(n * rng.random(m) ** (1 / self.b)).astype(np.int64), n - 1)
                dst_rank = j * k_count + community
                keep = dst_rank != ranks[local]
                src, dst = ids[local[keep]], self.node_of_rank(dst_rank[keep])
                for s in range(0, src.size, max_edges):
                    yield src[s: s + max_edges], dst[s: s + max_edges]
