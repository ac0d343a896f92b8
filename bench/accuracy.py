"""Accuracy benchmark: diskgnn.train against an in-memory, full-neighbour reference trainer.

    python -m bench.accuracy [--datasets cora,citeseer,amazon_computers,coauthor_cs] [--models sage,gcn]
                             [--seeds 5] [--pause-while FILE]
    python -m bench.accuracy --smoke          # Cora, 1 seed, 3 epochs: for the test suite

For every dataset x model x seed it trains three times with the same
hyper-parameters and the same initial weights: `bench.reference` (full batch,
every neighbour, all in memory), `diskgnn.train --sampling offline` (the
default: each epoch sampled and packed ahead, rows from the memory tier and
the packs) and `diskgnn.train --sampling online` (sampled during training,
rows read from the feature file). The bounds, on means over the seeds:
|offline - reference| <= 1.5 points of test accuracy and |offline - online|
<= 0.5 points. Datasets are prepared once into --workdir/data; results go to
bench/results/accuracy.json and the table to docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from diskgnn.config import TrainConfig
from diskgnn.errors import DiskgnnError
from diskgnn.format import open_dataset, read_manifest
from diskgnn.prepare import prepare
from diskgnn.train import train, versions

from .common import machine_info, write_json
from .reference import load, reference_train

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
MODES = ("reference", "offline", "online")
BOUNDS = {"offline_vs_reference": 1.5, "offline_vs_online": 0.5}  # points of test accuracy, |difference of means|


@dataclass(frozen=True)
class Spec:
    source: str  # relative to the shared datasets directory
    split_per_class: tuple[int, int] | None  # None: the source's own split
    split_note: str
    epochs: int


# Planetoid sources carry the public split (prepare takes a source's split over a drawn one); the
# gnn-benchmark graphs have none, so 20 train and 30 val nodes per class are drawn (seed 0), the rest test.
DATASETS = {
    "cora": Spec("planetoid_cora", None, "Planetoid public split", 50),
    "citeseer": Spec("planetoid_citeseer", None, "Planetoid public split", 50),
    "amazon_computers": Spec("amazon_computers/amazon-computers.zip", (20, 30),
                             "20 train + 30 val per class, rest test (split seed 0)", 150),
    "coauthor_cs": Spec("coauthor_cs/coauthor-cs.zip", (20, 30),
                        "20 train + 30 val per class, rest test (split seed 0)", 30),
}
# Epochs: enough to reach the reference's val plateau (seed 0, measured with 60 to 300 epochs): the
# Planetoid graphs fit their train nodes (loss ~0) by epoch 15 and plateau by 20-30; Amazon's val
# accuracy plateaus after 75 (GCN) to 100 (SAGE) epochs, Coauthor's after 5-12. Longer runs only move
# which plateau epoch has the best val accuracy, and would put Coauthor CS (6,805 dense features per
# row) alone past half an hour on two cores.
# Every graph is symmetrised (Amazon's adjacency is stored one way; the Planetoid dicts miss a few reverse
# edges) and loses its self-loops (CiteSeer has 124): GCN adds its own, and PyG drops them too.
PREPARE = dict(undirected=True, drop_self_loops=True, split_seed=0)

# One set of hyper-parameters for every dataset, model and mode (Kipf & Welling's, 2 layers). A batch of
# 1024 seeds holds every train split here (at most 300 nodes), so diskgnn.train takes exactly one Adam step
# per epoch on all train nodes, as the full-batch reference does; fanouts 25,10 are generous (mean degree
# 4 to 36), so sampling drops few neighbours.
HPARAMS = dict(hidden=64, lr=0.01, weight_decay=5e-4, dropout=0.5)
FANOUTS = "25,10"
BATCH_SIZE = 1024
# The host tier may hold every feature row by default. Placement still leaves the rows epoch 0 did not
# sample cold, so later epochs pack a few (7 % of the rows read on Cora); a partial tier would pack most of
# every 2-hop neighbourhood (up to 27 KB a row on Coauthor CS) to disk and read it back, every epoch of
# every run, on a disk shared with timing benchmarks. Where a row comes from does not change its bytes
# (tests/test_store.py checks the store against a gather); --host-cache-fraction below 1 exercises more
# of the packs (the smoke test does).
HOST_CACHE_FRACTION = 1.0
# Page-cache reads for the same reason: online epochs read every sampled row from the feature file.
BACKEND = "mmap"
MEMORY_BUDGET = "16GiB"  # a planning bound only; the host tier is sized by --host-cache-fraction


def wait_while(flag: Path | None) -> None:
    """Waits while `flag` exists (another job on this machine asks for quiet while it times)."""
    if flag is None or not flag.exists():
        return
    print(f"waiting while {flag} exists ...", flush=True)
    while flag.exists():
        time.sleep(10)


def prepared(name: str, shared: Path, cache: Path) -> Path:
    """The dataset directory for `name`, prepared on first use (and again if its recipe changed)."""
    spec = DATASETS[name]
    out = cache / name
    split = "source" if spec.split_per_class is None else \
        f"per-class {spec.split_per_class[0]},{spec.split_per_class[1]} (seed {PREPARE['split_seed']})"
    try:
        options = read_manifest(out)["producer"]["options"]
        if (options["split"], options["undirected"], options["drop_self_loops"]) == (
                split, PREPARE["undirected"], PREPARE["drop_self_loops"]):
            return out
    except (DiskgnnError, KeyError):
        pass
    source = shared / spec.source
    if not source.exists():
        raise DiskgnnError(f"{source} is absent (the real datasets live in ../shared/datasets beside the repo)")
    cache.mkdir(parents=True, exist_ok=True)
    path = prepare(source, out, split_per_class=spec.split_per_class, overwrite=True, progress=False,
                   **PREPARE)
    if read_manifest(path)["producer"]["options"]["split"] != split:
        raise DiskgnnError(f"{source}: prepared with split {read_manifest(path)['producer']['options']['split']!r}, "
                           f"expected {split!r}")
    return path


def diskgnn_run(data: Path, model: str, seed: int, epochs: int, mode: str, host_fraction: float, workdir: Path,
                log: Path) -> dict:
    """One diskgnn.train run in this process; its output goes to `log`, its workdir is removed after."""
    ds = open_dataset(data)
    cfg = TrainConfig(data=str(data), model=model, fanouts=FANOUTS, batch_size=BATCH_SIZE, epochs=epochs,
                      seed=seed, sampling=mode, workdir=str(workdir), progress=False, backend=BACKEND,
                      memory_budget=MEMORY_BUDGET,
                      host_cache=str(int(host_fraction * ds.num_nodes * ds.row_bytes)), **HPARAMS)
    cfg.validate()
    start = time.perf_counter()
    with open(log, "w") as f, contextlib.redirect_stdout(f):
        summary = train(cfg)
    wall = time.perf_counter() - start
    shutil.rmtree(workdir)
    hits = {name: t["hit_rate"] for name, t in summary["tiers"].items()}
    return {"test_acc": summary["test_acc"], "val_acc": summary["val_acc"], "best_epoch": summary["best_epoch"],
            "wall_s": wall, "tier_hit_rates": hits, "device": summary["device"]}


def _stats(values: list[float]) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else 0.0, "n": int(a.size)}


def aggregate(runs: list[dict]) -> list[dict]:
    """Mean and std of test accuracy per dataset, model and mode; the two differences in points."""
    rows = []
    keys = list(dict.fromkeys((r["dataset"], r["model"]) for r in runs))
    for dataset, model in keys:
        mine = [r for r in runs if r["dataset"] == dataset and r["model"] == model]
        row = {"dataset": dataset, "model": model}
        for mode in MODES:
            row[mode] = _stats([r["test_acc"] for r in mine if r["mode"] == mode])
        row["offline_minus_reference"] = 100 * (row["offline"]["mean"] - row["reference"]["mean"])
        # Unpaired: the two trainers draw different dropout masks, so a seed's runs are not paired.
        row["offline_minus_reference_se"] = 100 * math.sqrt(sum(row[m]["std"] ** 2 / row[m]["n"]
                                                                for m in ("offline", "reference")))
        row["offline_minus_online"] = 100 * (row["offline"]["mean"] - row["online"]["mean"])
        row["pass_reference"] = abs(row["offline_minus_reference"]) <= BOUNDS["offline_vs_reference"]
        row["pass_online"] = abs(row["offline_minus_online"]) <= BOUNDS["offline_vs_online"]
        rows.append(row)
    return rows


def _pm(s: dict) -> str:
    return f"{100 * s['mean']:.2f} ± {100 * s['std']:.2f}"


def table(rows: list[dict]) -> str:
    lines = ["| dataset | model | reference | offline | online | offline − reference (s.e.) | offline − online | "
             "pass (≤ 1.5 / ≤ 0.5) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "pass" if r["pass_reference"] and r["pass_online"] else "FAIL (" + ", ".join(
            name for name, ok in (("reference", r["pass_reference"]), ("online", r["pass_online"])) if not ok) + ")"
        gap = f"{r['offline_minus_reference']:+.2f} ({r['offline_minus_reference_se']:.2f})"
        lines.append(f"| {r['dataset']} | {r['model']} | {_pm(r['reference'])} | {_pm(r['offline'])} | "
                     f"{_pm(r['online'])} | {gap} | {r['offline_minus_online']:+.2f} | {verdict} |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    hp, ver = result["hyperparameters"], result["versions"]
    ds_lines = "\n".join(f"- {name}: {d['nodes']:,} nodes, {d['edges']:,} edges (symmetrised, no self-loops), "
                         f"{d['feature_dim']} features, {d['classes']} classes; {d['split']}: train / val / test "
                         f"{d['splits']['train']} / {d['splits']['val']} / {d['splits']['test']}; "
                         f"{d['epochs']} epochs" for name, d in result["datasets"].items())
    seeds = result["seeds"]
    test = {(r["dataset"], r["model"], r["seed"], r["mode"]): r["test_acc"] for r in result["runs"]}
    pairs = [k[:3] for k in test if k[3] == "offline"]
    same = sum(test[p + ("offline",)] == test[p + ("online",)] for p in pairs)
    return f"""# Accuracy: diskgnn.train against an in-memory, full-neighbour reference

