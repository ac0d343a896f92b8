"""HAG: the greedy search's structure (every destination still covers exactly its sources, levels read only earlier
levels, the capacity holds) and its sums, forward and backward, against plain `index_add_` on awkward blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diskgnn import _native
from diskgnn.loading.blocks import TensorBlock
from diskgnn.loading.hag import HagBuilder, decode, encode, pays, predicted_cost, search


def block_of(lists: list[list[int]], num_src: int) -> TensorBlock:
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int64)
    indices = np.asarray([s for x in lists for s in x], dtype=np.int64)
    return TensorBlock.from_csc(indptr, indices, len(lists), num_src)


def shared_lists(rng, num_dst=300, num_src=120):
    """Destinations drawing from a few shared groups of sources (much redundancy)."""
    groups = [rng.choice(num_src, size=rng.integers(2, 9), replace=False) for _ in range(12)]
    lists = []
    for _ in range(num_dst):
        picked = set()
        for g in rng.choice(len(groups), size=rng.integers(0, 4), replace=False):
            picked.update(groups[g].tolist())
        picked.update(rng.choice(num_src, size=rng.integers(0, 3)).tolist())
        lists.append(sorted(picked))
    return lists, num_src


def power_law_lists(rng, num_dst=400, num_src=500):
    """In-degrees from a Zipf law, sources from a skewed popularity: hubs shared by many destinations."""
    popularity = 1 / np.arange(1, num_src + 1) ** 1.1
    popularity /= popularity.sum()
    lists = []
    for _ in range(num_dst):
        d = min(num_src, int(rng.zipf(1.8)))
        lists.append(sorted(rng.choice(num_src, size=d, replace=False, p=popularity).tolist()))
    return lists, num_src


CASES = {
    "empty": ([], 5),
    "no sources": ([[], [], []], 0),
    "one destination": ([[3, 1, 4]], 6),
    "duplicate-heavy": ([[0, 0, 1, 2], [0, 1, 2], [0, 1, 2], [1, 1]], 3),
    "all the same": ([[0, 1, 2, 3]] * 50, 4),
    "shared groups": shared_lists(np.random.default_rng(1)),
    "power law": power_law_lists(np.random.default_rng(2)),
}


def cover(hag, x: int) -> list[int]:
    """The original sources an extended id sums (recursively through aggregation nodes)."""
    if x < hag.num_src:
        return [x]
    a, b = hag.inputs[2 * (x - hag.num_src): 2 * (x - hag.num_src) + 2]
    return cover(hag, int(a)) + cover(hag, int(b))


@pytest.mark.parametrize("case", CASES)
def test_every_destination_covers_exactly_its_sources(case):
    lists, num_src = CASES[case]
    block = block_of(lists, num_src)
    hag, plain, through = search(block)
    assert plain == block.indices.numel() and through == hag.num_edges + 2 * hag.num_agg
    assert hag.num_agg <= max(1, len(lists) // 4)
    ptr, idx = hag.indptr, hag.indices
    for v, expected in enumerate(lists):
        got = sorted(s for x in idx[ptr[v]:ptr[v + 1]] for s in cover(hag, int(x)))
        assert got == sorted(expected), (case, v)
    bounds = hag.level_bounds
    level = np.zeros(num_src + hag.num_agg, np.int64)
    for lv in range(len(bounds) - 1):
        for k in range(bounds[lv], bounds[lv + 1]):
            ins = hag.inputs[2 * k: 2 * k + 2]
            assert all(i < num_src or level[i] < lv + 1 for i in ins)  # inputs from earlier levels only
            assert all(i < num_src or i - num_src < bounds[lv] for i in ins)
            level[num_src + k] = lv + 1
    if case in ("all the same", "shared groups", "power law"):
        assert hag.num_agg > 0 and through < plain  # redundancy found
    if case == "duplicate-heavy":
        assert hag.frozen == 2  # multisets are summed as they are


def oracle(block, h, how):
    """Plain torch: index_add_ over every edge, then the mean's scale and GCN's self row."""
    total = torch.zeros(block.num_dst, h.shape[1], dtype=torch.float32).index_add_(0, block.dst,
                                                                                   h[block.indices].float())
    if how == "gcn":
        return (total + h[: block.num_dst].float()) * block.inv_deg_self[:, None]
    return total * block.inv_deg[:, None] if how == "mean" else total


# GCN's self row needs a block's layout (destinations first among the sources): "no sources" has none.
@pytest.mark.parametrize("case,how", [(c, how) for c in CASES for how in ("sum", "mean", "gcn")
                                      if not (how == "gcn" and len(CASES[c][0]) > CASES[c][1])])
@pytest.mark.parametrize("dim", [1, 33, 128])
def test_hag_sums_equal_index_add_forward_and_backward(case, how, dim):
    lists, num_src = CASES[case]
    block = block_of(lists, num_src)
    hag, _, _ = search(block)
    h = torch.randn(num_src, dim, generator=torch.Generator().manual_seed(dim))
    grad = torch.randn(block.num_dst, dim, generator=torch.Generator().manual_seed(7))
    x = h.clone().requires_grad_()
    ref = oracle(block, x, how)
    ref.backward(grad)
    block.hag = hag
    y = h.clone().requires_grad_()
    out = block.sum_neighbours(y) if how == "sum" else block.mean_neighbours(y, self_loop=how == "gcn")
    out.backward(grad)
    tol = 1e-5 * max(1.0, float(np.sqrt(max((len(v) for v in lists), default=1))))
    torch.testing.assert_close(out, ref.detach(), rtol=1e-5, atol=tol)
    torch.testing.assert_close(y.grad, x.grad, rtol=1e-5, atol=tol)


@pytest.mark.parametrize("case", ["shared groups", "power law", "empty"])
def test_hag_sums_of_bf16_rows_equal_the_plain_bf16_sums(case):
    """bf16 rows through a HAG: summed in float32 like the plain kernel, so only the partial sums' order differs
    (both round once, on the way out)."""
    lists, num_src = CASES[case]
    block = block_of(lists, num_src)
    h = torch.randn(num_src, 64, generator=torch.Generator().manual_seed(3)).bfloat16()
    grad = torch.randn(block.num_dst, 64, generator=torch.Generator().manual_seed(4)).bfloat16()
    runs = []
    for hag in (None, search(block)[0]):
        block.hag = hag
        y = h.clone().requires_grad_()
        out = block.mean_neighbours(y, self_loop=block.num_dst <= num_src)
        out.backward(grad)
        assert out.dtype == torch.bfloat16 and y.grad.dtype == torch.bfloat16
        runs.append((out.float(), y.grad.float()))
    for plain, through in zip(*runs):
        torch.testing.assert_close(through, plain, rtol=1e-2, atol=1e-2)


def test_a_hag_refuses_rows_of_another_block():
    lists, num_src = CASES["all the same"]
    hag, _, _ = search(block_of(lists, num_src))
    with pytest.raises(ValueError, match="row counts do not match the block"):
        _native.hag_sum(hag, np.zeros((num_src + 1, 4), np.float32), np.zeros((len(lists), 4), np.float32), 1, None,
                        False)


def test_builder_runs_the_hag_only_where_the_cost_model_says_it_pays(monkeypatch):
    redundant = block_of(*CASES["all the same"])
    sparse = block_of([[0, 1], [2, 3], [4, 5]], 6)
    # Every row costing the same (a removed read 1, a node its 2 reads): the row count decides.
    monkeypatch.setattr("diskgnn.defaults.HAG_SAVED_ROW_COST", 1.0)
    monkeypatch.setattr("diskgnn.defaults.HAG_NODE_COST", 2.0)
    builder = HagBuilder("auto")
    builder.attach([redundant, sparse])
    assert redundant.hag is not None and sparse.hag is None
    s = builder.stats.to_dict()
    # the sparse block is not even searched: no pair of its sources is shared by more than a / s = 2 destinations
    assert s["blocks"] == 1 and s["used"] == 1 and 0 < s["saving"] < 1
    hag, plain, through = search(block_of(*CASES["all the same"]))
    assert predicted_cost(plain, hag.num_edges, hag.num_agg) == through  # every row read counts 1
    # Removed reads of cached rows cost nothing (this machine's measured model): the same HAG does not pay.
    monkeypatch.setattr("diskgnn.defaults.HAG_SAVED_ROW_COST", 0.0)
    assert predicted_cost(plain, hag.num_edges, hag.num_agg) > plain
    assert not pays("auto", plain, hag.num_edges, hag.num_agg)
    assert pays("on", plain, hag.num_edges, hag.num_agg) and through < plain  # on: wherever fewer rows are summed
    # auto stops searching a pass where the probe found nothing to save (blocks the pair counts let through)
    monkeypatch.setattr("diskgnn.defaults.HAG_PROBE_BATCHES", 2)
    monkeypatch.setattr("diskgnn.loading.hag.may_pay", lambda mode, block: True)
    quiet = HagBuilder("auto")
    for _ in range(3):
        quiet.attach([block_of([[0, 1], [2, 3]], 4)])
    assert quiet.stats.stopped and quiet.stats.batches == 2
    monkeypatch.setattr("diskgnn.defaults.HAG_SAVED_ROW_COST", 1.0)
    off = HagBuilder("off")
    again = block_of(*CASES["all the same"])
    off.attach([again])
    assert again.hag is None and off.stats.blocks == 0


def test_stored_hags_come_back_equal_and_are_checked():
    """encode/decode round-trips a batch's HAGs (None for a block that runs plain); a record cut short, or one
    whose ids point forward, is refused before any sum trusts it."""
    lists, num_src = CASES["shared groups"]
    block = block_of(lists, num_src)
    hag = search(block)[0]
    back = decode(encode([hag, None]))
    assert back[1] is None
    for name in ("inputs", "level_bounds", "indptr", "indices"):
        np.testing.assert_array_equal(getattr(back[0], name), getattr(hag, name))
    assert (back[0].num_src, back[0].frozen) == (hag.num_src, hag.frozen)
    assert decode(encode([])) == []
    raw = encode([hag])
    with pytest.raises(ValueError, match="HAG record: arrays truncated"):
        decode(raw[:-8])
    with pytest.raises(ValueError, match="HAG record: trailing bytes"):
        decode(raw + bytes(8))
    forward = hag.inputs.copy()
    forward[0] = num_src + hag.num_agg - 1  # the first node reading the last: a cycle
    with pytest.raises(ValueError, match="reads a node of its own or a later level"):
        _native.hag_from_arrays(num_src, hag.frozen, forward, hag.level_bounds, hag.indptr, hag.indices)
    far = hag.indices.copy()
    far[-1] = num_src + hag.num_agg
    with pytest.raises(ValueError, match="out of range"):
        _native.hag_from_arrays(num_src, hag.frozen, hag.inputs, hag.level_bounds, hag.indptr, far)


def test_sample_files_store_each_batchs_hags_under_its_checksum(train_data, tmp_path):
    """Offline sampling with --hag on stores the HAGs with the records: the loader's blocks run them, their sums
    equal the plain ones, a batch sampled without them is the same batch, and a flipped byte in the HAG part fails
    the record's checksum."""
    from diskgnn.data.format import open_dataset
    from diskgnn.errors import DiskgnnError
    from diskgnn.loading.blocks import sampled_blocks
    from diskgnn.offline.batches import SampleFile
    from diskgnn.offline.sample import sample_epoch
    from diskgnn.target.cpu import CpuTarget

    ds = open_dataset(train_data)
    common = dict(fanouts=[-1, -1], batch_size=64, seed=0, epoch=0, threads=2)
    plain = sample_epoch(ds, tmp_path / "plain.samples", **common)
    builder = HagBuilder("on")
    stored = sample_epoch(ds, tmp_path / "hag.samples", hag=builder, **common)
    assert plain.hag_mode == "off" and stored.hag_mode == "on" and builder.stats.used > 0
    labels = np.asarray(ds.labels)
    ran = 0
    for b in range(len(stored)):
        a, s = plain[b], stored[b]
        assert a.hag_bytes is None and s.hag_bytes is not None
        np.testing.assert_array_equal(a.nodes, s.nodes)
        work = CpuTarget().prepare(s, labels)
        for block, reference in zip(work.blocks, sampled_blocks(a)):
            h = torch.randn(block.num_src, 8, generator=torch.Generator().manual_seed(b))
            torch.testing.assert_close(block.mean_neighbours(h), reference.mean_neighbours(h), rtol=1e-5, atol=1e-5)
            ran += block.hag is not None
    assert ran == builder.stats.used
    raw = bytearray((tmp_path / "hag.samples").read_bytes())
    raw[stored.offsets[1] - 9] ^= 1  # inside batch 0's HAG part
    (tmp_path / "hag.samples").write_bytes(bytes(raw))
    with pytest.raises(DiskgnnError, match="batch 0 fails its checksum"):
        SampleFile(tmp_path / "hag.samples")[0]


