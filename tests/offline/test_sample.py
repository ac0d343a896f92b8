"""Offline sampler against the graph it samples: validity, determinism, uniformity, checksums."""

import numpy as np
import pytest

from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.defaults import SAMPLE_GROUP as GROUP
from diskgnn.errors import DiskgnnError
from diskgnn.offline.sample import (
    SampleFile,
    batch_key,
    batch_order,
    epoch_seeds,
    open_graph,
    sample_batch,
    sample_epoch,
)

from conftest import random_graph, write_npy_dir


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sample")
    g = random_graph(n=199, e=900, seed=3)
    g["dst"][g["dst"] == 7] = 8  # node 7 has no in-edges: a degree-0 seed
    g["src"][g["src"] == 7] = 9
    train = np.arange(0, 199, 2)  # 100 train nodes -> batches of 32, 32, 32, 4
    return open_dataset(prepare(write_npy_dir(tmp / "src", g, splits={"train": train, "val": [1], "test": [3]}),
                                tmp / "ds", progress=False))


def check_batch(ds, batch, fanouts):
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    nodes = batch.nodes
    assert np.unique(nodes).size == nodes.size
    n_known = batch.num_seeds
    for h, block in enumerate(batch.blocks):
        assert block.num_dst == n_known and block.indptr.size == n_known + 1
        assert block.indices.size == block.indptr[-1] and (block.indices < block.num_src).all()
        for i in range(block.num_dst):
            true_nb = indices[indptr[nodes[i]]: indptr[nodes[i] + 1]]
            picked = nodes[block.indices[block.indptr[i]: block.indptr[i + 1]]]
            want = true_nb.size if fanouts[h] == -1 else min(fanouts[h], true_nb.size)
            assert picked.size == want and np.unique(picked).size == want
            assert np.isin(picked, true_nb).all()
        n_known = block.num_src
    assert n_known == nodes.size


@pytest.mark.parametrize("fanouts", [[3, 2], [-1], [50, 1, -1]])
def test_batches_are_valid_samples(dataset, tmp_path, fanouts):
    sf = sample_epoch(dataset, tmp_path / "epoch-00000.samples", fanouts=fanouts, batch_size=32, seed=5, epoch=0)
    assert len(sf) == 4 and [len(b.seeds) for b in sf] == [32, 32, 32, 4]
    expected = epoch_seeds(dataset.split("train"), 32, 5, 0)
    for batch, seeds in zip(sf, expected):
        np.testing.assert_array_equal(batch.seeds, seeds)
        check_batch(dataset, batch, fanouts)
    assert sorted(np.concatenate([b.seeds for b in sf]).tolist()) == list(range(0, 199, 2))


def test_single_seed_batch_and_isolated_seed(dataset, tmp_path):
    sf = sample_epoch(dataset, tmp_path / "e.samples", fanouts=[4, 4], batch_size=1, seed=0, epoch=0,
                      seeds=np.array([7]))
    (batch,) = list(sf)
    assert batch.nodes.tolist() == [7] and [b.indices.size for b in batch.blocks] == [0, 0]


def test_same_seed_same_file_whatever_the_threads(dataset, tmp_path):
    a = sample_epoch(dataset, tmp_path / "a.samples", fanouts=[5, 3], batch_size=7, seed=1, epoch=2, threads=1)
    b = sample_epoch(dataset, tmp_path / "b.samples", fanouts=[5, 3], batch_size=7, seed=1, epoch=2, threads=3)
    c = sample_epoch(dataset, tmp_path / "c.samples", fanouts=[5, 3], batch_size=7, seed=1, epoch=3, threads=2)
    assert (tmp_path / "a.samples").read_bytes() == (tmp_path / "b.samples").read_bytes()
    assert a.meta["checksums"] == b.meta["checksums"] != c.meta["checksums"]


