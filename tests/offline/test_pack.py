"""The native packer: every region is its rows gathered from the features, bit for bit, whatever the
chunk size, memory budget, thread count or I/O mode; inconsistent input and small budgets are refused."""

import numpy as np
import pytest
import xxhash

from diskgnn import _native, defaults
from diskgnn.data.files import padded
from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.errors import DiskgnnError
from diskgnn.offline.pack import PackFile, pack_epoch, plan
from diskgnn.offline.placement import access_counts, place
from diskgnn.offline.sample import sample_epoch
from diskgnn.store.store import FeatureStore

from conftest import random_graph, write_npy_dir

# (nodes, feature dim, dtype): rows of 28 B, 4097 B (not dividing 4 KiB, larger than a block) and 1 B.
CASES = [(1500, 7, np.float32), (97, 4097, np.int8), (300, 1, np.uint8)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}x{c[1]}-{np.dtype(c[2]).name}")
def epoch(request, tmp_path_factory):
    """A dataset and one sampled epoch (big enough that regions outgrow the smallest staging buffers)."""
    n, dim, dtype = request.param
    tmp = tmp_path_factory.mktemp("pack")
    g = random_graph(n=n, e=6 * n, d=dim, seed=n)
    g["feat"] = (g["feat"] * 100).astype(dtype)
    src = write_npy_dir(tmp / "src", g, splits={"train": np.arange(0, n, 2)})
    ds = open_dataset(prepare(src, tmp / "ds", progress=False, feature_dtype=np.dtype(dtype).name))
    sf = sample_epoch(ds, tmp / "e.samples", fanouts=[4, 4], batch_size=max(8, n // 9), seed=0, epoch=0)
    counts = access_counts([sf], ds.num_nodes)
    return tmp, ds, sf, counts


def minimum_memory(ds, sf, placement, path, max_blowup=None) -> int:
    """The smallest pack_memory the packer accepts, read from its refusal of one byte."""
    with pytest.raises(DiskgnnError, match="below the packer's minimum of") as e:
        pack_epoch(ds, sf, placement, path, pack_memory=1, max_blowup=max_blowup)
    assert "\n" not in str(e.value)
    assert not path.exists() and not path.with_name(path.name + ".tmp").exists()
    return int(str(e.value).split("minimum of ")[1].split()[0])


def check_regions(ds, packs, regions):
    """Region r of the pack file is features[regions[r]] then zeros; its checksum is xxh3_64 of the rows."""
    data = np.fromfile(packs.path, dtype=np.uint8)
    feats = np.asarray(ds.features).view(np.uint8).reshape(ds.num_nodes, ds.row_bytes)
    assert data.size == packs.offsets[-1]
    for r, ids in enumerate(regions):
        offset, length = packs.region(r)
        rows = feats[ids].tobytes()
        assert length == len(rows) and packs.offsets[r + 1] - offset == padded(length)
        assert data[offset: offset + length].tobytes() == rows
        assert not data[offset + length: packs.offsets[r + 1]].any()
        assert packs.meta["checksums"][r] == xxhash.xxh3_64_hexdigest(rows)


@pytest.mark.parametrize("threads", [1, 3])
def test_plan_holds_each_batchs_uncached_rows_sorted_with_their_positions(epoch, threads):
    tmp, ds, sf, counts = epoch
    placement = place(counts, ds.row_bytes, [("host", int(0.2 * ds.num_nodes * ds.row_bytes))])
    cached = set(placement.tier_ids[0].tolist())
    p = plan(sf, placement, ds.num_nodes, threads=threads)
    rows = p.positions
    own_pos, shared_pos = rows.own_pos, rows.shared_pos
    assert len(p.regions) == len(own_pos) == len(sf) and 0 < len(cached) < ds.num_nodes
    assert p.segment_batches == 0 and all(s.size == 0 for s in shared_pos)
    for b, batch in enumerate(sf):
        want = sorted((int(v), i) for i, v in enumerate(batch.nodes) if int(v) not in cached)
        assert p.regions[b].tolist() == [v for v, _ in want]
        assert own_pos[b].tolist() == [i for _, i in want] and own_pos[b].dtype == np.int32


@pytest.mark.parametrize("cache_fraction,max_blowup", [(0.0, None), (0.2, None), (0.0, 1.5), (0.2, 1.0), (2.0, None)])
def test_pack_files_are_the_oracle_for_any_chunk_budget_and_threads(epoch, cache_fraction, max_blowup):
    tmp, ds, sf, counts = epoch
    placement = place(counts, ds.row_bytes, [("host", int(cache_fraction * ds.num_nodes * ds.row_bytes))])
    regions = plan(sf, placement, ds.num_nodes, max_blowup).regions
    assert (max(ids.size for ids in regions) == 0) == (cache_fraction >= 1)
    budget = minimum_memory(ds, sf, placement, tmp / "min.packs", max_blowup)
    variants = [  # (chunk_bytes, pack_memory, threads)
        (64 << 20, 1 << 30, 2),  # one chunk holds every row
        (1, 1 << 30, 1),  # one-row chunks
        (3 * ds.row_bytes, budget, 2),  # the smallest budget: staging flushes every block or two
        (3 * ds.row_bytes, budget, 1),
        (4096, budget + 64 * 4096, 3),
    ]
    reference, flushed = None, set()
    for i, (chunk_bytes, pack_memory, threads) in enumerate(variants):
        path = tmp / f"v{i}.packs"
        packs = pack_epoch(ds, sf, placement, path, max_blowup=max_blowup, chunk_bytes=chunk_bytes,
                           pack_memory=pack_memory, threads=threads)
        if max_blowup is not None:
            assert packs.meta["blowup"] <= max_blowup and packs.meta["segment_batches"] >= 2
        assert packs.packing["buffer_bytes"] <= pack_memory
        assert packs.packing["bytes_written"] == packs.offsets[-1]
        if packs.packing["staging_bytes"] < max(padded(ids.size * ds.row_bytes) for ids in regions):
            assert packs.packing["writes"] > sum(ids.size > 0 for ids in regions)  # a staging buffer was flushed
            flushed.add(i)
        check_regions(ds, packs, regions)
        data = path.read_bytes()
        if reference is None:
            reference = (data, packs.meta["checksums"], (tmp / f"v{i}.packs.pos").read_bytes())
        assert (data, packs.meta["checksums"], (tmp / f"v{i}.packs.pos").read_bytes()) == reference
        for p in tmp.glob(f"v{i}.packs*"):
            p.unlink()
    if cache_fraction == 0 and max_blowup is None and ds.row_bytes > 1:  # 1-byte rows: every region under 4 KiB
        assert {2, 3} <= flushed  # at the smallest budget regions outgrow their staging buffers


def test_staging_holds_at_most_a_sixteenth_of_the_pack(epoch):
    # A budget that would stage every region whole: the first writes would wait until most of the
    # features had been read. Staging is capped at 1/16 of the pack (or the packer's minimum).
    tmp, ds, sf, counts = epoch
    placement = place(counts, ds.row_bytes, [("host", 0)])
    path = tmp / "cap.packs"
    least = minimum_memory(ds, sf, placement, path)
    packs = pack_epoch(ds, sf, placement, path, chunk_bytes=4096, pack_memory=1 << 30, threads=2)
    chunk_buffers = 2 * (padded(packs.packing["chunk_bytes"]) + 4096)
    bound = max(least, packs.offsets[-1] // 16)
    if ds.row_bytes == 1:
        pytest.skip("1-byte rows: every region is under 4 KiB, so the packer's minimum stages the whole pack")
    assert bound < packs.offsets[-1]  # without the cap every region would be staged whole
    assert packs.packing["buffer_bytes"] - chunk_buffers <= bound
    check_regions(ds, packs, plan(sf, placement, ds.num_nodes).regions)
    for p in tmp.glob("cap.packs*"):
        p.unlink()


@pytest.mark.parametrize("max_blowup", [None, 1.5])
def test_batches_assemble_to_the_oracle_at_the_smallest_budget(epoch, max_blowup):
    tmp, ds, sf, counts = epoch
    budget = int(0.1 * ds.num_nodes * ds.row_bytes)
    placement = place(counts, ds.row_bytes, [("host", budget // 2), ("host2", budget - budget // 2)])
    path = tmp / f"m{max_blowup}.packs"
    pack_memory = minimum_memory(ds, sf, placement, path, max_blowup)
    packs = pack_epoch(ds, sf, placement, path, max_blowup=max_blowup, chunk_bytes=2 * ds.row_bytes,
                       pack_memory=pack_memory, threads=2)
    store = FeatureStore(ds, placement, packs)
    features = np.asarray(ds.features)
    for batch in sf:
        got = store.finish(store.start(batch)).host.numpy()  # the stored rows, byte for byte
        np.testing.assert_array_equal(got.view(np.uint8), features[batch.nodes].view(np.uint8))
    stats = {s.name: s for s in store.stats()}
    assert stats["disk"].hits == sum(packs.meta["rows"][: len(sf)]) > 0
    assert (stats["page_cache"].hits > 0) == (max_blowup is not None)
    store.close()


def test_one_batch(epoch):
    tmp, ds, _, _ = epoch
    sf = sample_epoch(ds, tmp / "one.samples", fanouts=[2], batch_size=10**6, seed=3, epoch=0)
    assert len(sf) == 1
    placement = place(access_counts([sf], ds.num_nodes), ds.row_bytes, [("host", 0)])
    packs = pack_epoch(ds, sf, placement, tmp / "one.packs", pack_memory=16 << 20, threads=1)
    check_regions(ds, packs, plan(sf, placement, ds.num_nodes).regions)
    assert packs.packing["buffer_bytes"] <= 16 << 20


@pytest.mark.parametrize("max_blowup", [None, 1.0])
def test_plan_and_packs_hold_their_rows_in_flat_arrays_and_the_index_mapped(tmp_path, max_blowup):
    """The memory contract of an epoch's tens of millions of packed rows: the plan's regions are views of
    one array (per-batch arrays left W1's freed plan resident, 0.5 GB, beside training), and opened packs
    map their position index from the file rather than reading it into the run's memory."""
    g = random_graph(n=400, e=3000, d=5, seed=4)
    ds = open_dataset(prepare(write_npy_dir(tmp_path / "src", g, splits={"train": np.arange(400)}), tmp_path / "ds",
                              progress=False))
    sf = sample_epoch(ds, tmp_path / "e.samples", fanouts=[5, 5], batch_size=40, seed=0, epoch=0)
    placement = place(access_counts([sf], ds.num_nodes), ds.row_bytes, [("host", 0)])
    p = plan(sf, placement, ds.num_nodes, max_blowup)
    assert (p.segment_batches > 0) == (max_blowup is not None)
    assert all(np.shares_memory(r, p.ids) for r in p.regions if r.size)
    rows = p.positions
    assert all(np.shares_memory(a, p.index) for part in (rows.own_pos, rows.shared_pos, rows.shared_slot)
               for a in part if a.size)
    packs = pack_epoch(ds, sf, placement, tmp_path / "e.packs", max_blowup=max_blowup)
    mapped = [a for part in (packs.own_pos, packs.shared_pos, packs.shared_slot) for a in part if a.size]
    assert mapped and all(isinstance(a.base, np.memmap) or isinstance(a, np.memmap) for a in mapped)
    check_regions(ds, packs, p.regions)


def test_corrupt_segment_region_is_detected(tmp_path):
    g = random_graph(n=400, e=3000, d=5, seed=4)
    ds = open_dataset(prepare(write_npy_dir(tmp_path / "src", g, splits={"train": np.arange(400)}), tmp_path / "ds",
                              progress=False))
    sf = sample_epoch(ds, tmp_path / "e.samples", fanouts=[5, 5], batch_size=40, seed=0, epoch=0)
    placement = place(access_counts([sf], ds.num_nodes), ds.row_bytes, [("host", 0)])
    packs = pack_epoch(ds, sf, placement, tmp_path / "e.packs", max_blowup=1.0)
    first = next(b for b in range(len(sf)) if packs.shared_pos[b].size)
    offset, _ = packs.region(packs.segment_region(first))
    with open(packs.path, "r+b") as f:
        f.seek(offset + 1)
        byte = f.read(1)
        f.seek(offset + 1)
        f.write(bytes([byte[0] ^ 0x40]))
    store = FeatureStore(ds, placement, PackFile(packs.path))
    with pytest.raises(DiskgnnError, match=f"region {packs.segment_region(first)}'s packed rows fail their checksum"):
        store.load(sf[first])
    store.close()


# The native call on a raw feature file: regions of every awkward shape.

def raw_features(tmp_path, num_rows, row_bytes, seed=0):
    data = np.random.default_rng(seed).integers(0, 256, num_rows * row_bytes, dtype=np.uint8)
    path = tmp_path / "features.bin"
    np.concatenate([data, np.zeros(padded(data.size) - data.size, np.uint8)]).tofile(path)
    return path, data.reshape(num_rows, row_bytes)


def layout(regions, row_bytes):
    sizes = np.array([len(r) for r in regions], dtype=np.int64)
    ids = np.concatenate([np.asarray(r, dtype=np.int64) for r in regions]) if regions else np.empty(0, np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum([padded(int(n) * row_bytes) for n in sizes])]).astype(np.int64)
    return ids, starts, offsets


def native_options(**kw) -> dict:
    """pack_regions' options (the native side has no defaults): the defaults module's, then `kw`."""
    return {"chunk_bytes": defaults.PACK_CHUNK_BYTES, "pack_memory": defaults.PACK_MEMORY,
            "max_write_bytes": defaults.PACK_MAX_WRITE_BYTES, "threads": 2, "write_depth": defaults.PACK_WRITE_DEPTH,
            "direct": "auto", **kw}


def test_native_packer_refuses_unset_options(tmp_path):
    path, _ = raw_features(tmp_path, 10, 8)
    with pytest.raises(TypeError):  # every option is required: no second set of defaults in C++
        _native.pack_regions(str(path), 10, 8, *layout([[1]], 8), str(tmp_path / "pack"))
    with pytest.raises(ValueError, match="chunk_bytes"):
        _native.pack_regions(str(path), 10, 8, *layout([[1]], 8), str(tmp_path / "pack"), **native_options(chunk_bytes=0))


@pytest.mark.parametrize("row_bytes", [3, 4096, 5000])
def test_native_packer_regions_of_every_shape(tmp_path, row_bytes):
    n = 2000 if row_bytes < 4096 else 200
    path, rows = raw_features(tmp_path, n, row_bytes)
    rng = np.random.default_rng(row_bytes)
    regions = [[], [0], [n - 1], list(range(n)), list(range(5, n, 2)), [], list(range(n - 37, n)),
               sorted(rng.choice(n, n // 3, replace=False).tolist())]
    ids, starts, offsets = layout(regions, row_bytes)
    outputs = []
    for direct, threads, budget in (("auto", 2, 1 << 30), ("off", 3, 1 << 30), ("auto", 1, 400 << 10)):
        out = tmp_path / f"pack-{direct}-{threads}"
        stats = _native.pack_regions(str(path), n, row_bytes, ids, starts, offsets, str(out),
                                     **native_options(chunk_bytes=7 * row_bytes, pack_memory=budget, threads=threads,
                                                      write_depth=2, direct=direct))
        if direct == "off":
            assert not stats["read_direct"] and not stats["write_direct"]
            assert stats["read_fallback_reason"] == stats["write_fallback_reason"] == "direct I/O switched off"
        data = out.read_bytes()
        assert len(data) == offsets[-1]
        for r, region in enumerate(regions):
            expect = rows[region].tobytes()
            assert data[offsets[r]: offsets[r] + len(expect)] == expect
            assert data[offsets[r] + len(expect): offsets[r + 1]] == bytes(int(offsets[r + 1]) - offsets[r] - len(expect))
            assert f"{stats['checksums'][r]:016x}" == xxhash.xxh3_64_hexdigest(expect)
        outputs.append(data)
    assert outputs[0] == outputs[1] == outputs[2]


def test_native_packer_refuses_inconsistent_input(tmp_path):
    n, row_bytes = 100, 12
    path, _ = raw_features(tmp_path, n, row_bytes)
    out = str(tmp_path / "pack")

    def pack(regions, fix=None, **kw):
        ids, starts, offsets = layout(regions, row_bytes)
        if fix:
            ids, starts, offsets = fix(ids, starts, offsets)
        num_rows = kw.pop("num_rows", n)
        return _native.pack_regions(str(path), num_rows, row_bytes, ids, starts, offsets, out, **native_options(**kw))

    for regions, message in (([[5, 3]], "not strictly ascending"), ([[3, 3]], "not strictly ascending"),
                             ([[n]], "out of range"), ([[-1]], "out of range")):
        with pytest.raises(ValueError, match=message):
            pack(regions)

    def shift(ids, starts, offsets):
        offsets[1:] += 4096
        return ids, starts, offsets

    with pytest.raises(ValueError, match=r"offsets\[1\] - offsets\[0\]"):
        pack([[1, 2]], shift)
    with pytest.raises(ValueError, match="id array holds"):
        pack([[1, 2]], lambda i, s, o: (i[:1], s, o))
    with pytest.raises(ValueError, match="one entry per region"):
        pack([[1, 2]], lambda i, s, o: (i, s, o[:1]))
    with pytest.raises(ValueError, match="threads"):
        pack([[1]], threads=0)
    with pytest.raises(_native.PackMemoryError, match="minimum"):
        pack([[1]], pack_memory=4096)
    with pytest.raises(EOFError, match="shorter than expected"):
        pack([[1]], num_rows=10 * n)
    with pytest.raises(FileNotFoundError):
        _native.pack_regions(str(tmp_path / "missing"), n, row_bytes, *layout([[1]], row_bytes), out, **native_options())
