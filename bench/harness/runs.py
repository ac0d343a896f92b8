"""A system trained in a process of its own, under a memory cap, and what it measured read back.

`trainer` runs `python -m diskgnn.train` and returns its summary's timings,
tiers and memory; `loop` runs a training loop that writes one JSON line per
batch (bench.harness.naive, the peers) and takes its rate from those lines,
so that a loop stopped by its timeout still has one.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from diskgnn.units import format_size

from .common import GpuUtilisation, drop_caches
from .memcap import CapUnavailable, run_capped
from .workload import LR, batches_per_epoch


def _capped(argv: list[str], cap: int | None, timeout: float | None, cold: bool = True) -> dict:
    """Runs argv (cold: page cache dropped first) under the cap; the cap's accounting, or why there is none."""
    cold_note = drop_caches() if cold else "page cache left warm on purpose"
    info = {"cold_cache": cold and cold_note is None, "cold_cache_note": cold_note}
    if cap is None:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return {**info, "returncode": None, "stdout": e.stdout, "stderr": e.stderr, "cap_bytes": None,
                    "timed_out": True}
        return {**info, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                "cap_bytes": None, "timed_out": False}
    try:
        r = run_capped(argv, cap, timeout=timeout)
    except CapUnavailable as e:
        raise SystemExit(f"bench: cannot apply the memory cap: {e}") from None
    return {**info, "returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "cap_bytes": cap,
            "cgroup_peak_bytes": r.peak_bytes, "oom_killed": r.oom_killed, "timed_out": r.timed_out,
            "wall_s": r.wall_s}


def _failed(name: str, run: dict) -> str:
    out = run["stderr"] or run["stdout"] or ""
    tail = (out if isinstance(out, str) else out.decode(errors="replace")).strip().splitlines()[-3:]
    why = "OOM-killed" if run.get("oom_killed") else f"exit {run['returncode']}"
    return f"{name}: {why}: " + " | ".join(tail)


def trainer(name: str, data: Path, work: Path, args, *, memory_budget: str, host_cache: str,
            cap: int | None, features: str = "fp32", device: str = "auto", options: tuple[str, ...] = (),
            seed: int = 0) -> dict:
    """One diskgnn.train run (on `features`: fp32 or a stored quantized variant; args.batches None: a
    whole epoch; on `device`, with its GPU utilisation sampled on cuda; `options`: more diskgnn.train
    options); its summary's timings, tiers and memory."""
    summary_path = work / f"{name}.summary.json"
    summary_path.unlink(missing_ok=True)
    evaluate = ["--eval", "sampled", "--eval-max-batches", str(args.eval_batches)] if args.eval_batches else \
        ["--eval", "none"]
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--model", "sage",
            "--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
            "--epochs", str(args.epochs), *evaluate, "--seed", str(seed), "--lr", str(LR),
            "--memory-budget", memory_budget, "--host-cache", host_cache, "--workdir", str(work / name),
            "--features", features, "--force-features", "--device", device, "--summary-json", str(summary_path),
            "--no-progress", *options]
    if args.batches:
        argv += ["--max-batches", str(args.batches)]
    if args.max_blowup:
        argv += ["--max-blowup", str(args.max_blowup)]
    gpu = GpuUtilisation() if device == "cuda" else None
    with gpu or contextlib.nullcontext():
        run = _capped(argv, cap, None)
    if run["returncode"] != 0 or not summary_path.exists():
        shutil.rmtree(work / name, ignore_errors=True)
        return {"error": _failed(name, run), **{k: run.get(k) for k in ("cap_bytes", "oom_killed")}}
    s = json.loads(summary_path.read_text())
    shutil.rmtree(work / name, ignore_errors=True)  # its packs: gigabytes on W1
    times = s["epoch_times_s"]
    batches = s["stage_times_s"]["train"]["items"]
    evaluated = {"val_acc_per_epoch": s["val_acc_per_epoch"], "wall_s_at_val": s["wall_s_at_val"],
                 "test_acc": s["test_acc"], "best_epoch": s["best_epoch"]} if args.eval_batches else {}
    return {"epoch_s": sum(times) / len(times), "epochs_done": len(times), "train_s_per_epoch": times,
            "wall_s": s["wall_s"],
            "batches": batches, "per_batch_s": sum(times) / batches, **evaluated,
            "sample_s": s["sample_s"], "pack_s": s["pack_s"], "offline": s["offline"],
            "stage_times_s": s["stage_times_s"],
            "bottleneck": s.get("bottleneck"), "tiers": s["tiers"], "disk_bytes_read": s["disk_bytes_read"],
            "rows_per_batch": s["rows_per_batch"],
            "peak_rss_bytes": s["peak_rss_bytes"], "peak_anon_bytes": s["peak_anon_bytes"],
            "backend": s["backend"], "plan": s["plan"],
            "features": s["features"], "feature_row_bytes": s["feature_row_bytes"],
            "memory_budget": memory_budget, "host_cache": host_cache, "cold_cache": run["cold_cache"],
            "cap_bytes": run["cap_bytes"], "cgroup_peak_bytes": run.get("cgroup_peak_bytes"),
            "oom_killed": run.get("oom_killed", False), "device": s["device"],
            **({"gpu_utilisation": gpu.result} if gpu else {})}


