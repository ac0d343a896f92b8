import numpy as np

from diskgnn.placement import place


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
