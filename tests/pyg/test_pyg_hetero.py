"""The PyG seam on a heterogeneous dataset: NodeLoader over the same DiskgnnFeatureStore, DiskgnnGraphStore and
DiskgnnSampler gives HeteroData whose rows, labels and edges are the dataset's, and PyG's to_hetero trains on it."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import small_hetero

pytest.importorskip("torch_geometric", reason="the PyG seam needs torch_geometric (the pyg extra)")


@pytest.fixture(scope="module")
def hds(tmp_path_factory):
    return small_hetero(tmp_path_factory.mktemp("pyg-h"), learnable=True)


def loader(data, ids, fanouts, batch_size, shuffle=False, cache="0", sampler="neighbor"):
    from torch_geometric.loader import NodeLoader

    from diskgnn.pyg import DiskgnnFeatureStore, DiskgnnGraphStore, DiskgnnSampler

    fs, gs = DiskgnnFeatureStore(data, cache=cache), DiskgnnGraphStore(data)
    return NodeLoader((fs, gs), node_sampler=DiskgnnSampler(data, fanouts=fanouts, sampler=sampler),
                      input_nodes=("paper", torch.as_tensor(np.array(ids))), batch_size=batch_size, shuffle=shuffle)


@pytest.mark.parametrize("cache,fanouts,sampler", [("0", [3, 2], "neighbor"), ("1MiB", [3, 2], "neighbor"),
                                                   ("0", ["cites=2,writes=1", "tags=1"], "neighbor"),
                                                   ("0", [3, 2], "labor")])
def test_batches_are_the_datasets(hds, cache, fanouts, sampler):
    """Also with counts per relation, a relation a hop does not follow (tags at the seeds' hop) having no edges,
    and with LABOR per relation."""
    from diskgnn.data.format import open_dataset

    ds = open_dataset(hds, typed=True)
    ids = np.asarray(ds.split("train"))
    seen = 0
    for data in loader(hds, ids, fanouts, 17, cache=cache, sampler=sampler):
        n_id = data["paper"].n_id.numpy()
        bs = data["paper"].batch_size
        assert np.array_equal(n_id[:bs], ids[seen:seen + bs])
        seen += bs
        np.testing.assert_array_equal(data["paper"].x.numpy(), np.asarray(ds.type_features("paper"))[n_id])
        np.testing.assert_array_equal(data["term"].x.numpy(), np.asarray(ds.type_features("term"))[data["term"].n_id])
        np.testing.assert_array_equal(data["paper"].y.numpy(), np.asarray(ds.labels)[n_id])
        for i, r in enumerate(ds.schema.relations):  # every sampled edge is one of the relation's
            ei = data[r.key].edge_index.numpy()
            src, dst = data[r.src].n_id.numpy()[ei[0]], data[r.dst].n_id.numpy()[ei[1]]
            indptr, indices = ds.csc(i)
            for u, v in zip(src, dst):
                assert u in indices[indptr[v]:indptr[v + 1]]
    assert seen == ids.size


def test_typed_rows_by_id_and_their_tiers(hds):
    """Ids in any order with duplicates, one type's at a time; every row from disk without a host tier, counted per
    type; one budget across the types holds the most-read rows."""
    from diskgnn.data.format import open_dataset
    from diskgnn.errors import DiskgnnError
    from diskgnn.pyg import DiskgnnFeatureStore

    ds = open_dataset(hds, typed=True)
    fs = DiskgnnFeatureStore(hds, cache=0)
    ids = torch.tensor([198, 5, 5, 0])
    np.testing.assert_array_equal(fs.get_tensor(group_name="paper", attr_name="x", index=ids).numpy(),
                                  np.asarray(ds.type_features("paper"))[ids.numpy()])
    assert fs.get_tensor(group_name="term", attr_name="x", index=torch.tensor([6])).shape == (1, 4097)
    assert fs.stats()["paper"]["disk"]["hits"] == 4 and fs.stats()["term"]["disk"]["hits"] == 1
    assert fs.get_tensor_size(group_name="paper", attr_name="y") == (199,)
    with pytest.raises(DiskgnnError, match="term id 7 out of range"):
        fs.get_tensor(group_name="term", attr_name="x", index=torch.tensor([7]))
    with pytest.raises(KeyError, match="no tensor 'author'/'x'"):
        fs.get_tensor(group_name="author", attr_name="x", index=torch.tensor([0]))
    fs.close()
    held = DiskgnnFeatureStore(hds, cache="1MiB")
    held.get_tensor(group_name="paper", attr_name="x", index=ids)
    assert held.stats()["paper"]["host"]["hits"] == 4


def test_to_hetero_trains_through_the_seam(hds):
    from torch_geometric.nn import SAGEConv, to_hetero

    from diskgnn.data.format import open_dataset

    ds = open_dataset(hds, typed=True)
    s = ds.schema
    torch.manual_seed(0)

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = SAGEConv((-1, -1), 16), SAGEConv((-1, -1), 3)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    first = next(iter(loader(hds, ds.split("train"), [4, 4], 32)))
    authors = torch.nn.Embedding(s.type("author").count, 16)

    def inputs(data):
        return {"paper": data["paper"].x, "term": data["term"].x, "author": authors(data["author"].n_id)}

    model = to_hetero(Sage(), first.metadata(), aggr="sum")
    with torch.no_grad():
        model(inputs(first), first.edge_index_dict)
    opt = torch.optim.Adam([*model.parameters(), *authors.parameters()], lr=0.005)
    for _ in range(10):
        for data in loader(hds, ds.split("train"), [4, 4], 32, shuffle=True):
            opt.zero_grad()
            bs = data["paper"].batch_size
            F.cross_entropy(model(inputs(data), data.edge_index_dict)["paper"][:bs], data["paper"].y[:bs]).backward()
            opt.step()
    correct = total = 0
    with torch.no_grad():
        for data in loader(hds, ds.split("test"), [-1, -1], 64):
            bs = data["paper"].batch_size
            pred = model(inputs(data), data.edge_index_dict)["paper"][:bs].argmax(1)
            correct += int((pred == data["paper"].y[:bs]).sum())
            total += bs
    assert correct / total > 0.6  # 3 classes


@pytest.mark.parametrize("edge_type,mode", [(("author", "writes", "paper"), None),
                                            (("author", "writes", "paper"), "binary"),
                                            (("paper", "cites", "paper"), "triplet")])
def test_link_loader_samples_around_both_ends_types(hds, edge_type, mode):
    """LinkLoader over a typed graph's relation (with a duplicate edge; batches of 1 and of 41 edges): the
    ends (and PyG's negatives) are their types' seeds, sampled around at once; edge_label_index (or the
    triplet's indices) points at them, and every sampled edge is one of its relation's."""
    from torch_geometric.loader import LinkLoader
    from torch_geometric.sampler import NegativeSampling

    from diskgnn.data.format import open_dataset
    from diskgnn.pyg import DiskgnnFeatureStore, DiskgnnGraphStore, DiskgnnSampler

    ds = open_dataset(hds, typed=True)
    s = ds.schema
    indptr, indices = ds.csc([r.key for r in s.relations].index(edge_type))
    src = torch.from_numpy(np.asarray(indices[:41], np.int64))
    dst = torch.from_numpy(np.repeat(np.arange(indptr.size - 1), np.diff(indptr))[:41])
    src[5], dst[5] = src[4], dst[4]
    neg = None if mode is None else NegativeSampling(mode, amount=2)
    fs, gs = DiskgnnFeatureStore(hds, cache=0), DiskgnnGraphStore(hds)
    for batch_size in (1, 41):
        loader = LinkLoader((fs, gs), link_sampler=DiskgnnSampler(hds, fanouts=[3, 2], seed=0), neg_sampling=neg,
                            edge_label_index=(edge_type, torch.stack([src, dst])), batch_size=batch_size)
        batches = list(loader)
        assert len(batches) == -(-41 // batch_size)
        for i, data in enumerate(batches[:3]):
            edges = slice(i * batch_size, (i + 1) * batch_size)
            n_src, n_dst = data[edge_type[0]].n_id.numpy(), data[edge_type[2]].n_id.numpy()
            np.testing.assert_array_equal(data["paper"].x.numpy(), np.asarray(ds.type_features("paper"))[
                data["paper"].n_id.numpy()])
            store = data[edge_type]
            if mode == "triplet":
                assert np.array_equal(n_src[data[edge_type[0]].src_index.numpy()], src[edges].numpy())
                assert np.array_equal(n_dst[data[edge_type[2]].dst_pos_index.numpy()], dst[edges].numpy())
                assert data[edge_type[2]].dst_neg_index.shape == (len(range(41)[edges]), 2)
            else:
                pos = len(range(41)[edges])
                eli = store.edge_label_index.numpy()
                assert np.array_equal(n_src[eli[0, :pos]], src[edges].numpy())
                assert np.array_equal(n_dst[eli[1, :pos]], dst[edges].numpy())
                if mode == "binary":
                    assert store.edge_label.numel() == 3 * pos and (store.edge_label[pos:] == 0).all()
                seeds = {k: data[k].num_sampled_nodes[0] for k in (edge_type[0], edge_type[2])}
                assert set(eli[0]) == set(range(seeds[edge_type[0]]))  # the ends are the seeds, first
                assert set(eli[1]) == set(range(seeds[edge_type[2]]))
            for r, rel in enumerate(s.relations):
                ei = data[rel.key].edge_index.numpy()
                ip, ix = ds.csc(r)
                for u, v in zip(data[rel.src].n_id.numpy()[ei[0]], data[rel.dst].n_id.numpy()[ei[1]]):
                    assert u in ix[ip[v]:ip[v + 1]]
