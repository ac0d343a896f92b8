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
    assert set(result["gathers"]) == {"cpu", "zero-copy", "device", "calibration"} and result["h2d_gb_per_s"] > 0
    for name, v in result["gathers"].items():
        assert name == "calibration" or (v["ms_per_batch"] > 0 and v["rows_per_batch"] > 0)
    assert result["disk_floor"]["gb_per_s"] > 0 and result["cuda_context_bytes"] >= 0
    epochs = result["epochs"]
    assert set(epochs) == {"3GiB host, device cache 0", "3GiB host, device cache 1MiB", "3GiB host, device cache all",
                           "3GiB host, device cache 1MiB, zero copy on", "3GiB host, device cache 1MiB, zero copy auto",
                           "every row in GPU memory"}
    for name, v in epochs.items():
        assert "error" not in v, (name, v)
        assert v["batches"] > 0 and v["peak_anon_bytes"] <= v["budget_bytes"], (name, v)
    on = epochs["3GiB host, device cache 1MiB, zero copy on"]
    assert on["host_gather"].startswith("host tiers: zero copy") and on["tiers"]["host"]["hits"] > 0


def test_the_report_and_the_epoch_runner_work_without_a_gpu(tmp_path, train_data):
    """What the GPU machine's one call relies on, run here: the runs it makes, one epoch run through
    diskgnn.train (on the CPU), the disk floor, and the table from their results."""
    from bench import gpu

    names = list(gpu.runs("2GiB", ["0", "256MiB", "all"]))
    assert names == ["2GiB host, device cache 0", "2GiB host, device cache 256MiB", "2GiB host, device cache all",
                     "2GiB host, device cache 256MiB, zero copy on", "2GiB host, device cache 256MiB, zero copy auto",
                     "every row in GPU memory"]
    one = gpu.epoch(train_data, tmp_path, "2GiB host, device cache 0",
                    {"memory_budget": "2GiB", "device_cache": "0", "zero_copy": "off"}, 1 << 20, device="cpu")
    assert "error" not in one, one
    assert one["batches"] > 0 and one["epoch_s"] > 0 and 0 < one["peak_anon_bytes"] <= one["budget_bytes"]
    floor = gpu.disk_floor(train_data / "features.bin")
    assert floor["gb_per_s"] > 0 or floor["bytes"] == 0
    floor = {**floor, "gb_per_s": 1.0}
    ceiling = {**one, "epoch_s": one["epoch_s"] / 2}
    result = {"command": "python -m bench.gpu", "gpu": "a GPU", "machine": {"summary": "a machine"}, "dataset": "d",
              "h2d_gb_per_s": 50.0, "disk_floor": floor, "cuda_context_bytes": 300 << 20,
              "gathers": {"cpu": {"ms_per_batch": 2.0, "cpu_ms_per_batch": 3.0, "rows_per_batch": 4e4, "gb_per_s": 10},
                          "calibration": {"zero_copy_gb_per_s": 40.0, "cpu_gather_gb_per_s": 10.0}},
              "epochs": {"2GiB host, device cache 0": one, "failed": {"error": ["it broke"]},
                         "every row in GPU memory": ceiling}}
    text = gpu.table(result)
    row = next(line for line in text.splitlines() if line.startswith("| 2GiB host, device cache 0 |"))
    assert row.split(" | ")[3] == "2.00"  # against the all-in-GPU epoch
    assert "| failed | failed: it broke |" in text and "zero copy 40.0 GB/s" in text