Generated by `bench/accuracy.py` (issue 5, item 5); do not edit by hand.

Test accuracy in percent, mean ± sample std over {len(seeds)} seed(s) ({", ".join(map(str, seeds))}); the
seed sets the initial weights (identical on all three sides), dropout, and diskgnn's sampling.
Differences are in points, between means; s.e. is the standard error of offline − reference (unpaired).
Bounds: |offline − reference| ≤ {BOUNDS['offline_vs_reference']} and |offline − online| ≤ \
{BOUNDS['offline_vs_online']}.

- **reference**: `bench.reference.reference_train`: whole graph in memory, full batch, every neighbour in
  training and evaluation.
- **offline**: `diskgnn.train --sampling offline` (the default): each epoch sampled (and its cold rows
  packed) ahead; host cache tier {hp["host_cache_fraction"]:.0%} of the feature bytes; evaluation on sampled
  batches (the default `--eval sampled`, fanouts as in training).
- **online**: `diskgnn.train --sampling online`: sampled during training with the same random streams,
  rows read from the feature file; evaluation likewise.

All three select the epoch with the best val accuracy and report its test accuracy. With sampling and
dropout off (fanouts -1,-1, dropout 0), `diskgnn.train` and the reference take the same steps from the
same weights and have the same val accuracy at every epoch (`tests/test_accuracy_smoke.py` checks it on
Cora), so offline − reference is what sampling costs plus the noise of different dropout masks.

