"""The typed sampler (offline/sample.py over several relations) against the relations' CSCs read with numpy."""

import numpy as np
import pytest

from conftest import small_hetero


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    from diskgnn.data.format import open_dataset
    from diskgnn.offline.sample import open_graph

    ds = open_dataset(small_hetero(tmp_path_factory.mktemp("hs")), typed=True)
    return ds, open_graph(ds)


def sample(g, seeds, **kwargs):
    from diskgnn.offline.sample import sample_batch

    return sample_batch(g, seeds, threads=1, **kwargs)


def neighbours(ds, r, v):
    indptr, indices = ds.csc(r)
    return np.asarray(indices[indptr[v]:indptr[v + 1]], dtype=np.int64)


def check_batch(ds, b, fanouts, everything=False):
    """Every block's destinations are the first nodes of their type, each picks distinct true neighbours,
    min(fanout, degree) of them (all of them where `everything`)."""
    s = ds.schema
    for h, hop in enumerate(b.hops):
        for r, blk in enumerate(hop):
            if blk is None:  # a relation the hop does not follow has no block
                assert fanouts[h][r] == 0
                continue
            rel = s.relations[r]
            dt, st = s.type_index(rel.dst), s.type_index(rel.src)
            assert blk.num_dst == b.counts[h, dt] and blk.num_src == b.counts[h + 1, st]
            for i in range(blk.num_dst):
                v = b.type_nodes[dt][i]
                got = b.type_nodes[st][blk.indices[blk.indptr[i]:blk.indptr[i + 1]]]
                true = neighbours(ds, r, v)
                assert np.unique(got).size == got.size and np.isin(got, true).all()
                f = fanouts[h][r]
                want = true.size if f < 0 else min(f, true.size)
                assert got.size == want
                if everything:
                    assert np.array_equal(np.sort(got), true)
    for t, ids in enumerate(b.type_nodes):  # a type's nodes are distinct
        assert np.unique(ids).size == ids.size


def test_every_neighbour_and_fanouts(graph):
    from diskgnn.data.schema import relation_fanouts

    ds, g = graph
    seeds = ds.split("train")[:37]
    everything = relation_fanouts("-1,-1", ds.schema)
    b = sample(g, seeds, key=3, fanouts=everything, seed=1)
    assert np.array_equal(b.type_nodes[ds.schema.type_index("paper")][:37], seeds) and b.num_seeds == 37
    check_batch(ds, b, everything, everything=True)
    names = [r.name for r in ds.schema.relations]
    spec = relation_fanouts("cites=2,writes=3/rev_writes=1,tags=-1", ds.schema)
    b = sample(g, seeds, key=4, fanouts=spec, seed=1)
    check_batch(ds, b, spec)
    assert b.hops[0][names.index("tags")] is None  # not named at hop 0: not followed
    one = sample(g, seeds[:1], key=5, fanouts=relation_fanouts("3,3", ds.schema), seed=1)
    check_batch(ds, one, relation_fanouts("3,3", ds.schema))


