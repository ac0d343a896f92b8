"""One training run: the model side of it, over a Loader (train/loader.py) that plans and yields the batches.

`Run` takes a Loader (data, workdir, plan, offline epochs, memory tiers,
passes) and adds what training needs: the precision, the train step (plain,
data-parallel with DDP, or cooperative), train passes that can start mid-epoch
(for --resume) and checkpoint inside an epoch, and evaluation. The epochs,
checkpoints and summary are train/loop.py's. Under torchrun each rank is a
Run in its own workdir (WORKDIR/rank-R) with its share of the batches and of
the eval sets (diskgnn/distributed/); its evaluation is summed over the ranks.
A typed dataset's Run is the same over the same Loader (which sizes a typed
plan with the typed model it makes): the model is called as a plain one is
(`model(mb.blocks, x, mb.rows)`), the task is the node task on the target
type, and its featureless types' tables are the run's tables
(train/tables.py), as --embeddings' table is a plain run's.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from ..distributed import cooperative
from ..distributed.group import Group
from ..errors import DiskgnnError
from ..loading.loaders import MiniBatch
from ..nn.inference import full_neighbour_logits
from ..target.graphed import CaptureFailed, GraphedStep
from ..units import Every
from .checkpoints import EpochState
from .config import TrainConfig
from .loader import Loader
from .model import new_model
from .passes import Pass
from .modes import Precision
from .tables import NodeTable


class Run:
    """One training run: its loader, its precision and passes, and the bytes its steps exchanged."""

    def __init__(self, cfg: TrainConfig, group: Group = Group()):
        self.cfg, self.group = cfg, group
        self.loader = Loader(config=cfg, group=group, steps_tables=True, steps_captured=True).open()
        self.typed = self.loader.typed
        self.device, self.target, self.task = self.loader.device, self.loader.target, self.loader.task
        self.precision = self.loader.plan.precision
        if self.precision.bf16:
            self.target.use_bf16()
        for line in self.precision_lines():
            self.loader.say(line)
        self.exchange_bytes = 0  # sent to the other ranks by this rank's cooperative steps
        self.ddp = None  # the model wrapped for data parallelism (--distributed independent)
        # the rows it learns in tables (open_embeddings): --embeddings' table, a typed run's featureless types'
        self.tables = self.loader.tables or (NodeTable(cfg, self.loader) if cfg.embeddings else None)
        self.graphed: GraphedStep | None = None  # the captured step, where the plan took one (model_and_optimizer)
        self.step_stats = {"line": self.loader.plan.step.line}  # summary.json's "step": captures, replays, eager

    def model_and_optimizer(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """The run's model, seeded, on its device (with --task link its decoder as a submodule: optimised and
        checkpointed with the GNN; data-parallel runs wrap it in DDP as `ddp`), and the target's optimizer."""
        cfg, ds = self.cfg, self.loader.ds
        if self.typed:
            model = self.loader.model  # made seeded, and the plan sized with it
        else:
            torch.manual_seed(cfg.seed)
            model = new_model(cfg, ds).to(self.device)
        if cfg.distribution.independent:
            # a typed hop leaves the relations it does not follow without a block: their weights get no gradient
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=self.target.device_ids(self.group.local_rank), find_unused_parameters=self.typed)
        graphed = self.loader.plan.step.graphed
        optimizer = self.target.optimizer(model.parameters(), cfg.lr, cfg.weight_decay, capturable=graphed)
        if graphed:
            self.graphed = GraphedStep(model, optimizer, self.device, self.precision.bf16, capture=True,
                                       stats=self.step_stats)
        return model, optimizer

    def open_embeddings(self, resumed: dict | None) -> None:
        """The run's tables, new (a fresh run) or rolled back to the checkpoint's (`resumed`), hot rows placed."""
        if self.tables:
            self.tables.open(resumed)

    @property
    def has_tables(self) -> bool:
        """Whether the run learns tables of rows (--embeddings; a typed run's featureless types' tables)."""
        return bool(self.tables)

    def flush_tables(self) -> dict | None:
        """The tables on disk as of the checkpoint about to be saved; what last.pt keeps of them (None: none)."""
        return self.tables.flush() if self.tables else None

    def tables_committed(self) -> None:
        """The checkpoint is saved: the tables' journals start over."""
        if self.tables:
            self.tables.committed()

    def tables_at_best(self) -> dict:
        """What best.pt keeps of the tables (diskgnn.infer checks --embeddings' generation)."""
        return self.tables.at_best() if self.tables else {}

    def tables_summary(self) -> dict:
        return self.tables.summary() if self.tables else {}

    def close_tables(self) -> None:
        if self.tables:
            self.tables.close()

    def inputs(self, mb, train: bool):
        """The model's input rows: the batch's, with (or as) its tables' rows; and for a train step what the tables'
        `step` takes after the backward pass."""
        return self.tables.inputs(mb, train) if self.tables else (mb.x, None)

    def _embedding_step(self, mb, trained) -> None:
        if trained is not None:
            self.tables.step(mb, trained)

    def precision_lines(self) -> list[str]:
        if self.cfg.precision_asked is Precision.FP32:
            return []
        how = ("the layers under autocast in bfloat16; weights, optimizer state and loss in fp32, neighbour sums "
               "accumulated in fp32"
               + ("; gat's layers stay fp32 (their edge work is their cost, and bf16 moved its attention "
                  "gradients)" if self.cfg.weighs_every_edge else "")
               if self.precision.bf16 else "this device has no native bf16")
        if self.precision.bf16:
            how += self.target.bf16_note()
        return [f"plan: --precision {self.cfg.precision}: {self.precision} ({how})"]

    def autocast(self):
        """The layers' precision: bf16 autocast, or nothing to change."""
        return self.target.autocast(self.precision.bf16)

    def step(self, model, mb) -> tuple[torch.Tensor, int, int]:
        """One batch's forward and backward, gradients summed over the ranks where there are several: the
        loss (this rank's seeds' mean; cooperative: their part of the global batch's mean), the bytes sent and
        what the loss is a mean over (seeds, or --task link's edges)."""
        x, trained = self.inputs(mb, True)
        if mb.share is not None:
            with self.autocast():
                logits, sent = cooperative.forward(model, mb.share, mb.x, mb.salt)
            loss = cooperative.loss(logits.float(), mb.labels, mb.share)
            loss.backward()
            cooperative.sum_gradients(model)
            return loss * mb.share.num_seeds / max(1, mb.labels.numel()), sent, mb.labels.numel()
        with self.autocast():
            out = (self.ddp or model)(mb.blocks, x, mb.rows)
        loss, items = self.task.loss(model, out, mb)
        loss.backward()  # DDP averages the ranks' gradients as it goes
        self._embedding_step(mb, trained)
        return loss, 0, items

    def train_step(self, model, optimizer, mb) -> tuple[torch.Tensor, int, int]:
        """One batch trained, the optimizer's step included: by the captured step where the plan took one and
        the batch came with its record (target/graphed.py), else eagerly (`step`). A capture that fails ends the
        captured steps: with --cuda-graphs on the run stops saying why, with auto it says why once and goes on."""
        if self.graphed is not None and mb.record is not None:
            try:
                loss, items = self.graphed(mb)
                return loss, 0, items
            except CaptureFailed as e:
                if self.loader.plan.step.required:
                    raise DiskgnnError(f"--cuda-graphs on: the train step could not be captured: {e}") from None
                self.loader.say(f"plan: step: eager from here on: its capture failed ({e})")
                self.step_stats["capture_failed"] = str(e)
                self.graphed = None
                self.loader.eager_steps()
        if mb.record is not None and not mb.blocks:  # sent for the captured step, which makes its own
            mb.blocks = self.loader.train_target.blocks_of(mb)
        optimizer.zero_grad(set_to_none=True)
        loss, sent, items = self.step(model, mb)
        optimizer.step()
        return loss, sent, items

    def train_epoch(self, model, optimizer, state: EpochState,
                    checkpoint: Callable[[EpochState], None] | None = None,
                    validate: Callable[[EpochState], None] | None = None) -> None:
        """Trains epoch `state.epoch` from batch `state.next_batch` on, updating `state` after each; calls
        `checkpoint(state)` as often as --checkpoint-every says and `validate(state)` as often as --val-every says
        (neither after the epoch's last batch: the epoch end does both). A validation stops the pass first (its
        pipeline's memory is the evaluation's, as at an epoch end), and a new pass goes on from the next batch;
        its time is not the epoch's."""
        cfg = self.cfg
        # Dropout masks depend on (seed, epoch), the batch and the node only (nn/dropout.py), so a resumed run
        # repeats them, and every rank draws the ones one process would for its rows.
        model.reseed(np.random.SeedSequence([cfg.seed, 17, state.epoch]))
        if state.dropout_rng is not None:
            model.dropout_state = state.dropout_rng
        start = time.perf_counter() - state.elapsed_s
        saves, checks = Every(cfg.checkpoint_interval if checkpoint else None), Every(
            cfg.val_interval if validate else None)
        # The loss is summed on the device and read at the progress bar's pace: reading it every batch would
        # make the host wait for each step on a GPU.
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)

        def settle():
            state.loss_sum += float(loss_sum)
            loss_sum.zero_()
            state.elapsed_s = time.perf_counter() - start
            state.dropout_rng = model.dropout_state

        bar = None
        while True:
            epoch = self.loader.epoch(state.epoch, state.next_batch)
            bar = bar or tqdm(total=len(epoch), initial=state.next_batch, desc=f"epoch {state.epoch}", unit="batch",
                              disable=not (cfg.progress and self.group.leader), dynamic_ncols=True, leave=True)
            model.train()
            if not self._train_pass(model, optimizer, epoch, state, loss_sum, bar, start, saves, checks, settle,
                                    checkpoint):
                break
            settle()
            validate(state)
            checks.done()
            start = time.perf_counter() - state.elapsed_s
        settle()
        bar.close()

    def _train_pass(self, model, optimizer, epoch: Pass, state: EpochState, loss_sum, bar, start: float,
                    saves: Every, checks: Every, settle, checkpoint) -> bool:
        """Trains the pass's batches until its end (False) or until a validation is due (True)."""
        cfg = self.cfg
        for i, mb in enumerate(epoch, start=state.next_batch):
            loss, sent, items = self.train_step(model, optimizer, mb)
            state.next_batch = i + 1
            self.exchange_bytes += sent
            loss_sum += loss.detach().double() * items
            state.seen += items
            bar.update(1)
            if cfg.progress and self.group.leader and (i % 10 == 0 or i == len(epoch) - 1):
                stats = epoch.stats()
                rows = max(1, sum(s.hits for s in stats))
                elapsed = max(1e-9, time.perf_counter() - start)
                bar.set_postfix_str(f"loss {loss.item():.3f} rows from "
                                    + " ".join(f"{s.name} {s.hits / rows:.0%}" for s in stats)
                                    + f"; read {epoch.disk_bytes() / elapsed / 1e6:.0f} MB/s")
            if state.next_batch < len(epoch) and saves.due(state.next_batch):
                settle()
                checkpoint(state)
                saves.done()
            if state.next_batch < len(epoch) and checks.due(state.next_batch):
                return True
        return False

    @torch.no_grad()
    def evaluate(self, model, split: str) -> float:
        """The task's metric on the split (accuracy, micro-F1, or --task link's MRR), every metric kept in the task's
        scores: the task is handed each eval batch's output rows and sums them; under torchrun each rank sums its
        share of the batches, then the ranks' sums are summed."""
        if self.cfg.evaluation.off or self.loader.eval_size(split) == 0:
            return float("nan")
        model.eval()
        sums = self.task.eval_sums(model, None, None)
        for out, mb in self._eval_outputs(model, split):
            sums += self.task.eval_sums(model, out, mb)
        return self.task.score(self.group.sum(sums.tolist()), split)

    def _eval_outputs(self, model, split: str):
        """(output rows, batch) of each of the split's eval batches; under --eval full on a plain graph, one of the
        seeds' full-neighbour logits (nn/inference.py) and their labels."""
        loader, cfg = self.loader, self.cfg
        if self.typed or not cfg.evaluation.full:
            for mb in loader.evaluation(split):
                with self.autocast():
                    out = model(mb.blocks, self.inputs(mb, False)[0], mb.rows)
                yield out.float(), mb
            return
        seeds = loader.eval_seeds(split)
        if cfg.eval_max_batches is not None:
            seeds = seeds[: cfg.eval_max_batches * cfg.batch_size]
        if seeds.size:
            with self.autocast():
                logits = full_neighbour_logits(model, loader.ds, seeds, loader.workdir / "inference",
                                               batch_size=cfg.batch_size, device=self.device, features=loader.source,
                                               hag=loader.graph_hag() if self.target.hag else None,
                                               memory=cfg.budget_bytes // 4)
            yield logits.float(), MiniBatch(None, [], torch.from_numpy(loader.labels[seeds]))
