"""Node classification: batches of train nodes, a score per class, cross-entropy, accuracy.

On a typed graph the nodes are the target type's; its labels may be multi-label (a 0/1 row of classes per node:
binary cross-entropy, a class predicted where its logit is positive), scored by micro-F1. Every run's summary has
the test micro- and macro-F1 beside its metric (HGB's two), a typed run's final line its macro-F1.
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
        self.typed, self.multilabel, self.classes = ds.typed, ds.schema.multilabel, ds.schema.num_classes
        self.metric = "micro_f1" if self.multilabel else "acc"

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

    def eval_sums(self, model, out, mb):
        """Per class true positives, false positives and false negatives, the correct and all predictions."""
        c = self.classes
        if mb is None:
            return np.zeros(3 * c + 2)
        counts = class_counts(out, mb.labels.float() if self.multilabel else mb.labels, self.multilabel, c)
        correct = 0 if self.multilabel else int((out.argmax(1) == mb.labels).sum())
        return np.concatenate([*counts, [correct, mb.labels.shape[0]]]).astype(np.float64)

    def score(self, sums: list, split: str) -> float:
        c = self.classes
        tp, fp, fn = (np.asarray(sums[i * c:(i + 1) * c], np.int64) for i in range(3))
        micro, macro = f1_scores(tp, fp, fn)
        scores = {"micro_f1": micro, "macro_f1": macro, "seeds": int(sums[-1])}
        if not self.multilabel:
            scores["acc"] = sums[-2] / max(1, sums[-1])
        self.scores[split] = scores
        return scores[self.metric]

    def summary(self) -> dict:
        return {f"test_{k}": v for k, v in self.scores.get("test", {}).items() if k not in ("seeds", self.metric)}

    def result_line(self, test: float, best: dict) -> str:
        if self.typed:
            macro = self.scores.get("test", {}).get("macro_f1", float("nan"))
            return (f"test {self.metric} {test:.4f}, macro-F1 {macro:.4f}, best val {self.metric} "
                    f"{best['val_acc']:.4f}")
        return (f"test acc {test:.4f} (chance {1 / self.classes:.4f}), best val acc "
                f"{best['val_acc']:.4f}")
