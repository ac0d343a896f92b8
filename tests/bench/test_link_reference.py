"""The PyG link-prediction reference: its filtered all-node ranking against a loop, and a tiny run end to end."""

import numpy as np
import pytest
import torch

from bench.accuracy import link_reference as ref
from diskgnn.data.format import open_dataset
from diskgnn.nn.link import Decoder
from diskgnn.offline.link_batches import LinkEpoch


def test_filtered_all_node_ranking_matches_a_loop(link_data):
    ds = open_dataset(link_data)
    edge_index = ref.graph_edges(ds)
    known = ref.known_by_source(ds, edge_index)
    torch.manual_seed(0)
    h = torch.randn(ds.num_nodes, 4)
    test = torch.from_numpy(np.array(ds.held_out_edges("test"), dtype=np.int64))
    batches = LinkEpoch.held_out(ds.held_out_edges("test"), ds.indptr, ds.indices, negatives=50, split_key=1)
    got = ref.evaluate(h, Decoder("dot", 4), batches, known)
    true = {(a, b) for a, b in edge_index.T.tolist()}
    for s in ("val", "test"):
        for a, b in np.asarray(ds.held_out_edges(s)).tolist():
            true |= {(a, b), (b, a)}
    rr = []
    for u, v in test.tolist():
        pos = float(h[u] @ h[v])
        others = [float(h[u] @ h[w]) for w in range(ds.num_nodes) if w != v and (u, w) not in true]
        rr.append(1 / (1 + sum(o > pos for o in others) + 0.5 * sum(o == pos for o in others)))
    assert got["all_nodes_mrr"] == pytest.approx(np.mean(rr))
    assert 0 < got["mrr"] <= 1 and 0 <= got["auc"] <= 1


def test_a_tiny_run_learns_and_reports_the_best_val_epoch(link_data, capsys):
    pytest.importorskip("torch_geometric", reason="the reference's encoder is PyG's GraphSAGE")
    r = ref.main(["--data", str(link_data), "--epochs", "3", "--hidden", "8", "--eval-negatives", "20", "--all-nodes"])
    assert len(r["history"]) == 3 and 0 <= r["best_epoch"] < 3
    assert r["val"]["mrr"] == pytest.approx(max(h["mrr"] for h in r["history"]))
    for m in (r["val"], r["test"]):
        assert all(0 <= m[k] <= 1 for k in ("mrr", "hits@1", "hits@10", "auc", "all_nodes_mrr")), m
    assert r["held_out"] == {s: open_dataset(link_data).manifest["edge_split"][s] for s in ("val", "test")}
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('{"system": "pyg_reference"')


def test_the_csr_adjacency_encodes_as_the_edge_list_does(link_data):
    pytest.importorskip("torch_geometric", reason="the reference's encoder is PyG's GraphSAGE")
    from torch_geometric.nn.models import GraphSAGE

    ds = open_dataset(link_data)
    x = torch.from_numpy(np.array(ds.features, dtype=np.float32))
    torch.manual_seed(0)
    encoder = GraphSAGE(ds.feature_dim, 8, num_layers=2, out_channels=8)
    assert torch.allclose(encoder(x, ref.adjacency(ds)), encoder(x, ref.graph_edges(ds)), atol=1e-6)


@pytest.mark.parametrize("batch_size", [1, 47])
def test_diskgnn_link_batches_with_whole_neighbourhoods_score_as_the_reference(link_data, tmp_path, batch_size):
    """diskgnn's out-of-core link batches (fanouts -1,-1: every in-neighbour) and the reference's whole-graph PyG
    encoder, given the same weights: the same edges and negatives, the same seed outputs and the same loss."""
    pytest.importorskip("torch_geometric", reason="the reference's encoder is PyG's GraphSAGE")
    from torch_geometric.nn.models import GraphSAGE

    import diskgnn
    from diskgnn.nn.link import batch_scores, link_loss
    from diskgnn.nn.models import GNN
    from diskgnn.offline.link_batches import LinkSpec

    ds = open_dataset(link_data)
    x = torch.from_numpy(np.array(ds.features, dtype=np.float32))
    torch.manual_seed(0)
    ours = GNN("sage", ds.feature_dim, 8, 8, 2, 0.0)
    theirs = GraphSAGE(ds.feature_dim, 8, num_layers=2, out_channels=8)
    with torch.no_grad():
        for conv, layer in zip(theirs.convs, ours.layers):  # PyG's lin_l: neighbours, with the bias; lin_r: self
            conv.lin_l.weight.copy_(layer.neigh_lin.weight)
            conv.lin_l.bias.copy_(layer.self_lin.bias)
            conv.lin_r.weight.copy_(layer.self_lin.weight)
        whole = theirs(x, ref.adjacency(ds))
    decoder = Decoder("dot", 8)
    reference = LinkEpoch(ds.indptr, ds.indices, LinkSpec(batch_size, 2, 5), seed=3, epoch=0)
    with diskgnn.Loader(link_data, task="link", fanouts="-1,-1", batch_size=batch_size, chunks=2, negatives=5,
                        seed=3, epochs=1, memory_budget="1GiB", workdir=str(tmp_path / "w"), progress=False) as loader:
        seen = 0
        for mb in loader.epoch(0):
            theirs_batch = reference[mb.batch.index]
            assert np.array_equal(mb.link.src, theirs_batch.src) and np.array_equal(mb.link.negatives,
                                                                                     theirs_batch.negatives)
            with torch.no_grad():
                h = ours(mb.blocks, mb.x)
                assert torch.allclose(h, whole[torch.from_numpy(mb.link.seeds)], atol=1e-5)
                assert link_loss(*batch_scores(decoder, h, mb.link, mb.link.local), "bce").item() == pytest.approx(
                    link_loss(*batch_scores(decoder, whole, theirs_batch), "bce").item(), rel=1e-5)
            seen += 1
    assert seen == len(reference)
