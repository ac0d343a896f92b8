"""A typed dataset's rows through each featured type's tier chain (store/by_type.py's TypedRows: its memory tier, placed
with the other types' under one budget, then the batch's pack region of the type or the feature file), against
numpy indexing of each type's features."""

import numpy as np
import pytest

from diskgnn.data.format import open_dataset
from diskgnn.offline.batches import Batch
from diskgnn.offline.placement import densest, held_placement
from diskgnn.store.by_type import TypedRows

from conftest import small_hetero, write_hetero_npy


def load(store, ids, b=-1):
    return store.load(Batch.one_type(b, np.asarray(ids, np.int64), [], 0)).numpy()


@pytest.mark.parametrize("budget_rows", [0, 2, 10**6])
def test_rows_by_id_match_numpy(tmp_path, budget_rows):
    from diskgnn.data.hetero.prepare import prepare_hetero

    src = write_hetero_npy(tmp_path / "src", {"w": 199, "o": 1, "n": 3}, {"w": 4097, "o": 1},
                           {("o", "to", "w"): [[0, 5]], ("n", "in", "w"): [[2, 198]]}, "w", np.zeros(199, int))
    ds = open_dataset(prepare_hetero(src, tmp_path / "ds"), typed=True)
    rows = TypedRows(ds)
    assert set(rows.sources) == {"w", "o"}  # n has no features
    counts = {"w": np.bincount([3, 3, 3, 7, 198], minlength=199), "o": np.ones(1, np.int64)}
    costs = {name: src.row_bytes + 8 for name, src in rows.sources.items()}
    held = densest(counts, costs, budget_rows * (4097 * 4 + 8))
    # 2 rows' bytes: o's one row is densest, then w's row 3 (read 3 times); the next w row does not fit
    assert {n: ids.tolist() for n, ids in held.items()} == {0: {"w": [], "o": []}, 2: {"w": [3], "o": [0]},
                                                            10**6: {"w": [3, 7, 198], "o": [0]}}[budget_rows]
    rows.place({n: held_placement(rows.sources[n].num_rows, ids, counts[n]) for n, ids in held.items()})
    assert {n: p.tier_ids[0].tolist() for n, p in rows.placements.items()} == {n: i.tolist() for n, i in held.items()}
    typed = rows.store()
    stores = typed.stores
    for name, ids in (("w", [198, 3, 3, 0, 7, 100]), ("o", [0, 0]), ("w", []), ("w", [5])):
        want = np.load(src / "nodes" / name / "features.npy")[ids]
        np.testing.assert_array_equal(load(stores[name], ids), want)
    assert rows.summary()["w"]["rows"] == 0  # a pass's rows are counted as it ends
    rows.add(typed)
    summary = rows.summary()
    assert summary["w"]["rows"] == 7 and summary["o"]["rows"] == 2
    assert summary["w"]["hits"] == {0: 0, 2: 2, 10**6: 4}[budget_rows]
    assert summary["w"]["bytes_read"] == (7 - summary["w"]["hits"]) * 4097 * 4
    for store in stores.values():
        store.close()


@pytest.mark.parametrize("tier_rows", [0, 3, 10**6])
def test_packed_rows_match_numpy(tmp_path, tier_rows):
    """Awkward batches (one seed each; terms of 4097 floats; batches with no term at all), host tiers of none,
    some, all; a flipped byte in a pack region is named."""
    from diskgnn.data.schema import relation_fanouts
    from diskgnn.errors import DiskgnnError
    from diskgnn.offline.epochs import pack_types
    from diskgnn.offline.sample import sample_epoch

    ds = open_dataset(small_hetero(tmp_path / "hds", learnable=True), typed=True)
    fanouts = relation_fanouts("tags=1/cites=2", ds.schema)  # terms only where the seed has a tag
    samples = sample_epoch(ds, tmp_path / "e.samples", fanouts=fanouts, batch_size=1, seed=1, epoch=0)
    rows = TypedRows(ds)
    counts = {t: np.ones(ds.schema.type(t).count, np.int64) for t in ("paper", "term")}
    held = densest(counts, {"paper": 12 * 4 + 8, "term": 4097 * 4 + 8}, tier_rows * (4097 * 4 + 8))
    rows.place({n: held_placement(rows.sources[n].num_rows, ids, counts[n]) for n, ids in held.items()})
    packs, stats = pack_types(ds, samples, rows.placements, tmp_path, "e", pack_memory=64 << 20, threads=2,
                              sources=rows.sources)
    assert sorted(packs) == ["paper", "term"]
    typed = rows.store(packs)
    stores = typed.stores
    names = [t.name for t in ds.schema.types]
    empty = 0
    for b in range(len(samples)):
        batch = samples[b]
        for name in ("paper", "term"):
            ids = batch.type_nodes[names.index(name)]
            empty += ids.size == 0
            np.testing.assert_array_equal(load(stores[name], ids, b), np.asarray(ds.type_features(name))[ids])
    assert empty > 0 and len(samples) == 100
    packed = sum(int(p.rows.sum()) * p.row_bytes for p in packs.values())
    assert typed.disk.bytes == packed
    rows.add(typed)
    assert sum(s["bytes_read"] for s in rows.summary().values()) == packed
    assert (packed == 0) == (tier_rows == 10**6) and stats["bytes_written"] >= packed
    if packed:
        name, p = next((n, p) for n, p in packs.items() if p.rows.sum())
        b = int(np.flatnonzero(p.rows)[0])
        with open(p.path, "r+b") as fh:
            fh.seek(p.region(b)[0])
            fh.write(bytes([fh.read(1)[0] ^ 1]))
        with pytest.raises(DiskgnnError, match=f"{p.path}: region {b}'s packed rows fail their checksum"):
            load(stores[name], samples[b].type_nodes[names.index(name)], b)
    for store in stores.values():
        store.close()