def test_a_typed_batch_stores_a_hag_per_relation_block(tmp_path):
    """A typed graph's offline sampling stores a HAG per (hop, relation) block, hop 0 first (none where the hop does
    not follow the relation); the loader's blocks run them with sums equal to the plain ones, and the HAGs found
    online (attached to a MiniBatch's blocks, the model's order) sit on the same blocks."""
    from conftest import small_hetero
    from diskgnn.data.format import open_dataset
    from diskgnn.loading.blocks import sampled_blocks
    from diskgnn.offline.sample import sample_epoch
    from diskgnn.target.cpu import CpuTarget

    ds = open_dataset(small_hetero(tmp_path), typed=True)
    rels = len(ds.schema.relations)
    fanouts = [[-1] * rels, [-1 if r % 2 else 0 for r in range(rels)]]  # hop 1 leaves every other relation out
    common = dict(fanouts=fanouts, batch_size=37, seed=0, epoch=0, threads=2)
    plain = sample_epoch(ds, tmp_path / "plain.samples", **common)
    builder = HagBuilder("on")
    stored = sample_epoch(ds, tmp_path / "hag.samples", hag=builder, **common)
    assert stored.hag_mode == "on" and builder.stats.used > 0 and len(stored) == len(plain) > 1
    labels = np.asarray(ds.labels)
    ran = 0
    for b in range(len(stored)):
        work = CpuTarget().prepare(stored[b], labels)
        online = CpuTarget().prepare(plain[b], labels, hag=HagBuilder("on"))
        assert plain[b].hag_bytes is None and work.blocks[0][0] is None  # hop 1 is the model's first
        for hop, mine, reference in zip(work.blocks, online.blocks, sampled_blocks(plain[b])):
            for block, found, ref in zip(hop, mine, reference):
                if ref is None:
                    assert block is None and found is None
                    continue
                h = torch.randn(block.num_src, 5, generator=torch.Generator().manual_seed(b))
                torch.testing.assert_close(block.mean_neighbours(h), ref.mean_neighbours(h), rtol=1e-5, atol=1e-5)
                assert (block.hag is None) == (found.hag is None)
                ran += block.hag is not None
    assert ran == builder.stats.used