def test_max_batches_and_online_batches_match_the_full_epoch(dataset, tmp_path):
    full = sample_epoch(dataset, tmp_path / "f.samples", fanouts=[5, 3], batch_size=7, seed=1, epoch=2)
    head = sample_epoch(dataset, tmp_path / "h.samples", fanouts=[5, 3], batch_size=7, seed=1, epoch=2,
                        max_batches=3)
    assert len(head) == 3 and head.meta["checksums"] == full.meta["checksums"][:3]
    graph, seeds = open_graph(dataset), epoch_seeds(dataset.split("train"), 7, 1, 2)
    for b in (0, len(full) - 1):  # the last batch is a partial one
        online = sample_batch(graph, seeds[b], key=batch_key(2, b), fanouts=[5, 3], seed=1, threads=1)
        np.testing.assert_array_equal(online.nodes, full[b].nodes)
        for x, y in zip(online.blocks, full[b].blocks):
            np.testing.assert_array_equal(x.indices, y.indices)
    assert len(sample_epoch(dataset, tmp_path / "z.samples", fanouts=[5], batch_size=7, seed=1, epoch=2,
                            max_batches=0)) == 0


def test_epochs_of_many_groups_are_written_in_order(dataset, tmp_path):
    # 100 one-seed batches: several native groups, each written while the next is sampled.
    assert 100 > 3 * GROUP
    sf = sample_epoch(dataset, tmp_path / "m.samples", fanouts=[4, 2], batch_size=1, seed=4, epoch=1)
    graph, seeds = open_graph(dataset), epoch_seeds(dataset.split("train"), 1, 4, 1)
    assert len(sf) == len(seeds) == 100
    for b in range(len(sf)):
        online = sample_batch(graph, seeds[b], key=batch_key(1, b), fanouts=[4, 2], seed=4, threads=1)
        np.testing.assert_array_equal(online.nodes, sf[b].nodes)


def test_a_failed_write_fails_the_epoch_and_leaves_no_file(dataset, tmp_path, monkeypatch):
    import diskgnn.data.files as files_module  # where RecordLog hashes each record as it is written

    calls = []

    def failing_hash(rec):
        calls.append(1)
        if len(calls) == GROUP + 5:  # in the second group's write
            raise OSError(28, "No space left on device")
        return "0"

    monkeypatch.setattr(files_module.xxhash, "xxh3_64_hexdigest", failing_hash)
    with pytest.raises(DiskgnnError, match="f.samples: no space left on device while writing"):
        sample_epoch(dataset, tmp_path / "f.samples", fanouts=[3], batch_size=1, seed=0, epoch=0)
    assert not list(tmp_path.iterdir()), "a file or its temporary sibling stayed behind"


def test_neighbours_are_uniform(dataset, tmp_path):
    # Over many epochs each of a degree-d node's neighbours is picked with probability f/d.
    indptr = np.asarray(dataset.indptr)
    v = int(np.argmax(np.diff(indptr)))
    d = int(indptr[v + 1] - indptr[v])
    picks = []
    for epoch in range(300):
        (batch,) = list(sample_epoch(dataset, tmp_path / "u.samples", fanouts=[2], batch_size=1, seed=9,
                                     epoch=epoch, seeds=np.array([v])))
        picks.append(batch.nodes[1:])
    counts = np.unique(np.concatenate(picks), return_counts=True)[1]
    assert counts.size == d
    expected = 300 * 2 / d
    assert np.abs(counts - expected).max() < 5 * np.sqrt(expected)


def test_replay_order_is_a_permutation():
    assert batch_order(5, 0, 0).tolist() == [0, 1, 2, 3, 4]
    orders = [batch_order(50, 0, e) for e in (1, 2)]
    assert sorted(orders[0].tolist()) == list(range(50)) and orders[0].tolist() != orders[1].tolist()


def test_corruption_is_detected(dataset, tmp_path):
    sample_epoch(dataset, tmp_path / "x.samples", fanouts=[3], batch_size=16, seed=0, epoch=0)
    data = bytearray((tmp_path / "x.samples").read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / "x.samples").write_bytes(bytes(data))
    sf = SampleFile(tmp_path / "x.samples")
    with pytest.raises(DiskgnnError, match="fails its checksum"):
        list(sf)
    (tmp_path / "x.samples").write_bytes(bytes(data[:-8]))
    with pytest.raises(DiskgnnError, match="the index says"):
        SampleFile(tmp_path / "x.samples")


def test_bad_arguments(dataset, tmp_path):
    with pytest.raises(DiskgnnError, match="fanouts"):
        sample_epoch(dataset, tmp_path / "y.samples", fanouts=[0], batch_size=4, seed=0, epoch=0)
    with pytest.raises(DiskgnnError, match="batch size"):
        sample_epoch(dataset, tmp_path / "y.samples", fanouts=[2], batch_size=0, seed=0, epoch=0)
