"""Training epoch benchmark: diskgnn under a memory cap against its compute limit and a naive np.memmap loop.

    python -m bench.epoch [--data W1_DIR] [--batches 200] [--cap 2GiB]
    python -m bench.epoch --smoke                     # tiny, for the test suite

In one run, on W1 (prepare synthetic --nodes 8000000 --feat-dim 128
--avg-degree 10 --classes 16 --seed 0; sage, fanouts 10,5, batch 1024,
hidden 256), each system in its own process:

  (a) `python -m diskgnn.train` under a cgroup memory cap (page cache
      included) with the page cache dropped first, --memory-budget = the cap;
  (b) the same trainer uncapped with every feature row in the host cache:
      no disk reads, so its epoch time is the compute limit on this machine;
  (c) bench.naive (same sampler and model, features gathered through
      np.memmap, no pipeline) under the same cap, cold, twice: with the
      kernel's default readahead and with MADV_RANDOM.

Epoch times are training only (diskgnn's offline sampling and packing are
reported beside them). A naive run that hits --naive-timeout is stopped and
its rate taken from the batches it finished. Ratios: (a)/(b), (c)/(a).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from diskgnn.format import open_dataset
from diskgnn.units import format_size, parse_size

from .common import drop_caches, machine_info, synthetic_workload, write_json
from .memcap import CapUnavailable, run_capped

REPO = Path(__file__).resolve().parents[1]


def _capped(argv: list[str], cap: int | None, timeout: float | None) -> dict:
    """Runs argv cold (page cache dropped) under the cap; the cap's accounting, or why there is none."""
    cold_note = drop_caches()
    info = {"cold_cache": cold_note is None, "cold_cache_note": cold_note}
    if cap is None:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return {**info, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                "cap_bytes": None, "timed_out": False}
    try:
        r = run_capped(argv, cap, timeout=timeout)
    except CapUnavailable as e:
        raise SystemExit(f"bench.epoch: cannot apply the memory cap: {e}") from None
    return {**info, "returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "cap_bytes": cap,
            "cgroup_peak_bytes": r.peak_bytes, "oom_killed": r.oom_killed, "timed_out": r.timed_out,
            "wall_s": r.wall_s}


def _failed(name: str, run: dict) -> str:
    tail = (run["stderr"] or run["stdout"] or "").strip().splitlines()[-3:]
    why = "OOM-killed" if run.get("oom_killed") else f"exit {run['returncode']}"
    return f"{name}: {why}: " + " | ".join(tail)


def trainer(name: str, data: Path, work: Path, args, *, memory_budget: str, host_cache: str,
            cap: int | None, features: str = "fp32") -> dict:
    """One diskgnn.train run (on `features`: fp32 or a stored quantized variant); its summary's
    timings, tiers and memory."""
    summary_path = work / f"{name}.summary.json"
    summary_path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--model", "sage",
            "--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
            "--epochs", "1", "--max-batches", str(args.batches), "--eval", "none", "--seed", "0",
            "--memory-budget", memory_budget, "--host-cache", host_cache, "--workdir", str(work / name),
            "--features", features, "--summary-json", str(summary_path), "--no-progress"]
    run = _capped(argv, cap, None)
    if run["returncode"] != 0 or not summary_path.exists():
        return {"error": _failed(name, run), **{k: run.get(k) for k in ("cap_bytes", "oom_killed")}}
    s = json.loads(summary_path.read_text())
    epoch_s = s["epoch_times_s"][0]
    return {"epoch_s": epoch_s, "batches": args.batches, "per_batch_s": epoch_s / args.batches,
            "sample_s": s["sample_s"], "pack_s": s["pack_s"], "stage_times_s": s["stage_times_s"],
            "bottleneck": s.get("bottleneck"), "tiers": s["tiers"], "disk_bytes_read": s["disk_bytes_read"],
            "peak_rss_bytes": s["peak_rss_bytes"], "backend": s["backend"], "plan": s["plan"],
            "features": s["features"], "feature_row_bytes": s["feature_row_bytes"],
            "memory_budget": memory_budget, "host_cache": host_cache, "cold_cache": run["cold_cache"],
            "cap_bytes": run["cap_bytes"], "cgroup_peak_bytes": run.get("cgroup_peak_bytes"),
            "oom_killed": run.get("oom_killed", False)}


