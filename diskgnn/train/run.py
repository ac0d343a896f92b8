"""One training run: its data, plan, loaders, and its train and eval passes.

`Run` opens the data and the feature rows, holds the workdir (locked: one run
at a time; what a killed run left half-written is removed), plans
(train/plan.py), then for offline sampling samples and places epoch 0 and
loads the memory tiers; it makes each pass's loader and runs train passes
(from any batch of an epoch on, for --resume) and eval passes. The epochs,
checkpoints and summary are train/loop.py's. Under torchrun each rank is a
Run in its own workdir (WORKDIR/rank-R) with its share of the batches and of
the eval sets (diskgnn/distributed/); its train step is data-parallel (DDP)
or cooperative, and its evaluation is summed over the ranks.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from .. import defaults
from ..data.builtin import default_dataset
from ..data.features import feature_source
from ..data.files import guard_io, remove_stale_temps
from ..data.format import open_dataset
from ..distributed import cooperative
from ..distributed.group import Group
from ..errors import DiskgnnError, UsageError
from ..loading.hag import HagBuilder
from ..loading.loaders import OfflineLoader, OnlineLoader
from ..loading.pipeline import StageTime
from ..offline.epochs import EpochFiles, OfflineEpochs
from ..store.store import FeatureStore
from ..store.tiers import load_tiers
from .checkpoints import EpochState
from .config import TrainConfig, save
from .plan import Plan, disk_copies, make_plan, resolve_device, resolve_precision

EVAL_EPOCH = {"val": 1 << 20, "test": (1 << 20) + 1}  # sampling stream keys of the eval sets


class Run:
    """One training run: its data, loaders, model and accounting."""

    def __init__(self, cfg: TrainConfig, group: Group = Group()):
        self.cfg, self.group = cfg, group
        self.device = resolve_device(cfg)
        self.precision = resolve_precision(cfg, self.device)
        self.data = Path(cfg.data) if cfg.data else default_dataset(cfg.progress)
        self.ds = open_dataset(self.data)
        try:
            self.source = feature_source(self.ds, cfg.features)
        except DiskgnnError as e:
            raise UsageError(f"--features {cfg.features}: {e}") from None
        self.workdir = Path(cfg.workdir) if cfg.workdir else defaults.home() / "runs" / self.data.name
        if group.active:  # one machine's ranks must not share a workdir; nothing else assumes a shared file system
            self.workdir = self.workdir / f"rank-{group.rank}"
        self._lock = _hold_workdir(self.workdir)
        save(cfg, self.workdir / "config.yaml")
        self.labels = np.asarray(self.ds.labels)
        self.train_ids = self.ds.split("train")
        if self.train_ids.size == 0:
            raise DiskgnnError(f"{self.data}: the train split is empty")
        if self.ds.num_classes < 2:
            raise DiskgnnError(f"{self.data}: needs at least 2 classes to train a classifier")
        self.stage_times: dict[str, StageTime] = {}
        # Summed over the trained batches: input rows, each layer's destinations (input layer first), seeds, and
        # the bytes this rank sent to the others (cooperative).
        self.trained = {"batches": 0, "input_rows": 0, "destinations": [], "seeds": 0, "exchange_bytes": 0}
        self.ddp = None  # the model wrapped for data parallelism (--distributed independent)
        # GAT weights every edge: no shared partial sums; the HAG kernels are the CPU's.
        self.hag = HagBuilder(cfg.hag if cfg.model != "gat" and self.device == "cpu" else "off")
        self.epochs: OfflineEpochs | None = None
        self.tiers = None
        self.read_depth: int | None = None  # the plan's, from --read-depth and the budget
        self.eval_files: dict[str, EpochFiles] = {}  # split -> its sampled eval batches, packed once
        self.backend = cfg.backend

    # -- planning -----------------------------------------------------------------------------
    def plan(self) -> Plan:
        """Plans the run (printing the plan), then for offline sampling samples epoch 0, places its hottest
        rows, checks the disk and loads the memory tiers."""
        cfg, ds = self.cfg, self.ds
        group = self.group
        plan = make_plan(ds, self.source, cfg, self.device)
        for line in (plan.lines() + ([self.distributed_line()] if group.active else []) + self.hag_lines()
                     + self.precision_lines()):
            self.say(line)
        self.read_depth = plan.read_depth
        if cfg.sampling == "online":
            return plan
        coop = cfg.distributed == "cooperative"
        self.epochs = OfflineEpochs(ds, self.workdir / "epochs", fanouts=cfg.fanout_list,
                                    batch_size=cfg.batch_size * (group.world if coop else 1),
                                    eval_batch_size=cfg.batch_size,
                                    shard=(0, 1) if coop else (group.rank, group.world),
                                    rows=(lambda samples: cooperative.OwnedRows(samples, group.rank, group.world,
                                                                                cfg.owner, ds.num_nodes))
                                    if coop else None,
                                    seed=cfg.seed, replay=cfg.sampling == "replay",
                                    max_blowup=cfg.max_blowup, threads=cfg.threads, pack_memory=plan.pack_memory,
                                    max_batches=cfg.max_batches, features=self.source,
                                    read_ahead=plan.topology_read_ahead, sampler=cfg.sampler_spec,
                                    recent=plan.recent_batches)
        placement = self.epochs.plan_placement(list(plan.tiers.items()))
        if len(self.epochs.files(0).samples) == 0:
            raise DiskgnnError(f"{self.data}: {self.train_ids.size:,} train seeds make fewer than {group.world} "
                               f"batches of {cfg.batch_size}: every rank needs one (lower --batch-size)")
        copies = disk_copies(cfg, *(int(ds.split(s).size) for s in ("train", "val", "test")))
        plan = plan.placed(placement, self.epochs.samples_bytes(), self.epochs.epoch0_rows(), copies, self.workdir,
                           shutil.disk_usage(self.workdir).free)
        self.say(plan.placed_line(self.workdir))
        if cfg.eval == "sampled":
            # Now rather than at the first evaluation, where it would pack beside epoch 1's packer.
            for split in ("val", "test"):
                if self.eval_seeds(split).size:
                    self.eval_files[split] = self.epochs.eval_files(
                        split, self.eval_seeds(split), cfg.eval_fanout_list, EVAL_EPOCH[split], cfg.eval_max_batches)
        self.tiers = load_tiers(ds, placement, self.device, cfg.backend, self.source)
        return plan

    def say(self, line: str) -> None:
        """Prints on rank 0 only (every rank plans and trains alike)."""
        if self.group.leader:
            print(line, flush=True)

    def distributed_line(self) -> str:
        cfg, g = self.cfg, self.group
        if cfg.distributed == "cooperative":
            step = (f"each step trains one global batch of {g.world} x {cfg.batch_size} seeds, every vertex read and "
                    f"computed by its owner ({cfg.owner} of its id) and exchanged all-to-all")
        else:
            step = (f"each step trains {g.world} batches of {cfg.batch_size} seeds, one per rank (the epoch's last "
                    f"batches beyond a multiple of {g.world} are dropped)")
        return (f"plan: {g.describe()}: --memory-budget {cfg.memory_budget} is this process's (every rank "
                f"plans its own); {step}; evaluation sharded over the ranks; workdir {self.workdir}")

    def precision_lines(self) -> list[str]:
        if self.cfg.precision == "fp32":
            return []
        how = ("the layers under autocast in bfloat16; weights, optimizer state, loss and neighbour sums in fp32"
               + ("; gat's layers stay fp32 (their edge work is their cost, and bf16 moved its attention "
                  "gradients)" if self.cfg.model == "gat" else "")
               if self.precision == "bf16" else "this device has no native bf16")
        return [f"plan: --precision {self.cfg.precision}: {self.precision} ({how})"]

    def autocast(self):
        """The layers' precision: bf16 autocast, or nothing to change."""
        return torch.autocast("cuda" if self.device == "cuda" else "cpu", dtype=torch.bfloat16,
                              enabled=self.precision == "bf16")

    def hag_lines(self) -> list[str]:
        cfg = self.cfg
        if cfg.hag == "off":
            return []
        if self.hag.mode == "off":
            why = "gat weights every edge" if cfg.model == "gat" else "its kernels run on the CPU"
            return [f"plan: --hag {cfg.hag}: not used ({why})"]
        return [f"plan: --hag {cfg.hag}: each block's HAG searched as its batch is decoded, run where it sums "
                + ("any fewer rows" if cfg.hag == "on" else f"at least {defaults.HAG_MIN_SAVING:.0%} fewer rows; "
                   f"no more searching where the first {defaults.HAG_PROBE_BATCHES} batches had none")]

    def eval_seeds(self, split: str) -> np.ndarray:
        """The split's seeds this rank evaluates (every world-th)."""
        return self.ds.split(split)[self.group.rank::self.group.world]

    # -- loaders --------------------------------------------------------------------------------
    def train_loader(self, epoch: int):
        cfg = self.cfg
        if cfg.sampling == "online":
            return OnlineLoader(self.ds, self.train_ids, fanouts=cfg.fanout_list, batch_size=cfg.batch_size,
                                seed=cfg.seed, epoch=epoch, labels=self.labels, device=self.device,
                                read_depth=self.read_depth, backend=cfg.backend, features=self.source,
                                sampler=cfg.sampler_spec, hag=self.hag)
        files = self.epochs.files(epoch)
        if cfg.distributed == "cooperative":
            return self._cooperative_loader(files)
        return self._offline_loader(files)

    def _offline_loader(self, files) -> OfflineLoader:
        store = FeatureStore(self.ds, self.epochs.placement, files.packs, device=self.device,
                             backend=self.cfg.backend, tiers=self.tiers, features=self.source)
        self.backend = store.backend
        return OfflineLoader(files.samples, store, self.labels, self.device, self.read_depth, hag=self.hag)

    def _cooperative_loader(self, files) -> OfflineLoader:
        loader = self._offline_loader(files)
        g, owner, n = self.group, self.cfg.owner, self.ds.num_nodes
        loader.cooperative = lambda batch: cooperative.exchange_plan(
            batch, cooperative.owners(batch.nodes, g.world, owner, n), g.rank, g.world)
        return loader

    def eval_loader(self, split: str):
        cfg, seeds = self.cfg, self.eval_seeds(split)
        if cfg.sampling == "online":
            return OnlineLoader(self.ds, seeds, fanouts=cfg.eval_fanout_list, batch_size=cfg.batch_size,
                                seed=cfg.seed, epoch=EVAL_EPOCH[split], labels=self.labels, device=self.device,
                                read_depth=self.read_depth, backend=cfg.backend, features=self.source,
                                sampler=cfg.sampler_spec, hag=self.hag)
        return self._offline_loader(self.eval_files[split])

    # -- one pass -------------------------------------------------------------------------------
    def _account(self, pipeline) -> None:
        for name, t in pipeline.times.items():
            acc = self.stage_times.setdefault(name, StageTime())
            acc.busy_s += t.busy_s
            acc.wait_s += t.wait_s
            acc.items += t.items

    def _count(self, work, sent: int) -> None:
        t = self.trained
        t["batches"] += 1
        t["input_rows"] += int(work.x.shape[0])
        t["seeds"] += int(work.labels.numel())
        t["exchange_bytes"] += sent
        dst = [b.num_dst for b in work.blocks]
        t["destinations"] = [a + b for a, b in zip(t["destinations"], dst)] if t["destinations"] else dst

    def rows_per_batch(self) -> dict:
        """Mean input rows and destinations per layer (input layer first) of the batches this rank trained."""
        n = max(1, self.trained["batches"])
        return {"input": self.trained["input_rows"] / n, "destinations": [d / n for d in self.trained["destinations"]]}

    def step(self, model, work) -> tuple[torch.Tensor, int]:
        """One batch's forward and backward, gradients summed over the ranks where there are several: the
        loss (this rank's seeds' mean; cooperative: their part of the global batch's mean) and the bytes sent."""
        if work.share is not None:
            with self.autocast():
                logits, sent = cooperative.forward(model, work.share, work.x)
            loss = cooperative.loss(logits.float(), work.labels, work.share)
            loss.backward()
            cooperative.sum_gradients(model)
            return loss * work.share.num_seeds / max(1, work.labels.numel()), sent
        with self.autocast():
            logits = (self.ddp or model)(work.blocks, work.x)
        loss = F.cross_entropy(logits.float(), work.labels)
        loss.backward()  # DDP averages the ranks' gradients as it goes
        return loss, 0

    def train_epoch(self, model, optimizer, loader, order, state: EpochState,
                    checkpoint: Callable[[EpochState], None] | None = None) -> list:
        """Trains the batches `order[state.next_batch:]`, updating `state` after each; calls `checkpoint(state)`
        as often as --checkpoint-every says (not after the epoch's last batch: the epoch end saves anyway).
        Returns the loader's tier statistics."""
        cfg, interval = self.cfg, self.cfg.checkpoint_interval
        model.train()
        # Dropout masks depend on (seed, epoch, rank) and the position in the epoch only, so a resumed run
        # repeats them.
        model.reseed(np.random.SeedSequence([cfg.seed, 17, state.epoch] + ([self.group.rank] if self.group.active
                                                                            else [])))
        if state.dropout_rng is not None:
            model.dropout_state = state.dropout_rng
        start = time.perf_counter() - state.elapsed_s
        saved = time.monotonic()
        bar = tqdm(total=len(order), initial=state.next_batch, desc=f"epoch {state.epoch}", unit="batch",
                   disable=not (cfg.progress and self.group.leader), dynamic_ncols=True, leave=True)
        pipeline = loader.pipeline(order[state.next_batch:])
        with pipeline:
            for i, work in enumerate(pipeline, start=state.next_batch):
                optimizer.zero_grad(set_to_none=True)
                loss, sent = self.step(model, work)
                optimizer.step()
                state.next_batch = i + 1
                self._count(work, sent)
                state.loss_sum += loss.item() * work.labels.numel()
                state.seen += work.labels.numel()
                bar.update(1)
                if cfg.progress and self.group.leader and (i % 10 == 0 or i == len(order) - 1):
                    stats = loader.stats()
                    rows = max(1, sum(s.hits for s in stats))
                    elapsed = max(1e-9, time.perf_counter() - start)
                    bar.set_postfix_str(f"loss {loss.item():.3f} rows from "
                                        + " ".join(f"{s.name} {s.hits / rows:.0%}" for s in stats)
                                        + f"; read {loader.disk_bytes() / elapsed / 1e6:.0f} MB/s")
                if checkpoint is not None and interval is not None and state.next_batch < len(order) and (
                        state.next_batch % interval[1] == 0 if interval[0] == "batches"
                        else time.monotonic() - saved >= interval[1]):
                    state.elapsed_s = time.perf_counter() - start
                    state.dropout_rng = model.dropout_state
                    checkpoint(state)
                    saved = time.monotonic()
        bar.close()
        state.elapsed_s = time.perf_counter() - start
        self._account(pipeline)
        return loader.stats()

    @torch.no_grad()
    def evaluate(self, model, split: str) -> float:
        """Accuracy on the split (under torchrun: each rank's share, summed over the ranks)."""
        if self.cfg.eval == "none" or self.ds.split(split).size == 0:
            return float("nan")
        correct, total = self.group.sum(list(self._evaluate(model, split)))
        return correct / max(1, total)

    def _evaluate(self, model, split: str) -> tuple[int, int]:
        """(correct, total) over this rank's seeds of the split."""
        model.eval()
        if self.cfg.eval == "full":
            from ..nn.inference import full_neighbour_logits

            seeds = self.eval_seeds(split)
            if self.cfg.eval_max_batches is not None:
                seeds = seeds[: self.cfg.eval_max_batches * self.cfg.batch_size]
            if seeds.size == 0:
                return 0, 0
            with self.autocast():
                logits = full_neighbour_logits(model, self.ds, seeds, self.workdir / "inference",
                                               batch_size=self.cfg.batch_size, device=self.device,
                                               features=self.source)
            return int((logits.argmax(1).numpy() == self.labels[seeds]).sum()), int(seeds.size)
        if split not in self.eval_files and self.cfg.sampling != "online":
            return 0, 0  # this rank's share of the split is empty
        loader = self.eval_loader(split)
        order = np.arange(len(loader))
        if self.cfg.eval_max_batches is not None:
            order = order[: self.cfg.eval_max_batches]
        correct = total = 0
        with loader.pipeline(order) as pipeline:
            for work in pipeline:
                with self.autocast():
                    pred = model(work.blocks, work.x).argmax(1)
                correct += int((pred == work.labels).sum())
                total += work.labels.numel()
        return correct, total


def _hold_workdir(workdir: Path):
    """Creates and locks the workdir for this process (two runs in one workdir would overwrite each other's
    files), then removes the temporary files a killed run left there. Returns the lock's file."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        lock = open(workdir / ".lock", "a+")
    except OSError as e:
        raise DiskgnnError(f"--workdir {workdir}: cannot create or write it ({e.strerror})") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        raise DiskgnnError(f"--workdir {workdir}: in use by another run (pid {lock.read().strip() or '?'}); wait "
                           "for it or use another --workdir") from None
    lock.seek(0)
    lock.truncate()
    guard_io(workdir / ".lock", lambda: (lock.write(f"{os.getpid()}\n"), lock.flush()))
    remove_stale_temps(workdir, recursive=True, any_pid=True)
    return lock
