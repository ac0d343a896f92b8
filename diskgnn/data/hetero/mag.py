"""`prepare synthetic --schema mag`: a MAG240M-shaped heterogeneous graph, generated streaming.

- paper: the powerlaw structure's nodes (sources/powerlaw.py): features with a weak class signal, labels that
  follow planted communities with noise, citations with power-law degrees mostly inside a community
  (relation `cites`, paper -> paper, `--avg-degree` of them per paper on average).
- author: `--authors-per-paper` x papers (MAG240M: 1.0), no features. Relation `writes` (author -> paper):
  each paper has 1 + Poisson(`--writers` - 1) authors (MAG240M: 3.2 on average), drawn from the paper's community
  with probability `--homophily` (else from any), within a community by a power law over the authors (a few
  write many papers).
- institution: one per `--papers-per-institution` papers (MAG240M: about 4,700), no features. Relation
  `affiliated_with` (author -> institution): an author has one with probability `--affiliated` (MAG240M: 0.37),
  of its community's institutions, by a power law.

Every value is a function of (seed, kind, block) streams or of the node id, so any piece is drawn the same
whatever the chunking, and memory stays bounded. `prepare` adds each relation's reverse (rev_writes lets a
paper's authors reach it and back).
"""

from __future__ import annotations

import numpy as np

from ...errors import UsageError
from ..sources.powerlaw import PowerLawSource
from ..sources.synthetic import BLOCK, stream
from ..schema import NodeType, Relation

WRITES, AFFILIATED = 11, 12  # stream kinds beside the powerlaw source's


class MagSource:
    """The MAG-shaped source, in the hetero source interface of sources.py."""

    def __init__(self, papers: int, feat_dim: int, avg_degree: float, classes: int, seed: int, *,
                 feature_dtype: str = "float16", authors_per_paper: float = 1.0, writers: float = 3.2,
                 papers_per_institution: int = 4700, affiliated: float = 0.37, homophily: float = 0.8, **powerlaw):
        if writers < 1 or authors_per_paper <= 0 or papers_per_institution < 1 or not 0 <= affiliated <= 1:
            raise UsageError("synthetic --schema mag: --writers must be >= 1, --authors-per-paper > 0, "
                             "--papers-per-institution >= 1 and --affiliated in [0, 1]")
        self.papers = PowerLawSource(papers, feat_dim, avg_degree, classes, seed, homophily=homophily, **powerlaw)
        k = self.papers.communities
        self.seed, self.homophily, self.writers, self.affiliated = seed, homophily, writers, affiliated
        self.num_authors = max(k, int(round(papers * authors_per_paper)))
        self.num_institutions = max(k, papers // papers_per_institution)
        self.name = (f"synthetic(schema=mag, papers={papers}, authors={self.num_authors}, institutions="
                     f"{self.num_institutions}, feat_dim={feat_dim}, classes={classes}, seed={seed})")
        self.types = (NodeType("paper", papers, feat_dim, feature_dtype), NodeType("author", self.num_authors),
                      NodeType("institution", self.num_institutions))
        self.relations = (Relation("paper", "cites", "paper"), Relation("author", "writes", "paper"),
                          Relation("author", "affiliated_with", "institution"))
        self.target, self.num_classes, self.multilabel = "paper", classes, False
        self.b = self.papers.b

    def type_of(self, name: str) -> NodeType:
        return next(t for t in self.types if t.name == name)

    def edge_count(self, relation: int) -> int:
        n = self.papers.num_nodes
        return int([n * self.papers.avg_degree / 2, n * self.writers, self.num_authors * self.affiliated][relation])

    def _power_law_member(self, rng, community: np.ndarray, count: int) -> np.ndarray:
        """A member of each community (ids m * K + community below `count`), by the degree power law: member j
        has weight ((j+1)/n)^b - (j/n)^b."""
        k = self.papers.communities
        n = (count - community + k - 1) // k
        j = np.minimum(np.floor(n * rng.random(community.size) ** (1 / self.b)).astype(np.int64), n - 1)
        return j * k + community

    def _other_community(self, rng, community: np.ndarray) -> np.ndarray:
        k = self.papers.communities
        out = community.copy()
        if k > 1:
            leave = rng.random(community.size) >= self.homophily
            out[leave] = (out[leave] + rng.integers(1, k, size=int(leave.sum()))) % k
        return out

    def edge_blocks(self, max_edges: int, relation: int):
        k = self.papers.communities
        if relation == 0:
            for s, d in self.papers.edges(max_edges):
                yield 0, s, d
            return
        count = self.papers.num_nodes if relation == 1 else self.num_authors
        for b in range(-(-count // BLOCK)):
            ranks = np.arange(b * BLOCK, min(count, (b + 1) * BLOCK), dtype=np.int64)
            rng = stream(self.seed, WRITES if relation == 1 else AFFILIATED, b)
            if relation == 1:  # each paper's authors: ranks are paper ranks, community rank mod K
                per = 1 + rng.poisson(self.writers - 1, ranks.size)
                owner = np.repeat(ranks, per)
                author = self._power_law_member(rng, self._other_community(rng, owner % k), self.num_authors)
                pair = np.unique(np.stack([author, self.papers.node_of_rank(owner)], 1), axis=0)
            else:  # an author's institution: authors' ids are their ranks, community id mod K
                has = ranks[rng.random(ranks.size) < self.affiliated]
                inst = self._power_law_member(rng, self._other_community(rng, has % k), self.num_institutions)
                pair = np.stack([has, inst], 1)
            for s in range(0, len(pair), max_edges):
                yield relation, pair[s:s + max_edges, 0], pair[s:s + max_edges, 1]

    def feature_blocks(self, max_rows: int):
        for block in self.papers.features(max_rows):
            yield "paper", block

    def label_blocks(self, max_rows: int):
        first = 0
        for block in self.papers.labels(max_rows):
            yield first, block.astype(np.int32)
            first += block.size

    def splits(self):
        return None

    def parameters(self) -> dict:
        return {"schema": "mag", **self.papers.parameters(), "authors": self.num_authors,
                "institutions": self.num_institutions, "writers": self.writers, "affiliated": self.affiliated}
