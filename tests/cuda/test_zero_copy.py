"""The GPU path against numpy: zero-copy gathers (store/uva.py) on awkward rows, the store's ZeroCopyTier, and
training with it against training with the CPU gather. Everything here needs a CUDA device and CuPy, and skips
saying which is missing; the kernel's source is compiled by nvcc wherever nvcc is installed."""

import shutil
import subprocess

import numpy as np
import pytest
import torch

from diskgnn.store.tiers import host_gather_path
from diskgnn.store.uva import KERNEL, why_not

from conftest import train_config

WHY_NOT = why_not("cuda")
needs_gpu = pytest.mark.skipif(WHY_NOT is not None, reason=f"zero-copy gathers cannot run here: {WHY_NOT}")


def test_the_kernel_compiles_with_nvcc(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed: the kernel is compiled at run time by CuPy only")
    proc = subprocess.run([nvcc, "-std=c++17", "-c", "-o", str(tmp_path / "uva.o"), str(KERNEL)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "uva.o").stat().st_size > 0


def test_without_a_device_the_cpu_gathers_and_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the fallback's reason is the device's, tested on CPU machines")
    assert host_gather_path("cpu") == (False, "host tiers: rows gathered by the CPU (no device)")
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
    mapped.gather(slots, positions, out)
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
    assert runs["on"]["host_gather"].startswith("host tiers: zero-copy")
    assert runs["off"]["host_gather"].startswith("host tiers: CPU gather + pinned copy (--zero-copy off)")
    assert runs["on"]["tiers"]["host"]["hits"] > 0