def naive(madvise: str, data: Path, work: Path, args, cap: int | None) -> dict:
    """One bench.naive run; from its progress lines when the timeout stopped it."""
    progress = work / f"naive-{madvise}.jsonl"
    progress.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "bench.naive", "--data", str(data), "--batches", str(args.batches),
            "--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
            "--madvise", madvise, "--progress", str(progress)]
    run = _capped(argv, cap, args.naive_timeout)
    lines = [json.loads(x) for x in progress.read_text().splitlines()] if progress.exists() else []
    if not lines:
        return {"error": _failed(f"naive {madvise}", run) if not run["timed_out"]
                else f"naive {madvise}: no batch finished within {args.naive_timeout:.0f} s"}
    if run["returncode"] != 0 and not run["timed_out"]:
        return {"error": _failed(f"naive {madvise}", run)}
    last = lines[-1]
    done = last["batch"] + 1
    per_batch = last["elapsed_s"] / done
    return {"epoch_s": per_batch * args.batches, "batches_done": done, "batches": args.batches,
            "per_batch_s": per_batch, "extrapolated": done < args.batches, "gather_s": last["gather_s"],
            "disk_bytes_read": last["disk_bytes_read"] * args.batches / done, "madvise": madvise,
            "cold_cache": run["cold_cache"], "cap_bytes": run["cap_bytes"],
            "cgroup_peak_bytes": run.get("cgroup_peak_bytes"), "timed_out": run["timed_out"]}


def _ratio(a: dict, b: dict) -> float | None:
    return a["per_batch_s"] / b["per_batch_s"] if "per_batch_s" in a and "per_batch_s" in b else None


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.epoch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="dataset directory (default: W1 under --workdir, prepared if missing)")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--cap", default="2GiB", help="cgroup memory cap of (a) and (c), page cache included")
    ap.add_argument("--naive-timeout", type=float, default=300.0, help="seconds before a naive run is stopped")
    ap.add_argument("--no-cap", action="store_true", help="run (a) and (c) uncapped (no cgroup here)")
    ap.add_argument("--workdir", default=str(REPO / "bench" / "results" / "epoch-work"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "epoch.json"))
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.batches, args.batch_size, args.hidden = min(args.batches, 3), 256, 32
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = Path(args.data) if args.data else synthetic_workload(work, 20_000 if args.smoke else 8_000_000)
    ds = open_dataset(data)
    feature_bytes = ds.num_nodes * ds.row_bytes
    cap = None if args.no_cap else parse_size(args.cap)
    info = machine_info(work)
    print(f"machine: {info['summary']}; W1-like data {data}: {ds.num_nodes:,} nodes, features "
          f"{format_size(feature_bytes)}; cap {args.cap if cap else 'none'}; {args.batches} batches")

    runs = {}
    runs["a_capped"] = trainer("a_capped", data, work, args, memory_budget=args.cap, host_cache="auto", cap=cap)
    # (b): all rows in the host cache; the budget leaves the working set room beside them.
    runs["b_uncapped_all_cached"] = trainer("b_uncapped_all_cached", data, work, args,
                                            memory_budget=format_size(feature_bytes + (6 << 30)),
                                            host_cache=format_size(feature_bytes + (1 << 20)), cap=None)
    runs["c_naive_default"] = naive("default", data, work, args, cap)
    runs["c_naive_madv_random"] = naive("random", data, work, args, cap)
    ratios = {"a_over_b": _ratio(runs["a_capped"], runs["b_uncapped_all_cached"]),
              "c_default_over_a": _ratio(runs["c_naive_default"], runs["a_capped"]),
              "c_random_over_a": _ratio(runs["c_naive_madv_random"], runs["a_capped"])}
    for name, r in runs.items():
        if "error" in r:
            print(f"{name}: FAILED: {r['error']}")
        else:
            extra = f" (extrapolated from {r['batches_done']} batches)" if r.get("extrapolated") else ""
            print(f"{name}: {r['per_batch_s'] * 1e3:.1f} ms/batch, epoch {r['epoch_s']:.1f} s{extra}, disk read "
                  f"{format_size(int(r['disk_bytes_read']))}"
                  + (f", cgroup peak {format_size(r['cgroup_peak_bytes'])}" if r.get("cgroup_peak_bytes") else ""))
    print("ratios: " + ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} n/a" for k, v in ratios.items()))
    result = {"benchmark": "epoch", "machine": info, "dataset": str(data), "nodes": ds.num_nodes,
              "feature_bytes": feature_bytes, "batches": args.batches, "fanouts": args.fanouts,
              "batch_size": args.batch_size, "hidden": args.hidden, "cap": args.cap if cap else None,
              "backend": runs["a_capped"].get("backend"), "runs": runs, "ratios": ratios}
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
