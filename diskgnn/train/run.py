"""One training run: its loaders, the epochs, evaluation, checkpoints and the summary.

`Run` opens the data and the feature rows, plans (train/plan.py), then for
offline sampling samples and places epoch 0 and loads the memory tiers; it
makes each pass's loader and runs train and eval passes. `train` drives the
epochs (the next one sampled and packed in the background), keeps the best
and last checkpoints, and writes summary.json.
"""

from __future__ import annotations

import json
import platform
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from .. import defaults
from ..build import __version__, native_info
from ..data.builtin import default_dataset
from ..data.features import feature_source
from ..data.format import open_dataset
from ..errors import DiskgnnError, raise_if_interrupted
from ..loading.loaders import OfflineLoader, OnlineLoader
from ..loading.pipeline import StageTime
from ..memory import AnonPeak, limit_malloc_arenas, peak_rss_bytes
from ..nn.models import GNN
from ..offline.epochs import EpochFiles, OfflineEpochs
from ..store.store import FeatureStore
from ..store.tiers import load_tiers
from ..units import format_size
from .checkpoints import Checkpoints
from .config import TrainConfig, save
from .plan import Plan, make_plan, resolve_device

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
            raise DiskgnnError(f"--features {cfg.features}: {e}") from None
        self.workdir = Path(cfg.workdir) if cfg.workdir else defaults.home() / "runs" / self.data.name
        self.workdir.mkdir(parents=True, exist_ok=True)
        save(cfg, self.workdir / "config.yaml")
        self.labels = np.asarray(self.ds.labels)
        self.train_ids = self.ds.split("train")
        if self.train_ids.size == 0:
            raise DiskgnnError(f"{self.data}: the train split is empty")
        if self.ds.num_classes < 2:
            raise DiskgnnError(f"{self.data}: needs at least 2 classes to train a classifier")
        self.stage_times: dict[str, StageTime] = {}
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
                                    read_ahead=plan.topology_read_ahead)
        placement = self.epochs.plan_placement(list(plan.tiers.items()))
        # Fresh epochs: the next epoch's files are made while this one trains.
        copies = 1 if cfg.sampling == "replay" or cfg.epochs == 1 else 2
        if cfg.eval == "sampled":
            copies += (ds.split("val").size + ds.split("test").size) / max(1, self.train_ids.size)
        plan = plan.placed(placement, self.epochs.samples_bytes(), self.epochs.cold_bytes(), copies, self.workdir,
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
                                read_depth=self.read_depth, backend=cfg.backend, features=self.source)
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
                                read_depth=self.read_depth, backend=cfg.backend, features=self.source)
        return self._offline_loader(self.eval_files[split])

    # -- one pass -------------------------------------------------------------------------------
    def _account(self, pipeline) -> None:
        for name, t in pipeline.times.items():
            acc = self.stage_times.setdefault(name, StageTime())
            acc.busy_s += t.busy_s
            acc.wait_s += t.wait_s
            acc.items += t.items

    def train_epoch(self, model, optimizer, loader, order, epoch: int) -> tuple[float, float, list]:
        cfg = self.cfg
        if cfg.max_batches is not None:
            order = order[: cfg.max_batches]
        model.train()
        # Dropout masks depend on (seed, epoch) only, so a resumed run repeats them.
        model.reseed(np.random.SeedSequence([cfg.seed, 17, epoch]))
        total_loss, seen = 0.0, 0
        start = time.perf_counter()
        bar = tqdm(total=len(order), desc=f"epoch {epoch}", unit="batch", disable=not cfg.progress,
                   dynamic_ncols=True, leave=True)
        pipeline = loader.pipeline(order)
        with pipeline:
            for i, work in enumerate(pipeline):
                optimizer.zero_grad(set_to_none=True)
                out = model(work.blocks, work.x)
                loss = F.cross_entropy(out, work.labels)
                loss.backward()
                optimizer.step()
                total_loss += loss.item() * work.labels.numel()
                seen += work.labels.numel()
                bar.update(1)
                if cfg.progress and (i % 10 == 0 or i == len(order) - 1):
                    stats = loader.stats()
                    rows = max(1, sum(s.hits for s in stats))
                    elapsed = max(1e-9, time.perf_counter() - start)
                    bar.set_postfix_str(f"loss {loss.item():.3f} "
                                        + " ".join(f"{s.name} {s.hits / rows:.0%}" for s in stats)
                                        + f" disk {loader.disk_bytes() / elapsed / 1e6:.0f} MB/s")
        bar.close()
        self._account(pipeline)
        return time.perf_counter() - start, total_loss / max(1, seen), loader.stats()

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


def versions() -> dict:
    return {"diskgnn": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "native": native_info()}


def train(cfg: TrainConfig) -> dict:
    """Runs the whole job; returns the summary (also written to the workdir)."""
    limit_malloc_arenas()
    with AnonPeak() as memory:
        return _train(cfg, memory)


