"""Link prediction's decoders, losses, metrics and negatives against plain loops."""

import math

import numpy as np
import pytest
import torch

from diskgnn.nn.link import Decoder, link_loss, metrics_of, rank_sums, ranks
from diskgnn.offline.negatives import chunk_negatives


def loop_rank(p, row):
    return 1 + sum(1.0 if n > p else 0.5 if n == p else 0.0 for n in row)


def loop_auc(pos, neg):
    """Each positive's chance to outscore one of its own negatives (ties half), averaged over positives."""
    return np.mean([sum(1.0 if p > n else 0.5 if p == n else 0.0 for n in row) / len(row)
                    for p, row in zip(pos, neg)])


@pytest.mark.parametrize("edges,k", [(1, 1), (1, 7), (199, 13), (64, 100)])
def test_ranks_auc_and_hits_match_loops_with_ties(edges, k):
    g = torch.Generator().manual_seed(edges * k)
    pos = torch.randint(0, 5, (edges,), generator=g).double()  # few values: many ties
    neg = torch.randint(0, 5, (edges, k), generator=g).double()
    want = [loop_rank(p, row) for p, row in zip(pos.tolist(), neg.tolist())]
    assert ranks(pos, neg).tolist() == want
    m = metrics_of(rank_sums(pos, neg))
    assert m["mrr"] == pytest.approx(np.mean([1 / r for r in want]))
    assert m["hits@1"] == pytest.approx(np.mean([r <= 1 for r in want]))
    assert m["hits@10"] == pytest.approx(np.mean([r <= 10 for r in want]))
    assert m["auc"] == pytest.approx(loop_auc(pos.tolist(), neg.tolist()))
    halves = [rank_sums(pos[:a], neg[:a]) for a in (edges // 2,)] + [rank_sums(pos[edges // 2:], neg[edges // 2:])]
    assert metrics_of({k: halves[0][k] + halves[1][k] for k in halves[0]}) == pytest.approx(m)  # sums add up


def test_metrics_of_no_edges_are_nan_and_masked_negatives_do_not_count():
    m = metrics_of(rank_sums(torch.empty(0), torch.empty(0, 5)))
    assert all(math.isnan(v) for v in m.values())
    pos, neg = torch.tensor([1.0]), torch.tensor([[2.0, -math.inf, 0.0]])
    assert ranks(pos, neg).tolist() == [2.0]
    assert metrics_of(rank_sums(pos, neg))["auc"] == pytest.approx(0.5)  # above 0.0, below 2.0; the masked one is none
    # a diverged model's NaN scores rank its positives last, not first
    nan = torch.tensor([math.nan, 1.0])
    assert ranks(nan, torch.tensor([[0.0, 0.0], [math.nan, 0.0]])).tolist() == [3.0, 2.0]
    assert metrics_of(rank_sums(nan[:1], torch.zeros(1, 2)))["auc"] == 0.0


def test_losses_match_their_formulas():
    g = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(199, generator=g), torch.randn(199, 13, generator=g)
    sig = torch.sigmoid
    bce = torch.stack([-(torch.log(sig(p)) + torch.log(1 - sig(n)).mean()) for p, n in zip(pos, neg)]).mean()
    assert float(link_loss(pos, neg, "bce")) == pytest.approx(float(bce), rel=1e-5)
    soft = torch.stack([-torch.log_softmax(torch.cat([p[None], n]), 0)[0] for p, n in zip(pos, neg)]).mean()
    assert float(link_loss(pos, neg, "softmax")) == pytest.approx(float(soft), rel=1e-5)
    with pytest.raises(ValueError, match="loss 'hinge'"):
        link_loss(pos, neg, "hinge")
    empty = torch.zeros(0, requires_grad=True)
    for kind in ("bce", "softmax"):  # a batch whose edges were all self-loops
        loss = link_loss(empty, empty[:, None].expand(0, 3), kind)
        loss.backward()
        assert float(loss.detach()) == 0.0 and empty.grad is not None


@pytest.mark.parametrize("kind", ["dot", "distmult"])
@pytest.mark.parametrize("chunks", [1, 3])
def test_decoder_scores_each_edge_against_its_chunks_negatives(kind, chunks):
    torch.manual_seed(0)
    dec = Decoder(kind, 5)
    if dec.relation is not None:
        dec.relation.data = torch.randn(5)
    src, dst, negs = torch.randn(7, 5), torch.randn(7, 5), torch.randn(chunks, 4, 5)
    chunk_of = torch.arange(7) * chunks // 7
    r = dec.relation if dec.relation is not None else torch.ones(5)
    assert torch.allclose(dec(src, dst), torch.stack([(s * r * d).sum() for s, d in zip(src, dst)]))
    want = torch.stack([torch.stack([(src[e] * r * negs[chunk_of[e], j]).sum() for j in range(4)])
                        for e in range(7)])
    assert torch.allclose(dec.against(src, negs, chunk_of), want, atol=1e-6)


def test_chunk_negatives_shapes_sharing_and_degree_bias():
    rng = np.random.default_rng(0)
    chunk_of, negs = chunk_negatives(rng, 10, chunks=3, per_chunk=4, num_nodes=199)
    assert chunk_of.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2] and negs.shape == (3, 4)
    assert negs.min() >= 0 and negs.max() < 199
    chunk_of, negs = chunk_negatives(rng, 1, chunks=8, per_chunk=5, num_nodes=199)
    assert chunk_of.tolist() == [0] and negs.shape == (1, 5)
    chunk_of, negs = chunk_negatives(rng, 0, chunks=8, per_chunk=5, num_nodes=199)
    assert chunk_of.size == 0 and negs.shape == (1, 5)
    # A star: node 0 is the source of 900 of 1,000 edges; drawn by degree it is ~90 % of the negatives.
    indices = np.r_[np.zeros(900, dtype=np.int32), np.arange(1, 101, dtype=np.int32)]
    _, negs = chunk_negatives(rng, 1000, chunks=10, per_chunk=1000, num_nodes=101, indices=indices,
                              degree_fraction=1.0)
    assert abs((negs == 0).mean() - 0.9) < 0.01
    _, negs = chunk_negatives(rng, 1000, chunks=10, per_chunk=1000, num_nodes=101, indices=indices,
                              degree_fraction=0.5)
    assert abs((negs == 0).mean() - (0.45 + 0.5 / 101)) < 0.01
