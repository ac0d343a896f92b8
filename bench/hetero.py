"""A MAG-shaped heterogeneous graph trained out of core under a cgroup cap (issue 50).

    python -m bench.hetero [--papers 17000000 --feat-dim 768] [--cap 4GiB] [--budget 3584MiB] [--epochs 3]
        [--features sq4]
    python -m bench.hetero --smoke          # 20,000 papers, 1 epoch, for the test suite

With --features, the papers' rows are also quantized (python -m diskgnn.quantize --types paper, once, under the
same cap) and the same run is made again from the variant's code rows, the page cache dropped before each run:
the JSON has both runs and the ratios of their epoch times and bytes read.

Prepares `prepare synthetic --schema mag` once into --workdir (papers with float16 features: at the default
size 26.1 GB, more than a 23.5 GiB machine's RAM), drops the page cache, and runs `diskgnn.train` on it under
a memory cgroup capped at --cap (page cache included) with --memory-budget --budget. Prints the machine and the
reader's backend and writes JSON: the prepare's time and peak, each epoch's time and val accuracy with the wall
time it was reached at, the bytes read and the host tier's share, the offline phases (sampling, packing, bytes
packed), the run's anonymous peak and the cgroup's.
The numbers are this machine's, measured in one run; docs/benchmarks.md ("MAG-shaped") quotes one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .harness.common import REPO, drop_caches, machine_info
from .harness.memcap import run_capped
from .harness.output import add_output_args, command_line, write_json
from .harness.workload import prepare_once


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.hetero", description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", type=int, default=17_000_000)
    ap.add_argument("--feat-dim", type=int, default=768)
    ap.add_argument("--classes", type=int, default=64)
    ap.add_argument("--cap", default="4GiB", help="the cgroup's memory cap, page cache included")
    ap.add_argument("--budget", default="3584MiB", help="the run's --memory-budget")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--fanouts", default="5,3")
    ap.add_argument("--features", help="also train from this quantized variant of the papers' rows")
    ap.add_argument("--smoke", action="store_true")
    add_output_args(ap, "hetero")
    args = ap.parse_args(argv)
    if args.smoke:
        args.papers, args.feat_dim, args.classes, args.epochs, args.cap, args.budget = \
            20_000, 32, 8, 1, "2GiB", "1536MiB"
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    info = machine_info(work)
    print(f"machine: {info['summary']}")
    data = work / f"mag-{args.papers}-{args.feat_dim}"
    prepared = prepare_once(data, ["synthetic", "--schema", "mag", "--nodes", str(args.papers), "--feat-dim",
                                   str(args.feat_dim), "--avg-degree", "10", "--classes", str(args.classes), "--seed",
                                   "0", "--split-ratios", "0.01,0.002,0.002", "--memory-budget", "4GiB"],
                            "bench.hetero")
    features = sum(p.stat().st_size for p in data.glob("features-*.bin"))
    result = {
        "benchmark": "hetero", "machine": info, "command": command_line("bench.hetero", argv), "prepare": prepared,
        "papers": args.papers, "feature_bytes": features, "memory_ram_bytes": info.get("ram_bytes"),
        "features_exceed_ram": features > info.get("ram_bytes", 0), "cap": args.cap, "budget": args.budget,
        **_run(args, data, work / "run", []),
    }
    if args.features:
        if f"paper/{args.features}" not in json.loads((data / "manifest.json").read_text()).get("quantized", {}):
            quantized = run_capped([sys.executable, "-m", "diskgnn.quantize", str(data), "--spec", args.features,
                                    "--types", "paper", "--memory-budget", args.budget], args.cap, cwd=REPO)
            if quantized.returncode != 0:
                raise SystemExit(f"bench.hetero: quantize failed: {(quantized.stderr or '').strip()[-500:]}")
        q = result["quantized"] = _run(args, data, work / f"run-{args.features}", ["--features", args.features])
        result["ratios"] = {"epoch_time": _mean(q["epoch_times_s"]) / _mean(result["epoch_times_s"]),
                            "disk_bytes": q["disk_bytes"] / max(1, result["disk_bytes"])}
    write_json(Path(args.out), result)
    for name, r in [("stored rows", result)] + ([(args.features, result["quantized"])] if args.features else []):
        print(f"hetero: {args.papers:,} papers, {features / 1e9:.1f} GB of features, {name}, reader {r['backend']}, "
              f"cap {args.cap}: epochs " + ", ".join(f"{t:.1f}" for t in r["epoch_times_s"]) + " s, val "
              + " -> ".join(f"{v:.3f}" for v in r["val_acc"]) + f", read {r['disk_bytes'] / 1e9:.1f} GB, packed "
              f"{r['offline']['pack_bytes_written'] / 1e9:.1f} GB in {r['pack_s']:.0f} s, peak "
              f"{r['peak_anon_bytes'] / 2**30:.2f} GiB anonymous, cgroup peak {r['cgroup']['peak_bytes']}")
    if args.features:
        print(f"hetero: {args.features} against the stored rows, in this run: epoch time "
              f"{result['ratios']['epoch_time']:.2f}x, bytes read {result['ratios']['disk_bytes']:.2f}x")
    return result


def _mean(values) -> float:
    return sum(values) / max(1, len(values))


def _run(args, data: Path, workdir: Path, extra: list[str]) -> dict:
    """One capped training run from a dropped page cache: its epochs, validations, bytes and memory."""
    dropped = drop_caches()
    summary_path = workdir.with_name(workdir.name + ".summary.json")
    argv_train = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--workdir", str(workdir),
                  "--epochs", str(args.epochs), "--batch-size", "1024", "--hidden", "128", "--fanouts", args.fanouts,
                  "--featureless", "hashed", "--memory-budget", args.budget, "--no-progress", "--summary-json",
                  str(summary_path), *extra]
    capped = run_capped(argv_train, args.cap, cwd=REPO)
    if capped.returncode != 0:
        raise SystemExit(f"bench.hetero: the run failed under the {args.cap} cap ({capped.summary()}): "
                         f"{(capped.stderr or '').strip().splitlines()[-1:]}")
    s = json.loads(summary_path.read_text())
    rows = s["features"]["paper"]
    return {"page_cache_dropped": dropped is None, "drop_caches_error": dropped, "features": extra[1:] or ["fp32"],
            "backend": s["plan"]["backend"], "epoch_times_s": s["epoch_times_s"], "val_acc": s["val_acc_per_epoch"],
            "wall_s_at_val": s["wall_s_at_val"], "test_acc": s.get("test_acc"),
            # every pass's reads, the evaluations' too
            "disk_bytes": sum(t["bytes_read"] for t in s["features"].values()), "pack_s": s["pack_s"],
            "host_tier_share": rows["hits"] / max(1, rows["rows"]), "peak_anon_bytes": s["peak_anon_bytes"],
            "cgroup": capped.summary(), "plan": s["plan"], "offline": s["offline"]}


if __name__ == "__main__":
    main()
