"""Tiny runs of the benchmarks, so that they cannot rot (speed is measured in bench/, not here)."""

import json

from bench import prepare as bench_prepare


def test_prepare_bench_smoke(tmp_path):
    out = tmp_path / "prepare.json"
    result = bench_prepare.main(["--smoke", "--workdir", str(tmp_path / "work"), "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["nodes"] == result["nodes"] == 20_000
    for key in ("peak_rss_bytes", "memory_budget_bytes", "write_MBps", "disk", "machine", "wall_s"):
        assert key in saved
    assert saved["disk"]["MBps"] > 0 and saved["peak_rss_bytes"] > 0
    assert saved["peak_rss_bytes"] <= saved["memory_budget_bytes"]


def test_offline_bench_smoke(tmp_path):
    from bench import offline as bench_offline

    result = bench_offline.main(["--smoke", "--workdir", str(tmp_path), "--out", str(tmp_path / "offline.json")])
    saved = json.loads((tmp_path / "offline.json").read_text())
    assert saved["batches"] == result["batches"] >= 1
    assert [t["cache_fraction"] for t in saved["tiers"]] == [0.05, 0.1, 0.3]
    rates = [t["expected_hit_rate"] for t in saved["tiers"]]
    assert rates == sorted(rates) and 0 < rates[0] <= 1
    assert saved["pack_rows"] > 0 and saved["disk"]["MBps"] > 0 and saved["pack_over_disk_seq_write"] > 0


def test_epoch_bench_smoke(tmp_path):
    from bench import epoch as bench_epoch
    from bench.memcap import CapUnavailable, run_capped

    try:
        run_capped(["true"], "256MiB")
        cap = ["--cap", "1GiB"]
    except CapUnavailable:  # the bench then runs uncapped; the cap itself is tested in test_memcap
        cap = ["--no-cap"]
    result = bench_epoch.main(["--smoke", *cap, "--workdir", str(tmp_path), "--out", str(tmp_path / "epoch.json")])
    saved = json.loads((tmp_path / "epoch.json").read_text())
    assert set(saved["runs"]) == {"a_capped", "b_uncapped_all_cached", "c_naive_default", "c_naive_madv_random"}
    for name, run in saved["runs"].items():
        assert "error" not in run, run
        assert run["per_batch_s"] > 0 and run["epoch_s"] > 0, name
    assert saved["runs"]["b_uncapped_all_cached"]["tiers"]["host"]["hit_rate"] == 1.0
    assert saved["runs"]["b_uncapped_all_cached"]["disk_bytes_read"] == 0
    assert all(v is not None and v > 0 for v in saved["ratios"].values())
    assert result["backend"] == saved["runs"]["a_capped"]["backend"]
