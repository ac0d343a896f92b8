"""`python -m diskgnn.train`: plans, samples, packs and trains a GNN out of core.

With no arguments it prepares the built-in synthetic dataset once (cached
under $DISKGNN_HOME, default ~/.cache/diskgnn) and trains on it end to end.

The run: resolve the configuration (defaults < --config FILE.yaml < flags)
-> the feature rows (--features: features.bin or a stored quantized variant,
whose code rows everything below the model moves)
-> plan (sizes, budgets; impossible settings refused) -> sample epoch 0 and
place the hottest rows in the memory tiers (expected hit rates printed) ->
pack -> per epoch, the pipeline (sample -> read -> assemble -> copy -> train
step) while the next epoch is sampled and packed in the background -> eval
-> checkpoints (best and last) -> summary JSON. Everything the run writes
lives in its workdir.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import xxhash
from tqdm import tqdm

from . import __version__
from .config import TrainConfig, resolve, save
from .epochs import EpochFiles, OfflineEpochs
from .errors import DiskgnnError, raise_if_interrupted, run_cli
from .format import Dataset, FeatureSource, open_dataset, read_manifest
from .loader import OfflineLoader, OnlineLoader
from .memory import AnonPeak, limit_malloc_arenas, peak_rss_bytes
from .models import GNN, activation_bytes, layer_dims
from .pipeline import StageTime
from .sample import topology_bytes
from .store import FeatureStore, load_tiers
from .units import format_size, parse_size

# The built-in dataset: 1 GiB of features, more than the default host cache.
DEFAULT_SYNTHETIC = dict(nodes=2_000_000, feat_dim=128, avg_degree=10, classes=16, seed=0)
DEFAULT_SPLITS = (0.1, 0.05, 0.05)
BASE_RSS = 450 << 20  # Python, torch and the extension before any data
READ_DEPTH = 4  # batches whose reads are in flight, unless the budget needs fewer
PACK_MEMORY = 256 << 20  # the packer's chunk and staging buffers, at least where the budget has room
MIN_PACK_MEMORY = 64 << 20  # where it has not (smaller writes, slower packing)
MAX_PACK_MEMORY = 2 << 30  # and at most, where the budget leaves room
EVAL_EPOCH = {"val": 1 << 20, "test": (1 << 20) + 1}  # sampling stream keys of the eval sets


def diskgnn_home() -> Path:
    return Path(os.environ.get("DISKGNN_HOME", "~/.cache/diskgnn")).expanduser()


def default_dataset(progress: bool, path: Path | None = None) -> Path:
    """The built-in synthetic dataset at `path` (default $DISKGNN_HOME/synthetic-default), prepared on
    first use (and again if its recipe changed)."""
    from .prepare import prepare

    path = Path(path) if path is not None else diskgnn_home() / "synthetic-default"
    expected = "synthetic(nodes={nodes}, feat_dim={feat_dim}, avg_degree={avg_degree}, classes={classes}, " \
               "seed={seed})".format(**DEFAULT_SYNTHETIC)
    try:
        producer = read_manifest(path)["producer"]
        if producer["source"] == expected and producer["options"]["split"].startswith(
                "ratios " + ",".join(f"{r:g}" for r in DEFAULT_SPLITS)):
            return path
    except (DiskgnnError, KeyError):
        pass
    print(f"train: preparing the built-in synthetic dataset in {path} (once)", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return prepare("synthetic", path, undirected=True, split_ratios=DEFAULT_SPLITS, memory_budget="1GiB",
                   overwrite=True, synthetic=DEFAULT_SYNTHETIC, progress=progress, report=True)


def batch_layers(ds: Dataset, batch_size: int, fanouts: list[int]) -> list[tuple[int, int, int]]:
    """Upper bounds on each model layer's (source rows, destination rows, edges) for one batch, input
    layer first; the first layer's sources are the batch's input rows."""
    hops = [batch_size]  # nodes first reached at each hop, seeds first
    for f in fanouts:
        hops.append(ds.num_nodes if f < 0 else hops[-1] * f)
    reached = [min(ds.num_nodes, sum(hops[: k + 1])) for k in range(len(hops))]
    layers = []
    for k in range(len(fanouts), 0, -1):  # the block from hop k's nodes into hop k - 1's
        f = fanouts[k - 1]
        edges = ds.num_edges if f < 0 else min(ds.num_edges, reached[k - 1] * f)
        layers.append((reached[k], reached[k - 1], edges))
    return layers


def working_set(ds: Dataset, source: FeatureSource, cfg: TrainConfig, read_depth: int = READ_DEPTH,
                pack_memory: int = PACK_MEMORY) -> int:
    """Host memory the run needs besides its caches: an estimate, checked against the budget."""
    layers = batch_layers(ds, cfg.batch_size, cfg.fanout_list)
    rows = layers[0][0]
    # Rows, ids and blocks in the stages: stored rows up to the decode (the reads in flight and
    # the queues between), float32 model input after it (two queued, one being trained).
    queued = rows * ((read_depth + 3) * (source.row_bytes + 64) + 3 * (source.decoded_row_bytes + 64))
    dims = layer_dims(ds.feature_dim, cfg.hidden, ds.num_classes, len(layers))
    activations = activation_bytes(cfg.model, layers, dims, cfg.heads)
    tables = ds.num_nodes * (5 + 8)  # placement lookup tables, access counts
    return BASE_RSS + tables + queued + source.decode_bytes(rows) + activations + pack_memory


@dataclass
class Fit:
    """What the memory budget holds: the reads in flight, the packer's buffers and the working set."""

    read_depth: int
    pack_memory: int
    need: int