{table(result["aggregate"])}

Offline and online runs of the same seed gave the same test accuracy in {same} of {len(pairs)} pairs: both
sample batch b of epoch e from the same random stream, so they train on the same batches and differ only
in where the rows are read from.

## Set-up

- Command: `{result["command"]}`
- Machine: {result["machine"]["summary"]}; device {result["device"]}, {result["torch_threads"]} torch
  thread(s), nice {result["nice"]} (the machine was shared with other jobs: times are not benchmarks)
- Versions: diskgnn {ver["diskgnn"]}, torch {ver["torch"]}, numpy {ver["numpy"]}, Python {ver["python"]}
- Hyper-parameters (all datasets, models and modes): 2 layers, hidden {hp["hidden"]}, Adam lr {hp["lr"]},
  weight decay {hp["weight_decay"]}, dropout {hp["dropout"]}; diskgnn: fanouts {hp["fanouts"]} (eval the
  same), batch size {hp["batch_size"]} (more than any train split: one step per epoch on every train node,
  as the full-batch reference); epochs per dataset below, enough to reach the reference's val plateau
  (see `bench/accuracy.py`); reader backend `{hp["backend"]}` (page cache: it changes no row's bytes, and
  keeps every online epoch's reads off a shared disk); features as the sources give them (no row
  normalisation).
- Wall time: {result["wall_s"] / 60:.1f} min for {len(result["runs"])} runs.

Datasets (`diskgnn.prepare --undirected --drop-self-loops`, from `../shared/datasets`):

