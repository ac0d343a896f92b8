"""Putting a batch's rows in place, against numpy indexing: the native multi-threaded assembly (the CPU path and
the GPU path's pinned gather), the device-side assembly's index logic run with a CPU tensor standing in for
the device, the slabs' bound, and the device tier's fill through bounded chunks."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from diskgnn import _native
from diskgnn.offline.pack import PackFile
from diskgnn.offline.placement import place
from diskgnn.offline.batches import Batch
from diskgnn.store.staging import Slabs
from diskgnn.store.store import DeviceAssembly, FeatureStore, HostAssembly
from diskgnn.store.tiers import PlacedTier, load_tiers

from conftest import CASES, REPO, every_tier, make_dataset


@pytest.mark.parametrize("row_bytes", [1, 28, 512, 4097])
@pytest.mark.parametrize("threads", [1, 3])
def test_native_assembly_equals_numpy(row_bytes, threads):
    rng = np.random.default_rng(row_bytes)
    table = rng.integers(0, 256, (199, row_bytes), dtype=np.uint8)
    pack = rng.integers(0, 256, (57, row_bytes), dtype=np.uint8)
    n = 1 + 57 + 140 + 1
    positions = rng.permutation(n)
    sources = [(table, np.array([198]), positions[:1], 0),  # one row
               (pack, None, positions[1:58], 0),  # contiguous rows, scattered
               (table, rng.integers(0, 199, 140), positions[58:198], 0),  # duplicate slots
               (table[:0], None, np.zeros(0, np.int64), 0),  # an empty source
               (table[5:6], None, None, n - 1)]  # no positions: rows first + i
    out = np.zeros((n, row_bytes), np.uint8)
    _native.assemble_rows(out, sources, threads)
    want = np.zeros_like(out)
    want[positions[:1]] = table[[198]]
    want[positions[1:58]] = pack
    want[positions[58:198]] = table[sources[2][1]]
    want[n - 1] = table[5]
    np.testing.assert_array_equal(out, want)


def test_native_assembly_refuses_ids_out_of_range_before_writing():
    table = np.ones((4, 8), np.float32)
    out = np.zeros((3, 8), np.float32)
    with pytest.raises(ValueError, match=r"source 1's slot 4 out of range \[0, 4\)"):
        _native.assemble_rows(out, [(table, None, np.array([0]), 0), (table, np.array([4]), np.array([1]), 0)], 2)
    with pytest.raises(ValueError, match=r"source 0's position 3 out of range \[0, 3\)"):
        _native.assemble_rows(out, [(table, np.array([0]), np.array([3]), 0)], 2)
    with pytest.raises(ValueError, match="not as wide"):
        _native.assemble_rows(out, [(np.ones((4, 7), np.float32), None, None, 0)], 2)
    assert not out.any()


class DeviceStandIn(PlacedTier):
    """A placement tier whose rows are a torch tensor, as the device tier's are on a GPU (here on the CPU)."""

    def __init__(self, tier: PlacedTier):
        super().__init__(tier.name, tier.index, tier.placement, tier.rows)
        self.table = tier.rows


ASSEMBLIES = {"host": HostAssembly, "device on a cpu": lambda: DeviceAssembly("cpu")}


@pytest.mark.parametrize("nodes,dim,dtype", CASES)
@pytest.mark.parametrize("assembly", ASSEMBLIES)
def test_every_tier_put_in_place_equals_numpy(tmp_path, nodes, dim, dtype, assembly):
    """A device tier (a tensor table), a host tier, the recent rows, the segment's rows and the pack: every
    row of every batch where numpy indexing puts it, on both paths."""
    ds, sf, counts, placement, packs = every_tier(tmp_path, nodes, dim, dtype)
    features = np.asarray(ds.features)
    device, host = load_tiers(ds, placement)
    store = FeatureStore(ds, placement, PackFile(packs), tiers=[DeviceStandIn(device), host],
                         assembly=ASSEMBLIES[assembly](), read_depth=2)
    assert [t.name for t in store.chain] == ["device", "host", "recent", "page_cache", "disk"]
    for batch in sf:
        np.testing.assert_array_equal(store.load(batch).numpy(), features[batch.nodes].astype(np.float32))
    hits = {s.name: s.hits for s in store.stats()}
    assert hits["device"] > 0 and hits["host"] > 0 and hits["recent"] > 0 and sum(hits.values()) == counts.sum()
    assert hits["page_cache"] + hits["disk"] > 0
    store.close()


