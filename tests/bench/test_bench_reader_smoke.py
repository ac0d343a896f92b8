"""The reader benchmark at a tiny size, so that it cannot rot (speed is measured in bench/, not here)."""

import json

from bench import reader as bench_reader


def test_reader_bench_smoke(tmp_path):
    out = tmp_path / "reader.json"
    bench_reader.main(["--size", "8MiB", "--smoke", "--file", str(tmp_path / "data.bin"), "--out", str(out)])
    saved = json.loads(out.read_text())
    for key in ("machine", "config", "native", "auto_backend", "cache", "fio_used", "results", "ratios", "targets"):
        assert key in saved
    assert saved["config"]["smoke"] and saved["config"]["size_bytes"] == 8 << 20
    assert saved["auto_backend"]["backend"] in ("io_uring", "pread")
    assert set(saved["ratios"]) >= {"gather_4k_vs_fio_randread", "range_vs_fio_seq", "gather_512_vs_mmap"}
    measured = {(r["kind"], r["backend"]) for r in saved["results"] if "seconds" in r}
    for kind in ("gather", "ranges"):
        assert {(kind, "pread"), (kind, "mmap")} <= measured
    if saved["native"]["io_uring_usable"] and saved["auto_backend"]["backend"] == "io_uring":
        assert ("gather", "io_uring") in measured
