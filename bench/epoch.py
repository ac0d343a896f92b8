"""Training epoch benchmark: diskgnn under memory caps against its compute limit, PyG and a naive np.memmap loop.

    python -m bench.epoch [--data W1_DIR] [--batches 200] [--caps 1GiB,2GiB,4GiB]
    python -m bench.epoch --smoke                     # tiny, for the test suite

In one run, on W1 (prepare synthetic --nodes 8000000 --feat-dim 128
--avg-degree 10 --classes 16 --seed 0; sage, fanouts 10,5, batch 1024,
hidden 256), each system in its own process, the same seed nodes per batch:

  uncapped, once:
    diskgnn_all_cached  `python -m diskgnn.train` with every feature row in the
                        host cache: no disk reads, its compute limit here;
    pyg_memory          PyG's NeighborLoader + GraphSAGE with topology and
                        features in RAM, page cache warm (bench.peers.pyg):
                        what users get when the graph fits;
  under each cgroup memory cap (page cache included), page cache dropped first:
    diskgnn             `python -m diskgnn.train --memory-budget CAP`;
    pyg_memmap_default  PyG with topology and features np.memmap'ed;
    pyg_memmap_random   the same with MADV_RANDOM on every map;
    naive_default       bench.naive: diskgnn's sampler and model, features
                        gathered through np.memmap, nothing overlapped;
    naive_random        the same with MADV_RANDOM.

Epoch times are training only (diskgnn's offline sampling and packing are
reported beside them). A loop (PyG, naive) that hits --loop-timeout is
stopped and its rate taken from the batches it finished; one that finished
none is reported as slower than the timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from diskgnn.data.format import open_dataset
from diskgnn.units import format_size, parse_size

from .common import GpuUtilisation, drop_caches, machine_info, synthetic_workload, write_json
from .memcap import CapUnavailable, run_capped

REPO = Path(__file__).resolve().parents[1]
CAPPED = ("diskgnn", "pyg_memmap_default", "pyg_memmap_random", "naive_default", "naive_random")
UNCAPPED = ("diskgnn_all_cached", "pyg_memory")
# With CUDA, diskgnn also trains on the GPU (the rows above stay on the CPU, like the PyG and naive loops).
GPU_CAPPED, GPU_UNCAPPED = ("diskgnn_cuda",), ("diskgnn_cuda_all_cached",)


def add_training_args(ap: argparse.ArgumentParser, batches: int | None = 200, smoke: bool = True) -> None:
    """The workload options every training benchmark and loop shares (W1's defaults)."""
    ap.add_argument("--batches", type=int, default=batches)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    if smoke:
        ap.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")


def add_loop_args(ap: argparse.ArgumentParser) -> None:
    """The options of a training loop run by loop() (bench.naive, bench.peers.pyg)."""
    add_training_args(ap, smoke=False)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", help="JSON lines file: one line per finished batch")


def apply_smoke(args) -> None:
    if args.smoke:
        args.batches = min(args.batches, 3) if args.batches else args.batches
        args.batch_size, args.hidden = 256, 32


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
        raise SystemExit(f"bench.epoch: cannot apply the memory cap: {e}") from None
    return {**info, "returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "cap_bytes": cap,
            "cgroup_peak_bytes": r.peak_bytes, "oom_killed": r.oom_killed, "timed_out": r.timed_out,
            "wall_s": r.wall_s}


def _failed(name: str, run: dict) -> str:
    out = run["stderr"] or run["stdout"] or ""
    tail = (out if isinstance(out, str) else out.decode(errors="replace")).strip().splitlines()[-3:]
    why = "OOM-killed" if run.get("oom_killed") else f"exit {run['returncode']}"
    return f"{name}: {why}: " + " | ".join(tail)


def trainer(name: str, data: Path, work: Path, args, *, memory_budget: str, host_cache: str,
            cap: int | None, features: str = "fp32", device: str = "auto") -> dict:
    """One diskgnn.train run (on `features`: fp32 or a stored quantized variant; args.batches None: a
    whole epoch; on `device`, with its GPU utilisation sampled on cuda); its summary's timings, tiers
    and memory."""
    summary_path = work / f"{name}.summary.json"
    summary_path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--model", "sage",
            "--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
            "--epochs", "1", "--eval", "none", "--seed", "0",
            "--memory-budget", memory_budget, "--host-cache", host_cache, "--workdir", str(work / name),
            "--features", features, "--force-features", "--device", device, "--summary-json", str(summary_path),
            "--no-progress"]
    if args.batches:
        argv += ["--max-batches", str(args.batches)]
    gpu = GpuUtilisation() if device == "cuda" else None
    with gpu or contextlib.nullcontext():
        run = _capped(argv, cap, None)
    if run["returncode"] != 0 or not summary_path.exists():
        shutil.rmtree(work / name, ignore_errors=True)
        return {"error": _failed(name, run), **{k: run.get(k) for k in ("cap_bytes", "oom_killed")}}
    s = json.loads(summary_path.read_text())
    shutil.rmtree(work / name, ignore_errors=True)  # its packs: gigabytes on W1
    epoch_s = s["epoch_times_s"][0]
    batches = s["stage_times_s"]["train"]["items"]
    return {"epoch_s": epoch_s, "batches": batches, "per_batch_s": epoch_s / batches,
            "sample_s": s["sample_s"], "pack_s": s["pack_s"], "offline": s["offline"],
            "stage_times_s": s["stage_times_s"],
            "bottleneck": s.get("bottleneck"), "tiers": s["tiers"], "disk_bytes_read": s["disk_bytes_read"],
            "peak_rss_bytes": s["peak_rss_bytes"], "peak_anon_bytes": s["peak_anon_bytes"],
            "backend": s["backend"], "plan": s["plan"],
            "features": s["features"], "feature_row_bytes": s["feature_row_bytes"],
            "memory_budget": memory_budget, "host_cache": host_cache, "cold_cache": run["cold_cache"],
            "cap_bytes": run["cap_bytes"], "cgroup_peak_bytes": run.get("cgroup_peak_bytes"),
            "oom_killed": run.get("oom_killed", False), "device": s["device"],
            **({"gpu_utilisation": gpu.result} if gpu else {})}