def fit_budget(ds: Dataset, source: FeatureSource, cfg: TrainConfig) -> Fit:
    """The deepest reads (--read-depth, or READ_DEPTH down to 1), then the larger packer floor, that
    --memory-budget holds beside an explicit --host-cache: a small budget trades read-ahead and pack
    write sizes for fitting at all."""
    budget = parse_size(cfg.memory_budget)
    host = 0 if cfg.host_cache == "auto" else parse_size(cfg.host_cache)
    depths = [cfg.read_depth] if cfg.read_depth is not None else range(READ_DEPTH, 0, -1)
    floors = (0,) if cfg.sampling == "online" else (PACK_MEMORY, MIN_PACK_MEMORY)  # online sampling packs nothing
    for depth in depths:
        for pack in floors:
            need = working_set(ds, source, cfg, depth, pack)
            if need + host <= budget:
                return Fit(depth, pack, need)
    smallest = working_set(ds, source, cfg, depths[-1], floors[-1])
    if host and smallest <= budget:
        raise DiskgnnError(f"--host-cache {cfg.host_cache} plus the working set (about {format_size(smallest)}) "
                           f"exceed --memory-budget {cfg.memory_budget}")
    raise DiskgnnError(f"--memory-budget {cfg.memory_budget} is too small: this run's working set needs "
                       f"about {format_size(smallest)} (lower --batch-size or --fanouts, or raise the budget)")


def resolve_device(cfg: TrainConfig) -> str:
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise DiskgnnError("--device cuda: CUDA is not available on this machine (torch "
                           f"{torch.__version__}, built {'with' if torch.version.cuda else 'without'} CUDA)")
    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.device