@pytest.mark.parametrize("assembly", ASSEMBLIES)
@pytest.mark.parametrize("ids", [[], [7], list(range(199)), [3, 3, 198, 0, 3]], ids=["empty", "one", "199", "dups"])
def test_ids_not_known_ahead_equal_numpy(tmp_path, assembly, ids):
    """Without packs (the PyG feature store's and the online loader's chain): empty, one row, every row,
    duplicate ids."""
    ds = make_dataset(tmp_path, 199, 7)
    features = np.asarray(ds.features)
    placement = place(np.arange(ds.num_nodes, dtype=np.int64), ds.row_bytes, [("host", 50 * ds.row_bytes)])
    store = FeatureStore(ds, placement, None, assembly=ASSEMBLIES[assembly](), read_depth=1)
    ids = np.asarray(ids, dtype=np.int64)
    for _ in range(3):  # slabs are reused
        x = store.load(Batch.one_type(-1, ids, [], 0))
        assert x.shape == (ids.size, 7)
        np.testing.assert_array_equal(x.numpy(), features[ids].astype(np.float32))
    store.close()


def test_slabs_are_made_once_and_never_more_than_their_count():
    slabs = Slabs(2, rows=10, row_bytes=8, pinned=False)
    a, b = slabs.acquire(3), slabs.acquire(12)  # a batch above the bound grows its slab
    assert a.capacity == 10 and b.capacity == 12
    with pytest.raises(RuntimeError, match="all 2 staging slabs are held"):
        slabs.acquire(1)
    first, rows = a.take(3)
    assert first == 0 and rows.shape == (3, 8)
    with pytest.raises(Exception, match="overflow its staging slab"):
        a.take(8)
    slabs.release(a)
    assert slabs.acquire(5) is a and a.used == 0


def test_the_device_tier_fill_holds_host_memory_to_its_chunks(tmp_path):
    """load_tiers' device fill, with a file-backed tensor standing in for device memory (not anonymous): 96 MiB
    of rows cross through 4 MiB chunks, and the process's anonymous memory grows by about two chunks beyond the
    reader's own buffers, not by the tier (which the old fill gathered into host memory whole)."""
    script = textwrap.dedent(f"""
        import numpy as np, torch
        from diskgnn.io.reader import FeatureReader
        from diskgnn.memory import AnonPeak
        from diskgnn.store.staging import fill_rows

        class Rows:
            path, num_rows, width, dtype, row_bytes = {str(tmp_path / 'feat.bin')!r}, 196608, 128, np.float32, 512
        rows = np.arange(Rows.num_rows * 128, dtype=np.float32).reshape(-1, 128)
        rows.tofile(Rows.path)
        del rows
        dest = torch.from_file({str(tmp_path / 'dest.bin')!r}, shared=True, size=Rows.num_rows * 128,
                               dtype=torch.float32).view(-1, 128)
        ids = np.arange(0, Rows.num_rows, 1, dtype=np.int64)
        with FeatureReader(Rows(), "pread") as reader:
            # The reader's own bounce buffers (a thread's first read into memory that is not page-aligned makes
            # one) are not the fill's: made here, before the measurement.
            reader.gather(ids[: 1 << 17])
            with AnonPeak(interval_s=0.002) as peak:
                base = peak.peak_bytes
                fill_rows(reader, ids, dest, 4 << 20)
        assert torch.equal(dest[12345], torch.arange(12345 * 128, 12346 * 128, dtype=torch.float32))
        assert torch.equal(dest[-1], torch.arange((Rows.num_rows - 1) * 128, Rows.num_rows * 128, dtype=torch.float32))
        print((peak.peak_bytes - base) >> 20)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    grew_mib = int(proc.stdout.split()[-1])
    assert grew_mib <= 2 * 4 + 8, f"the fill took {grew_mib} MiB of anonymous memory for 96 MiB of rows"
