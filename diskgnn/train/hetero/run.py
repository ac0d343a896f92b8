"""A training run on a heterogeneous dataset: the plain Run (train/run.py) over the typed data side (loader.py),
so that train/loop.py's epochs, checkpoints (with the world and the dataset), --resume, --val-every and summary
are one for every graph. What differs is the model's side: RGraphSAGE or R-GCN (nn/hetero.py) over a batch's
blocks per relation, the featureless types' rows (tables.py), and node classification on the target type with
micro/macro-F1 (`TypedNodeTask`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ...distributed.group import Group
from ...nn.hetero import HeteroGNN, class_counts, f1_scores
from ..run import Run
from .loader import HeteroLoader


class TypedNodeTask:
    """Node classification on the target type: accuracy, or micro-F1 where the labels are multi-label; macro-F1
    beside it."""

    name = "node"

    def __init__(self, multilabel: bool):
        self.metric = "micro_f1" if multilabel else "acc"
        self.scores: dict[str, dict] = {}  # each split's last evaluation, every metric

    def summary(self, run) -> dict:
        test = self.scores.get("test", {})
        return {f"test_{k}": v for k, v in test.items() if k not in ("seeds", self.metric)}

    def result_line(self, run, test: float, best: dict) -> str:
        macro = self.scores.get("test", {}).get("macro_f1", float("nan"))
        return f"test {self.metric} {test:.4f}, macro-F1 {macro:.4f}, best val {self.metric} {best['val_acc']:.4f}"


class HeteroRun(Run):
    """One typed run: the loader's batches, the typed model and its tables, the step and the evaluation."""

    def __init__(self, cfg, group: Group = Group()):
        self.cfg, self.group = cfg, group
        self.loader = HeteroLoader(config=cfg, group=group)
        self._model = self.loader.new_model()  # planned with (its parameters), then trained
        self.loader.open(self._model)
        self.device, self.schema, self.tables = self.loader.device, self.loader.schema, self.loader.tables
        self.precision = self.loader.precision
        self.task = TypedNodeTask(self.schema.multilabel)
        self.exchange_bytes = 0
        self.embeddings = None
        self.graphed = None
        self.ddp = None  # data-parallel: the model in DDP (model_and_optimizer)
        self.step_stats = {"line": "eager (a typed run's step is not captured)"}

    def model_and_optimizer(self):
        """The planned model (data-parallel: wrapped in DDP as `ddp`, each rank training its share of the batches, as
        a plain run's) and Adam."""
        model = self._model
        if self.cfg.distribution.independent:
            # a hop leaves the relations it does not follow without a block: their layers' weights get no gradient
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                find_unused_parameters=True)
        return model, torch.optim.Adam(model.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)

    def open_embeddings(self, resumed: dict | None) -> None:
        """--featureless table: the tables, new or rolled back to the checkpoint's (`resumed`), hot rows placed."""
        back = self.tables.open(resumed, self.loader.hot)
        if back:
            self.loader.say(f"plan: --resume: {back:,} table rows rolled back to the checkpoint from the undo "
                            "journals")

    @property
    def has_tables(self) -> bool:
        return bool(self.tables)

    def flush_tables(self) -> dict | None:
        return self.tables.flush() if self.tables else None

    def tables_committed(self) -> None:
        if self.tables:
            self.tables.committed()

    def tables_at_best(self) -> dict:
        return {}

    def tables_summary(self) -> dict:
        return {"embeddings": self._table_stats} if self.tables else {}

    def close_tables(self) -> None:
        self._table_stats = self.tables.stats()  # the summary's, made after the tables are closed
        self.tables.close()

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision.bf16)

    def targets(self, mb) -> torch.Tensor:
        """The seeds' labels as the loss takes them: classes, or 0/1 rows as floats where multi-label."""
        return mb.labels.float() if self.schema.multilabel else mb.labels

    def train_step(self, model, optimizer, mb) -> tuple[torch.Tensor, int, int]:
        """One batch's forward and backward, the tables' rows stepped after it, and the optimizer's step."""
        optimizer.zero_grad(set_to_none=True)
        x, trained = self.tables.inputs(mb.x, mb.nodes, self.device, True)
        with self.autocast():
            out = (self.ddp or model)(mb.hops, x, mb.nodes).float()
        loss = (F.binary_cross_entropy_with_logits(out, self.targets(mb)) if self.schema.multilabel
                else F.cross_entropy(out, mb.labels))
        loss.backward()
        self.tables.step(mb.nodes, trained)
        optimizer.step()
        return loss, 0, mb.num_seeds

    @torch.no_grad()
    def evaluate(self, model: HeteroGNN, split: str) -> float:
        """The task's metric over the split (sampled with --eval-fanouts, or every neighbour under --eval full);
        every metric kept in the task's `scores`. nan where the split is empty or evaluation is off."""
        if self.cfg.evaluation.off or self.loader.eval_size(split) == 0:
            return float("nan")
        model.eval()
        c = self.schema.num_classes
        tp, fp, fn = np.zeros(c, np.int64), np.zeros(c, np.int64), np.zeros(c, np.int64)
        correct = total = 0
        for mb in self.loader.evaluation(split):
            x, _ = self.tables.inputs(mb.x, mb.nodes, self.device, False)
            with self.autocast():
                out = model(mb.hops, x, mb.nodes).float()
            counts = class_counts(out, self.targets(mb), self.schema.multilabel, c)
            tp, fp, fn = tp + counts[0], fp + counts[1], fn + counts[2]
            if not self.schema.multilabel:
                correct += int((out.argmax(1) == mb.labels).sum())
            total += mb.num_seeds
        # each rank evaluated its share of the split's batches: the counts summed are one process's
        sums = self.group.sum([*tp.tolist(), *fp.tolist(), *fn.tolist(), correct, total])
        tp, fp, fn = (np.asarray(sums[i * c:(i + 1) * c], np.int64) for i in range(3))
        correct, total = int(sums[-2]), int(sums[-1])
        micro, macro = f1_scores(tp, fp, fn)
        scores = {"micro_f1": micro, "macro_f1": macro, "seeds": total}
        if not self.schema.multilabel:
            scores["acc"] = correct / max(1, total)
        self.task.scores[split] = scores
        return scores[self.task.metric]
