"""The task protocol: what the trainer asks of what a run learns (node.py and link.py say how)."""

from __future__ import annotations

# sampling stream keys of the eval sets, and of diskgnn.infer --fanouts's batches
EVAL_EPOCH = {"val": 1 << 20, "test": (1 << 20) + 1, "infer": (1 << 20) + 2}


class Task:
    """One task, for one configuration (`cfg`): handed loaders, batches and output rows, never the Run."""

    name = ""
    metric = ""  # the val metric that picks the best epoch, and the summary's name for it
    sized_from_epoch0 = True  # the plan may be made again from epoch 0's train batches (none larger later)
    # Why its step cannot be captured as a CUDA graph (target/graphed.py computes the seeds' cross-entropy, the node
    # task's loss), or None where it can.
    uncaptured = "its loss is not the seeds' cross-entropy, which a captured step computes"

    def __init__(self, cfg):
        self.cfg = cfg
        self.scores: dict[str, dict] = {}  # each split's last evaluation, every metric

    def seeds_per_batch(self) -> int:
        """The most seed nodes one of its batches has (the plan sizes the working set for it)."""
        return self.cfg.batch_size

    def pilot_rows(self, ds) -> int | None:
        """A batch's input rows at most, measured before any work where the fanouts' bound is far off and the
        plan cannot wait for epoch 0 (None: the bound)."""
        return None

    def link_spec(self):
        """How its batches are cut from edges (offline/link_batches.py's LinkSpec), or None."""
        return None

    def check(self, ds, data) -> None:
        """A DiskgnnError (one line naming `data`) where the dataset cannot be trained for this task."""

    def output_dim(self, ds) -> int:
        """The model's output width."""
        raise NotImplementedError

    def train_items(self, ds) -> int:
        """What an epoch's batches are cut from (train nodes, edges)."""
        raise NotImplementedError

    def items_text(self, ds) -> str:
        """train_items in words, for a refusal."""
        raise NotImplementedError

    def splits(self, ds) -> dict[str, int]:
        """The plan's line of splits: name -> items."""
        raise NotImplementedError

    def eval_size(self, ds, split: str) -> int:
        """Items of a val or test split (0: none)."""
        raise NotImplementedError

    def eval_batch(self) -> int:
        """Items (seeds, held-out edges) an eval batch holds."""
        return self.cfg.batch_size

    def eval_sets(self, loader, split: str):
        """(seeds, batches) the split's eval batches are sampled from: a node split's seeds, or batches computed
        otherwise (OfflineEpochs.eval_files takes one of the two)."""
        raise NotImplementedError

    def pass_batches(self, loader, split_or_epoch):
        """What a pass's MiniBatches carry beside their sampled batch (MiniBatch.link), or None."""
        return None

    def workload_text(self) -> str:
        """What the plan's workload line adds for this task."""
        return ""

    def head(self, model) -> None:
        """Adds the task's own modules to the model (optimised and checkpointed with it)."""

    def loss(self, model, out, mb):
        """(the batch's loss, what it is a mean over) from the model's output rows `out`."""
        raise NotImplementedError

    def eval_sums(self, model, out, mb):
        """What an eval batch adds to its split's sums (a float64 array), from the model's output rows `out` (the
        run computes them); `mb` None: the zeros the sums start from."""
        raise NotImplementedError

    def score(self, sums: list, split: str) -> float:
        """The metric of a split from its sums over every batch and rank; every metric kept in `scores`."""
        raise NotImplementedError

    def summary(self) -> dict:
        """The summary's fields beside the metric's."""
        return {}

    def result_line(self, test: float, best: dict) -> str:
        """The final line's result part."""
        raise NotImplementedError
