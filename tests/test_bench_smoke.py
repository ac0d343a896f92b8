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
