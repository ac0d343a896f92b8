"""Packed batches assemble to exactly the oracle: every batch's rows gathered from the mmapped features."""

import numpy as np
import pytest
import torch

from diskgnn.errors import DiskgnnError
from diskgnn.offline.pack import PackFile, pack_epoch
from diskgnn.offline.placement import access_counts, place
from diskgnn.offline.sample import sample_epoch
from diskgnn.store.store import FeatureStore

from conftest import CASES, make_dataset


@pytest.mark.parametrize("nodes,dim,dtype", CASES)
@pytest.mark.parametrize("cache_fraction", [0.0, 0.3, 2.0])
@pytest.mark.parametrize("backend", ["auto", "pread", "mmap"])
@pytest.mark.parametrize("max_blowup", [None, 1.2])
def test_assembled_batches_equal_the_oracle(tmp_path, nodes, dim, dtype, cache_fraction, backend, max_blowup):
    ds = make_dataset(tmp_path, nodes, dim, dtype)
    sf = sample_epoch(ds, tmp_path / "epoch-00000.samples", fanouts=[3, 2], batch_size=16, seed=0, epoch=0)
    counts = access_counts([sf], ds.num_nodes)
    budget = int(cache_fraction * ds.num_nodes * ds.row_bytes)
    placement = place(counts, ds.row_bytes, [("host", budget // 2), ("host2", budget - budget // 2)])
    packs = pack_epoch(ds, sf, placement, tmp_path / "epoch-00000.packs", chunk_bytes=5 * ds.row_bytes,
                       max_blowup=max_blowup)
    if max_blowup is not None:
        assert packs.meta["blowup"] <= max_blowup
    store = FeatureStore(ds, placement, packs, backend=backend)
    features = np.asarray(ds.features)
    served = 0
    for batch in sf:
        pending = store.finish(store.start(batch))  # the stored rows, byte for byte
        np.testing.assert_array_equal(pending.host.numpy().view(np.uint8), features[batch.nodes].view(np.uint8))
        x = store.to_device(pending)  # the model's input: the values as float32
        assert x.dtype == torch.float32
        np.testing.assert_array_equal(x.numpy(), features[batch.nodes].astype(np.float32))
        served += batch.nodes.size
    stats = {s.name: s for s in store.stats()}
    assert sum(s.hits for s in stats.values()) == served == counts.sum()
    own_rows = sum(packs.meta["rows"][: len(sf)])
    assert stats["disk"].hits == own_rows and stats["page_cache"].hits == sum(packs.meta["shared_rows"])
    if cache_fraction >= 1:
        assert packs.meta["packed_rows"] == 0 and stats["disk"].bytes == 0
    if cache_fraction == 0 and max_blowup is None:
        assert packs.meta["packed_rows"] == counts.sum()
    expected = sum(placement.expected_hit_rates) * counts.sum()
    assert stats["host"].hits + stats["host2"].hits == pytest.approx(expected)
    store.close()


def test_last_partial_batch_and_single_batch(tmp_path):
    ds = make_dataset(tmp_path, 199, 7)
    for batch_size in (1000, 19):  # one batch holding every seed; then a last partial batch
        sf = sample_epoch(ds, tmp_path / f"e{batch_size}.samples", fanouts=[-1], batch_size=batch_size, seed=1,
                          epoch=0)
        placement = place(access_counts([sf], ds.num_nodes), ds.row_bytes, [("host", 10 * ds.row_bytes)])
        packs = pack_epoch(ds, sf, placement, tmp_path / f"e{batch_size}.packs")
        store = FeatureStore(ds, placement, packs)
        for batch in sf:
            np.testing.assert_array_equal(store.load(batch).numpy(), np.asarray(ds.features)[batch.nodes])


def test_corrupt_pack_is_detected(tmp_path):
    ds = make_dataset(tmp_path, 199, 7)
    sf = sample_epoch(ds, tmp_path / "e.samples", fanouts=[2], batch_size=50, seed=0, epoch=0)
    placement = place(access_counts([sf], ds.num_nodes), ds.row_bytes, [("host", 0)])
    packs = pack_epoch(ds, sf, placement, tmp_path / "e.packs")
    offset, _ = packs.region(1)
    with open(packs.path, "r+b") as f:
        f.seek(offset + 3)
        f.write(b"\xff")
    store = FeatureStore(ds, placement, PackFile(packs.path))
    store.load(sf[0])
    with pytest.raises(DiskgnnError, match="region 1's packed rows fail their checksum"):
        store.load(sf[1])


def test_blowup_cap_shares_rows_between_batches(tmp_path):
    ds = make_dataset(tmp_path, 199, 7)
    sf = sample_epoch(ds, tmp_path / "e.samples", fanouts=[5, 5], batch_size=8, seed=2, epoch=0)
    placement = place(access_counts([sf], ds.num_nodes), ds.row_bytes, [("host", 0)])
    free = pack_epoch(ds, sf, placement, tmp_path / "free.packs")
    capped = pack_epoch(ds, sf, placement, tmp_path / "capped.packs", max_blowup=free.meta["blowup"] / 2)
    assert capped.meta["blowup"] <= free.meta["blowup"] / 2 and capped.meta["segment_batches"] >= 2
    assert sum(capped.meta["shared_rows"]) > 0
    with pytest.raises(DiskgnnError, match="--max-blowup 0.01 cannot be met"):
        pack_epoch(ds, sf, placement, tmp_path / "never.packs", max_blowup=0.01)


@pytest.mark.parametrize("nodes,dim,dtype", CASES)
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("max_blowup", [None, 1.2])
def test_recent_rows_are_not_packed_again_and_assemble_to_the_oracle(tmp_path, nodes, dim, dtype, window,
                                                                       max_blowup):
    """LABOR with batch dependency: rows one of the last `window` batches read are served from its assembled
    rows, not packed; every batch still equals numpy indexing, in file order and in a pass that starts
    mid-epoch (its first batches' earlier rows were never assembled: read from the features instead)."""
    from diskgnn.offline.sample import Sampler

    ds = make_dataset(tmp_path, nodes, dim, dtype)
    features = np.asarray(ds.features)
    sf = sample_epoch(ds, tmp_path / "e.samples", fanouts=[3, 2], batch_size=4, seed=0, epoch=0,
                      sampler=Sampler("labor", layer_dependency=True, batch_dependency=16))
    placement = place(access_counts([sf], ds.num_nodes), ds.row_bytes, [("host", 5 * ds.row_bytes)])
    plain = pack_epoch(ds, sf, placement, tmp_path / "plain.packs", max_blowup=max_blowup)
    packs = pack_epoch(ds, sf, placement, tmp_path / "recent.packs", recent=window, max_blowup=max_blowup)
    served = sum(p.size for p in packs.batch_rows.recent_pos)
    assert served > 0
    if max_blowup is None:
        assert packs.meta["packed_rows"] == plain.meta["packed_rows"] - served
    else:
        assert packs.meta["blowup"] <= max_blowup
    for start in (0, len(sf) // 2):
        store = FeatureStore(ds, placement, PackFile(packs.path))
        assert [t.name for t in store.chain] == ["host", "recent", "page_cache", "disk"]
        for b in range(start, len(sf)):
            np.testing.assert_array_equal(store.load(sf[b]).numpy(), features[sf[b].nodes].astype(np.float32))
        hits = {s.name: s.hits for s in store.stats()}
        assert hits["recent"] == sum(packs.batch_rows.recent_pos[b].size for b in range(start, len(sf)))
        store.close()