{ds_lines}
"""


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.accuracy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated, from " + ", ".join(DATASETS))
    ap.add_argument("--models", default="sage,gcn", help="comma-separated: sage, gcn, gat")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1")
    ap.add_argument("--epochs", type=int, help="epochs for every dataset (default: each dataset's own)")
    ap.add_argument("--shared", default=str(SHARED), help="the real datasets' directory")
    ap.add_argument("--workdir", default=str(REPO / "bench" / "results" / "accuracy-work"),
                    help="prepared datasets, run logs and (while they run) diskgnn workdirs")
    ap.add_argument("--out", help="result JSON (default: bench/results/accuracy.json, -smoke.json with --smoke)")
    ap.add_argument("--markdown", help="table (default: docs/accuracy.md; with --smoke, beside --out)")
    ap.add_argument("--host-cache-fraction", type=float, default=HOST_CACHE_FRACTION,
                    help="offline runs: the host tier's share of the feature bytes (the rest read from packs)")
    ap.add_argument("--pause-while", metavar="FILE", help="before each training run, wait while FILE exists")
    ap.add_argument("--smoke", action="store_true", help="cora, 1 seed, 3 epochs (for the test suite)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.datasets, args.seeds, args.epochs = "cora", 1, args.epochs or 3
    names = args.datasets.split(",")
    models = args.models.split(",")
    unknown = [n for n in names if n not in DATASETS] + [m for m in models if m not in ("sage", "gcn", "gat")]
    if unknown:
        raise SystemExit(f"bench.accuracy: unknown dataset(s) or model(s) {unknown}; datasets: "
                         f"{', '.join(DATASETS)}; models: sage, gcn, gat")
    if args.seeds < 1 or (args.epochs is not None and args.epochs < 1):
        raise SystemExit("bench.accuracy: --seeds and --epochs must be at least 1")
    if not 0 <= args.host_cache_fraction <= 1:
        raise SystemExit(f"bench.accuracy: --host-cache-fraction {args.host_cache_fraction}: must be in [0, 1]")
    suffix = "-smoke" if args.smoke else ""
    out = Path(args.out or REPO / "bench" / "results" / f"accuracy{suffix}.json")
    md = Path(args.markdown) if args.markdown else (out.with_suffix(".md") if args.smoke else
                                                     REPO / "docs" / "accuracy.md")
    work = Path(args.workdir)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    pause = Path(args.pause_while) if args.pause_while else None
    shared = Path(args.shared)
    info = machine_info(work)
    print(f"machine: {info['summary']}")

    # As run: the thread count matters on a busy machine (torch's spinning threads waste a shared core).
    threads_env = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    command = threads_env + " ".join(["python -m bench.accuracy", *(argv if argv is not None else sys.argv[1:])])
    start = time.perf_counter()
    runs: list[dict] = []
    datasets: dict[str, dict] = {}
    seeds = list(range(args.seeds))
    result: dict = {}
    for name in names:
        try:
            data = prepared(name, shared, work / "data")
        except DiskgnnError as e:
            raise SystemExit(f"bench.accuracy: {e}") from None
        ds = open_dataset(data)
        epochs = args.epochs or DATASETS[name].epochs
        datasets[name] = {"path": str(data), "nodes": ds.num_nodes, "edges": ds.num_edges,
                          "feature_dim": ds.feature_dim, "classes": ds.num_classes, "epochs": epochs,
                          "split": DATASETS[name].split_note,
                          "splits": {s: int(ds.split(s).size) for s in ("train", "val", "test")}}
        graph = load(data)  # once per dataset: the reference's whole graph in memory
        for model in models:
            for seed in seeds:
                wait_while(pause)
                t0 = time.perf_counter()
                ref = reference_train(data, model, seed=seed, epochs=epochs, graph=graph, **HPARAMS)
                runs.append({"dataset": name, "model": model, "mode": "reference", "seed": seed,
                             "test_acc": ref["test_acc"], "val_acc": ref["val_acc"],
                             "best_epoch": ref["best_epoch"], "wall_s": time.perf_counter() - t0})
                for mode in ("offline", "online"):
                    wait_while(pause)
                    tag = f"{name}-{model}-{mode}-seed{seed}"
                    runs.append({"dataset": name, "model": model, "mode": mode, "seed": seed,
                                 **diskgnn_run(data, model, seed, epochs, mode, args.host_cache_fraction,
                                               work / "runs" / tag, work / "logs" / f"{tag}.log")})
                accs = "  ".join(f"{r['mode']} {100 * r['test_acc']:.1f} ({r['wall_s']:.0f} s)" for r in runs[-3:])
                print(f"{name} {model} seed {seed}: test acc {accs}", flush=True)
        del graph
        # Written after every dataset, so a long run that stops keeps what it measured.
        result = {
            "benchmark": "accuracy", "machine": info, "versions": versions(),
            "command": command, "torch_threads": torch.get_num_threads(), "nice": os.nice(0),
            "device": runs[-1]["device"], "seeds": seeds, "models": models, "bounds_points": BOUNDS,
            "hyperparameters": {**HPARAMS, "layers": 2, "fanouts": FANOUTS, "batch_size": BATCH_SIZE,
                                "host_cache_fraction": args.host_cache_fraction, "backend": BACKEND,
                                "memory_budget": MEMORY_BUDGET},
            "datasets": datasets, "runs": runs, "aggregate": aggregate(runs), "smoke": args.smoke,
            "wall_s": time.perf_counter() - start,
        }
        write_json(out, result)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(markdown(result))
    print(table(result["aggregate"]))
    print(f"wrote {md}")
    bad = [r for r in runs if not (math.isfinite(r["test_acc"]) and 0 <= r["test_acc"] <= 1)]
    if bad:
        raise SystemExit(f"bench.accuracy: {len(bad)} run(s) without a test accuracy in [0, 1], e.g. {bad[0]}")
    return result


if __name__ == "__main__":
    main()
