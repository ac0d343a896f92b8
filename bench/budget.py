"""The memory budget as a contract: every model, sampling mode and feature variant under a cgroup cap of
1.25 x --memory-budget, on the built-in dataset; none may be OOM-killed.

    python -m bench budget [--budgets 1GiB,2GiB] [--batches 40] [--out bench/results/budget.json]
    python -m bench.budget --smoke        # one run, tiny

The cap charges anonymous memory and the page cache the run creates (the
kernel reclaims cache under it, and kills the run where anonymous memory
alone passes it). Each run trains --batches batches of one epoch and
evaluates a few sampled batches, so every offline phase (sampling, placement,
packing, the eval sets) and the pipeline run under the cap. The dataset is
the recipe `python -m diskgnn.train` uses by default (2M nodes, 976 MiB of
features), prepared once under --workdir with the quantized variants stored.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from diskgnn.data.builtin import DEFAULT_SPLITS, DEFAULT_SYNTHETIC
from diskgnn.units import format_size, parse_size

from .harness.common import REPO, drop_caches, machine_info
from .harness.memcap import CapUnavailable, run_capped
from .harness.output import add_output_args, finish

MODELS = ("sage", "gcn", "gat")
SAMPLING = ("offline", "replay", "online")
FEATURES = ("fp32", "sq8", "vq:w=16,L=256")
HEADROOM = 1.25


def dataset(directory: Path, nodes: int) -> Path:
    """The built-in dataset's recipe (at `nodes` nodes) with the variants of FEATURES stored, prepared once."""
    from diskgnn.data.prepare import prepare
    from diskgnn.data.quantize.cli import quantize_dataset

    path = Path(directory) / f"builtin-{nodes}"
    if not (path / "manifest.json").exists():
        prepare("synthetic", path, undirected=True, split_ratios=DEFAULT_SPLITS, memory_budget="1GiB", overwrite=True,
                synthetic={**DEFAULT_SYNTHETIC, "nodes": nodes})
        # Memory, not fidelity, is measured here: vq's 256 centroids of 16 Gaussian values are refused at fit.
        quantize_dataset(path, FEATURES[1:], memory_budget="1GiB", force=True)
    return path


def capped_run(data: Path, work: Path, budget: str, model: str, sampling: str, features: str, batches: int,
               extra=()) -> dict:
    """One `diskgnn.train` under a cap of HEADROOM x budget, page cache dropped first."""
    cap = int(HEADROOM * parse_size(budget))
    work.mkdir(parents=True, exist_ok=True)
    summary = work / "summary.json"
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--workdir", str(work / "run"),
            "--memory-budget", budget, "--model", model, "--sampling", sampling, "--features", features,
            "--epochs", "1", "--max-batches", str(batches), "--eval-max-batches", "3", "--no-progress",
            "--summary-json", str(summary), *extra]
    drop_caches()
    r = run_capped(argv, cap, cwd=REPO)
    out = {"budget": budget, "cap_bytes": cap, "model": model, "sampling": sampling, "features": features,
           "returncode": r.returncode, "oom_killed": r.oom_killed, "cgroup_peak_bytes": r.peak_bytes,
           "wall_s": r.wall_s}
    if r.returncode == 0 and summary.exists():
        s = json.loads(summary.read_text())
        out.update(peak_anon_bytes=s["peak_anon_bytes"], working_set_bytes=s["plan"]["working_set_bytes"],
                   read_depth=s["plan"]["read_depth"])
    else:
        out["error"] = (r.stderr or "").strip().splitlines()[-1:] or [f"exit {r.returncode}"]
    shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.budget", description=__doc__.split("\n\n")[0])
    ap.add_argument("--budgets", default="1GiB,2GiB")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--nodes", type=int, default=DEFAULT_SYNTHETIC["nodes"])
    ap.add_argument("--smoke", action="store_true", help="one run on a tiny dataset")
    add_output_args(ap, "budget")
    args = ap.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    grid = [(b, m, s, f) for b in args.budgets.split(",") for m in MODELS for s in SAMPLING for f in FEATURES]
    if args.smoke:
        args.nodes, args.batches, grid = 20_000, 3, [("1GiB", "sage", "offline", "sq8")]
    data = dataset(work, args.nodes)
    info = machine_info(work)
    print(f"machine: {info['summary']}; {data}; cap = {HEADROOM} x budget", flush=True)
    runs = []
    for budget, model, sampling, features in grid:
        try:
            r = capped_run(data, work / "run", budget, model, sampling, features, args.batches)
        except CapUnavailable as e:
            raise SystemExit(f"bench.budget: no memory cgroup here: {e}") from None
        runs.append(r)
        state = "OOM-KILLED" if r["oom_killed"] else ("ok" if r["returncode"] == 0 else f"FAILED {r['error']}")
        peak = f", cgroup peak {format_size(r['cgroup_peak_bytes'])}" if r["cgroup_peak_bytes"] else ""
        print(f"{budget} {model} {sampling} {features}: {state}{peak}", flush=True)
    killed = sum(r["oom_killed"] for r in runs)
    failed = sum(r["returncode"] != 0 for r in runs)
    print(f"{len(runs)} runs: {killed} OOM-killed, {failed} failed")
    result = {"machine": info, "dataset": str(data), "headroom": HEADROOM, "runs": runs,
              "oom_killed": killed, "failed": failed}
    return finish(result, args.out)


if __name__ == "__main__":
    main()
