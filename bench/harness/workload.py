"""The work the training benchmarks share: W1's graph, its GraphSAGE settings and their command-line options."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from diskgnn.data.format import open_dataset

W1 = dict(feat_dim=128, avg_degree=10, classes=16, seed=0)  # the W1 workload, at W1_NODES nodes
W1_NODES, SMOKE_NODES = 8_000_000, 20_000  # its size, and its size in the smoke runs of the test suite
# The work every system does (issue 21): GraphSAGE, 2 layers, hidden 256, batch 1024, Adam at this rate.
LR = 0.003


def synthetic_workload(directory: Path, nodes: int) -> Path:
    """W1's recipe at `nodes` nodes under `directory`, prepared once and reused."""
    from diskgnn.data.prepare import prepare

    path = Path(directory) / f"synthetic-{nodes}"
    if not (path / "manifest.json").exists():
        prepare("synthetic", path, undirected=True, memory_budget="1GiB", synthetic=dict(nodes=nodes, **W1))
    return path


def w2_options(nodes: int) -> list[str]:
    """`diskgnn.prepare` options of W2 at `nodes` nodes: W1's sizes on a power-law graph (docs/benchmarks.md)."""
    return ["synthetic", "--structure", "powerlaw", "--nodes", str(nodes), "--feat-dim", str(W1["feat_dim"]),
            "--avg-degree", str(W1["avg_degree"]), "--classes", str(W1["classes"]), "--seed", str(W1["seed"])]


def prepare_once(data: Path, options: list[str], who: str) -> dict | None:
    """`python -m diskgnn.prepare OPTIONS --out DATA` in its own process (its memory is not the benchmark's),
    unless DATA holds a dataset already: its wall time and last line, or None where it was there."""
    if (data / "manifest.json").exists():
        return None
    from .common import REPO

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "diskgnn.prepare", *options, "--no-progress", "--overwrite", "--out",
                           str(data)], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{who}: prepare failed: {proc.stderr.strip().splitlines()[-1:]}")
    return {"wall_s": time.perf_counter() - t0, "report": proc.stdout.strip().splitlines()[-1]}


def add_data_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--data", help="dataset directory (default: W1 under --workdir, prepared if missing)")


def dataset_or_w1(data: str | None, work: Path, smoke: bool) -> Path:
    """The dataset directory `data`, else W1 prepared under `work` (SMOKE_NODES nodes when `smoke`)."""
    return Path(data) if data else synthetic_workload(work, SMOKE_NODES if smoke else W1_NODES)


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
    """The options of a training loop run by runs.loop() (bench.harness.naive, bench.peers.pyg)."""
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


def training_options(args, epochs: int, batches: int | None = None) -> list[str]:
    """The workload options of a loop run (batches: default --batches)."""
    batches = args.batches if batches is None else batches
    return ["--batches", str(batches), "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
            "--hidden", str(args.hidden), "--lr", str(LR), "--epochs", str(epochs)]


def batches_per_epoch(data: Path, args) -> int:
    """Batches one epoch of the run has: every train node in batches of --batch-size, at most --batches."""
    n = -(-int(open_dataset(data).split("train").size) // args.batch_size)
    return min(n, args.batches) if args.batches else n
