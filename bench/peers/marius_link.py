"""MariusGNN's link-prediction models ranked after its run, each epoch's, with its own evaluation.

Why not during the run: with the embedding table in the partition buffer, its evaluation builds the
encoder's in-memory graph from the split being evaluated (graph_storage.cpp updateInMemorySubGraph_
reads storage_ptrs_.edges, which setValidationSet/setTestSet point at the held-out edges), so a GNN
encoder aggregates each held-out edge's own endpoints into each other before ranking it: on a 200,000-node
power-law graph, 2 epochs, its val MRR read 0.70 that way and 0.037 over the training edges. Its
`full_graph_evaluation` uses the training edges, and holds the whole table in memory: more than the caps
the comparison trains under. So the run (under the cap) only trains and saves, and `evaluate` ranks each
saved model here with `marius_eval` and `full_graph_evaluation: true`, uncapped, timed apart.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import yaml

from .common import write_text
from .marius import CONFIG, executable, metrics

# The held-out split MariusGNN's evaluation reads as its test set (marius_eval evaluates only that one).
SPLIT_EDGES = {"val": "validation", "test": "test"}


def saved_models(out: Path, epochs: int) -> list[Path]:
    """Each epoch's model dir: checkpoint_<k> after epochs 1..E-1 (Checkpointer::create_checkpoint), the last
    saved into model/ itself (training.save_model)."""
    model = out / "model"
    return [model / f"checkpoint_{k}" for k in range(1, epochs)] + [model]


def _split_as_test(out: Path, split: str) -> Path:
    """A dataset dir whose test edges are `split`'s (links to the export's files)."""
    view = out / f"eval-{split}"
    edges = view / "edges"
    edges.mkdir(parents=True, exist_ok=True)
    name = SPLIT_EDGES[split]
    for link, target in (("train_edges.bin", "train_edges.bin"),
                         ("train_partition_offsets.txt", "train_partition_offsets.txt"),
                         ("test_edges.bin", f"{name}_edges.bin"),
                         ("test_partition_offsets.txt", f"{name}_partition_offsets.txt")):
        if not (edges / link).is_symlink():
            os.symlink(Path("..") / ".." / "edges" / target, edges / link)
    return view


def _eval_config(out: Path, config: dict, model_dir: Path, split: str) -> Path:
    config = yaml.safe_load(yaml.safe_dump(config))  # a deep copy
    stats = config["storage"]["dataset"]
    if split == "val":
        view = _split_as_test(out, split)
        stats.update(dataset_dir=str(view) + "/", num_test=stats["num_valid"], num_valid=-1)
        write_text(view / "dataset.yaml", yaml.safe_dump({**stats, "initialized": False}, sort_keys=False))
    config["storage"].update(model_dir=str(model_dir) + "/", full_graph_evaluation=True)
    config["evaluation"]["epochs_per_eval"] = 1
    path = out / f"eval-{split}-{model_dir.name}.yaml"
    write_text(path, yaml.safe_dump(config, sort_keys=False))
    return path


def evaluate(out, *, timeout=None) -> dict:
    """Val MRR of each epoch's saved model and the last one's test MRR and Hits@10, by `marius_eval` (beside
    the marius_train that trained them), uncapped; where the run died, those of the epochs it saved. `eval_s`:
    the seconds the evaluations took; `eval_why`: why some did not run, where none or not all did."""
    out = Path(out).absolute()
    exe = Path(executable()).with_name("marius_eval")
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        return {"eval_why": f"{exe}: no marius_eval beside marius_train to rank the saved models with"}
    config = yaml.safe_load((out / CONFIG).read_text())
    models = saved_models(out, config["training"]["num_epochs"])
    saved = next((k for k, m in enumerate(models) if not (m / "model.pt").is_file()), len(models))
    row: dict = {"val_mrr_per_epoch": [], "eval_s": 0.0}
    if saved < len(models):
        row["eval_why"] = f"{models[saved]}: no saved model (the run stopped before epoch {saved + 1} ended)"
    for k, model_dir in enumerate(models[:saved], 1):
        for split in ("val", "test") if k == saved else ("val",):
            t0 = time.perf_counter()
            r = subprocess.run([str(exe), str(_eval_config(out, config, model_dir, split))], capture_output=True,
                               text=True, timeout=timeout)
            row["eval_s"] += time.perf_counter() - t0
            found = metrics(r.stdout + r.stderr)
            if r.returncode != 0 or not found.get("test_mrr_per_eval"):
                tail = " | ".join((r.stdout + r.stderr).strip().splitlines()[-3:])
                row["eval_why"] = f"marius_eval on {model_dir} ({split}): exit {r.returncode}: {tail}"
                return row
            if split == "val":
                row["val_mrr_per_epoch"].append(found["test_mrr_per_eval"][-1])
            else:
                row["test_mrr"] = found["test_mrr_per_eval"][-1]
                row["test_hits@10"] = found.get("test_hits@10_per_eval", [None])[-1]
    return row
