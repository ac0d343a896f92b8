"""Node classification: batches of train nodes, a score per class, cross-entropy, accuracy.

On a typed graph the nodes are the target type's; its labels may be multi-label (a 0/1 row of classes per node:
binary cross-entropy, a class predicted where its logit is positive), scored by micro-F1, and a typed run reports
macro-F1 beside its metric (HGB's two).
"""

from __future__ import annotations

import numpy as np
import torch.nn.functional as F

from ...errors import DiskgnnError
from ...nn.hetero import class_counts, f1_scores
from .base import Task


class NodeTask(Task):
    name, metric = "node", "acc"
    uncaptured = None  # its loss is the one target/graphed.py computes (the same lines but for padded labels)
    typed = multilabel = False  # the dataset's (check)

    def check(self, ds, data) -> None:
        if ds.split("train").size == 0:
            raise DiskgnnError(f"{data}: the train split is empty")
        if ds.schema.num_classes < 2:
            raise DiskgnnError(f"{data}: needs at least 2 classes to train a classifier")
        self.typed, self.multilabel = ds.typed, ds.schema.multilabel
        self.metric = "micro_f1" if self.multilabel else "acc"
        self.scores: dict[str, dict] = {}  # a typed run's: each split's last evaluation, every metric

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
        if self.multilabel:
            return F.binary_cross_entropy_with_logits(out.float(), mb.labels.float()), mb.labels.shape[0]
        return F.cross_entropy(out.float(), mb.labels), mb.labels.numel()

    def evaluate(self, run, model, split: str) -> float:
        if self.typed:
            return self._typed_scores(run, model, split)
        correct, total = run.group.sum(list(self._counts(run, model, split)))
        return correct / max(1, total)

    def _typed_scores(self, run, model, split: str) -> float:
        """The metric over the split's target nodes (sampled with --eval-fanouts, or every neighbour under --eval
        full), summed over the ranks; every metric kept in `scores`."""
        model.eval()
        c = run.loader.ds.schema.num_classes
        tp, fp, fn = np.zeros(c, np.int64), np.zeros(c, np.int64), np.zeros(c, np.int64)
        correct = total = 0
        for mb in run.loader.evaluation(split):
            with run.autocast():
                out = model(mb.blocks, run.inputs(mb, False)[0], mb.rows).float()
            counts = class_counts(out, mb.labels.float() if self.multilabel else mb.labels, self.multilabel, c)
            tp, fp, fn = tp + counts[0], fp + counts[1], fn + counts[2]
            if not self.multilabel:
                correct += int((out.argmax(1) == mb.labels).sum())
            total += mb.num_seeds
        # each rank evaluated its share of the split's batches: the counts summed are one process's
        sums = run.group.sum([*tp.tolist(), *fp.tolist(), *fn.tolist(), correct, total])
        tp, fp, fn = (np.asarray(sums[i * c:(i + 1) * c], np.int64) for i in range(3))
        micro, macro = f1_scores(tp, fp, fn)
        scores = {"micro_f1": micro, "macro_f1": macro, "seeds": int(sums[-1])}
        if not self.multilabel:
            scores["acc"] = sums[-2] / max(1, sums[-1])
        self.scores[split] = scores
        return scores[self.metric]

    def summary(self, run) -> dict:
        test = self.scores.get("test", {}) if self.typed else {}
        return {f"test_{k}": v for k, v in test.items() if k not in ("seeds", self.metric)}

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
        if self.typed:
            macro = self.scores.get("test", {}).get("macro_f1", float("nan"))
            return (f"test {self.metric} {test:.4f}, macro-F1 {macro:.4f}, best val {self.metric} "
                    f"{best['val_acc']:.4f}")
        return (f"test acc {test:.4f} (chance {1 / run.loader.ds.num_classes:.4f}), best val acc "
                f"{best['val_acc']:.4f}")