def test_training_through_hags_matches_plain_sums(train_data, tmp_path):
    """The trainer with --hag on (full neighbourhoods: shared pairs exist; HAGs stored in the sample files) ends where
    --hag off does, up to float reassociation, and its summary says how many blocks ran through a HAG."""
    from conftest import train_config
    from diskgnn.train.loop import train

    runs = {mode: train(train_config(train_data, tmp_path / mode, fanouts="-1,-1", hag=mode, dropout=0.0,
                                     checkpoint_every="off", eval="full"))
            for mode in ("off", "on")}
    on, off = runs["on"], runs["off"]
    assert on["hag"]["used"] > 0 and on["hag"]["saving"] > 0 and off["hag"]["blocks"] == 0
    # --eval full ran through the whole graph's stored HAG (where it pays: this random graph shares few pairs)
    assert on["hag"]["graph"]["chunks"] >= 1 and "graph" not in off["hag"]
    assert on["train_loss"] == pytest.approx(off["train_loss"], rel=1e-4)
    assert on["test_acc"] == pytest.approx(off["test_acc"], abs=0.01)


def test_hag_on_with_gat_is_refused():
    from diskgnn.errors import UsageError
    from diskgnn.train.config import TrainConfig

    with pytest.raises(UsageError, match="gat weights every edge"):
        TrainConfig(model="gat", hag="on").validate()


def test_auto_searches_nothing_where_the_cost_model_says_no_hag_can_pay(monkeypatch):
    """Under this machine's measured constants (a removed read saves nothing: s <= 0) no HAG is ever predicted
    faster, so auto decides from the constants and the pair counts before any search: a held-out graph with one
    full-neighbour batch per epoch took 2.3x --hag off's time while auto probed and chose nothing."""
    from diskgnn.loading.hag import may_pay, shared_by

    redundant = block_of(*CASES["all the same"])
    assert may_pay("on", redundant) and shared_by(redundant) >= 2
    assert not may_pay("auto", redundant)  # the defaults: s = -0.18
    builder = HagBuilder("auto")
    builder.attach([redundant])
    assert redundant.hag is None and builder.stats.stopped and builder.stats.blocks == 0 and not builder.active
    monkeypatch.setattr("diskgnn.defaults.HAG_SAVED_ROW_COST", 1.0)
    monkeypatch.setattr("diskgnn.defaults.HAG_NODE_COST", 2.0)
    assert may_pay("auto", redundant) and not may_pay("auto", block_of([[0, 1], [2, 3], [4, 5]], 6))
