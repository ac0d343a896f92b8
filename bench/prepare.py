"""Prepare benchmark: streaming ingestion of a graph several times larger than its memory budget.

Runs `python -m diskgnn.prepare synthetic ...` as a child process (the real
code path), then reports its wall time, bytes written, write throughput
against the disk's sequential write bandwidth measured in the same run (fio,
or dd when fio is absent), and its peak RSS next to the budget.

    python -m bench.prepare --nodes 8000000 --budget 1GiB --out bench/results/prepare.json
    python -m bench.prepare --smoke            # tiny, for the test suite
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from diskgnn.units import format_size, parse_size

from .harness.common import REPO, disk_seq_write_bandwidth, machine_info
from .harness.output import add_output_args, finish



def run_prepare(args: list[str]) -> tuple[float, int, str]:
    """Runs prepare as a child; returns wall seconds, its peak RSS in bytes (as it reports) and stdout."""
    cmd = [sys.executable, "-m", "diskgnn.prepare", *args, "--no-progress"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench.prepare: prepare failed ({proc.returncode}): {proc.stderr.strip()}")
    return wall, int(re.search(r"peak RSS (\d+) bytes", proc.stdout).group(1)), proc.stdout


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.prepare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8_000_000)
    ap.add_argument("--feat-dim", type=int, default=128)
    ap.add_argument("--avg-degree", type=float, default=10)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--budget", default="1GiB", help="prepare's --memory-budget")
    add_output_args(ap, "prepare")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    args = ap.parse_args(argv)
    if args.smoke:
        args.nodes, args.feat_dim, args.budget = 20_000, 32, "160MiB"
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    budget = parse_size(args.budget)
    info = machine_info(work)
    print(f"machine: {info['summary']}")

    disk = disk_seq_write_bandwidth(work, size_bytes=(64 << 20) if args.smoke else (2 << 30))
    out_dir = work / "dataset"
    wall, peak_rss, prepare_out = run_prepare([
        "synthetic", "--nodes", str(args.nodes), "--feat-dim", str(args.feat_dim),
        "--avg-degree", str(args.avg_degree), "--classes", str(args.classes), "--seed", "0",
        "--memory-budget", args.budget, "--out", str(out_dir), "--overwrite"])
    print(prepare_out.strip())
    manifest = json.loads((out_dir / "manifest.json").read_text())
    written = sum(f["file_bytes"] for f in manifest["files"].values())
    result = {
        "benchmark": "prepare",
        "machine": info,
        "nodes": args.nodes, "feat_dim": args.feat_dim, "edges": manifest["num_edges"],
        "memory_budget_bytes": budget,
        "dataset_bytes": written,
        "dataset_over_budget": written / budget,
        "peak_rss_bytes": peak_rss,
        "peak_rss_over_budget": peak_rss / budget,
        "wall_s": wall,
        "prepare_output": prepare_out.strip(),
        "write_MBps": written / wall / 1e6,
        "disk": disk,
        "write_over_disk_seq_write": written / wall / 1e6 / disk["MBps"] if disk["MBps"] else None,
    }
    print(f"dataset {format_size(written)} = {result['dataset_over_budget']:.1f} x the budget "
          f"({format_size(budget)})")
    print(f"peak RSS {format_size(peak_rss)} = {result['peak_rss_over_budget']:.2f} x the budget")
    print(f"prepare {wall:.1f} s, {result['write_MBps']:.0f} MB/s written; disk sequential write "
          f"{disk['MBps']:.0f} MB/s ({disk['tool']}): ratio {result['write_over_disk_seq_write'] or 0:.2f}")
    finish(result, args.out)
    if args.smoke:
        shutil.rmtree(out_dir, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
