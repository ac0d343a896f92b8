"""The tier chain: any tier can join it, each row is served once by the first tier that holds it, and packs
written for another placement are refused instead of served wrong."""

import numpy as np
import pytest

from diskgnn.errors import DiskgnnError
from diskgnn.offline.pack import pack_epoch
from diskgnn.offline.placement import access_counts, place
from diskgnn.offline.sample import sample_epoch
from diskgnn.store.store import FeatureStore
from diskgnn.store.tiers import Rows, Tier, load_tiers

from conftest import make_dataset


class EveryOtherRowOf(Tier):
    """A tier that holds every other row a given tier holds (stands in for the coming 'recent rows' and
    'peer rank' tiers: rows decided elsewhere, served from memory of its own)."""

    name = "recent"

    def __init__(self, features, ids):
        self.ids = np.asarray(ids[::2])
        self.rows = features[self.ids]

    def claim(self, batch, todo, slab):
        slots = np.searchsorted(self.ids, batch.nodes[todo])
        held = (slots < self.ids.size) & (self.ids[np.minimum(slots, self.ids.size - 1)] == batch.nodes[todo])
        return held, slots[held]

    def served(self, batch, positions, slots):
        return Rows(positions, self.rows, slots)


@pytest.fixture
def packed(tmp_path):
    ds = make_dataset(tmp_path, 199, 7)
    sf = sample_epoch(ds, tmp_path / "e.samples", fanouts=[3, 2], batch_size=16, seed=0, epoch=0)
    counts = access_counts([sf], ds.num_nodes)
    placement = place(counts, ds.row_bytes, [("host", 40 * ds.row_bytes)])
    return ds, sf, counts, placement, pack_epoch(ds, sf, placement, tmp_path / "e.packs")


def test_a_new_tier_joins_the_chain_and_is_counted(packed):
    ds, sf, counts, placement, packs = packed
    features = np.asarray(ds.features)
    host = load_tiers(ds, placement)
    recent = EveryOtherRowOf(features, placement.tier_ids[0])
    store = FeatureStore(ds, placement, packs, tiers=[recent, *host])
    assert [t.name for t in store.chain] == ["recent", "host", "page_cache", "disk"]
    held = set(recent.ids.tolist())
    expect_recent = 0
    for batch in sf:
        np.testing.assert_array_equal(store.load(batch).numpy(), features[batch.nodes])
        expect_recent += sum(int(v) in held for v in batch.nodes)
    stats = {s.name: s.hits for s in store.stats()}
    assert stats["recent"] == expect_recent > 0
    assert stats["recent"] + stats["host"] == sum(int(counts[i]) for i in placement.tier_ids[0])
    assert sum(stats.values()) == counts.sum()


def test_packs_for_another_placement_are_refused(packed, tmp_path):
    ds, sf, counts, placement, packs = packed
    smaller = place(counts, ds.row_bytes, [("host", 10 * ds.row_bytes)])  # rows the packs do not hold
    with pytest.raises(DiskgnnError, match="no memory tier and no pack region holds"):
        for batch in sf:
            FeatureStore(ds, smaller, packs).load(batch)
    larger = place(counts, ds.row_bytes, [("host", 80 * ds.row_bytes)])  # rows packed and cached both
    with pytest.raises(DiskgnnError, match="overlap rows a memory tier holds"):
        for batch in sf:
            FeatureStore(ds, larger, packs).load(batch)