def loop(name: str, argv: list[str], progress: Path, data: Path, args, cap: int | None, *, epochs: int = 1,
         cold: bool = True, timeout: float | None = None) -> dict:
    """One run of a training loop that writes progress lines (bench.harness.naive's, and the peers' per-epoch
    evaluation lines); its rate from the batch lines written when the timeout stopped it."""
    progress.unlink(missing_ok=True)
    run = _capped(argv, cap, timeout, cold)
    lines = [json.loads(x) for x in progress.read_text().splitlines()] if progress.exists() else []
    steps = [x for x in lines if "batch" in x]
    ends = [x for x in lines if "epoch_end" in x]
    tests = [x for x in lines if "test_acc" in x]
    common = {"cold_cache": run["cold_cache"], "cap_bytes": run["cap_bytes"],
              "cgroup_peak_bytes": run.get("cgroup_peak_bytes"), "timed_out": run["timed_out"]}
    if run["timed_out"] and not steps:
        return {**common, "error": f"{name}: no batch finished within {timeout:.0f} s",
                "per_batch_s_above": timeout}
    if not steps or (run["returncode"] != 0 and not run["timed_out"]):
        return {**common, "error": _failed(name, run)}
    last = steps[-1]
    done = last["batch"] + 1
    per_epoch = batches_per_epoch(data, args)
    total = per_epoch * epochs
    per_batch = last["elapsed_s"] / done
    out = {**common, "epoch_s": per_batch * per_epoch, "batches_done": done, "batches": total,
           "per_batch_s": per_batch, "extrapolated": done < total, "epochs_done": len(ends),
           "gather_s": last["gather_s"], "disk_bytes_read": last["disk_bytes_read"] * total / done,
           **({"load_s": last["load_s"]} if "load_s" in last else {})}
    if ends:
        out["val_acc_per_epoch"] = [x["val_acc"] for x in ends]
        out["train_s_per_epoch"] = list(np.diff([0.0] + [x["elapsed_s"] for x in ends]))
        if all("wall_s" in x for x in ends):
            out["wall_s_at_val"] = [x["wall_s"] for x in ends]
    if tests:
        out["test_acc"], out["best_epoch"] = tests[-1]["test_acc"], tests[-1]["best_epoch"]
    return out


def describe(name: str, r: dict) -> str:
    """One line for a run's result: its time per batch and epoch, what it read, or why it failed."""
    if "error" in r:
        return f"{name}: FAILED: {r['error']}"
    extra = f" (extrapolated from {r['batches_done']} batches)" if r.get("extrapolated") else ""
    gpu = r.get("gpu_utilisation", {})
    extra += f", GPU busy {gpu['mean_percent']:.0f} % on average" if "mean_percent" in gpu else ""
    extra += f", disk read {format_size(int(r['disk_bytes_read']))}" if "disk_bytes_read" in r else ""
    extra += f", cgroup peak {format_size(r['cgroup_peak_bytes'])}" if r.get("cgroup_peak_bytes") else ""
    extra += f", test acc {r['test_acc']:.4f} after {r['epochs_done']} epoch(s)" if r.get("test_acc") is not None \
        else ""
    return f"{name}: {r['per_batch_s'] * 1e3:.1f} ms/batch, epoch {r['epoch_s']:.1f} s{extra}"
