"""The reference study: diskgnn.train, sampling offline and online, against the in-memory full-neighbour
reference trainer (bench.harness.reference), and its part of docs/accuracy.md."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import torch

from diskgnn.data.format import open_dataset
from diskgnn.train.loop import versions

from ..harness.output import finish, report_markers, write_json
from ..harness.reference import load, reference_train
from .datasets import DATASETS, schedule
from ..harness.seeds import pm, stats
from .runs import HPARAMS, diskgnn_run, hyperparameters, prepared_or_exit, wait_while

MODES = ("reference", "offline", "online")
BOUNDS = {"offline_vs_reference": 1.5, "offline_vs_online": 0.5}  # points of test accuracy, |difference of means|


REFERENCE_MARKERS = report_markers("bench.accuracy", "reference")


def reference_study(args, names: list[str], models: list[str], work: Path, out: Path, md: Path, info: dict,
                    command: str) -> dict:
    """Every dataset x model x seed trained by the reference, then by diskgnn.train offline and online; the
    result written as JSON to `out` after each dataset, and as its section of `md`."""
    pause = Path(args.pause_while) if args.pause_while else None
    start = time.perf_counter()
    runs: list[dict] = []
    datasets: dict[str, dict] = {}
    seeds = list(range(args.seeds))
    result: dict = {}
    for name in names:
        data = prepared_or_exit(name, args, work)
        ds = open_dataset(data)
        epochs, _ = schedule(name, args.epochs)
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
            "hyperparameters": hyperparameters(args),
            "datasets": datasets, "runs": runs, "aggregate": aggregate(runs), "smoke": args.smoke,
            "wall_s": time.perf_counter() - start,
        }
        write_json(out, result)
    # Its own part of the file only: the other studies' sections and the notes between them stay.
    return finish(result, None, table=table(result["aggregate"]), report=md, markers=REFERENCE_MARKERS,
                  section=lambda _: markdown(result))


def aggregate(runs: list[dict]) -> list[dict]:
    """Mean and std of test accuracy per dataset, model and mode; the two differences in points."""
    rows = []
    keys = list(dict.fromkeys((r["dataset"], r["model"]) for r in runs))
    for dataset, model in keys:
        mine = [r for r in runs if r["dataset"] == dataset and r["model"] == model]
        row = {"dataset": dataset, "model": model}
        for mode in MODES:
            row[mode] = stats([r["test_acc"] for r in mine if r["mode"] == mode])
        row["offline_minus_reference"] = 100 * (row["offline"]["mean"] - row["reference"]["mean"])
        # Unpaired: the two trainers draw different dropout masks, so a seed's runs are not paired.
        row["offline_minus_reference_se"] = 100 * math.sqrt(sum(row[m]["std"] ** 2 / row[m]["n"]
                                                                for m in ("offline", "reference")))
        row["offline_minus_online"] = 100 * (row["offline"]["mean"] - row["online"]["mean"])
        row["pass_reference"] = abs(row["offline_minus_reference"]) <= BOUNDS["offline_vs_reference"]
        row["pass_online"] = abs(row["offline_minus_online"]) <= BOUNDS["offline_vs_online"]
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| dataset | model | reference | offline | online | offline − reference (s.e.) | offline − online | "
             "pass (≤ 1.5 / ≤ 0.5) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "pass" if r["pass_reference"] and r["pass_online"] else "FAIL (" + ", ".join(
            name for name, ok in (("reference", r["pass_reference"]), ("online", r["pass_online"])) if not ok) + ")"
        gap = f"{r['offline_minus_reference']:+.2f} ({r['offline_minus_reference_se']:.2f})"
        lines.append(f"| {r['dataset']} | {r['model']} | {pm(r['reference'])} | {pm(r['offline'])} | "
                     f"{pm(r['online'])} | {gap} | {r['offline_minus_online']:+.2f} | {verdict} |")
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

Generated by `python -m bench.accuracy` (issue 5, item 5); do not edit by hand.

Test accuracy in percent, mean ± sample std over {len(seeds)} seed(s) ({", ".join(map(str, seeds))}); the
seed sets the initial weights (identical on all three sides), dropout, and diskgnn's sampling.
Differences are in points, between means; s.e. is the standard error of offline − reference (unpaired).
Bounds: |offline − reference| ≤ {BOUNDS['offline_vs_reference']} and |offline − online| ≤ \
{BOUNDS['offline_vs_online']}.

- **reference**: `bench.harness.reference.reference_train`: whole graph in memory, full batch, every neighbour in
  training and evaluation.
- **offline**: `diskgnn.train --sampling offline` (the default): each epoch sampled (and its cold rows
  packed) ahead; host cache tier {hp["host_cache_fraction"]:.0%} of the feature bytes; evaluation on sampled
  batches (the default `--eval sampled`, fanouts as in training).
- **online**: `diskgnn.train --sampling online`: sampled during training with the same random streams,
  rows read from the feature file; evaluation likewise.

All three select the epoch with the best val accuracy and report its test accuracy. With sampling and
dropout off (fanouts -1,-1, dropout 0), `diskgnn.train` and the reference take the same steps from the
same weights and have the same val accuracy at every epoch (`tests/bench/test_accuracy_smoke.py` checks it on
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
  (see `bench/accuracy/datasets.py`); reader backend `{hp["backend"]}` (page cache: it changes no row's bytes, and
  keeps every online epoch's reads off a shared disk); features as the sources give them (no row
  normalisation).
- Wall time: {result["wall_s"] / 60:.1f} min for {len(result["runs"])} runs.

Datasets (`diskgnn.prepare --undirected --drop-self-loops`, from `../shared/datasets`):

{ds_lines}
"""