def _train(cfg: TrainConfig, memory: AnonPeak) -> dict:
    run = Run(cfg)
    plan = run.plan()
    ds = run.ds
    torch.manual_seed(cfg.seed)
    model = GNN(cfg.model, ds.feature_dim, cfg.hidden, ds.num_classes, len(cfg.fanout_list), cfg.dropout,
                cfg.heads).to(run.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    checkpoints = Checkpoints(run.workdir / "checkpoints")
    history = {"epoch_times_s": [], "train_loss": [], "val_acc_per_epoch": []}
    best = {"val_acc": -1.0, "epoch": -1}
    first = 0
    if cfg.resume:
        state = checkpoints.load("last")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        history, best, first = state["history"], state["best"], state["epoch"] + 1
        print(f"train: resuming after epoch {state['epoch']} from {checkpoints.dir / 'last.pt'}")
    tiers: dict[str, dict] = {}
    disk_bytes = 0
    try:
        for epoch in range(first, cfg.epochs):
            raise_if_interrupted()
            loader = run.train_loader(epoch)
            if run.epochs is not None and epoch + 1 < cfg.epochs:
                run.epochs.prefetch(epoch + 1)
            order = run.epochs.order(epoch, len(loader)) if run.epochs else np.arange(len(loader))
            seconds, loss, stats = run.train_epoch(model, optimizer, loader, order, epoch)
            for s in stats:
                t = tiers.setdefault(s.name, {"hits": 0, "bytes": 0})
                t["hits"] += s.hits
                t["bytes"] += s.bytes
            disk_bytes += loader.disk_bytes()
            val = run.evaluate(model, "val")
            history["epoch_times_s"].append(seconds)
            history["train_loss"].append(loss)
            history["val_acc_per_epoch"].append(val)
            print(f"epoch {epoch}: {seconds:.1f} s, loss {loss:.4f}, val acc {val:.4f}", flush=True)
            if not val <= best["val_acc"]:  # also true for the first epoch and when eval is off (nan)
                best = {"val_acc": val, "epoch": epoch}
                checkpoints.save("best", {"model": model.state_dict(), "epoch": epoch})
            checkpoints.save("last", {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                      "epoch": epoch, "history": history, "best": best})
            if run.epochs is not None and epoch + 1 < cfg.epochs:
                run.epochs.release(epoch)
        if best["epoch"] >= 0:
            model.load_state_dict(checkpoints.load("best")["model"])
        test = run.evaluate(model, "test")
    finally:
        if run.epochs is not None:
            run.epochs.close()
    rows = sum(t["hits"] for t in tiers.values())
    for t in tiers.values():
        t["hit_rate"] = t["hits"] / rows if rows else 0.0
    summary = {
        "epoch_times_s": history["epoch_times_s"],
        "sample_s": run.epochs.sample_s if run.epochs else 0.0,
        "pack_s": run.epochs.pack_s if run.epochs else 0.0,
        "offline": dict(run.epochs.phases) if run.epochs else {},
        "stage_times_s": {name: {"busy_s": t.busy_s, "wait_s": t.wait_s, "items": t.items}
                          for name, t in run.stage_times.items()},
        "bottleneck": max(run.stage_times, key=lambda n: run.stage_times[n].busy_s) if run.stage_times else None,
        "tiers": tiers,
        "disk_bytes_read": disk_bytes,
        "features": run.source.name,
        "feature_row_bytes": run.source.row_bytes,
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_anon_bytes": memory.peak_bytes,
        "memory_budget_bytes": plan.budget,
        "backend": run.backend,
        "device": run.device,
        "train_loss": history["train_loss"],
        "val_acc_per_epoch": history["val_acc_per_epoch"],
        "val_acc": best["val_acc"],
        "best_epoch": best["epoch"],
        "test_acc": test,
        "dataset": str(run.data),
        "plan": plan.to_dict(),
        "versions": versions(),
        "config": cfg.to_dict(),
    }
    text = json.dumps(summary, indent=2, default=float)
    (run.workdir / "summary.json").write_text(text + "\n")
    if cfg.summary_json:
        out = Path(cfg.summary_json)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(out)
    chance = 1 / ds.num_classes
    print(f"train: done: test acc {test:.4f} (chance {chance:.4f}), best val acc {best['val_acc']:.4f} "
          f"at epoch {best['epoch']}; epoch times " + ", ".join(f"{t:.1f}" for t in history["epoch_times_s"])
          + f" s; sample {summary['sample_s']:.1f} s, pack {summary['pack_s']:.1f} s; bottleneck "
          f"{summary['bottleneck']}; peak memory {format_size(summary['peak_anon_bytes'])} anonymous (budget "
          f"{cfg.memory_budget}), {format_size(summary['peak_rss_bytes'])} with mapped files; summary in "
          f"{run.workdir / 'summary.json'}")
    return summary