def loop(name: str, module: str, options: list[str], data: Path, work: Path, args, cap: int | None,
         *, cold: bool = True, timeout: float | None = None) -> dict:
    """One run of a training loop that writes bench.naive's progress lines (bench.naive, bench.peers.pyg);
    its rate from the lines written when the timeout stopped it."""
    progress = work / f"{name}.jsonl"
    progress.unlink(missing_ok=True)
    argv = [sys.executable, "-m", module, "--data", str(data), "--batches", str(args.batches),
            "--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
            "--progress", str(progress), *options]
    run = _capped(argv, cap, timeout, cold)
    lines = [json.loads(x) for x in progress.read_text().splitlines()] if progress.exists() else []
    common = {"cold_cache": run["cold_cache"], "cap_bytes": run["cap_bytes"],
              "cgroup_peak_bytes": run.get("cgroup_peak_bytes"), "timed_out": run["timed_out"]}
    if run["timed_out"] and not lines:
        return {**common, "error": f"{name}: no batch finished within {timeout:.0f} s",
                "per_batch_s_above": timeout}
    if not lines or (run["returncode"] != 0 and not run["timed_out"]):
        return {**common, "error": _failed(name, run)}
    last = lines[-1]
    done = last["batch"] + 1
    per_batch = last["elapsed_s"] / done
    return {**common, "epoch_s": per_batch * args.batches, "batches_done": done, "batches": args.batches,
            "per_batch_s": per_batch, "extrapolated": done < args.batches, "gather_s": last["gather_s"],
            "disk_bytes_read": last["disk_bytes_read"] * args.batches / done,
            **({"load_s": last["load_s"]} if "load_s" in last else {})}


def pyg(name: str, mode: str, madvise: str, data: Path, work: Path, args, cap: int | None, **kw) -> dict:
    """A bench.peers.pyg run, or why PyG cannot run here."""
    from .peers import pyg as peer

    ok, why = peer.available()
    if not ok:
        return {"error": f"PyG not installed: {why}", "not_installed": True}
    if mode == "memmap":
        peer.int64_indices(open_dataset(data))  # made once, outside every capped and timed run
    return loop(name, "bench.peers.pyg", ["--mode", mode, "--madvise", madvise], data, work, args, cap, **kw)


def diskgnn_backend(result: dict) -> str | None:
    """The I/O backend diskgnn's runs used (the first run that got far enough to say)."""
    runs = [*result["uncapped"].values()] + [c["runs"]["diskgnn"] for c in result["caps"].values()]
    return next((r["backend"] for r in runs if "backend" in r), None)


def _ratio(a: dict, b: dict) -> float | None:
    return a["per_batch_s"] / b["per_batch_s"] if "per_batch_s" in a and "per_batch_s" in b else None


def ratios(uncapped: dict, capped: dict) -> dict:
    """Per-batch ratios at one cap: diskgnn against its compute limit and PyG in memory; the rest against diskgnn."""
    d = capped["diskgnn"]
    out = {"diskgnn_over_all_cached": _ratio(d, uncapped["diskgnn_all_cached"]),
           "diskgnn_over_pyg_memory": _ratio(d, uncapped["pyg_memory"])}
    for name in CAPPED[1:]:
        out[f"{name}_over_diskgnn"] = _ratio(capped[name], d)
    if "diskgnn_cuda" in capped:
        out["diskgnn_cuda_over_diskgnn"] = _ratio(capped["diskgnn_cuda"], d)
    return out


