"""The GPU path against numpy: zero-copy gathers (store/uva.py) on awkward rows, the store's tiers assembled on
the device against the CPU path, the device tier's fill, the calibration, and training with each host gather
against the other. Everything here needs a CUDA device and CuPy, and skips saying which is missing; the
kernel's source is compiled by nvcc wherever nvcc is installed. The choices and the index logic are tested
on the CPU (tests/store/test_assembly.py, tests/train/test_plan.py)."""

import shutil
import subprocess

import numpy as np
import pytest
import torch

from diskgnn.store.uva import KERNEL, host_gather, why_not
from diskgnn.target.csr_sum import KERNEL as CSR_SUM_KERNEL
from diskgnn.target.keyed_dropout import KERNEL as DROPOUT_KERNEL

from conftest import CASES, every_tier, train_config

WHY_NOT = why_not("cuda")
needs_gpu = pytest.mark.skipif(WHY_NOT is not None, reason=f"zero-copy gathers cannot run here: {WHY_NOT}")


@pytest.mark.parametrize("kernel", [KERNEL, DROPOUT_KERNEL, CSR_SUM_KERNEL], ids=lambda k: k.name)
def test_the_kernels_compile_with_nvcc(tmp_path, kernel):
    """The zero-copy gather and (the GPU target's) the keyed-dropout mask and the CSR sums."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed: the kernels are compiled at run time by CuPy only")
    proc = subprocess.run([nvcc, "-std=c++17", "-c", "-o", str(tmp_path / "k.o"), str(kernel)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "k.o").stat().st_size > 0


def test_without_a_device_the_cpu_gathers_and_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the fallback's reason is the device's, tested on CPU machines")
    assert host_gather("cpu", "auto", 512).line == "host tiers: rows gathered by the CPU (no device)"
    assert WHY_NOT == "no CUDA device"


@needs_gpu
@pytest.mark.parametrize("dtype,width", [(np.float32, 128), (np.float32, 1025), (np.uint8, 4097), (np.uint8, 5)])
@pytest.mark.parametrize("slots", [[0], list(range(199)), [3, 3, 198, 0, 3], []], ids=["one", "199", "dups", "empty"])
def test_zero_copy_gather_equals_numpy(dtype, width, slots):
    from diskgnn.store.uva import MappedRows

    rng = np.random.default_rng(0)
    table = rng.integers(0, 250, (199, width)) if dtype == np.uint8 else rng.standard_normal((199, width))
    table = table.astype(dtype)
    mapped = MappedRows(torch.from_numpy(table.copy()))
    slots = np.asarray(slots, dtype=np.int64)
    positions = rng.permutation(slots.size + 3)[: slots.size]
    out = torch.zeros((slots.size + 3, width), dtype=torch.from_numpy(table[:0]).dtype, device="cuda")
    mapped.gather(torch.from_numpy(slots).cuda(), torch.from_numpy(positions).cuda(), out)
    want = np.zeros((slots.size + 3, width), dtype=dtype)
    want[positions] = table[slots]
    np.testing.assert_array_equal(out.cpu().numpy(), want)
    mapped.close()


@needs_gpu
def test_training_on_cuda_gathers_the_same_rows_either_way(train_data, tmp_path):
    from diskgnn.train.loop import train

    runs = {z: train(train_config(train_data, tmp_path / z, device="cuda", device_cache="2KiB", zero_copy=z, epochs=2,
                                  seed=3))
            for z in ("on", "off")}
    assert runs["on"]["train_loss"] == pytest.approx(runs["off"]["train_loss"], rel=1e-5)
    assert runs["on"]["host_gather"].startswith("host tiers: zero copy")
    assert runs["off"]["host_gather"].endswith("(--zero-copy off)")
    assert runs["on"]["tiers"]["host"]["hits"] > 0


@needs_gpu
@pytest.mark.parametrize("nodes,dim,dtype", CASES)
@pytest.mark.parametrize("zero_copy", [False, True])
def test_batches_assembled_on_the_gpu_equal_the_cpu_path(tmp_path, nodes, dim, dtype, zero_copy):
    """Device tier, host tier (zero copy or the CPU's gather into the pinned slab), recent rows, segment rows
    and the pack, put in place on the GPU: every batch equals numpy indexing."""
    from diskgnn.offline.pack import PackFile
    from diskgnn.store.store import FeatureStore
    from diskgnn.store.tiers import load_tiers

    ds, sf, _, placement, packs = every_tier(tmp_path, nodes, dim, dtype)
    features = np.asarray(ds.features)
    tiers = load_tiers(ds, placement, "cuda", zero_copy=zero_copy)
    assert tiers[0].rows.device.type == "cuda"
    store = FeatureStore(ds, placement, PackFile(packs), device="cuda", tiers=tiers, read_depth=2)
    for batch in sf:
        x = store.load(batch)
        assert x.device.type == "cuda"
        np.testing.assert_array_equal(x.cpu().numpy(), features[batch.nodes].astype(np.float32))
    hits = {s.name: s.hits for s in store.stats()}
    assert hits["device"] > 0 and hits["host"] > 0 and hits["recent"] > 0
    store.close()


@needs_gpu
def test_the_device_tier_fill_equals_numpy_through_small_chunks():
    from diskgnn.store.staging import fill_rows

    class Reader:  # a FeatureReader's gather over an array, rows of 4,097 bytes
        backend, row_bytes = "pread", 4097
        table = np.random.default_rng(0).integers(0, 255, (199, 4097), dtype=np.uint8)

        def gather(self, ids, out):
            out.copy_(torch.from_numpy(self.table[ids]))

    ids = np.array([3, 3, 198, 0, *range(50, 150)], dtype=np.int64)
    dest = torch.zeros((ids.size, 4097), dtype=torch.uint8, device="cuda")
    fill_rows(Reader(), ids, dest, chunk_bytes=3 * 4097)
    np.testing.assert_array_equal(dest.cpu().numpy(), Reader.table[ids])


@needs_gpu
def test_the_calibration_measures_both_ways():
    from diskgnn.store.uva import calibrate

    zero, cpu = calibrate(512, rows=4096, repeat=2)
    assert zero > 0 and cpu > 0
    assert host_gather("cuda", "auto", 512).measured is not None
