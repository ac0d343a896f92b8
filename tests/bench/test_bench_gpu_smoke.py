"""bench.gpu: on a GPU machine its smoke run fills both tables; elsewhere it stops with one line saying why."""

import json
import shutil

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
                           "3GiB host, device cache 1MiB, zero copy auto, bf16",
                           "3GiB host, device cache 1MiB, zero copy auto, sq8 features",
                           "every row in GPU memory, CUDA graphs off", "every row in GPU memory"}
    for name, v in epochs.items():
        assert "error" not in v, (name, v)
        assert v["batches"] > 0 and v["peak_anon_bytes"] <= v["budget_bytes"], (name, v)
        assert all(t["busy_s"] >= 0 and t["wait_s"] >= 0 for t in v["stages_s"].values()), (name, v)
    assert epochs["every row in GPU memory"]["step"]["replays"] > 0, epochs["every row in GPU memory"]["step"]
    assert epochs["every row in GPU memory, CUDA graphs off"]["step"] == {"line": "step: eager (--cuda-graphs off)"}
    on = epochs["3GiB host, device cache 1MiB, zero copy on"]
    assert on["host_gather"].startswith("host tiers: zero copy") and on["tiers"]["host"]["hits"] > 0
    assert result["quantize"]["seconds"] > 0, result["quantize"]
    profile = result["profile"]
    assert "error" not in profile and profile["batches"] > 0 and 0 < len(profile["top"]) <= 10, profile
    assert (tmp_path / "gpu.profile.txt").read_text().count("\n") == 2 + 25


def test_the_report_and_the_epoch_runner_work_without_a_gpu(tmp_path, train_data):
    """What the GPU machine's one call relies on, run here: the runs it makes, one epoch run through
    diskgnn.train (on the CPU), the disk floor, and the table from their results."""
    from bench import gpu

    runs = gpu.runs("2GiB", ["0", "256MiB", "all"])
    mid = "2GiB host, device cache 256MiB"
    assert list(runs) == ["2GiB host, device cache 0", mid, "2GiB host, device cache all", f"{mid}, zero copy on",
                          f"{mid}, zero copy auto", f"{mid}, zero copy auto, bf16",
                          f"{mid}, zero copy auto, sq8 features", "every row in GPU memory",
                          "every row in GPU memory, CUDA graphs off"]
    assert runs[f"{mid}, zero copy auto, bf16"] == {"memory_budget": "2GiB", "device_cache": "256MiB",
                                                    "zero_copy": "auto", "precision": "bf16"}
    assert runs[f"{mid}, zero copy auto, sq8 features"]["features"] == "sq8"
    one = gpu.epoch(train_data, tmp_path, "2GiB host, device cache 0",
                    {"memory_budget": "2GiB", "device_cache": "0", "zero_copy": "off"}, 1 << 20, device="cpu")
    assert "error" not in one, one
    assert one["step"] == {"line": "step: eager (no CUDA device)"}
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
    assert row.split(" | ")[8] == "eager (no CUDA device)"
    assert gpu.step_cell({"line": "step: a CUDA graph", "replays": 9, "eager": 2, "captures": 1}) == \
        "graph: 9 replays, 2 eager, 1 captures"
    assert row.split(" | ")[-1] == ", ".join(f"{k} {v['busy_s']:.1f}/{v['wait_s']:.1f}"
                                             for k, v in one["stages_s"].items()) + " |"
    assert set(one["stages_s"]) >= {"train"}


def test_the_bf16_and_sq8_epochs_run_on_the_cpu(tmp_path, train_data):
    """The two runs bench.gpu adds, through the same epoch runner on the CPU: bf16, and sq8 features after the
    bench wrote the variant (into a copy of the shared dataset) as a user would."""
    from bench import gpu

    runs = gpu.runs("2GiB", ["0", "256KiB"])
    data = shutil.copytree(train_data, tmp_path / "data")
    q = gpu.quantize(data)
    assert "error" not in q and q["seconds"] > 0, q
    assert gpu.quantize(data) == {"spec": "sq8", "seconds": None, "note": "already written"}
    for name in ("2GiB host, device cache 256KiB, zero copy auto, bf16",
                 "2GiB host, device cache 256KiB, zero copy auto, sq8 features"):
        one = gpu.epoch(data, tmp_path, name, runs[name], 1 << 20, device="cpu")
        assert "error" not in one, (name, one)
        assert one["batches"] > 0 and one["stages_s"]["train"]["busy_s"] > 0


