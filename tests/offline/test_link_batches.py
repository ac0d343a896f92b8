"""Link batches: an epoch's batches hold every non-loop edge of the graph once, reproducibly, in O(batch)."""

from collections import Counter

import numpy as np
import pytest

from diskgnn.offline.link_batches import LinkEpoch, LinkSpec

from conftest import edge_list


@pytest.fixture
def graph():
    return edge_list(199, 1200, loops=7)  # self-loops: no positives


@pytest.mark.parametrize("batch_size", [1, 64, 199, 5000])
def test_an_epoch_holds_every_non_loop_edge_once(graph, batch_size):
    n, src, dst, indptr, indices = graph
    epoch = LinkEpoch(indptr, indices, LinkSpec(batch_size, chunks=3, negatives=5), seed=0, epoch=0)
    assert len(epoch) == -(-1200 // batch_size)
    seen = Counter()
    for b in epoch:
        assert b.src.size <= batch_size and (b.src != b.dst).all()
        seen.update(zip(b.src.tolist(), b.dst.tolist()))
        assert (np.diff(b.seeds) > 0).all()
        for ids in (b.src, b.dst, b.negatives.ravel()):
            np.testing.assert_array_equal(b.seeds[b.local(ids)], ids)
        assert b.negatives.shape == (max(1, min(3, b.src.size)), 5) and (np.diff(b.chunk_of) >= 0).all()
    assert seen == Counter((s, d) for s, d in zip(src.tolist(), dst.tolist()) if s != d)


def test_batches_are_a_function_of_seed_epoch_and_index(graph):
    n, src, dst, indptr, indices = graph
    spec = LinkSpec(100, chunks=2, negatives=4, degree_fraction=0.5)
    a, again = LinkEpoch(indptr, indices, spec, seed=1, epoch=2), LinkEpoch(indptr, indices, spec, seed=1, epoch=2)
    for b in (5, 0, 11):  # any order, any process
        x, y = a[b], again[b]
        for field in ("src", "dst", "chunk_of", "negatives", "seeds"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field))
    other = LinkEpoch(indptr, indices, spec, seed=1, epoch=3)[0]
    assert not np.array_equal(other.src, a[0].src)
    with pytest.raises(IndexError):
        a[len(a)]


def test_an_edgeless_graph_has_no_batches():
    assert len(LinkEpoch(np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int32), LinkSpec(8), seed=0,
                         epoch=0)) == 0


def test_held_out_batches_keep_the_edges_order_and_draw_their_own_negatives(graph):
    n, src, dst, indptr, indices = graph
    held = np.stack([src[:2500 % 1200], dst[:2500 % 1200]], axis=1)[:199]
    ev = LinkEpoch.held_out(held, indptr, indices, negatives=50, split_key=1)
    assert len(ev) == 1
    b = ev[0]
    np.testing.assert_array_equal(np.stack([b.src, b.dst], 1), held)  # loops and all: a held-out edge is scored
    assert b.negatives.shape == (1, 50) and (b.chunk_of == 0).all()
    np.testing.assert_array_equal(LinkEpoch.held_out(held, indptr, indices, negatives=50, split_key=1)[0].negatives,
                                  b.negatives)
    assert not np.array_equal(LinkEpoch.held_out(held, indptr, indices, negatives=50, split_key=2)[0].negatives,
                              b.negatives)
    epoch = LinkEpoch(indptr, indices, LinkSpec(100), seed=0, epoch=0)
    assert len(epoch) == 12 and (np.diff(epoch[3].seeds) > 0).all()
    assert epoch[3].mask == 0 and epoch[3].excluded is None  # unpartitioned: nothing restricted
