"""The benchmark suite behind `make bench`: device limits, the epoch grid against PyG and a naive loop, scaling,
and one report (docs/benchmarks.md's generated section and its plots).

    python -m bench.suite [--caps 1GiB,2GiB,4GiB] [--loop-timeout 90] [--scales 0.25,0.5,1,2]
    python -m bench.suite --steps limits,epoch --systems diskgnn,dgl_ondisk    # a part; the report says which
    python -m bench.suite --steps w2                 # W2's section alone: diskgnn, MariusGNN, Ginex at 2, 4 GiB
    python -m bench.suite --smoke --out-dir DIR     # tiny, for the test suite; report and plots in DIR

In one session, in this order: the W1 workloads are prepared once (cached
under bench/results/workloads); fio measures the disk's read limits on W1's
feature file (page cache dropped); bench.epoch runs every system at every cap
(200 batches); on W2 (prepared once beside W1), bench.epoch runs diskgnn and an
installed MariusGNN and Ginex at 2 and 4 GiB; bench.scaling trains a whole epoch at each
scale. Each step
writes its JSON into --out-dir, then bench.report renders the tables and
plots. Before each step the suite waits (at most --idle-wait seconds) for the
machine to be idle, and records the CPU other processes took during it: on
two cores any other busy process slows torch's compute threads several-fold.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import time
from pathlib import Path

import torch

from diskgnn.train.loop import versions

from . import epoch as bench_epoch
from . import scaling as bench_scaling
from .harness.common import REPO, cpu_seconds, disk_read_limits, machine_info, wait_for_idle
from .harness.output import RESULTS, command_line, finish, write_json
from .harness.workload import SMOKE_NODES, W1_NODES, prepare_once, synthetic_workload, w2_options
from .report.markdown import render

STEPS = ("limits", "epoch", "w2", "scaling")
W2_CAPS, W2_SYSTEMS = "2GiB,4GiB", "diskgnn,marius,ginex"  # issue 51, 63: MariusGNN and Ginex on W2


def peer_versions() -> dict:
    """Versions of the peers and tools the report names (None: not installed)."""
    out = {}
    for name in ("torch_geometric", "torch_sparse", "torch_scatter", "matplotlib"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a peer that fails to import is as good as absent
            out[name] = None
    try:
        out["fio"] = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        out["fio"] = None
    return out


def step(name: str, fn, idle_wait: float) -> tuple[dict, dict]:
    """Runs one step after waiting for quiet; the step's result and how quiet the machine was meanwhile."""
    waited = wait_for_idle(idle_wait) if idle_wait > 0 else 0.0
    print(f"=== {name}", flush=True)
    busy0, own0 = cpu_seconds()
    t0 = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t0
    busy1, own1 = cpu_seconds()
    # /proc/stat's ticks and the children's rusage round differently: a small negative difference is zero.
    return result, {"wall_s": wall, "idle_wait_s": waited, "other_cpu_s": max(0.0, (busy1 - busy0) - (own1 - own0))}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__.split("\n\n")[0])
    ap.add_argument("--caps", default="1GiB,2GiB,4GiB")
    ap.add_argument("--loop-timeout", type=float, default=600.0,
                    help="seconds each DGL, PyG or naive run may take (its rate from the batches done); "
                         "uncapped in-memory runs get twice this")
    ap.add_argument("--epochs", type=int, default=3, help="epochs every system trains")
    ap.add_argument("--eval-batches", type=int, default=20,
                    help="val and test nodes evaluated after each epoch, in batches of the batch size")
    ap.add_argument("--scales", default="0.25,0.5,1,2")
    ap.add_argument("--scaling-repeat", type=int, default=5, help="runs per scale, interleaved")
    ap.add_argument("--batches", type=int, default=0, help="batches per epoch (0: whole epochs)")
    ap.add_argument("--idle-wait", type=float, default=60.0,
                    help="before each step, wait at most this many seconds for the machine to be idle")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"comma-separated steps to run, of {', '.join(STEPS)} (default all); the report's sections "
                         "of the others say they were not run")
    ap.add_argument("--systems", help="the epoch grid's rows to run (bench.epoch --systems; default all)")
    ap.add_argument("--out-dir", default=str(RESULTS / "suite"))
    ap.add_argument("--report", help="markdown file whose generated section is (re)written "
                    "(default: docs/benchmarks.md; with --smoke, in --out-dir)")
    ap.add_argument("--plots", help="directory of the PNG plots (default: docs/bench; with --smoke, --out-dir)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one cap, short timeouts (the test suite)")
    args = ap.parse_args(argv)
    chosen = args.steps.split(",")
    if set(chosen) - set(STEPS) or ("epoch" not in chosen and set(chosen) != {"w2"}):
        raise SystemExit(f"bench.suite: --steps {args.steps}: choose from {', '.join(STEPS)}, epoch among them "
                         "(W1's report is built around the epoch grid), or w2 alone (its section of the report)")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        args.caps, args.loop_timeout, args.batches, args.idle_wait = "1GiB", 60.0, 3, 0.0
        args.epochs, args.eval_batches = 2, 2
    docs = out if args.smoke else REPO / "docs"
    plots = Path(args.plots or docs / "bench")
    markdown = Path(args.report or docs / "benchmarks.md")
    workloads = out / "workloads" if args.smoke else RESULTS / "workloads"
    nodes = SMOKE_NODES if args.smoke else W1_NODES
    smoke = ["--smoke"] if args.smoke else []
    start = time.perf_counter()
    workloads.mkdir(parents=True, exist_ok=True)
    info = machine_info(workloads)
    print(f"machine: {info['summary']}", flush=True)
    steps = {}
    if "epoch" in chosen:
        w1, steps["prepare"] = step("prepare W1", lambda: synthetic_workload(workloads, nodes), 0.0)
    if "limits" in chosen:
        limits, steps["limits"] = step("disk limits (fio)", lambda: disk_read_limits(
            w1 / "features.bin", 2.0 if args.smoke else 15.0), args.idle_wait)
        write_json(out / "limits.json", limits)
    systems = ["--systems", args.systems] if args.systems else []
    if "epoch" in chosen:
        _, steps["epoch"] = step("epoch grid", lambda: bench_epoch.main(
            ["--data", str(w1), "--caps", args.caps, "--loop-timeout", str(args.loop_timeout), "--batches",
             str(args.batches), "--epochs", str(args.epochs), "--eval-batches", str(args.eval_batches),
             "--workdir", str(out / "epoch-work"), "--out", str(out / "epoch.json"), *systems, *smoke]),
            args.idle_wait)
    if "w2" in chosen:
        w2 = workloads / f"w2-{nodes}"
        _, steps["prepare W2"] = step("prepare W2", lambda: prepare_once(w2, w2_options(nodes), "bench.suite"), 0.0)
        _, steps["w2"] = step("W2: diskgnn, MariusGNN and Ginex", lambda: bench_epoch.main(
            ["--data", str(w2), "--caps", args.caps if args.smoke else W2_CAPS, "--systems", W2_SYSTEMS,
             "--loop-timeout", str(args.loop_timeout), "--batches", str(args.batches), "--epochs", str(args.epochs),
             "--eval-batches", str(args.eval_batches), "--workdir", str(out / "w2-work"), "--out",
             str(out / "w2.json"), *smoke]), args.idle_wait)
    if "scaling" in chosen:
        _, steps["scaling"] = step("scaling", lambda: bench_scaling.main(
            ["--nodes", str(nodes), "--scales", args.scales, "--repeat",
             str(1 if args.smoke else args.scaling_repeat), "--workdir", str(workloads),
             "--out", str(out / "scaling.json"), *smoke]), args.idle_wait)
    suite = {"benchmark": "suite", "machine": info, "versions": {**versions(), **peer_versions()},
             "date": datetime.date.today().isoformat(), "cuda": torch.cuda.is_available(),
             "command": command_line("bench.suite", argv), "smoke": args.smoke,
             "wall_s": time.perf_counter() - start, "steps": steps,
             "files": {name: str(out / f"{name}.json") for name in steps if not name.startswith("prepare")}}
    finish(suite, out / "suite.json")
    render(out / "suite.json", markdown, plots)
    print(f"suite: {suite['wall_s'] / 60:.1f} min; report {markdown}, plots in {plots}")
    return json.loads((out / "suite.json").read_text())


if __name__ == "__main__":
    main()
