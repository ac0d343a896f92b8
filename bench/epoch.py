"""Training epoch benchmark: diskgnn under memory caps against its compute limit, the peers and a naive loop.

    python -m bench.epoch [--data W1_DIR] [--batches 200] [--epochs 1] [--eval-batches 0] [--caps 1GiB,2GiB,4GiB]
    python -m bench.epoch --smoke                     # tiny, for the test suite

In one run, on W1 (prepare synthetic --nodes 8000000 --feat-dim 128
--avg-degree 10 --classes 16 --seed 0; sage, 2 layers, fanouts 10,5, batch
1024, hidden 256, Adam 0.003), each system in its own process, for --epochs
epochs of --batches batches (0: whole epochs), evaluated after each epoch on
the same val and test nodes when --eval-batches is set:

  uncapped, once:
    diskgnn_all_cached  `python -m diskgnn.train` with every feature row in the
                        host cache: no disk reads, its compute limit here;
    dgl_memory          DGL 2.1 GraphBolt, features read into RAM
                        (bench.peers.dgl, DGL's own venv): its ceiling;
    pyg_memory          PyG's NeighborLoader + GraphSAGE with topology and
                        features in RAM, page cache warm (bench.peers.pyg):
                        what users get when the graph fits;
  under each cgroup memory cap (page cache included), page cache dropped first:
    diskgnn             `python -m diskgnn.train --memory-budget CAP`;
    dgl_ondisk          GraphBolt's OnDiskDataset with `in_memory: false`
                        features (a memory map), its topology in RAM;
    marius, ginex       an installed MariusGNN (marius_train on PATH or
                        DISKGNN_MARIUS) or Ginex (DISKGNN_GINEX), on W1
                        exported for the cap; otherwise "not installed";
    pyg_memmap_default  PyG with topology and features np.memmap'ed;
    pyg_memmap_random   the same with MADV_RANDOM on every map;
    naive_default       bench.naive: diskgnn's sampler and model, features
                        gathered through np.memmap, nothing overlapped;
    naive_random        the same with MADV_RANDOM.

PyG and diskgnn train on the same seed nodes per batch; GraphBolt shuffles
its own. Epoch times are training only (diskgnn's offline sampling and
packing, PyG's and DGL's conversions are reported beside them). A loop (DGL,
PyG, naive) that hits --loop-timeout is stopped and its rate taken from the
batches it finished, said as such; one that finished none is reported as
slower than the timeout. The naive loop gives a rate only (its first
--batches, or 200, batches).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.units import format_size, parse_size

from .common import GpuUtilisation, drop_caches, machine_info, synthetic_workload, write_json
from .memcap import CapUnavailable, run_capped

REPO = Path(__file__).resolve().parents[1]
CAPPED = ("diskgnn", "dgl_ondisk", "pyg_memmap_default", "pyg_memmap_random", "naive_default", "naive_random",
          "marius", "ginex")
UNCAPPED = ("diskgnn_all_cached", "dgl_memory", "pyg_memory")
# The work every system does (issue 21): GraphSAGE, 2 layers, hidden 256, batch 1024, Adam at this rate.
LR = 0.003
NAIVE_BATCHES = 200  # bench.naive's batches when the grid trains whole epochs (it gives a rate, not accuracy)
# With CUDA, diskgnn also trains on the GPU (the rows above stay on the CPU, like the PyG and naive loops).
GPU_CAPPED, GPU_UNCAPPED = ("diskgnn_cuda",), ("diskgnn_cuda_all_cached",)


def add_training_args(ap: argparse.ArgumentParser, batches: int | None = 200, harness: bool = True) -> None:
    """The workload options every training benchmark and loop shares (W1's defaults); a harness (a benchmark
    that runs systems, not a loop it runs) also takes --eval-batches and --smoke."""
    ap.add_argument("--batches", type=int, default=batches)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run, each of at most --batches batches "
                    "(--batches 0: whole epochs)")
    if harness:
        ap.add_argument("--eval-batches", type=int, default=0,
                        help="after each epoch, val accuracy on the val split's first N batches of nodes, then the "
                             "best epoch's test accuracy on the test split's first N (every system the same "
                             "nodes; 0: none)")
        ap.add_argument("--max-blowup", type=float, help="diskgnn's runs: --max-blowup (packed rows / nodes; "
                        "default none)")
        ap.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")


def add_loop_args(ap: argparse.ArgumentParser) -> None:
    """The options of a training loop run by loop() (bench.naive, bench.peers.pyg)."""
    add_training_args(ap, harness=False)
    ap.add_argument("--eval-nodes", type=int, default=0,
                    help="after each epoch, val accuracy on the val split's first N nodes, then the best "
                         "epoch's test accuracy on the test split's first N (0: no evaluation)")
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
            cap: int | None, features: str = "fp32", device: str = "auto", options: tuple[str, ...] = ()) -> dict:
    """One diskgnn.train run (on `features`: fp32 or a stored quantized variant; args.batches None: a
    whole epoch; on `device`, with its GPU utilisation sampled on cuda; `options`: more diskgnn.train
    options); its summary's timings, tiers and memory."""
    summary_path = work / f"{name}.summary.json"
    summary_path.unlink(missing_ok=True)
    evaluate = ["--eval", "sampled", "--eval-max-batches", str(args.eval_batches)] if args.eval_batches else \
        ["--eval", "none"]
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--model", "sage",
            "--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
            "--epochs", str(args.epochs), *evaluate, "--seed", "0", "--lr", str(LR),
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
    evaluated = {"val_acc_per_epoch": s["val_acc_per_epoch"], "test_acc": s["test_acc"],
                 "best_epoch": s["best_epoch"]} if args.eval_batches else {}
    return {"epoch_s": sum(times) / len(times), "epochs_done": len(times), "train_s_per_epoch": times,
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


def batches_per_epoch(data: Path, args) -> int:
    """Batches one epoch of the run has: every train node in batches of --batch-size, at most --batches."""
    n = -(-int(open_dataset(data).split("train").size) // args.batch_size)
    return min(n, args.batches) if args.batches else n


def loop(name: str, argv: list[str], progress: Path, data: Path, args, cap: int | None, *, epochs: int = 1,
         cold: bool = True, timeout: float | None = None) -> dict:
    """One run of a training loop that writes progress lines (bench.naive's, and the peers' per-epoch
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
    if tests:
        out["test_acc"], out["best_epoch"] = tests[-1]["test_acc"], tests[-1]["best_epoch"]
    return out


def training_options(args, epochs: int, batches: int | None = None) -> list[str]:
    """The workload options of a loop run (batches: default --batches)."""
    batches = args.batches if batches is None else batches
    return ["--batches", str(batches), "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
            "--hidden", str(args.hidden), "--lr", str(LR), "--epochs", str(epochs)]


def naive(name: str, madvise: str, data: Path, work: Path, args, cap: int | None, **kw) -> dict:
    """bench.naive on the first --batches batches (NAIVE_BATCHES when the grid trains whole epochs): a
    rate, extrapolated to the epoch, not an accuracy."""
    progress = work / f"{name}.jsonl"
    argv = [sys.executable, "-m", "bench.naive", "--data", str(data), "--madvise", madvise,
            "--progress", str(progress), *training_options(args, 1, args.batches or NAIVE_BATCHES)]
    return loop(name, argv, progress, data, args, cap, **kw)


def pyg(name: str, mode: str, madvise: str, data: Path, work: Path, args, cap: int | None, **kw) -> dict:
    """A bench.peers.pyg run, or why PyG cannot run here."""
    from .peers import pyg as peer

    ok, why = peer.available()
    if not ok:
        return {"error": f"PyG not installed: {why}", "not_installed": True}
    conversion = {}
    if mode == "memmap":
        # made once, outside every capped and timed run
        conversion["indices_int64_s"] = peer.int64_indices(open_dataset(data))[1]
    progress = work / f"{name}.jsonl"
    argv = [sys.executable, "-m", "bench.peers.pyg", "--data", str(data), "--mode", mode, "--madvise", madvise,
            "--progress", str(progress), "--eval-nodes", str(args.eval_batches * args.batch_size),
            *training_options(args, args.epochs)]
    return {**loop(name, argv, progress, data, args, cap, epochs=args.epochs, **kw), "conversion_s": conversion}


def dgl(name: str, mode: str, data: Path, work: Path, args, cap: int | None, **kw) -> dict:
    """A GraphBolt run (bench.peers.dgl, in DGL's own venv), or why DGL cannot run here. The export and
    GraphBolt's preprocessing happen once, outside every capped and timed run."""
    from .peers import dgl as peer

    ok, why = peer.available()
    if not ok:
        return {"error": why, "not_installed": True}
    try:
        export = peer.export(data, eval_nodes=args.eval_batches * args.batch_size)
    except DiskgnnError as e:
        return {"error": f"{name}: {e}"}
    progress = work / f"{name}.jsonl"
    argv = peer.command(Path(export["path"]), mode=mode, epochs=args.epochs, batches=args.batches,
                        fanouts=args.fanouts, batch_size=args.batch_size, hidden=args.hidden, lr=LR,
                        dropout=0.5, seed=0, progress=progress)
    conversion = {k: export[k] for k in ("export_s", "preprocess_s")}
    return {**loop(name, argv, progress, data, args, cap, epochs=args.epochs, **kw), "conversion_s": conversion}


def installed_peer(name: str, data: Path, work: Path, args, cap_text: str, timeout: float | None) -> dict:
    """MariusGNN or Ginex from the user's own installation, on W1 exported for this cap; without one, a row
    saying how to point the bench at it."""
    from .peers import ginex, marius
    from .peers.common import read_export_info

    peer = {"marius": marius, "ginex": ginex}[name]
    ok, why = peer.installed()
    if not ok:
        return {"error": why, "not_installed": True}
    out = work / f"{name}-{cap_text}"
    t0 = time.perf_counter()
    peer.export(data, out, cap=cap_text, fanouts=[int(f) for f in args.fanouts.split(",")],
                batch_size=args.batch_size, epochs=args.epochs, hidden=args.hidden, overwrite=True)
    export_s = time.perf_counter() - t0
    drop_caches()
    row = peer.run(out, timeout=timeout)
    plan = read_export_info(out)["options"].get("buffer_plan", {})
    shutil.rmtree(out, ignore_errors=True)  # a full copy of the features: gigabytes on W1
    if row["status"] != "ok" or not row.get("epoch_times_s"):
        return {"error": f"{name}: {row['status']}: {row.get('why', '')}", "row": row}
    times = row["epoch_times_s"]
    batches = batches_per_epoch(data, args)
    return {"epoch_s": sum(times) / len(times), "epochs_done": len(times), "train_s_per_epoch": times,
            "per_batch_s": sum(times) / (batches * len(times)), "batches": batches * len(times),
            "cap_bytes": row["cap_bytes"], "cgroup_peak_bytes": row["cgroup_peak_bytes"],
            "conversion_s": {"export_s": export_s}, "row": row,
            **({"neighbour_share": plan["neighbour_share"]} if "neighbour_share" in plan else {})}


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
           "diskgnn_over_dgl_memory": _ratio(d, uncapped["dgl_memory"]),
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
    extra += f", disk read {format_size(int(r['disk_bytes_read']))}" if "disk_bytes_read" in r else ""
    extra += f", cgroup peak {format_size(r['cgroup_peak_bytes'])}" if r.get("cgroup_peak_bytes") else ""
    extra += f", test acc {r['test_acc']:.4f} after {r['epochs_done']} epoch(s)" if r.get("test_acc") is not None \
        else ""
    return f"{name}: {r['per_batch_s'] * 1e3:.1f} ms/batch, epoch {r['epoch_s']:.1f} s{extra}"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.epoch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="dataset directory (default: W1 under --workdir, prepared if missing)")
    add_training_args(ap)
    ap.add_argument("--caps", default="2GiB",
                    help="comma-separated cgroup memory caps (page cache included) of the capped runs")
    ap.add_argument("--loop-timeout", type=float, default=300.0,
                    help="seconds before a DGL, PyG or naive run is stopped (its rate from the batches done); "
                         "uncapped in-memory runs get twice this")
    ap.add_argument("--systems", help="comma-separated: run only these rows (the others say so); default all")
    ap.add_argument("--no-cap", action="store_true", help="run the 'capped' systems uncapped (no cgroup here)")
    ap.add_argument("--workdir", default=str(REPO / "bench" / "results" / "epoch-work"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "epoch.json"))
    args = ap.parse_args(argv)
    apply_smoke(args)
    if args.batches < 0 or args.epochs < 1 or args.eval_batches < 0:
        raise SystemExit("bench.epoch: --batches and --eval-batches must be at least 0, --epochs at least 1")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = Path(args.data) if args.data else synthetic_workload(work, 20_000 if args.smoke else 8_000_000)
    ds = open_dataset(data)
    feature_bytes = ds.num_nodes * ds.row_bytes
    caps = ["none"] if args.no_cap else args.caps.split(",")
    info = machine_info(work)
    print(f"machine: {info['summary']}; data {data}: {ds.num_nodes:,} nodes, features "
          f"{format_size(feature_bytes)}; caps {', '.join(caps)}; {args.batches} batches")

    cuda = torch.cuda.is_available()
    everything = (*UNCAPPED, *CAPPED, *(GPU_UNCAPPED + GPU_CAPPED if cuda else ()))
    chosen = set(args.systems.split(",")) if args.systems else set(everything)
    if chosen - set(everything):
        raise SystemExit(f"bench.epoch: --systems: unknown {sorted(chosen - set(everything))}; choose from "
                         f"{', '.join(everything)}")

    def pick(name: str, label: str, fn) -> dict:
        r = fn() if name in chosen else {"error": "not selected (--systems)", "not_selected": True}
        print(label + describe(name, r), flush=True)
        return r

    # All rows in the host cache; the budget leaves the working set room beside them.
    cached = dict(memory_budget=format_size(feature_bytes + (6 << 30)), host_cache=format_size(feature_bytes + (1 << 20)),
                  cap=None)
    uncapped = {"diskgnn_all_cached": pick("diskgnn_all_cached", "", lambda: trainer(
        "diskgnn_all_cached", data, work, args, device="cpu", **cached))}
    if cuda:
        uncapped["diskgnn_cuda_all_cached"] = pick("diskgnn_cuda_all_cached", "", lambda: trainer(
            "diskgnn_cuda_all_cached", data, work, args, device="cuda", **cached))
    # Warm: these loops load every file into RAM before they time anything; twice the timeout leaves that room.
    warm = dict(cold=False, timeout=2 * args.loop_timeout)
    uncapped["dgl_memory"] = pick("dgl_memory", "", lambda: dgl("dgl_memory", "memory", data, work, args, None,
                                                                   **warm))
    uncapped["pyg_memory"] = pick("pyg_memory", "", lambda: pyg("pyg_memory", "memory", "default", data, work, args,
                                                                   None, **warm))
    per_cap = {}
    for cap_text in caps:
        cap = None if cap_text == "none" else parse_size(cap_text)
        budget = cap_text if cap else "2GiB"
        at = f"cap {cap_text}: "
        runs = {"diskgnn": pick("diskgnn", at, lambda: trainer(f"diskgnn-{cap_text}", data, work, args,
                                                               memory_budget=budget, host_cache="auto", cap=cap,
                                                               device="cpu"))}
        if cuda:
            runs["diskgnn_cuda"] = pick("diskgnn_cuda", at, lambda: trainer(
                f"diskgnn_cuda-{cap_text}", data, work, args, memory_budget=budget, host_cache="auto", cap=cap,
                device="cuda"))
        runs["dgl_ondisk"] = pick("dgl_ondisk", at, lambda: dgl(f"dgl_ondisk-{cap_text}", "ondisk", data, work, args,
                                                                cap, timeout=args.loop_timeout))
        for madvise in ("default", "random"):
            runs[f"pyg_memmap_{madvise}"] = pick(f"pyg_memmap_{madvise}", at, lambda: pyg(
                f"pyg_memmap_{madvise}-{cap_text}", "memmap", madvise, data, work, args, cap,
                timeout=args.loop_timeout))
            runs[f"naive_{madvise}"] = pick(f"naive_{madvise}", at, lambda: naive(
                f"naive_{madvise}-{cap_text}", madvise, data, work, args, cap, timeout=args.loop_timeout))
        for peer in ("marius", "ginex"):
            runs[peer] = pick(peer, at, lambda: installed_peer(peer, data, work, args, cap_text, args.loop_timeout))
        per_cap[cap_text] = {"runs": runs, "ratios": ratios(uncapped, runs)}
        print(f"cap {cap_text}: ratios " + ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} n/a"
                                                     for k, v in per_cap[cap_text]["ratios"].items()), flush=True)
    result = {"benchmark": "epoch", "machine": info, "dataset": str(data), "nodes": ds.num_nodes,
              "edges": ds.num_edges, "feature_bytes": feature_bytes, "batches": args.batches,
              "epochs": args.epochs, "eval_batches": args.eval_batches,
              "batches_per_epoch": batches_per_epoch(data, args),
              "fanouts": args.fanouts, "batch_size": args.batch_size, "hidden": args.hidden,
              "loop_timeout_s": args.loop_timeout, "cuda": cuda,
              "uncapped": uncapped, "caps": per_cap}
    result["backend"] = diskgnn_backend(result)
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