def test_uniform_and_deterministic(graph, tmp_path):
    from diskgnn.data.schema import relation_fanouts
    from diskgnn.offline.sample import batch_key, sample_epoch

    ds, g = graph
    r = [x.name for x in ds.schema.relations].index("writes")
    indptr = np.asarray(ds.csc(r)[0])
    v = int(np.argmax(np.diff(indptr)))  # the paper with the most authors
    true = neighbours(ds, r, v)
    fan = relation_fanouts("2", ds.schema)
    hits = np.zeros(true.size)
    trials = 3000
    for k in range(trials):
        b = sample(g, np.array([v]), key=k, fanouts=fan, seed=0)
        blk = b.hops[0][r]
        hits[np.searchsorted(true, b.type_nodes[ds.schema.type_index("author")][blk.indices])] += 1
    expected = trials * 2 / true.size
    assert np.abs(hits - expected).max() < 5 * np.sqrt(expected), (hits, expected)
    fan = relation_fanouts("4,2", ds.schema)
    one = sample_epoch(ds, tmp_path / "a.samples", graph=g, fanouts=fan, batch_size=13, seed=7, epoch=2, threads=1)
    two = sample_epoch(ds, tmp_path / "b.samples", fanouts=fan, batch_size=13, seed=7, epoch=2, threads=2)
    assert len(one) == -(-ds.split("train").size // 13)
    for i in range(len(one)):
        assert bytes(one.record(i)) == bytes(two.record(i))
    b5 = one[5]
    again = sample(g, b5.type_nodes[ds.schema.type_index("paper")][:b5.num_seeds], key=batch_key(2, 5), fanouts=fan,
                           seed=7)
    assert all(np.array_equal(x, y) for x, y in zip(b5.type_nodes, again.type_nodes))


def test_bad_seeds(graph):
    from diskgnn.data.schema import relation_fanouts

    ds, g = graph
    with pytest.raises(RuntimeError, match="same seed twice"):
        sample(g, np.array([3, 3]), key=0, fanouts=relation_fanouts("2", ds.schema), seed=0)
    with pytest.raises(IndexError, match="not a node of its type"):
        sample(g, np.array([199]), key=0, fanouts=relation_fanouts("2", ds.schema), seed=0)


def test_a_typed_epoch_refuses_what_only_one_relation_samples(graph, tmp_path):
    from diskgnn.data.schema import relation_fanouts
    from diskgnn.errors import DiskgnnError
    from diskgnn.offline.sample import sample_epoch

    ds, g = graph
    fan = relation_fanouts("2", ds.schema)
    with pytest.raises(DiskgnnError, match="no partitions"):
        sample_epoch(ds, tmp_path / "p.samples", graph=g, fanouts=fan, batch_size=13, seed=0, epoch=0,
                     partition_rows=50)
    with pytest.raises(DiskgnnError, match="for each of the"):
        sample_epoch(ds, tmp_path / "f.samples", graph=g, fanouts=[2], batch_size=13, seed=0, epoch=0)
    assert not list(tmp_path.iterdir())


LABORS = {"labor": dict(), "layer": dict(layer_dependency=True), "kappa4": dict(batch_dependency=4),
          "layer-kappa3": dict(layer_dependency=True, batch_dependency=3)}


@pytest.mark.parametrize("kind", LABORS)
def test_typed_labor_picks_each_relations_smallest_variates_of_the_source_type(graph, tmp_path, kind):
    """LABOR per relation: every destination keeps, of its in-neighbours along relation r, the `fanout` whose
    variates (those of r's source type at the batch's step and hop) are smallest; ties in the oracle are
    impossible (continuous variates)."""
    from diskgnn import _native
    from diskgnn.data.schema import relation_fanouts
    from diskgnn.offline.sample import Sampler, sample_epoch

    ds, g = graph
    sampler = Sampler("labor", **LABORS[kind])
    fan = relation_fanouts("3,2", ds.schema)
    sf = sample_epoch(ds, tmp_path / "l.samples", graph=g, fanouts=fan, batch_size=29, seed=5, epoch=1,
                      sampler=sampler)
    assert sf.meta["sampler"] == "labor" and len(sf) == -(-ds.split("train").size // 29)
    s = ds.schema
    for b, batch in enumerate(sf):
        check_batch(ds, batch, fan)
        step = sampler.key(1, b, len(sf))
        for h, hop in enumerate(batch.hops):
            for r, blk in enumerate(hop):
                rel = s.relations[r]
                dt, st = s.type_index(rel.dst), s.type_index(rel.src)
                for i in range(blk.num_dst):
                    true = neighbours(ds, r, batch.type_nodes[dt][i])
                    got = np.sort(batch.type_nodes[st][blk.indices[blk.indptr[i]:blk.indptr[i + 1]]])
                    if true.size <= fan[h][r]:
                        assert got.tolist() == true.tolist()
                        continue
                    var = _native.labor_variates(5, sampler.layer_dependency, sampler.batch_dependency, step, h,
                                                 true, node_type=st)
                    assert got.tolist() == np.sort(true[np.argsort(var)[:fan[h][r]]]).tolist()


def test_typed_labor_is_deterministic_shares_sources_and_each_type_has_its_own_variates(graph, tmp_path):
    from diskgnn import _native
    from diskgnn.data.schema import relation_fanouts
    from diskgnn.offline.sample import Sampler, sample_epoch

    ds, g = graph
    fan = relation_fanouts("2,2", ds.schema)

    def epoch(name, sampler, threads=1):
        return sample_epoch(ds, tmp_path / f"{name}.samples", graph=g, fanouts=fan, batch_size=16, seed=3, epoch=0,
                            sampler=sampler, threads=threads)

    labor = Sampler("labor", layer_dependency=True, batch_dependency=8)
    one, two = epoch("one", labor), epoch("two", labor, threads=2)
    assert all(bytes(one.record(i)) == bytes(two.record(i)) for i in range(len(one)))
    uniform, independent = epoch("u", Sampler()), epoch("l", Sampler("labor"))

    def distinct(sf):  # nodes a batch reads, all types together
        return np.mean([sum(ids.size for ids in b.type_nodes) for b in sf])

    assert distinct(independent) < distinct(uniform)
    ids = np.arange(5000, dtype=np.int64)
    plain = _native.labor_variates(3, False, 1, 2, 0, ids)
    assert np.array_equal(_native.labor_variates(3, False, 1, 2, 0, ids, node_type=0), plain)
    assert abs(np.corrcoef(plain, _native.labor_variates(3, False, 1, 2, 0, ids, node_type=1))[0, 1]) < 0.05
