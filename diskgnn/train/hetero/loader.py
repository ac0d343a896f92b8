"""`diskgnn.Loader` on a heterogeneous dataset: the data side of a typed run, and of one's own training loop.

    with diskgnn.Loader("data/acm", fanouts="10,10", batch_size=128, memory_budget="2GiB") as loader:
        for epoch in range(3):
            for mb in loader.epoch(epoch):   # MiniBatch: blocks[layer][relation], x[type], nodes[type], labels
                out = model(mb.blocks, mb.x, mb.rows)   # e.g. diskgnn.nn.hetero.HeteroGNN
                ...

`diskgnn.Loader(data)` returns one of these when `data` is a heterogeneous dataset; python -m diskgnn.train's
Run (train/run.py) is built on it for such a dataset, as on a Loader for a plain one. Constructing it checks
the options; opening it locks the workdir, makes the typed model (`model`: the Run trains it), samples epoch 0,
makes the plan (the model's parameters size it) and fills the typed host tier. `epoch(e)` yields its batches
while e + 1 is sampled and packed in the background (the files of the epochs before e are deleted);
`evaluation(split)` the val or test batches (with --eval-fanouts, or every neighbour under eval="full"), sampled
and packed once.

The plan splits --memory-budget as the homogeneous one does: the base, the model with its optimizer state
(learned featureless rows included), the labels, the working set of epoch 0's largest batch (raw rows, their
float32 copies, the step's activations, times the batches in flight), the packer, the out-of-core tables' own
memory (train/tables.py), and the rest to the host tier (half under --host-cache auto): typed feature rows and
the tables' hot rows, ranked together by epoch 0's reads per byte. Epochs and eval sets are sampled and packed
per type by OfflineEpochs; the plan checks the disk their files take at once.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ... import defaults
from ...data.features import type_variants
from ...data.format import Dataset, open_dataset
from ...data.schema import relation_fanouts
from ...distributed.group import Group
from ...errors import DiskgnnError, UsageError
from ...loading.loaders import OfflineLoader, OnlineLoader
from ...nn.hetero import HeteroGNN
from ...offline.batches import SampleFile
from ...offline.epochs import EpochFiles, EpochSpec, OfflineEpochs
from ...offline.placement import densest
from ...offline.sample import open_graph
from ...store.by_type import TypedRows
from ...target import target_for
from ...units import format_size, parse_size
from ..options import from_options, save
from ..plan import TypedPlan, check_fidelity, disk_copies, resolve_device, resolve_precision
from ..report import distributed_line
from ..tables import TypeTables
from ..tasks.base import EVAL_EPOCH
from ..validation import validate_graph_kind
from ..workdir import hold_workdir


def _hop_text(schema, hop) -> str:
    if len(set(hop)) == 1:
        return f"{hop[0]} per relation"
    return ",".join(f"{r.name}={f}" for r, f in zip(schema.relations, hop) if f)


class HeteroLoader:
    """A typed dataset's batches, planned, sampled, packed and read; see the module's docstring."""

    def __init__(self, data=None, *, config=None, group: Group | None = None,
                 log: Callable[[str], None] | None = print, **options):
        cfg = self.cfg = config if config is not None else from_options(data=None if data is None else str(data),
                                                                        **options)
        self.log, self.group = log, group or Group()
        self.ds: Dataset = open_dataset(cfg.data, typed=True)
        self.schema = schema = self.ds.schema
        validate_graph_kind(cfg, True)
        self.task = cfg.task_spec  # node classification on the target type
        self.task.check(self.ds, cfg.data)
        self.fanouts = relation_fanouts(cfg.fanouts, schema)
        layers = len(self.fanouts)
        self.eval_fanouts = ([[-1] * len(schema.relations)] * layers if cfg.evaluation.full else
                             relation_fanouts(cfg.eval_fanouts or cfg.fanouts, schema, "--eval-fanouts"))
        if len(self.eval_fanouts) != layers:
            raise UsageError(f"--eval-fanouts {cfg.eval_fanouts}: needs {layers} layers, as --fanouts has")
        device = resolve_device(cfg.device)  # as a plain run's plan resolves them
        self.device, self.target = torch.device(device), target_for(device)
        self.plan = TypedPlan(resolve_precision(cfg, device))
        self.sizes: dict = {}  # the budget's split, summary.json's "plan" (open)
        self.workdir = Path(cfg.workdir) if cfg.workdir else defaults.home() / "runs" / self.ds.path.name
        if self.group.active:  # one machine's ranks must not share a workdir, as a plain run's
            self.workdir = self.workdir / f"rank-{self.group.rank}"
        self.labels = np.asarray(self.ds.labels)
        # each featured type's rows as stored or a quantized variant's codes (--features), decoded per type
        self.features = TypedRows(self.ds, cfg.backend, type_variants(cfg.features, schema))
        for name, src in self.features.sources.items():
            check_fidelity(src, cfg, name)
        self.tables = TypeTables(cfg, schema, self.workdir)
        self.model: HeteroGNN | None = None  # the model the plan was sized with (open), the one the Run trains
        self.budget = parse_size(cfg.memory_budget, "--memory-budget")
        self.threads = cfg.threads or None
        self._lock = None
        self.epochs: OfflineEpochs | None = None
        self.pack_memory = defaults.PACK_MEMORY
        self._eval_files: dict[str, EpochFiles] = {}  # sampled and packed once, on first use
        # what a checkpoint keeps of the data side: the train passes' disk bytes (the tiers' counters are per type)
        self.accounting: dict = {"disk_bytes": 0}
        self.trained = {"batches": 0, "input_rows": 0, "seeds": 0}  # summed over the train batches, every type
        self._graph = None  # the relations mapped for online sampling, at its first pass

    def say(self, line: str) -> None:
        if self.group.leader and self.log is not None:
            self.log(line)

    def new_model(self) -> HeteroGNN:
        """The model a run of these options trains, seeded, on the run's device."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        out = self.schema.num_classes
        return HeteroGNN(self.schema, cfg.model, cfg.hidden, out, len(self.fanouts), cfg.dropout,
                         featureless=cfg.featureless, bases=cfg.bases, relation_aggr=cfg.relation_aggr,
                         heads=cfg.heads).to(self.device)

    # -- the data --------------------------------------------------------------------------------------------

    def open(self, model: HeteroGNN | None = None) -> "HeteroLoader":
        """Locks the workdir, samples epoch 0 and plans from it (`model`'s parameters counted: the run's, or one
        made for its size), packs nothing yet. Once; returns the loader."""
        if self._lock is not None:
            return self
        cfg = self.cfg
        model = self.model = model or self.new_model()
        self._lock = hold_workdir(self.workdir)
        save(cfg, self.workdir / "config.yaml")
        s = self.schema
        self.say(f"plan: heterogeneous {self.ds.path.name}: " + ", ".join(
            f"{t.name} {t.count:,}" + (f" ({t.feature_dim}-d)" if t.feature_dim else f" ({cfg.featureless})")
            for t in s.types) + f"; {len(s.relations)} relations, {self.ds.num_edges:,} edges; target {s.target}, "
            f"{s.num_classes} classes{' (multi-label)' if s.multilabel else ''}; {cfg.model} x {len(self.fanouts)} "
            f"layers, fanouts per hop " + " / ".join(_hop_text(s, hop) for hop in self.fanouts))
        self.epochs = OfflineEpochs(self.ds, self.workdir / "epochs", self._spec())
        self.epochs.sample_first()  # what epoch 0 trains on
        if len(self.epochs.samples0) == 0:
            raise DiskgnnError(f"{self.ds.path}: the train split makes fewer than {self.group.world} batches of "
                               f"{cfg.batch_size} (each rank trains one a step): lower --batch-size")
        self._plan(model, self.epochs.samples0)
        self.epochs.follow(self._spec())  # the packer's share of the budget, as planned
        if self.group.active:
            self.say(distributed_line(cfg, self.group, self.workdir))
        return self

    def _spec(self) -> EpochSpec:
        cfg = self.cfg
        return EpochSpec(tuple(tuple(hop) for hop in self.fanouts), cfg.batch_size, cfg.seed, self.pack_memory,
                         self.features.sources, replay=cfg.sampling_mode.replay, threads=self.threads,
                         max_batches=cfg.max_batches, sampler=cfg.sampler_spec, recent=cfg.recent_window,
                         max_blowup=cfg.max_blowup, shard=(self.group.rank, self.group.world),
                         eval_shard=(self.group.rank, self.group.world))

    @property
    def offline(self) -> dict:
        """The offline work's seconds and bytes so far."""
        return {"sample_s": self.epochs.sample_s, "pack_s": self.epochs.pack_s,
                "pack_bytes_written": int(self.epochs.phases["pack_bytes_written"])}

    def _plan(self, model: HeteroGNN, epoch0: SampleFile) -> None:
        cfg, s = self.cfg, self.schema
        base = defaults.TRAIN_BASE_RSS + (defaults.CUDA_BASE_RSS if self.device.type == "cuda" else 0)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        model_bytes = params * (4 if self.device.type == "cpu" else 0)  # weights, gradients, Adam's two moments
        table_types = {t.name for t in self.tables.types}
        # epoch 0's reads per row: the featured types' as the offline epochs counted them, the tables' here
        counts = {**self.epochs.counts0, **{t: np.zeros(s.type(t).count, np.int32) for t in table_types}}
        table_rows = dict.fromkeys(table_types, 0)
        rows_max = step_max = 0
        for b in range(len(epoch0)):
            batch = epoch0[b]
            rows = step = 0
            for t, ty in enumerate(s.types):
                ids = batch.type_nodes[t]
                if ty.name in table_types:
                    counts[ty.name][ids] += 1  # a batch's nodes of a type are distinct
                if ty.feature_dim:
                    # as read (stored or code rows), and as float32
                    rows += ids.size * (self.features.sources[ty.name].row_bytes + 4 * ty.feature_dim)
                elif ty.name in table_types:
                    table_rows[ty.name] = max(table_rows[ty.name], ids.size)
                    rows += ids.size * (self.tables.row_bytes + 8 * cfg.hidden)  # records, values and gradient
                step += int(batch.counts[:, t].sum()) * cfg.hidden * 4 * 8  # activations and their gradients
            edges = sum(int(blk.indices.size) for hop in batch.hops for blk in hop if blk is not None)
            if cfg.model == "gat":  # a message per edge, its weighted copy and their gradients
                step += edges * cfg.hidden * 4 * 4
            rows += edges * 40  # its block tensors
            rows_max, step_max = max(rows_max, rows), max(step_max, step)
        # the batches in flight hold their rows and blocks, the recent-rows tiers the last window's; one step at a
        # time holds its activations
        window = cfg.recent_window
        working = rows_max * (defaults.READ_DEPTH + 2 + window) + step_max
        reads = {name: int(c.sum()) for name, c in counts.items()}
        feature_reads = [n for t, n in reads.items() if t not in table_types]
        # the packer's plan holds at most an epoch's reads of one type (types are packed one at a time)
        plan_rows = defaults.PACK_PLAN_BYTES_PER_ROW * max(feature_reads, default=0) * defaults.DISK_HEADROOM
        if window:  # and, for the recent-rows tier, the batch and position each of the type's nodes was last read
            plan_rows += 8 * max((t.count for t in s.types if t.feature_dim), default=0)
        tables = self.tables.memory(table_rows)
        left = self.budget - base - model_bytes - self.labels.nbytes - working - int(plan_rows) - tables
        self.pack_memory = defaults.PACK_MEMORY if left - defaults.PACK_MEMORY >= 0 else defaults.MIN_PACK_MEMORY
        left -= self.pack_memory if feature_reads else 0
        if left < 0:
            raise DiskgnnError(f"--memory-budget {cfg.memory_budget}: the run needs about "
                               f"{format_size(self.budget - left)} (base {format_size(base)}, model and optimizer "
                               f"{format_size(model_bytes)}, working set {format_size(working)}: "
                               f"{defaults.READ_DEPTH + 2} batches of epoch 0's largest in flight; the packer "
                               f"{format_size(self.pack_memory + plan_rows)}"
                               + (f"; the tables {format_size(tables)}" if tables else "") + "): raise it, or lower "
                               "--batch-size or --fanouts" + (", or learn featureless types' rows out of core "
                                                              "(--featureless table) or hash them (hashed)"
                                                              if cfg.featureless == "learned" and
                                                              any(not t.feature_dim for t in s.types) else ""))
        tier = left // 2 if cfg.host_cache == "auto" else min(left, parse_size(cfg.host_cache, "--host-cache"))
        if cfg.sampling_mode.online:
            tier = 0  # the baseline: no rows placed from a known future, every one read by id
        costs = {name: src.row_bytes + 8 for name, src in self.features.sources.items()}  # a row and its id
        costs.update(self.tables.held_row_bytes())
        chosen = densest({n: c for n, c in counts.items() if n in costs}, costs, tier)
        self.features.place(self.epochs.place_held(chosen))
        hot = {name: ids for name, ids in chosen.items() if name in table_types}
        self.tables.hold(hot, self.say)
        placed = {name: int(ids.size) for name, ids in chosen.items()}
        hits = {name: int(counts[name][ids].sum()) for name, ids in chosen.items()}
        blowup = cfg.max_blowup if cfg.max_blowup is not None else float("inf")  # each type's packs capped
        stored = {name: src.row_bytes for name, src in self.features.sources.items()}
        pack_bytes = sum(min((reads[n] - hits.get(n, 0)) * b + 4096 * len(epoch0), blowup * s.type(n).count * b)
                         for n, b in stored.items())
        pack_bytes = int(pack_bytes)
        copies = disk_copies(cfg, *(self.ds.split(n).size for n in ("train", "val", "test")), cfg.batch_size,
                             streamed=False)
        disk = int(copies * (pack_bytes + epoch0.meta["file_bytes"]) * defaults.DISK_HEADROOM) + self.tables.disk()
        free = shutil.disk_usage(self.workdir).free + self._held_on_disk()
        if disk > free:
            raise DiskgnnError(f"{self.workdir}: needs ~{format_size(disk)} of disk for samples and packs "
                               f"({copies:.2f} epochs' at once) and tables, {format_size(free)} free (use --workdir "
                               "elsewhere, raise --host-cache or --memory-budget, or lower --eval-max-batches)")
        self.sizes = {"budget_bytes": self.budget, "base_bytes": base, "model_bytes": model_bytes,
                     "working_set_bytes": working, "pack_memory_bytes": self.pack_memory + int(plan_rows),
                     "recent_batches": window,
                     "table_memory_bytes": tables, "host_tier_bytes": self.features.held_bytes() + sum(
                         ids.size * self.tables.held_row_bytes()[n] for n, ids in hot.items()),
                     "host_tier_rows": placed,
                     "expected_hit_rate": {n: hits.get(n, 0) / max(1, reads[n]) for n in reads},
                     "packs_bytes_per_epoch": pack_bytes, "disk_needed": disk, "disk_free": free,
                     "backend": self.features.backend_name}
        self.say(f"plan: --memory-budget {format_size(self.budget)}: base {format_size(base)}, model and optimizer "
                 f"{format_size(model_bytes)}, working set {format_size(working)}, host tier "
                 f"{format_size(self.sizes['host_tier_bytes'])} ("
                 + ", ".join(f"{n}{' table' if n in table_types else ''} {placed.get(n, 0):,} rows, "
                             f"{hits.get(n, 0) / max(1, reads[n]):.0%} of epoch 0's reads" for n in reads)
                 + f"), packer {format_size(self.pack_memory + plan_rows)}"
                 + (f", tables {format_size(tables)} besides their hot rows" if tables else "") + "; disk "
                 f"{format_size(disk)} at once ({format_size(pack_bytes)} of packs an epoch), {format_size(free)} "
                 f"free; reader {self.features.backend_name}")

    def _held_on_disk(self) -> int:
        """Bytes of earlier runs' epoch and eval files in the workdir, which this run replaces."""
        return sum(f.stat().st_size for d in ("epochs", "eval") if (self.workdir / d).is_dir()
                   for f in (self.workdir / d).iterdir() if f.is_file() and f != self.epochs.samples0.path)

    def epoch(self, epoch: int, start: int = 0) -> "TypedPass":
        """Epoch `epoch`'s batches from `start` on, in training order. Sampling ahead, epoch e + 1 (up to the
        `epochs` option) is sampled and packed in the background meanwhile, and the files of the epochs before e
        are deleted; online, each batch is sampled as the pass reaches it (the batches sampling ahead makes)."""
        self.open()
        cfg = self.cfg
        if cfg.sampling_mode.online:
            return self._online(self.ds.split("train"), self.fanouts, epoch, cfg.max_batches, start, train=True)
        for done in range(epoch):
            self.epochs.release(done)
        files = self.epochs.files(epoch)
        if epoch + 1 < cfg.epochs:
            self.epochs.prefetch(epoch + 1)
        order = self.epochs.order(epoch, len(files.samples))[: cfg.max_batches]
        return TypedPass(self, self._offline(files), files.packs, order, start, train=True)

    def _offline(self, files: EpochFiles):
        return lambda store: OfflineLoader(files.samples, store, self.labels, defaults.READ_DEPTH, target_for("cpu"))

    def _online(self, seeds, fanouts, epoch: int, max_batches: int | None, start: int = 0,
                train: bool = False) -> "TypedPass":
        cfg = self.cfg
        if self._graph is None:
            self._graph = open_graph(self.ds)

        def source(store):
            return OnlineLoader(self.ds, seeds, fanouts=fanouts, batch_size=cfg.batch_size, seed=cfg.seed,
                                epoch=epoch, labels=self.labels, target=target_for("cpu"),
                                read_depth=defaults.READ_DEPTH, backend=cfg.backend, graph=self._graph, store=store,
                                sampler=cfg.sampler_spec)

        batches = -(-int(np.asarray(seeds).size) // cfg.batch_size)
        return TypedPass(self, source, None, np.arange(batches)[:max_batches], start, train)

    @property
    def num_batches(self) -> int:
        """Train batches per epoch."""
        return len(self.epochs.samples0)

    def passes(self, source, packs, order, train: bool = False):
        """The batches `order` of a pass as MiniBatches, through the loaders' stages (sample, read, assemble) of
        `source` (a store -> its loader) over each featured type's store (`packs`: the pass's, or None: rows by
        id); laid out by the CPU target, then moved to the run's device. A train pass's batches are counted."""
        store = self.features.store(packs)
        t, before = self.trained, self._disk_bytes()
        try:
            with source(store).pipeline(order) as pipeline:
                for mb in pipeline:
                    if train:
                        t["batches"] += 1
                        t["input_rows"] += sum(int(x.shape[0]) for x in mb.x.values())
                        t["seeds"] += mb.num_seeds
                    yield mb if self.device.type == "cpu" else self._moved(mb)
        finally:
            store.close()
            if train:  # (a validation inside the pass reads its own rows meanwhile: counted here too)
                self.accounting["disk_bytes"] = self.accounting.get("disk_bytes", 0) + self._disk_bytes() - before

    def _disk_bytes(self) -> int:
        return int(sum(st["bytes_read"] for st in self.features.summary().values()))

    def _moved(self, mb):
        mb.x = {name: x.to(self.device, non_blocking=True) for name, x in mb.x.items()}
        mb.blocks = [[b if b is None else b.to(self.device, non_blocking=True) for b in hop] for hop in mb.blocks]
        mb.labels = mb.labels.to(self.device, non_blocking=True)
        return mb

    def evaluation(self, split: str) -> "TypedPass":
        """The split's batches (with the eval fanouts): sampled and packed once, or online sampled as they come."""
        self.open()
        cfg = self.cfg
        if cfg.sampling_mode.online:
            return self._online(self.ds.split(split), self.eval_fanouts, EVAL_EPOCH[split], cfg.eval_max_batches)
        if split not in self._eval_files:
            self._eval_files[split] = self.epochs.eval_files(split, np.asarray(self.ds.split(split)),
                                                             self.eval_fanouts, EVAL_EPOCH[split],
                                                             max_batches=cfg.eval_max_batches)
        files = self._eval_files[split]
        return TypedPass(self, self._offline(files), files.packs, np.arange(len(files.samples)), 0)

    def eval_size(self, split: str) -> int:
        return int(self.ds.split(split).size)

    def stats(self) -> dict:
        """Rows asked for, served by the host tier and bytes read, per featured type."""
        return self.features.summary()

    def summary(self) -> dict:
        """The data side of summary.json."""
        features = self.features.summary()
        disk = int(sum(st["bytes_read"] for st in features.values()))
        return {"heterogeneous": True, "plan": self.sizes, "features": features, "disk_bytes": disk,
                "disk_bytes_read": disk, "offline": self.offline, "sample_s": self.epochs.sample_s,
                "pack_s": self.epochs.pack_s, "bottleneck": None, "memory_budget_bytes": self.budget,
                "backend": self.sizes.get("backend"), "device": str(self.device), "dataset": str(self.ds.path)}

    def close(self) -> None:
        if self.epochs is not None:
            self.epochs.close()  # waits for the epoch made in the background
        self.tables.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> "HeteroLoader":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


class TypedPass:
    """One pass over an epoch's (or an eval set's) batches `order` from position `start` on, as a Loader's Pass."""

    def __init__(self, loader: HeteroLoader, source, packs, order: np.ndarray, start: int, train: bool = False):
        self.loader, self.source, self.packs, self.order, self.start = loader, source, packs, order, start
        self.train = train

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self):
        return self.loader.passes(self.source, self.packs, self.order[self.start:], self.train)

    def stats(self) -> list:
        return [st for tiers in self.loader.features.stats.values() for st in tiers.values()]

    def disk_bytes(self) -> int:
        return sum(st["bytes_read"] for st in self.loader.features.summary().values())
