"""Partitioned link epochs (MariusGNN's buffer order) against plain oracles: the buffer states cover every pair
of partitions once, one swap apart; an epoch trains every non-loop edge once, each batch inside its state (edges,
negatives); and the sampler, masked, samples exactly as it would on the graph cut to the buffered partitions."""

from collections import Counter
from itertools import combinations_with_replacement

import numpy as np
import pytest

from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.errors import UsageError
from diskgnn.offline.link_batches import LinkEpoch, LinkSpec
from diskgnn.offline.partitions import EdgeBuckets, buffer_plan, buffer_states, partition_rows
from diskgnn.offline.batches import parse_record
from diskgnn.offline.sample import Sampler, open_graph

from conftest import edge_list, random_graph, write_npy_dir


@pytest.mark.parametrize("p,c", [(1, 1), (2, 2), (5, 2), (8, 3), (16, 4), (64, 6), (7, 9)])
def test_buffer_states_cover_every_pair_once_one_swap_apart(p, c):
    states = buffer_states(p, c)
    seen = Counter(pair for _, pairs in states for pair in pairs)
    assert seen == Counter(combinations_with_replacement(range(p), 2))  # each pair {a, b}, a <= b, once
    for (held, pairs), (before, _) in zip(states[1:], states):
        assert len(set(held) - set(before)) == 1 and len(held) == min(p, c)
    for held, pairs in states:
        assert all(a in held and b in held for a, b in pairs)
    if p > c >= 2:  # no swap is wasted while pairs are left that one swap can reach
        assert len(states) - 1 <= (p * (p + 1) // 2 - c * (c + 1) // 2)


@pytest.fixture
def graph():
    return edge_list(199, 1500, loops=5)  # self-loops: no positives


@pytest.mark.parametrize("p,c,batch_size", [(1, 1, 64), (4, 2, 1), (7, 3, 50), (8, 8, 5000), (64, 5, 33)])
def test_a_partitioned_epoch_trains_every_edge_once_inside_its_buffer(graph, tmp_path, p, c, batch_size):
    """199 nodes: the last partition is short; 64 partitions of 4 rows: the last ones are empty."""
    n, src, dst, indptr, indices = graph
    buckets = EdgeBuckets.train(indptr, indices, p, tmp_path / "b.bin")
    rows = partition_rows(n, p)
    spec = LinkSpec(batch_size, chunks=3, negatives=6, degree_fraction=0.5)
    epoch = LinkEpoch(indptr, indices, spec, seed=2, epoch=1, buckets=buckets, capacity=c)
    seen, states = Counter(), []
    for b in range(len(epoch)):
        batch = epoch[b]
        held = set(batch.partitions)
        assert len(held) == min(p, c)
        for ids in (batch.src, batch.dst, batch.negatives.ravel()):
            assert set((ids // rows).tolist()) <= held
        assert batch.src.size <= batch_size and (batch.src != batch.dst).all()
        seen.update(zip(batch.src.tolist(), batch.dst.tolist()))
        if not states or states[-1] != batch.partitions:
            states.append(batch.partitions)
    assert seen == Counter((s, d) for s, d in zip(src.tolist(), dst.tolist()) if s != d)
    assert len(states) == len(set(states))  # a state's batches are consecutive
    last = epoch[len(epoch) - 1]
    assert last.mask == sum(1 << q for q in last.partitions)
    pairs = Counter(map(tuple, last.excluded.tolist()))  # its positives, both ways, left out of its sampling
    assert pairs == Counter(zip(last.src.tolist(), last.dst.tolist())) + Counter(zip(last.dst.tolist(),
                                                                                    last.src.tolist()))
    again = LinkEpoch(indptr, indices, spec, seed=2, epoch=1, buckets=buckets, capacity=c)
    np.testing.assert_array_equal(again[len(epoch) - 1].negatives, epoch[len(epoch) - 1].negatives)
    if p > c:  # another epoch meets the partitions in another order
        other = LinkEpoch(indptr, indices, spec, seed=2, epoch=2, buckets=buckets, capacity=c)
        assert [other[b].partitions for b in range(3)] != [epoch[b].partitions for b in range(3)]


def test_the_plan_refuses_a_buffer_of_fewer_than_two_partitions():
    assert buffer_plan(8, 1000, 1000 * 40, 2 * 125 * 40) == (8, 2)
    assert buffer_plan(8, 1000, 1000 * 40, 10**9) == (8, 8)
    with pytest.raises(UsageError, match="--embedding-partitions 8: a partition is 4.9 KiB .* less than two"):
        buffer_plan(8, 1000, 1000 * 40, 2 * 125 * 40 - 1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("masked")
    g = random_graph(n=199, e=2500, seed=5)
    return open_dataset(prepare(write_npy_dir(tmp / "src", g, splits={"train": np.arange(199)}), tmp / "ds",
                                progress=False))


def sample(ds, seeds, fanouts, sampler=Sampler(), rows=0, masks=(), exclude=None):
    extra = {} if exclude is None else {"exclude_pairs": np.asarray(exclude, np.int64).reshape(-1, 2),
                                        "exclude_offsets": [0, len(exclude)]}
    recs = open_graph(ds).records([np.asarray(seeds, np.int64)], [17], fanouts, 3, 1, sampler, partition_rows=rows,
                                  batch_masks=list(masks), **extra)
    return parse_record(recs[0], 0)


@pytest.mark.parametrize("sampler", [Sampler(), Sampler("labor", True)])
def test_a_mask_of_every_partition_samples_as_no_mask(dataset, sampler):
    seeds = np.arange(0, 199, 3)
    a, b = sample(dataset, seeds, [4, 3], sampler), sample(dataset, seeds, [4, 3], sampler, 50, [0b1111])
    np.testing.assert_array_equal(a.nodes, b.nodes)
    for x, y in zip(a.blocks, b.blocks):
        np.testing.assert_array_equal(x.indices, y.indices)


@pytest.mark.parametrize("fanouts", [[-1, -1], [3, 2], [1]])
@pytest.mark.parametrize("sampler", [Sampler(), Sampler("labor")])
def test_a_masked_batch_samples_only_among_its_partitions(dataset, fanouts, sampler):
    """The oracle: each node's in-neighbours cut to the mask's partitions (numpy), fanout of those or all."""
    rows, held = 40, (0, 2, 4)  # 199 nodes: partitions 0..4, the last of 39
    indptr, indices = np.asarray(dataset.indptr), np.asarray(dataset.indices)
    seeds = np.array([5, 81, 160, 198, 0])
    batch = sample(dataset, seeds, fanouts, sampler, rows, [sum(1 << q for q in held)])
    nodes, known = batch.nodes, batch.num_seeds
    assert set((nodes[known:] // rows).tolist()) <= set(held)
    for h, block in enumerate(batch.blocks):
        for i in range(block.num_dst):
            nb = indices[indptr[nodes[i]]: indptr[nodes[i] + 1]]
            allowed = nb[np.isin(nb // rows, held)]
            picked = nodes[block.indices[block.indptr[i]: block.indptr[i + 1]]]
            want = allowed.size if fanouts[h] == -1 else min(fanouts[h], allowed.size)
            assert picked.size == want and np.isin(picked, allowed).all()
            if fanouts[h] == -1:
                assert Counter(picked.tolist()) == Counter(allowed.tolist())


@pytest.mark.parametrize("fanouts,rows,masks", [([-1, -1], 0, ()), ([2, 2], 0, ()), ([-1], 40, [0b10101])])
def test_excluded_edges_are_never_sampled(dataset, fanouts, rows, masks):
    """A link batch's positives (and their reverses) left out of its neighbourhoods, at every hop: the oracle is
    each node's in-neighbours less the excluded edges into it (and cut to the mask's partitions)."""
    indptr, indices = np.asarray(dataset.indptr), np.asarray(dataset.indices)
    seeds = np.array([5, 81, 160, 198])
    exclude = [(int(indices[indptr[v]]), int(v)) for v in seeds if indptr[v + 1] > indptr[v]]
    exclude += [(int(indices[indptr[v] + 1]), int(v)) for v in (17, 33) if indptr[v + 1] - indptr[v] > 1]
    exclude += [(5, 81), (7, 7), (81, 5)]  # pairs that may not be edges at all
    held = [q for q in range(5) if masks and masks[0] >> q & 1]
    batch = sample(dataset, seeds, fanouts, Sampler(), rows, masks, exclude)
    nodes = batch.nodes
    for h, block in enumerate(batch.blocks):
        for i in range(block.num_dst):
            v = nodes[i]
            nb = indices[indptr[v]: indptr[v + 1]]
            allowed = [u for u in nb.tolist() if (u, v) not in exclude and (not held or u // rows in held)]
            picked = nodes[block.indices[block.indptr[i]: block.indptr[i + 1]]].tolist()
            want = len(allowed) if fanouts[h] == -1 else min(fanouts[h], len(allowed))
            assert len(picked) == want and not Counter(picked) - Counter(allowed)
    if fanouts[0] == -1:  # something was left out
        assert sample(dataset, seeds, fanouts, Sampler(), rows, masks).blocks[0].indices.size > \
            batch.blocks[0].indices.size


def test_bad_masks_are_refused(dataset):
    with pytest.raises(ValueError, match="one partition mask per batch"):
        sample(dataset, [1, 2], [2], Sampler(), 50, [1, 1])
    with pytest.raises(ValueError, match="1 to 64 partitions"):
        sample(dataset, [1, 2], [2], Sampler(), 3, [1])
