"""LABOR-0 sampling with layer and batch dependency: every destination's picks against the plain rule (its
`fanout` in-neighbours with the smallest variates, the variates from the native function), and the properties
it is for: fewer distinct vertices per batch, and consecutive batches that overlap."""

import numpy as np
import pytest

from diskgnn import _native
from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.errors import DiskgnnError
from diskgnn.offline.sample import Sampler, epoch_seeds, sample_epoch

from conftest import random_graph, write_npy_dir
from test_sample import check_batch


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Dense enough that seeds share in-neighbours (avg degree 20 over 300 nodes), with a degree-0 node."""
    tmp = tmp_path_factory.mktemp("labor")
    g = random_graph(n=300, e=6000, seed=11)
    g["dst"][g["dst"] == 5] = 6
    g["src"][g["src"] == 5] = 6
    return open_dataset(prepare(write_npy_dir(tmp / "src", g, splits={"train": np.arange(0, 300, 2)}), tmp / "ds",
                                progress=False))


@pytest.mark.parametrize("sampler", [Sampler("labor"), Sampler("labor", layer_dependency=True),
                                     Sampler("labor", batch_dependency=4),
                                     Sampler("labor", layer_dependency=True, batch_dependency=3)],
                         ids=["labor", "layer", "kappa4", "layer-kappa3"])
def test_labor_batches_are_valid_and_pick_the_smallest_variates(dataset, tmp_path, sampler):
    fanouts = [4, 3]
    sf = sample_epoch(dataset, tmp_path / "l.samples", fanouts=fanouts, batch_size=16, seed=7, epoch=1,
                      sampler=sampler)
    assert sf.meta["sampler"] == "labor" and sf.meta["batch_dependency"] == sampler.batch_dependency
    indptr, indices = np.asarray(dataset.indptr), np.asarray(dataset.indices)
    for b, batch in enumerate(sf):
        check_batch(dataset, batch, fanouts)
        step = sampler.key(1, b, len(sf))
        # Each destination's picks are exactly its neighbours with the smallest variates at (step, hop).
        for h, block in enumerate(batch.blocks):
            for i in range(block.num_dst):
                v = batch.nodes[i]
                nb = indices[indptr[v]: indptr[v + 1]]
                picked = np.sort(batch.nodes[block.indices[block.indptr[i]: block.indptr[i + 1]]])
                if nb.size <= fanouts[h]:
                    assert picked.tolist() == np.sort(nb).tolist()
                    continue
                r = _native.labor_variates(7, sampler.layer_dependency, sampler.batch_dependency, step, h, nb)
                assert picked.tolist() == np.sort(nb[np.argsort(r)[: fanouts[h]]]).tolist()


def test_labor_is_the_same_whatever_the_threads(dataset, tmp_path):
    s = Sampler("labor", layer_dependency=True, batch_dependency=8)
    a = sample_epoch(dataset, tmp_path / "a.samples", fanouts=[5, 3], batch_size=7, seed=1, epoch=2, threads=1,
                     sampler=s)
    b = sample_epoch(dataset, tmp_path / "b.samples", fanouts=[5, 3], batch_size=7, seed=1, epoch=2, threads=3,
                     sampler=s)
    assert (tmp_path / "a.samples").read_bytes() == (tmp_path / "b.samples").read_bytes()
    assert len(a) == len(b) == 22


@pytest.mark.parametrize("sampler", [Sampler("labor"), Sampler("labor", batch_dependency=16)], ids=["k1", "k16"])
def test_each_neighbour_is_included_with_probability_fanout_over_degree(dataset, sampler):
    """LABOR-0's marginal: over independent variates (here: 4000 steps), each of a seed's d in-neighbours is
    among its k picks with probability k/d, whatever the point of κ's drift the step falls on. Under κ the
    steps are two windows apart (consecutive windows share a seed), cycling through the window's points."""
    from diskgnn.offline.sample import open_graph, sample_batch

    indptr, indices = np.asarray(dataset.indptr), np.asarray(dataset.indices)
    deg = np.diff(indptr)
    v = int(np.argmax(deg))
    nb, k, steps = indices[indptr[v]: indptr[v + 1]], 4, 4000
    assert nb.size > 2 * k
    graph = open_graph(dataset)
    counts = dict.fromkeys(nb.tolist(), 0)
    kappa = sampler.batch_dependency
    for j in range(steps):
        step = j if kappa == 1 else 2 * kappa * j + j % kappa
        batch = sample_batch(graph, np.array([v]), key=step, fanouts=[k], seed=9, threads=1, sampler=sampler)
        for u in batch.nodes[batch.blocks[0].indices].tolist():
            counts[u] += 1
    p = k / nb.size
    freq = np.array(list(counts.values()))
    sigma = np.sqrt(steps * p * (1 - p))
    assert np.abs(freq - steps * p).max() < 5 * sigma, (freq, steps * p)
    assert freq.sum() == steps * k