def tier_budgets(source: FeatureSource, cfg: TrainConfig, device: str, fit: Fit) -> list[tuple[str, int]]:
    """(tier, bytes) from the fastest: the device cache with CUDA, then the host cache; no tier
    larger than all the stored rows."""
    features = source.num_rows * source.row_bytes
    if cfg.host_cache == "auto":
        # the other half: page cache for segments and the OS
        host = min(features, (parse_size(cfg.memory_budget) - fit.need) // 2)
    else:
        host = parse_size(cfg.host_cache)
    tiers = [("host", host)]
    if device != "cpu":
        if cfg.device_cache == "auto":
            free, _ = torch.cuda.mem_get_info()
            dev = min(features, free // 4)
        else:
            dev = parse_size(cfg.device_cache)
        tiers.insert(0, ("device", dev))
    return tiers


def _dir_free(path: Path) -> int:
    return shutil.disk_usage(path).free


class Checkpoints:
    """best.pt and last.pt in the workdir, each with an XXH3-64 checked on load."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def save(self, name: str, state: dict) -> None:
        path = self.dir / f"{name}.pt"
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        digest = xxhash.xxh3_64_hexdigest(tmp.read_bytes())
        tmp.replace(path)
        sidecar = path.with_name(path.name + ".xxh3")
        sidecar.with_name(sidecar.name + ".tmp").write_text(digest + "\n")
        sidecar.with_name(sidecar.name + ".tmp").replace(sidecar)

    def load(self, name: str) -> dict:
        path = self.dir / f"{name}.pt"
        sidecar = path.with_name(path.name + ".xxh3")
        if not path.exists() or not sidecar.exists():
            raise DiskgnnError(f"{path}: no checkpoint to resume from (run without --resume first)")
        if xxhash.xxh3_64_hexdigest(path.read_bytes()) != sidecar.read_text().strip():
            raise DiskgnnError(f"{path}: fails its checksum (the checkpoint is corrupted)")
        return torch.load(path, map_location="cpu", weights_only=False)


class Run:
    """One training run: its data, loaders, model and accounting."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.device = resolve_device(cfg)
        self.data = Path(cfg.data) if cfg.data else default_dataset(cfg.progress)
        self.ds = open_dataset(self.data)
        try:
            self.source = self.ds.feature_source(cfg.features)
        except DiskgnnError as e:
            raise DiskgnnError(f"--features {cfg.features}: {e}") from None
        self.workdir = Path(cfg.workdir) if cfg.workdir else diskgnn_home() / "runs" / self.data.name
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
    def plan(self) -> dict:
        cfg, ds, source = self.cfg, self.ds, self.source
        feats = ds.num_nodes * source.row_bytes
        print(f"plan: dataset {self.data}: {ds.num_nodes:,} nodes, {ds.num_edges:,} edges, features "
              f"{ds.feature_dim} x {ds.feature_dtype.name} = {format_size(ds.num_nodes * ds.row_bytes)}; splits "
              + ", ".join(f"{s} {ds.split(s).size:,}" for s in ("train", "val", "test")))
        smaller = ds.row_bytes / source.row_bytes
        print(f"plan: --features {source.name}: {source.row_bytes:,} B rows"
              + (f" ({smaller:.1f}x smaller than features.bin)" if smaller != 1 else "")
              + f", {format_size(feats)} in {source.path.name}; packs, caches and reads move these rows, decoded "
              "on the training device")
        fit = fit_budget(ds, source, cfg)
        self.read_depth, need = fit.read_depth, fit.need
        budgets = tier_budgets(source, cfg, self.device, fit)
        squeezed = (cfg.read_depth is None and fit.read_depth < READ_DEPTH) or fit.pack_memory < PACK_MEMORY
        print(f"plan: memory budget {cfg.memory_budget}: working set ~{format_size(need)} with reads of "
              f"{fit.read_depth} batches in flight"
              + (f" and packer buffers from {format_size(fit.pack_memory)} (the defaults, {READ_DEPTH} and "
                 f"{format_size(PACK_MEMORY)}, do not fit)" if squeezed else "")
              + ", " + ", ".join(f"{name} cache {format_size(b)} ({b // source.row_bytes:,} rows)"
                                  for name, b in budgets)
              + f"; device {self.device}; sampling {cfg.sampling}; model {cfg.model} "
              f"(fanouts {cfg.fanouts}, batch {cfg.batch_size}, hidden {cfg.hidden})")
        info = {"features": source.name, "row_bytes": source.row_bytes, "feature_bytes": feats,
                "tier_budgets": dict(budgets), "tier_rows": {name: b // source.row_bytes for name, b in budgets},
                "working_set_bytes": need, "read_depth": fit.read_depth}
        if cfg.sampling == "online":
            print("plan: online sampling: no placement (future accesses unknown); every row is read from "
                  f"{source.path.name}")
            return info
        # What the budget leaves to the page cache goes first to the topology (read ahead only where it
        # fits), then half of the rest to the packer: it stages one buffer per batch, so on a fixed
        # budget its writes shrink as an epoch's batches grow in number (W1 at 16M nodes: 124 KiB with
        # 256 MiB, 590 KiB with 1 GiB; packing 26 s against 23 s, where 8M nodes took 11 s).
        page_cache = parse_size(cfg.memory_budget) - need - min(feats, dict(budgets)["host"])
        topology = topology_bytes(ds)
        read_ahead = topology <= page_cache
        pack_memory = fit.pack_memory + min(MAX_PACK_MEMORY - fit.pack_memory,
                                            max(0, page_cache - (topology if read_ahead else 0)) // 2)
        print(f"plan: topology {format_size(topology)}: "
              + ("read ahead into the page cache before each sampling pass" if read_ahead else
                 f"sampled through page faults (the budget leaves {format_size(max(0, page_cache))} of page cache)")
              + f"; packer buffers {format_size(pack_memory)}")
        info.update(topology_read_ahead=read_ahead, pack_memory_bytes=pack_memory)
        self.epochs = OfflineEpochs(ds, self.workdir / "epochs", fanouts=cfg.fanout_list,
                                    batch_size=cfg.batch_size, seed=cfg.seed, replay=cfg.sampling == "replay",
                                    max_blowup=cfg.max_blowup, threads=cfg.threads, pack_memory=pack_memory,
                                    max_batches=cfg.max_batches, features=source, read_ahead=read_ahead)
        placement = self.epochs.plan_placement(budgets)
        samples_bytes = self.epochs.samples_bytes()
        epoch_packs = self.epochs.cold_bytes()
        # Fresh epochs: the next epoch's files are made while this one trains.
        on_disk = (1 if cfg.sampling == "replay" or cfg.epochs == 1 else 2) * (epoch_packs + samples_bytes)
        eval_share = (ds.split("val").size + ds.split("test").size) / max(1, self.train_ids.size)
        if cfg.eval == "sampled":
            on_disk += int(eval_share * (epoch_packs + samples_bytes))
        rates = placement.expected_hit_rates
        print("plan: expected hit rates "
              + ", ".join(f"{n} {r:.1%} ({ids.size:,} rows)" for n, r, ids in
                          zip(placement.tier_names, rates, placement.tier_ids))
              + f", packs {1 - sum(rates):.1%}; samples {format_size(samples_bytes)} and packs "
              f"~{format_size(epoch_packs)} per epoch; {format_size(on_disk)} on disk at once, "
              f"{format_size(_dir_free(self.workdir))} free in {self.workdir}")
        if on_disk > _dir_free(self.workdir):
            raise DiskgnnError(f"{self.workdir}: needs ~{format_size(on_disk)} of disk for samples and packs, "
                               f"{format_size(_dir_free(self.workdir))} free (use --workdir elsewhere, raise the "
                               "cache budgets or set --max-blowup)")
        info.update(expected_hit_rates=dict(zip(placement.tier_names, rates)),
                    packs_bytes_per_epoch=epoch_packs, samples_bytes_per_epoch=samples_bytes)
        if cfg.eval == "sampled":
            # Now rather than at the first evaluation, where it would pack beside epoch 1's packer.
            for split in ("val", "test"):
                if ds.split(split).size:
                    self.eval_files[split] = self.epochs.eval_files(
                        split, ds.split(split), cfg.eval_fanout_list, EVAL_EPOCH[split], cfg.eval_max_batches)
        self.tiers = load_tiers(ds, placement, self.device, cfg.backend, source)
        return info

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
            from .inference import full_neighbour_logits

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
    from . import native_info

    return {"diskgnn": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "native": native_info()}


def train(cfg: TrainConfig) -> dict:
    """Runs the whole job; returns the summary (also written to the workdir)."""
    limit_malloc_arenas()
    with AnonPeak() as memory:
        return _train(cfg, memory)


def _train(cfg: TrainConfig, memory: AnonPeak) -> dict:
    run = Run(cfg)
    info = run.plan()
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
        "memory_budget_bytes": parse_size(cfg.memory_budget),
        "backend": run.backend,
        "device": run.device,
        "train_loss": history["train_loss"],
        "val_acc_per_epoch": history["val_acc_per_epoch"],
        "val_acc": best["val_acc"],
        "best_epoch": best["epoch"],
        "test_acc": test,
        "dataset": str(run.data),
        "plan": info,
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


def main(argv=None) -> None:
    train(resolve(argv))


if __name__ == "__main__":
    sys.exit(run_cli("train", main))
