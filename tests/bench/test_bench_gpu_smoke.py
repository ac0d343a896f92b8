"""bench.gpu: on a GPU machine its smoke run fills both tables; elsewhere it stops with one line saying why."""

import json

import pytest

from diskgnn.store.uva import why_not

from conftest import run_module

WHY_NOT = why_not("cuda")


def test_without_a_gpu_it_says_why_in_one_line():
    if WHY_NOT is None:
        pytest.skip("a CUDA device and CuPy are here: the smoke run below is the test")
    proc = run_module("bench.gpu", "--smoke")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"bench.gpu: error: bench.gpu needs a CUDA device and CuPy: {WHY_NOT} "
                                                "(run `make gpu-check` on a GPU machine)"]


@pytest.mark.skipif(WHY_NOT is not None, reason=f"needs a CUDA device and CuPy: {WHY_NOT}")
def test_gpu_bench_smoke(tmp_path):
    out = tmp_path / "gpu.json"
    proc = run_module("bench.gpu", "--smoke", "--workdir", tmp_path / "work", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["gathers"]) == {"cpu", "zero-copy", "device"} and result["h2d_gb_per_s"] > 0
    for v in result["gathers"].values():
        assert v["ms_per_batch"] > 0 and v["rows_per_batch"] > 0
    assert result["epochs"]["zero-copy host tier"]["host_gather"].startswith("host tiers: zero-copy")
