import numpy as np
import pytest

from diskgnn.offline.placement import hottest_first, place


def test_hottest_rows_fill_tiers_in_order():
    counts = np.array([0, 5, 1, 9, 9, 3, 0, 2])
    p = place(counts, row_bytes=100, budgets=[("device", 250), ("host", 200), ("empty", 0)])
    assert [ids.tolist() for ids in p.tier_ids] == [[3, 4], [1, 5], []]
    assert p.total_accesses == 29
    np.testing.assert_allclose(p.expected_hit_rates, [18 / 29, 8 / 29, 0])
    tier, slot = p.locate(np.array([4, 0, 5, 2, 3, 1]))
    assert tier.tolist() == [0, -1, 1, -1, 0, 1]
    assert slot[tier >= 0].tolist() == [1, 1, 0, 0]


def test_room_left_after_the_accessed_rows_holds_the_others():
    counts = np.array([0, 1, 0, 2, 0])
    p = place(counts, row_bytes=4097, budgets=[("host", 10**9)])
    assert p.tier_ids[0].tolist() == [0, 1, 2, 3, 4] and p.expected_hit_rates == [1.0]
    p = place(counts, row_bytes=4097, budgets=[("host", 3 * 4097), ("next", 4097)])
    assert [ids.tolist() for ids in p.tier_ids] == [[0, 1, 3], [2]]  # accessed first, then by id
    assert p.expected_hit_rates == [1.0, 0.0]
    tier, _ = p.locate(np.array([], dtype=np.int64))
    assert tier.size == 0


@pytest.mark.parametrize("top", [0, 1, 7, 65535, 65536, 10**6])
def test_hottest_first_matches_sorting_by_count_then_id(top):
    # 16-bit keys (radix sort) up to a count of 65535, 64-bit keys above: both give (-count, id) order.
    rng = np.random.default_rng(top)
    counts = rng.integers(0, top + 1, size=199).astype(np.int32)
    counts[rng.integers(0, 199, size=20)] = top  # ties at the top and at zero
    oracle = sorted(range(counts.size), key=lambda i: (-int(counts[i]), i))
    assert hottest_first(counts).tolist() == oracle
    assert hottest_first(np.zeros(0, np.int32)).size == 0


def test_tier_is_locates_first_half():
    p = place(np.array([3, 0, 2, 1]), row_bytes=8, budgets=[("device", 8), ("host", 8)])
    nodes = np.array([3, 3, 0, 1, 2])
    assert p.tier(nodes).tolist() == p.locate(nodes)[0].tolist() == [-1, -1, 0, -1, 1]
