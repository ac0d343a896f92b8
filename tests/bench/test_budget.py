"""The memory budget holds under a real cgroup cap of 1.25 x --memory-budget: the built-in dataset (the main
job's) trains without being OOM-killed; bench.budget runs the whole grid of models, sampling modes and variants."""

import pytest

from bench.budget import capped_run, main
from bench.harness.memcap import CapUnavailable
from diskgnn.data.builtin import default_dataset


def test_the_builtin_dataset_trains_under_a_cap_of_its_budget_and_a_quarter(tmp_path):
    data = default_dataset(progress=False)  # prepared once under $DISKGNN_HOME, as `make run` does
    try:
        r = capped_run(data, tmp_path / "w", "1GiB", "sage", "offline", "fp32", batches=20)
    except CapUnavailable as e:
        pytest.skip(f"no memory cgroup here: {e}")
    assert not r["oom_killed"] and r["returncode"] == 0, r
    assert r["peak_anon_bytes"] <= 1 << 30, r


def test_bench_budget_smoke(tmp_path):
    try:
        result = main(["--smoke", "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "budget.json")])
    except SystemExit as e:
        pytest.skip(str(e))
    assert result["oom_killed"] == 0 and result["failed"] == 0, result["runs"]
    assert (tmp_path / "budget.json").exists()