def describe(name: str, r: dict) -> str:
    if "error" in r:
        return f"{name}: FAILED: {r['error']}"
    extra = f" (extrapolated from {r['batches_done']} batches)" if r.get("extrapolated") else ""
    gpu = r.get("gpu_utilisation", {})
    extra += f", GPU busy {gpu['mean_percent']:.0f} % on average" if "mean_percent" in gpu else ""
    return (f"{name}: {r['per_batch_s'] * 1e3:.1f} ms/batch, epoch {r['epoch_s']:.1f} s{extra}, disk read "
            f"{format_size(int(r['disk_bytes_read']))}"
            + (f", cgroup peak {format_size(r['cgroup_peak_bytes'])}" if r.get("cgroup_peak_bytes") else ""))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.epoch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="dataset directory (default: W1 under --workdir, prepared if missing)")
    add_training_args(ap)
    ap.add_argument("--caps", default="2GiB",
                    help="comma-separated cgroup memory caps (page cache included) of the capped runs")
    ap.add_argument("--loop-timeout", type=float, default=300.0,
                    help="seconds before a PyG memmap or naive run is stopped (its rate from the batches done)")
    ap.add_argument("--no-cap", action="store_true", help="run the 'capped' systems uncapped (no cgroup here)")
    ap.add_argument("--workdir", default=str(REPO / "bench" / "results" / "epoch-work"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "epoch.json"))
    args = ap.parse_args(argv)
    apply_smoke(args)
    if not args.batches or args.batches < 1:
        raise SystemExit("bench.epoch: --batches must be at least 1")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = Path(args.data) if args.data else synthetic_workload(work, 20_000 if args.smoke else 8_000_000)
    ds = open_dataset(data)
    feature_bytes = ds.num_nodes * ds.row_bytes
    caps = ["none"] if args.no_cap else args.caps.split(",")
    info = machine_info(work)
    print(f"machine: {info['summary']}; data {data}: {ds.num_nodes:,} nodes, features "
          f"{format_size(feature_bytes)}; caps {', '.join(caps)}; {args.batches} batches")

    # All rows in the host cache; the budget leaves the working set room beside them.
    uncapped = {"diskgnn_all_cached": trainer("diskgnn_all_cached", data, work, args,
                                              memory_budget=format_size(feature_bytes + (6 << 30)),
                                              host_cache=format_size(feature_bytes + (1 << 20)), cap=None,
                                              device="cpu")}
    print(describe("diskgnn_all_cached", uncapped["diskgnn_all_cached"]), flush=True)
    cuda = torch.cuda.is_available()
    if cuda:
        uncapped["diskgnn_cuda_all_cached"] = trainer("diskgnn_cuda_all_cached", data, work, args,
                                                      memory_budget=format_size(feature_bytes + (6 << 30)),
                                                      host_cache=format_size(feature_bytes + (1 << 20)), cap=None,
                                                      device="cuda")
        print(describe("diskgnn_cuda_all_cached", uncapped["diskgnn_cuda_all_cached"]), flush=True)
    # Warm: the loop loads every file into RAM before it times anything; twice the timeout leaves that room.
    uncapped["pyg_memory"] = pyg("pyg_memory", "memory", "default", data, work, args, None, cold=False,
                                 timeout=2 * args.loop_timeout)
    print(describe("pyg_memory", uncapped["pyg_memory"]), flush=True)
    per_cap = {}
    for cap_text in caps:
        cap = None if cap_text == "none" else parse_size(cap_text)
        budget = cap_text if cap else "2GiB"
        runs = {"diskgnn": trainer(f"diskgnn-{cap_text}", data, work, args, memory_budget=budget,
                                   host_cache="auto", cap=cap, device="cpu")}
        if cuda:
            runs["diskgnn_cuda"] = trainer(f"diskgnn_cuda-{cap_text}", data, work, args, memory_budget=budget,
                                           host_cache="auto", cap=cap, device="cuda")
        for madvise in ("default", "random"):
            runs[f"pyg_memmap_{madvise}"] = pyg(f"pyg_memmap_{madvise}-{cap_text}", "memmap", madvise, data, work,
                                                args, cap, timeout=args.loop_timeout)
            runs[f"naive_{madvise}"] = loop(f"naive_{madvise}-{cap_text}", "bench.naive", ["--madvise", madvise],
                                            data, work, args, cap, timeout=args.loop_timeout)
        for name in runs:
            print(f"cap {cap_text}: " + describe(name, runs[name]), flush=True)
        per_cap[cap_text] = {"runs": runs, "ratios": ratios(uncapped, runs)}
        print(f"cap {cap_text}: ratios " + ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} n/a"
                                                     for k, v in per_cap[cap_text]["ratios"].items()), flush=True)
    result = {"benchmark": "epoch", "machine": info, "dataset": str(data), "nodes": ds.num_nodes,
              "edges": ds.num_edges, "feature_bytes": feature_bytes, "batches": args.batches,
              "fanouts": args.fanouts, "batch_size": args.batch_size, "hidden": args.hidden,
              "loop_timeout_s": args.loop_timeout, "cuda": cuda,
              "uncapped": uncapped, "caps": per_cap}
    result["backend"] = diskgnn_backend(result)
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
