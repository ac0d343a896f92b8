"""One training run: its data, plan, loaders, and its train and eval passes.

`Run` opens the data and the feature rows, holds the workdir (locked: one run
at a time; what a killed run left half-written is removed), plans
(train/plan.py), then for offline sampling samples and places epoch 0 and
loads the memory tiers; it makes each pass's loader and runs train passes
(from any batch of an epoch on, for --resume) and eval passes. The epochs,
checkpoints and summary are train/loop.py's.
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
from ..errors import DiskgnnError, UsageError
from ..loading.loaders import OfflineLoader, OnlineLoader
from ..loading.pipeline import StageTime
from ..offline.epochs import EpochFiles, OfflineEpochs
from ..store.store import FeatureStore
from ..store.tiers import load_tiers
from .checkpoints import EpochState
from .config import TrainConfig, save
from .plan import Plan, disk_copies, make_plan, resolve_device

EVAL_EPOCH = {"val": 1 << 20, "test": (1 << 20) + 1}  # sampling stream keys of the eval sets


class Run:
    """One training run: its data, loaders, model and accounting."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.device = resolve_device(cfg)
        self.data = Path(cfg.data) if cfg.data else default_dataset(cfg.progress)
        self.ds = open_dataset(self.data)
        try:
            self.source = feature_source(self.ds, cfg.features)
        except DiskgnnError as e:
            raise UsageError(f"--features {cfg.features}: {e}") from None
        self.workdir = Path(cfg.workdir) if cfg.workdir else defaults.home() / "runs" / self.data.name
        self._lock = _hold_workdir(self.workdir)
        save(cfg, self.workdir / "config.yaml")
        self.labels = np.asarray(self.ds.labels)
        self.train_ids = self.ds.split("train")
        if self.train_ids.size == 0:
            raise DiskgnnError(f"{self.data}: the train split is empty")
        if self.ds.num_classes < 2:
            raise DiskgnnError(f"{self.data}: needs at least 2 classes to train a classifier")
        self.stage_times: dict[str, StageTime] = {}
        # Summed over the trained batches: input rows, and each layer's destinations (input layer first).
        self.trained = {"batches": 0, "input_rows": 0, "destinations": []}
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
        plan = make_plan(ds, self.source, cfg, self.device)
        for line in plan.lines():
            print(line)
        self.read_depth = plan.read_depth
        if cfg.sampling == "online":
            return plan
        self.epochs = OfflineEpochs(ds, self.workdir / "epochs", fanouts=cfg.fanout_list,
                                    batch_size=cfg.batch_size, seed=cfg.seed, replay=cfg.sampling == "replay",
                                    max_blowup=cfg.max_blowup, threads=cfg.threads, pack_memory=plan.pack_memory,
                                    max_batches=cfg.max_batches, features=self.source,
                                    read_ahead=plan.topology_read_ahead, sampler=cfg.sampler_spec,
                                    recent=plan.recent_batches)
        placement = self.epochs.plan_placement(list(plan.tiers.items()))
        copies = disk_copies(cfg, *(int(ds.split(s).size) for s in ("train", "val", "test")))
        plan = plan.placed(placement, self.epochs.samples_bytes(), self.epochs.epoch0_rows(), copies, self.workdir,
                           shutil.disk_usage(self.workdir).free)
        print(plan.placed_line(self.workdir))
        if cfg.eval == "sampled":
            # Now rather than at the first evaluation, where it would pack beside epoch 1's packer.
            for split in ("val", "test"):
                if ds.split(split).size:
                    self.eval_files[split] = self.epochs.eval_files(
                        split, ds.split(split), cfg.eval_fanout_list, EVAL_EPOCH[split], cfg.eval_max_batches)
        self.tiers = load_tiers(ds, placement, self.device, cfg.backend, self.source)
        return plan

    # -- loaders --------------------------------------------------------------------------------
    def train_loader(self, epoch: int):
        cfg = self.cfg
        if cfg.sampling == "online":
            return OnlineLoader(self.ds, self.train_ids, fanouts=cfg.fanout_list, batch_size=cfg.batch_size,
                                seed=cfg.seed, epoch=epoch, labels=self.labels, device=self.device,
                                read_depth=self.read_depth, backend=cfg.backend, features=self.source,
                                sampler=cfg.sampler_spec)
        files = self.epochs.files(epoch)
        return self._offline_loader(files)

    def _offline_loader(self, files) -> OfflineLoader:
        store = FeatureStore(self.ds, self.epochs.placement, files.packs, device=self.device,
                             backend=self.cfg.backend, tiers=self.tiers, features=self.source)
        self.backend = store.backend
        return OfflineLoader(files.samples, store, self.labels, self.device, self.read_depth)

    def eval_loader(self, split: str):
        cfg, seeds = self.cfg, self.ds.split(split)
        if cfg.sampling == "online":
            return OnlineLoader(self.ds, seeds, fanouts=cfg.eval_fanout_list, batch_size=cfg.batch_size,
                                seed=cfg.seed, epoch=EVAL_EPOCH[split], labels=self.labels, device=self.device,
                                read_depth=self.read_depth, backend=cfg.backend, features=self.source,
                                sampler=cfg.sampler_spec)
        return self._offline_loader(self.eval_files[split])

    # -- one pass -------------------------------------------------------------------------------
    def _account(self, pipeline) -> None:
        for name, t in pipeline.times.items():
            acc = self.stage_times.setdefault(name, StageTime())
            acc.busy_s += t.busy_s
            acc.wait_s += t.wait_s
            acc.items += t.items

    def _count(self, work) -> None:
        t = self.trained
        t["batches"] += 1
        t["input_rows"] += int(work.x.shape[0])
        dst = [b.num_dst for b in work.blocks]
        t["destinations"] = [a + b for a, b in zip(t["destinations"], dst)] if t["destinations"] else dst

    def rows_per_batch(self) -> dict:
        """Mean input rows and destinations per layer (input layer first) of the batches trained."""
        n = max(1, self.trained["batches"])
        return {"input": self.trained["input_rows"] / n, "destinations": [d / n for d in self.trained["destinations"]]}

    def train_epoch(self, model, optimizer, loader, order, state: EpochState,
                    checkpoint: Callable[[EpochState], None] | None = None) -> list:
        """Trains the batches `order[state.next_batch:]`, updating `state` after each; calls `checkpoint(state)`
        as often as --checkpoint-every says (not after the epoch's last batch: the epoch end saves anyway).
        Returns the loader's tier statistics."""
        cfg, interval = self.cfg, self.cfg.checkpoint_interval
        model.train()
        # Dropout masks depend on (seed, epoch) and the position in the epoch only, so a resumed run repeats them.
        model.reseed(np.random.SeedSequence([cfg.seed, 17, state.epoch]))
        if state.dropout_rng is not None:
            model.dropout_state = state.dropout_rng
        start = time.perf_counter() - state.elapsed_s
        saved = time.monotonic()
        bar = tqdm(total=len(order), initial=state.next_batch, desc=f"epoch {state.epoch}", unit="batch",
                   disable=not cfg.progress, dynamic_ncols=True, leave=True)
        pipeline = loader.pipeline(order[state.next_batch:])
        with pipeline:
            for i, work in enumerate(pipeline, start=state.next_batch):
                optimizer.zero_grad(set_to_none=True)
                out = model(work.blocks, work.x)
                loss = F.cross_entropy(out, work.labels)
                loss.backward()
                optimizer.step()
                state.next_batch = i + 1
                self._count(work)
                state.loss_sum += loss.item() * work.labels.numel()
                state.seen += work.labels.numel()
                bar.update(1)
                if cfg.progress and (i % 10 == 0 or i == len(order) - 1):
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
        if self.cfg.eval == "none" or self.ds.split(split).size == 0:
            return float("nan")
        model.eval()
        if self.cfg.eval == "full":
            from ..nn.inference import full_neighbour_logits

            seeds = self.ds.split(split)
            if self.cfg.eval_max_batches is not None:
                seeds = seeds[: self.cfg.eval_max_batches * self.cfg.batch_size]
            logits = full_neighbour_logits(model, self.ds, seeds, self.workdir / "inference",
                                           batch_size=self.cfg.batch_size, device=self.device,
                                           features=self.source)
            return float((logits.argmax(1).numpy() == self.labels[seeds]).mean())
        loader = self.eval_loader(split)
        order = np.arange(len(loader))
        if self.cfg.eval_max_batches is not None:
            order = order[: self.cfg.eval_max_batches]
        correct = total = 0
        with loader.pipeline(order) as pipeline:
            for work in pipeline:
                pred = model(work.blocks, work.x).argmax(1)
                correct += int((pred == work.labels).sum())
                total += work.labels.numel()
        return correct / max(1, total)


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
