"""The PyG seam against plain oracles: numpy indexing for the feature store, the dataset's CSC for the graph store
and the sampler's edges, and PyG's GraphSAGE over the whole in-memory graph for whole batches (all neighbours
sampled, a 2-layer model's seeds see exactly their full 2-hop neighbourhood)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric", reason="torch_geometric is the optional extra diskgnn[pyg]")

from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import LinkLoader, NodeLoader  # noqa: E402
from torch_geometric.sampler import NegativeSampling  # noqa: E402
from torch_geometric.nn.models import GraphSAGE  # noqa: E402

import diskgnn  # noqa: E402
from diskgnn.data.format import open_dataset  # noqa: E402
from diskgnn.data.prepare import prepare  # noqa: E402
from diskgnn.data.quantize.cli import quantize_dataset  # noqa: E402
from diskgnn.data.quantize.variants import load_quantized  # noqa: E402
from diskgnn.errors import DiskgnnError  # noqa: E402
from diskgnn.pyg import (DiskgnnFeatureStore, DiskgnnGraphStore, DiskgnnLoader, DiskgnnSampler,  # noqa: E402
                         to_pyg)

from conftest import REPO, random_graph, write_npy_dir  # noqa: E402

N, DIM = 199, 1025  # rows of 4,100 bytes: not a multiple of the 4 KiB sectors O_DIRECT reads


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pyg")
    g = random_graph(n=N, e=6 * N, d=DIM, classes=4, seed=3)
    g["feat"][np.arange(N), g["labels"]] += 3.0
    g["dst"][:5] = 7  # node 7 has a high in-degree, so fanouts cut it
    splits = {"train": np.arange(0, N, 2), "val": np.arange(1, N, 4), "test": np.arange(3, N, 4)}
    path = prepare(write_npy_dir(tmp / "src", g, splits=splits), tmp / "ds", progress=False)
    quantize_dataset(path, ["sq8"], force=True)
    return path


@pytest.fixture(scope="module")
def ds(data_dir):
    return open_dataset(data_dir)


def in_neighbours(ds, v: int) -> np.ndarray:
    ip = np.asarray(ds.indptr)
    return np.asarray(ds.indices[ip[v]: ip[v + 1]], dtype=np.int64)


IDS = [np.array([5]), np.arange(N), np.array([3, 3, 198, 0, 3]), np.array([], dtype=np.int64),
       np.array([198, 7, 1, 7])]


@pytest.mark.parametrize("cache", [0, "20KiB", 10 << 20])
@pytest.mark.parametrize("ids", IDS, ids=["one", "all-199", "dups", "empty", "mixed"])
def test_feature_store_equals_numpy_indexing(data_dir, ds, cache, ids):
    fs = DiskgnnFeatureStore(data_dir, cache=cache)  # the reader the machine has: io_uring where built
    x, y = fs.multi_get_tensor([dict(group_name=None, attr_name="x", index=torch.from_numpy(ids)),
                                dict(group_name=None, attr_name="y", index=torch.from_numpy(ids))])
    np.testing.assert_array_equal(x.numpy(), np.asarray(ds.features)[ids])
    np.testing.assert_array_equal(y.numpy(), np.asarray(ds.labels)[ids])
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    stats = fs.stats()
    assert stats["host"]["hits"] + stats["disk"]["hits"] == ids.size
    if cache == 0:
        assert stats["host"]["hits"] == 0
    if cache == 10 << 20:
        assert stats["disk"]["hits"] == 0
    fs.close()


def test_feature_store_cache_holds_the_highest_in_degree_rows(data_dir, ds):
    fs = DiskgnnFeatureStore(data_dir, cache=3 * DIM * 4)
    degree = np.diff(np.asarray(ds.indptr))
    held = next(iter(fs.rows.placements.values())).tier_ids[0]  # the one type's
    assert held.size == 3 and degree[held].min() >= np.sort(degree)[-3]
    fs.get_tensor(group_name=None, attr_name="x", index=torch.from_numpy(held))
    assert fs.stats()["host"]["hits"] == 3 and fs.stats()["disk"]["hits"] == 0


def test_feature_store_other_indexes_and_sizes(data_dir, ds):
    fs = DiskgnnFeatureStore(data_dir, cache=0)
    np.testing.assert_array_equal(fs.get_tensor(group_name=None, attr_name="x", index=slice(10, 30, 7)).numpy(),
                                  np.asarray(ds.features)[10:30:7])
    mask = np.zeros(N, dtype=bool)
    mask[[0, 50, 198]] = True
    np.testing.assert_array_equal(fs.get_tensor(group_name=None, attr_name="y", index=torch.from_numpy(mask)).numpy(),
                                  np.asarray(ds.labels)[mask])
    assert fs.get_tensor_size(group_name=None, attr_name="x") == (N, DIM)
    assert {a.attr_name for a in fs.get_all_tensor_attrs()} == {"x", "y"}
    with pytest.raises(DiskgnnError, match="out of range"):
        fs.get_tensor(group_name=None, attr_name="x", index=torch.tensor([N]))
    with pytest.raises(KeyError, match="no tensor .*this dataset has None/x, None/y"):
        fs.get_tensor(group_name=None, attr_name="edge_weight", index=torch.tensor([0]))


def test_feature_store_decodes_a_quantized_variant(data_dir, ds):
    ids = np.array([4, 4, 100, 0])
    fs = DiskgnnFeatureStore(data_dir, features="sq8", cache=0)
    q, codes, _ = load_quantized(ds, "sq8")
    got = fs.get_tensor(group_name=None, attr_name="x", index=torch.from_numpy(ids))
    np.testing.assert_array_equal(got.numpy(), q.decode_numpy(np.asarray(codes)[ids]))
    assert fs.stats()["disk"]["bytes"] == ids.size * DIM  # one byte per value was read, not four


def test_stores_are_read_only(data_dir):
    fs, gs = DiskgnnFeatureStore(data_dir, cache=0), DiskgnnGraphStore(data_dir)
    with pytest.raises(DiskgnnError, match="read-only"):
        fs.put_tensor(torch.zeros(2, DIM), group_name=None, attr_name="x", index=torch.tensor([0, 1]))
    with pytest.raises(DiskgnnError, match="read-only"):
        fs.remove_tensor(group_name=None, attr_name="x", index=None)
    with pytest.raises(DiskgnnError, match="read-only"):
        gs.put_edge_index((torch.tensor([0]), torch.tensor([1])), edge_type=None, layout="coo", size=(N, N))


def test_graph_store_maps_the_csc(data_dir, ds):
    gs = DiskgnnGraphStore(data_dir)
    (attr,) = gs.get_all_edge_attrs()
    indices, indptr = gs.get_edge_index(attr)
    np.testing.assert_array_equal(indices.numpy(), np.asarray(ds.indices))
    np.testing.assert_array_equal(indptr.numpy(), np.asarray(ds.indptr))
    assert attr.size == (N, N) and attr.layout.value == "csc"
    with pytest.raises(DiskgnnError, match="CSC only"):
        gs.get_edge_index(edge_type=None, layout="coo", size=(N, N))


def check_subgraph(ds, data: Data, seeds: np.ndarray, fanouts) -> None:
    """`data` is a NeighborLoader-style subgraph of `seeds`: seeds first, x and y the rows of n_id, every edge a
    real in-edge, each node's in-edges sampled once, at most its hop's fanout (all where the fanout is -1)."""
    data = data.cpu()  # diskgnn.Loader's batches are on its device: a GPU's where there is one
    n_id = data.n_id.numpy()
    np.testing.assert_array_equal(n_id[: data.batch_size], seeds)
    assert data.batch_size == seeds.size
    np.testing.assert_array_equal(data.x.numpy(), np.asarray(ds.features)[n_id])
    np.testing.assert_array_equal(data.y.numpy(), np.asarray(ds.labels)[n_id])
    src, dst = data.edge_index.numpy()
    assert sum(data.num_sampled_nodes) == n_id.size and sum(data.num_sampled_edges) == src.size
    bounds = np.cumsum([0, *data.num_sampled_nodes])
    for hop, fanout in enumerate(fanouts):
        for local in range(bounds[hop], bounds[hop + 1]):
            got = np.sort(n_id[src[dst == local]])
            real = in_neighbours(ds, int(n_id[local]))
            assert np.isin(got, real).all() and np.unique(got).size == got.size
            assert got.size == (real.size if fanout == -1 else min(fanout, real.size))
    # Nodes reached at the last hop aggregate nothing.
    assert not np.isin(dst, np.arange(bounds[len(fanouts)], n_id.size)).any()


@pytest.mark.parametrize("batch_size", [1, 64, N])
@pytest.mark.parametrize("fanouts", [[3, 2], [-1, 2]])
def test_node_loader_yields_neighbor_loader_batches(data_dir, ds, batch_size, fanouts):
    fs, gs = DiskgnnFeatureStore(data_dir, cache="40KiB"), DiskgnnGraphStore(data_dir)
    seeds = np.asarray(ds.split("train"))
    loader = NodeLoader((fs, gs), node_sampler=DiskgnnSampler(data_dir, fanouts=fanouts, seed=0),
                        input_nodes=torch.from_numpy(seeds.copy()), batch_size=batch_size, shuffle=False)
    batches = list(loader)
    assert len(batches) == -(-seeds.size // batch_size)
    for i, data in enumerate(batches[:6]):
        check_subgraph(ds, data, seeds[i * batch_size: (i + 1) * batch_size], fanouts)


@pytest.mark.parametrize("mode", [None, "binary", "triplet"])
def test_link_loader_yields_link_neighbor_loader_batches(data_dir, ds, mode):
    """Edge batches (with a duplicate edge, and batches of 1 and of 199 edges): each batch is the subgraph
    around its edges' ends (and PyG's negatives), and edge_label_index / the triplet's indices point at them."""
    fs, gs = DiskgnnFeatureStore(data_dir, cache=0), DiskgnnGraphStore(data_dir)
    src, dst = (torch.from_numpy(np.asarray(a, np.int64)) for a in (ds.indices[:199], np.repeat(
        np.arange(ds.num_nodes), np.diff(ds.indptr))[:199]))
    src[5], dst[5] = src[4], dst[4]
    neg = None if mode is None else NegativeSampling(mode, amount=2)
    for batch_size in (1, 199):
        loader = LinkLoader((fs, gs), link_sampler=DiskgnnSampler(data_dir, fanouts=[3, 2], seed=0),
                            edge_label_index=(None, torch.stack([src, dst])), neg_sampling=neg,
                            batch_size=batch_size)
        batches = list(loader)
        assert len(batches) == -(-199 // batch_size)
        for i, data in enumerate(batches[:4]):
            edges = slice(i * batch_size, (i + 1) * batch_size)
            n_id = data.n_id.numpy()
            np.testing.assert_array_equal(data.x.numpy(), np.asarray(ds.features)[n_id])
            if mode == "triplet":
                assert np.array_equal(n_id[data.src_index.numpy()], src[edges].numpy())
                assert np.array_equal(n_id[data.dst_pos_index.numpy()], dst[edges].numpy())
                assert data.dst_neg_index.shape == (data.src_index.numel(), 2)
                continue
            label_index = n_id[data.edge_label_index.numpy()]
            pos = len(range(199)[edges])
            assert np.array_equal(label_index[:, :pos], torch.stack([src, dst])[:, edges].numpy())
            if mode == "binary":
                assert data.edge_label.numel() == 3 * pos and (data.edge_label[pos:] == 0).all()
            # the ends are the subgraph's seeds, sampled around as a NodeLoader batch of them would be
            seeds = data.num_sampled_nodes[0]
            assert set(data.edge_label_index.flatten().tolist()) == set(range(seeds))
            data.batch_size = seeds  # what a NodeLoader batch of these seeds has
            check_subgraph(ds, data, n_id[:seeds], [3, 2])


def test_sampler_repeats_and_keeps_duplicate_seeds(data_dir, ds):
    sampler = DiskgnnSampler(data_dir, fanouts=[2, 2], seed=5)
    fs, gs = DiskgnnFeatureStore(data_dir, cache=0), DiskgnnGraphStore(data_dir)
    seeds = torch.tensor([7, 3, 7, 198, 3])
    loader = NodeLoader((fs, gs), node_sampler=sampler, input_nodes=seeds, batch_size=5)
    (data,) = list(loader)
    check_subgraph(ds, data, seeds.numpy(), [2, 2])
    src, dst = data.edge_index.numpy()
    n_id = data.n_id.numpy()
    for a, b in ((0, 2), (1, 4)):  # each copy of a seed aggregates the same neighbours
        assert sorted(n_id[src[dst == a]]) == sorted(n_id[src[dst == b]])
    again = DiskgnnSampler(data_dir, fanouts=[2, 2], seed=5)
    (twin,) = list(NodeLoader((fs, gs), node_sampler=again, input_nodes=seeds, batch_size=5))
    assert torch.equal(twin.edge_index, data.edge_index) and torch.equal(twin.n_id, data.n_id)


def test_sampler_labor_batches_are_subgraphs(data_dir, ds):
    sampler = DiskgnnSampler(data_dir, fanouts=[3, 2], sampler="labor", layer_dependency=True, batch_dependency=4)
    fs, gs = DiskgnnFeatureStore(data_dir, cache=0), DiskgnnGraphStore(data_dir)
    seeds = np.array(ds.split("val"))
    for i, data in enumerate(NodeLoader((fs, gs), node_sampler=sampler, input_nodes=torch.from_numpy(seeds),
                                        batch_size=16)):
        n_id = data.n_id.numpy()
        np.testing.assert_array_equal(n_id[:data.batch_size], seeds[i * 16:(i + 1) * 16])
        src, dst = data.edge_index.numpy()
        for s, d in zip(n_id[src], n_id[dst]):
            assert s in in_neighbours(ds, int(d))


def full_graph(ds) -> Data:
    ip = np.asarray(ds.indptr)
    dst = np.repeat(np.arange(ds.num_nodes), np.diff(ip))
    return Data(x=torch.from_numpy(np.array(ds.features)),
                edge_index=torch.from_numpy(np.stack([np.asarray(ds.indices, dtype=np.int64), dst])))


def test_full_neighbour_batches_give_the_in_memory_models_outputs(data_dir, ds):
    """With all neighbours sampled, PyG's GraphSAGE on each NodeLoader batch and on each DiskgnnLoader batch
    computes for its seeds what it computes on the whole graph in memory."""
    torch.manual_seed(0)
    model = GraphSAGE(DIM, 16, num_layers=2, out_channels=4).eval()
    g = full_graph(ds)
    with torch.no_grad():
        want = model(g.x, g.edge_index)
        fs, gs = DiskgnnFeatureStore(data_dir, cache="40KiB"), DiskgnnGraphStore(data_dir)
        loader = NodeLoader((fs, gs), node_sampler=DiskgnnSampler(data_dir, fanouts=[-1, -1]),
                            input_nodes=torch.arange(N), batch_size=37)
        seen = 0
        for data in loader:
            got = model(data.x, data.edge_index)[: data.batch_size]
            torch.testing.assert_close(got, want[data.n_id[: data.batch_size]], rtol=1e-4, atol=1e-5)
            seen += data.batch_size
        assert seen == N
        with DiskgnnLoader(data_dir, fanouts=[-1, -1], batch_size=23, workdir=str(data_dir) + "-run",
                           memory_budget="2GiB", host_cache="16KiB", progress=False, log=None) as direct:
            batches = 0
            model, want = model.to(direct.device), want.to(direct.device)  # its batches are on the training device
            for data in direct:
                assert data.x.device.type == direct.device
                got = model(data.x, data.edge_index)[: data.batch_size]
                torch.testing.assert_close(got, want[data.n_id[: data.batch_size]], rtol=1e-4, atol=1e-5)
                batches += 1
            assert batches == len(np.asarray(ds.split("train"))) // 23 + 1


def test_to_pyg_matches_the_minibatch(data_dir, ds, tmp_path):
    with diskgnn.Loader(data_dir, fanouts=[4, 3], batch_size=30, workdir=str(tmp_path / "w"), host_cache="20KiB",
                        progress=False, log=None) as loader:
        mbs = list(loader.epoch(0))
        assert len(mbs) == loader.num_batches == -(-np.asarray(ds.split("train")).size // 30)
        for mb in mbs:
            data = mb.to_pyg()
            assert data.x is mb.x and data.batch_size == mb.labels.numel()
            np.testing.assert_array_equal(data.y[: data.batch_size].cpu().numpy(), mb.labels.cpu().numpy())
            np.testing.assert_array_equal(data.n_id.numpy(), mb.input_nodes)
            check_subgraph(ds, data, mb.seeds, [4, 3])
        assert {"stage_times_s", "tiers", "plan"} <= set(loader.summary())
        assert sum(t["hits"] for t in loader.stats().values()) == sum(mb.input_nodes.size for mb in mbs)


def test_prepare_takes_a_pyg_data(ds, tmp_path):
    n = ds.num_nodes
    masks = {f"{s}_mask": torch.zeros(n, dtype=torch.bool).index_fill_(0, torch.from_numpy(np.array(ds.split(s))),
                                                                          True) for s in ("train", "val", "test")}
    g = full_graph(ds)
    data = Data(x=g.x, y=torch.from_numpy(np.asarray(ds.labels, dtype=np.int64)).view(-1, 1),
                edge_index=g.edge_index, **masks)
    out = open_dataset(diskgnn.prepare(data, tmp_path / "from-pyg", progress=False))
    for kind in ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(np.asarray(out.array(kind)), np.asarray(ds.array(kind)), err_msg=kind)
    with pytest.raises(DiskgnnError, match="needs labels y"):
        diskgnn.prepare(Data(x=g.x, edge_index=g.edge_index), tmp_path / "bad", progress=False)
    with pytest.raises(DiskgnnError, match="train_mask has shape"):
        diskgnn.prepare(Data(x=g.x, y=data.y, edge_index=g.edge_index, train_mask=torch.ones(n, 2, dtype=torch.bool),
                             val_mask=masks["val_mask"], test_mask=masks["test_mask"]), tmp_path / "bad",
                        progress=False)
    assert not (tmp_path / "bad").exists()


def test_example_trains_pyg_graphsage(train_data, tmp_path):
    """The example's smoke run, both loaders: PyG's GraphSAGE learns the (learnable) labels."""
    for loader in ("node", "diskgnn"):
        out = tmp_path / f"{loader}.json"
        proc = subprocess.run([sys.executable, str(REPO / "examples" / "pyg_graphsage.py"), str(train_data),
                               "--loader", loader, "--epochs", "3", "--fanouts", "4,3", "--batch-size", "47",
                               "--hidden", "16", "--lr", "0.02", "--cache", "2KiB", "--memory-budget", "2GiB",
                               "--json", str(out)], capture_output=True, text=True, cwd=tmp_path,
                              env={**os.environ, "DISKGNN_HOME": str(tmp_path / "home")})
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = json.loads(out.read_text())
        assert result["batches"] == 3 * -(-200 // 47) and result["test_acc"] > 0.6  # chance 0.25


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_node_loader_workers_read_their_own_rows(data_dir, ds, context):
    """DataLoader workers: a forked one opens its own reader (and never closes its parent's), a spawned one gets
    the stores and the sampler pickled and opens the dataset again."""
    fs, gs = DiskgnnFeatureStore(data_dir, cache="40KiB"), DiskgnnGraphStore(data_dir)
    fs.get_tensor(group_name=None, attr_name="x", index=torch.tensor([1, 2]))  # the parent's reader is open
    seeds = np.array(ds.split("val"))
    loader = NodeLoader((fs, gs), node_sampler=DiskgnnSampler(data_dir, fanouts=[3, 2]), batch_size=16, num_workers=2,
                        input_nodes=torch.from_numpy(seeds), multiprocessing_context=context)
    batches = list(loader)
    assert len(batches) == -(-seeds.size // 16)
    for i, data in enumerate(batches):
        check_subgraph(ds, data, seeds[i * 16:(i + 1) * 16], [3, 2])