def test_variates_are_uniform_at_every_point_of_the_drift():
    ids = np.arange(20_000, dtype=np.int64)
    for step in (0, 1, 5, 15):  # c = 0, 1/16, 5/16, 15/16 of a window of 16
        r = _native.labor_variates(3, False, 16, step, 0, ids)
        assert ((r > 0) & (r < 1)).all()
        hist = np.histogram(r, bins=10, range=(0, 1))[0]
        assert np.abs(hist - 2000).max() < 5 * np.sqrt(2000), (step, hist)  # ~5 sigma
    # Drift: consecutive steps are correlated, steps a window apart are not (fresh variates).
    r0, r1, r16 = (_native.labor_variates(3, False, 16, s, 0, ids) for s in (0, 1, 16))
    assert np.corrcoef(r0, r1)[0, 1] > 0.95 and abs(np.corrcoef(r0, r16)[0, 1]) < 0.05
    # Layer dependency: the same variates for every hop; without it, independent hops.
    assert np.array_equal(_native.labor_variates(3, True, 1, 4, 0, ids), _native.labor_variates(3, True, 1, 4, 1, ids))
    assert abs(np.corrcoef(_native.labor_variates(3, False, 1, 4, 0, ids),
                           _native.labor_variates(3, False, 1, 4, 1, ids))[0, 1]) < 0.05


def distinct(sf) -> float:
    return float(np.mean([b.nodes.size for b in sf]))


def overlap(sf) -> float:
    """Mean share of a batch's nodes that the batch before it also had."""
    shares = [np.isin(sf[b].nodes, sf[b - 1].nodes).mean() for b in range(1, len(sf))]
    return float(np.mean(shares))


def test_labor_samples_fewer_vertices_and_batch_dependency_makes_batches_overlap(dataset, tmp_path):
    def epoch(name, sampler):
        return sample_epoch(dataset, tmp_path / f"{name}.samples", fanouts=[5, 5], batch_size=16, seed=2, epoch=0,
                            sampler=sampler)

    uniform, labor = epoch("u", Sampler()), epoch("l", Sampler("labor"))
    layer = epoch("ld", Sampler("labor", layer_dependency=True))
    kappa = epoch("k", Sampler("labor", layer_dependency=True, batch_dependency=64))
    assert distinct(labor) < distinct(uniform) and distinct(layer) < distinct(labor)
    assert overlap(kappa) > overlap(layer) + 0.05
    # κ > 1 walks one permutation of the seeds in every epoch; κ = 1 shuffles per epoch.
    k1 = sample_epoch(dataset, tmp_path / "k1.samples", fanouts=[5, 5], batch_size=16, seed=2, epoch=1,
                      sampler=Sampler("labor", batch_dependency=64))
    assert [b.seeds.tolist() for b in k1] == [b.seeds.tolist() for b in kappa]
    assert [s.tolist() for s in epoch_seeds(dataset.split("train"), 16, 2, 1)] != [b.seeds.tolist() for b in kappa]


def test_bad_sampler_options():
    with pytest.raises(DiskgnnError, match="sampler 'poisson'"):
        Sampler("poisson")
    with pytest.raises(DiskgnnError, match="batch dependency 0"):
        Sampler("labor", batch_dependency=0)
    with pytest.raises(DiskgnnError, match="need the labor sampler"):
        Sampler("neighbor", layer_dependency=True)
