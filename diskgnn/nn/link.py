"""Link prediction's head: decoders that score (src, dst) pairs, the losses over positives and negatives, and
the ranking metrics (MRR, Hits@k, AUC against each edge's own negatives) every system is held to.

Scores come from node representations (a GNN's outputs, or learnable embeddings):
`dot` is <h_s, h_d>; `distmult` is <h_s, r * h_d> with r a learned vector
(DistMult with one relation, as MariusGNN's default for graphs without edge
types). Each positive is ranked against its own row of negatives: where
negatives are shared within a chunk of edges (MariusGNN's protocol), the rows
of a chunk's edges are the same nodes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DECODERS = ("dot", "distmult")
LOSSES = ("bce", "softmax")
HITS_AT = (1, 10)


class Decoder(nn.Module):
    def __init__(self, kind: str, dim: int):
        super().__init__()
        if kind not in DECODERS:
            raise ValueError(f"decoder {kind!r}: choose from {', '.join(DECODERS)}")
        self.kind = kind
        self.relation = nn.Parameter(torch.ones(dim)) if kind == "distmult" else None

    def forward(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Scores of row-aligned pairs: src and dst are [E, D] (or dst [E, K, D] against src [E, 1, D])."""
        if self.relation is not None:
            dst = dst * self.relation
        return (src * dst).sum(-1)

    def against(self, src: torch.Tensor, negatives: torch.Tensor, chunk_of: torch.Tensor) -> torch.Tensor:
        """[E, K] scores of each edge's src against the K negatives of its chunk: negatives is [C, K, D],
        chunk_of [E] each edge's chunk, non-decreasing (chunks are runs of consecutive edges). One matrix
        product per chunk, never an [E, K, D] gather."""
        if self.relation is not None:
            negatives = negatives * self.relation
        bounds = torch.searchsorted(chunk_of, torch.arange(negatives.shape[0] + 1, device=chunk_of.device)).tolist()
        return torch.cat([src[a:b] @ negatives[c].T for c, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))])


def batch_scores(decoder: Decoder, h: torch.Tensor, batch, rows=None) -> tuple[torch.Tensor, torch.Tensor]:
    """A link batch's positives' scores [E] and their chunks' negatives' [E, K] (offline/link_batches.py's
    LinkBatch), from representations `h`: row `rows(ids)` for node ids (default: row = id, every node's)."""
    def at(ids) -> torch.Tensor:
        return h[torch.from_numpy(ids if rows is None else rows(ids)).to(h.device)]

    src = at(batch.src)
    return decoder(src, at(batch.dst)), decoder.against(src, at(batch.negatives),
                                                        torch.from_numpy(batch.chunk_of).to(h.device))


def link_loss(pos: torch.Tensor, neg: torch.Tensor, kind: str) -> torch.Tensor:
    """pos [E], neg [E, K]. bce: each positive labelled 1 and its negatives 0, the negatives' terms averaged so
    that they weigh as much as the positive (averaged over all 1 + K scores, K of them negative, the model
    learns fastest to score everything low: with 100 negatives it collapsed to zero scores on Cora), then
    averaged over edges; softmax: each positive's cross-entropy against its row of negatives (MariusGNN's
    default). No edges (a batch of self-loops only): a zero that still backpropagates, not a NaN mean."""
    if pos.numel() == 0:
        return pos.sum() + neg.sum() * 0
    if kind == "bce":
        return (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="none")
                + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="none").mean(1)).mean()
    if kind == "softmax":
        logits = torch.cat([pos[:, None], neg], dim=1)
        return F.cross_entropy(logits, torch.zeros(pos.shape[0], dtype=torch.long, device=pos.device))
    raise ValueError(f"loss {kind!r}: choose from {', '.join(LOSSES)}")


def ranks(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """Each positive's rank among itself and its row of negatives, ties counted half (OGB's convention):
    1 + #(neg > pos) + #(neg == pos) / 2. A negative masked out is given -inf. A NaN score (a diverged model)
    ranks a positive last, never first: NaN compares false with everything."""
    pos = torch.nan_to_num(pos, nan=-torch.inf, posinf=torch.inf, neginf=-torch.inf)
    neg = torch.where(torch.isnan(neg), torch.inf, neg)
    above = (neg > pos[:, None]).sum(1).double()
    tied = (neg == pos[:, None]).sum(1).double()
    return 1 + above + tied / 2


def rank_sums(pos: torch.Tensor, neg: torch.Tensor) -> dict:
    """Sums over a batch of edges, to be added up over batches (and ranks) and divided by "edges": reciprocal
    ranks, hits at each k, and each edge's AUC against its own negatives, 1 - (rank - 1) / K with K its
    negatives that are not masked out (the chance that it outscores one of them, ties half)."""
    r = ranks(pos, neg)
    k = (neg != -torch.inf).sum(1).clamp(min=1).double()
    return {"edges": pos.numel(), "mrr": float((1 / r).sum()),
            **{f"hits@{k_}": float((r <= k_).double().sum()) for k_ in HITS_AT}, "auc": float((1 - (r - 1) / k).sum())}


def metrics_of(sums: dict) -> dict:
    """rank_sums' totals as means; NaN over no edges."""
    n = sums.get("edges", 0)
    return {m: (sums[m] / n if n else float("nan")) for m in ("mrr", *(f"hits@{k}" for k in HITS_AT), "auc")}
