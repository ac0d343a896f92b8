"""Node classification: batches of train nodes, a score per class, cross-entropy, accuracy."""

from __future__ import annotations

import torch.nn.functional as F

from ...errors import DiskgnnError
from .base import Task


class NodeTask(Task):
    name, metric = "node", "acc"
    uncaptured = None  # its loss is the one target/graphed.py computes (the same lines but for padded labels)

    def check(self, ds, data) -> None:
        if ds.split("train").size == 0:
            raise DiskgnnError(f"{data}: the train split is empty")
        if ds.num_classes < 2:
            raise DiskgnnError(f"{data}: needs at least 2 classes to train a classifier")

    def output_dim(self, ds) -> int:
        return ds.num_classes

    def train_items(self, ds) -> int:
        return int(ds.split("train").size)

    def items_text(self, ds) -> str:
        return f"{self.train_items(ds):,} train seeds"

    def splits(self, ds) -> dict[str, int]:
        return {s: int(ds.split(s).size) for s in ("train", "val", "test")}

    def eval_size(self, ds, split: str) -> int:
        return int(ds.split(split).size)

    def eval_sets(self, loader, split: str):
        return loader.ds.split(split), None

    def loss(self, model, out, mb):
        return F.cross_entropy(out.float(), mb.labels), mb.labels.numel()

    def evaluate(self, run, model, split: str) -> float:
        correct, total = run.group.sum(list(self._counts(run, model, split)))
        return correct / max(1, total)

    @staticmethod
    def _counts(run, model, split: str) -> tuple[int, int]:
        """(correct, total) over this rank's seeds of the split."""
        model.eval()
        loader, cfg = run.loader, run.cfg
        if cfg.evaluation.full:
            from ...nn.inference import full_neighbour_logits

            seeds = loader.eval_seeds(split)
            if cfg.eval_max_batches is not None:
                seeds = seeds[: cfg.eval_max_batches * cfg.batch_size]
            if seeds.size == 0:
                return 0, 0
            with run.autocast():
                logits = full_neighbour_logits(model, loader.ds, seeds, loader.workdir / "inference",
                                               batch_size=cfg.batch_size, device=run.device,
                                               features=loader.source,
                                               hag=loader.graph_hag() if run.target.hag else None,
                                               memory=cfg.budget_bytes // 4)
            return int((logits.argmax(1).numpy() == loader.labels[seeds]).sum()), int(seeds.size)
        correct = total = 0
        for mb in loader.evaluation(split):
            with run.autocast():
                pred = model(mb.blocks, run.inputs(mb, False)[0]).argmax(1)
            correct += int((pred == mb.labels).sum())
            total += mb.labels.numel()
        return correct, total

    def result_line(self, run, test: float, best: dict) -> str:
        return (f"test acc {test:.4f} (chance {1 / run.loader.ds.num_classes:.4f}), best val acc "
                f"{best['val_acc']:.4f}")