def test_a_small_or_empty_file_has_a_floor_and_a_zero_floor_prints_a_dash(tmp_path):
    """The smoke run's feature file is smaller than one 64 MiB read: it is read whole, in 4 KiB blocks; a file
    under a block measures nothing, and the table says "-" where it would divide by it."""
    from bench import gpu

    small = tmp_path / "small.bin"
    small.write_bytes(bytes(range(256)) * 48 + bytes(100))  # 3 x 4096 + 100 bytes
    floor = gpu.disk_floor(small)
    assert floor["bytes"] == 3 * 4096 and floor["gb_per_s"] > 0 and floor["seconds"] > 0
    for n in (0, 1):
        tiny = tmp_path / f"{n}.bin"
        tiny.write_bytes(bytes(n))
        assert gpu.disk_floor(tiny)["bytes"] == 0 and gpu.disk_floor(tiny)["gb_per_s"] == 0
    v = {"epoch_s": 2.0, "ms_per_batch": 4.0, "disk_bytes_read": 10**9, "peak_anon_bytes": 1 << 30,
         "budget_bytes": 2 << 30, "gpu_busy": {}, "stages_s": {"read": {"busy_s": 1.2, "wait_s": 0.3}},
         "step": {"line": "step: eager (--cuda-graphs off)"}}
    result = {"command": "c", "gpu": "g", "machine": {"summary": "m"}, "dataset": "d", "h2d_gb_per_s": 0.0,
              "disk_floor": {**floor, "gb_per_s": 0.0}, "cuda_context_bytes": 0,
              "gathers": {"cpu": {"ms_per_batch": 2.0, "cpu_ms_per_batch": 3.0, "rows_per_batch": 4e4, "gb_per_s": 10},
                          "calibration": {"zero_copy_gb_per_s": 40.0, "cpu_gather_gb_per_s": 10.0}},
              "epochs": {"run": v, "every row in GPU memory": {**v, "epoch_s": 0.0}}}
    text = gpu.table(result)
    row = next(line for line in text.splitlines() if line.startswith("| run |"))
    assert row.split(" | ")[3:5] == ["-", "-"] and row.endswith("| read 1.2/0.3 |")
    assert "reads - GB/s" in text and "| 10.0 | - |" in text


def test_the_profile_summary_is_per_batch_and_the_profiled_epoch_runs_on_the_cpu(tmp_path, train_data):
    """What the GPU machine's profiled epoch relies on: the summary of torch.profiler's events (a tiny CPU
    workload of known calls), and diskgnn's own training epoch run under the profiler in this process (on the
    CPU here), its summary written and tabled."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench import gpu

    model = torch.nn.Linear(8, 2)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(4):
            model(torch.randn(16, 8)).sum().backward()
    rows = gpu.host_ops(prof.key_averages(), batches=4, top=5)
    assert 0 < len(rows) <= 5 and set(rows[0]) == {"name", "calls_per_batch", "self_cpu_us_per_batch"}
    times = [r["self_cpu_us_per_batch"] for r in rows]
    assert times == sorted(times, reverse=True)
    assert {r["name"]: r["calls_per_batch"] for r in gpu.host_ops(prof.key_averages(), 4, 1000)}["aten::addmm"] == 1
    text = gpu.profile_text(rows, 4)
    assert text.count("\n") == 2 + len(rows) and rows[0]["name"] in text.splitlines()[2]

    p = gpu.profile_run(train_data, tmp_path, 1 << 20, tmp_path / "gpu.json", batches=2, device="cpu")
    assert "error" not in p and p["batches"] == 1 and p["host_ms_per_batch"] > 0, p  # train_data: 1 batch an epoch
    written = (tmp_path / "gpu.profile.txt").read_text().splitlines()
    assert p["file"] == str(tmp_path / "gpu.profile.txt") and len(written) == 2 + 25
    assert len(p["top"]) == 10 and any(o["name"].startswith("aten::") for o in p["top"])
    assert written[2].endswith(f"  {p['top'][0]['name']}")
    lines = gpu.profile_lines(p)
    assert len(lines) == 5 + 10 and lines[-10].startswith(f"| `{p['top'][0]['name']}` | ")
    assert "The profiled epoch failed: no" in "\n".join(gpu.profile_lines({"error": ["no"]}))
