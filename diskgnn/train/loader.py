"""`diskgnn.Loader`: the data side of a run, for one's own training loop (and diskgnn.train's).

    import diskgnn
    with diskgnn.Loader("data/w1", fanouts=[10, 5], batch_size=1024, memory_budget="2GiB") as loader:
        for epoch in range(3):
            for mb in loader.epoch(epoch):      # MiniBatch: blocks, x, labels (or mb.to_pyg())
                loss = F.cross_entropy(model(mb.blocks, mb.x), mb.labels)
                ...
        print(loader.stats(), loader.summary())

Constructing it plans exactly as `python -m diskgnn.train` does with the same
options (the flags' names in snake case; `train.config`): the budget is
checked and the device decided. Opening it (`open()`, or the with block) does
the work, in order: the workdir locked, epoch 0 sampled, the plan refined
from it and its hottest rows placed in the memory tiers, the eval sets sampled
and packed, the tiers loaded. `epoch(e)` runs e's pipeline
(sample -> read -> assemble -> copy) while the caller consumes its batches,
and starts sampling and packing epoch e + 1 in the background; `evaluation(split)`
runs the val or test batches. The model options (model, hidden, lr, ...)
are the trainer's and are not used here, except that the plan sizes the
working set from `hidden`. diskgnn.train is this object's first user: its
Run adds the model, the step, evaluation and checkpoints.
"""

from __future__ import annotations

import shutil
from contextlib import closing
from pathlib import Path
from typing import Callable

import numpy as np

from .. import defaults
from ..data.builtin import default_dataset
from ..data.features import feature_source
from ..data.format import open_dataset, read_manifest
from ..data.hetero.format import is_hetero
from ..distributed import cooperative
from ..distributed.group import Group
from ..errors import DiskgnnError, UsageError
from ..loading.graph_hag import graph_hag
from ..loading.hag import HagBuilder
from ..loading.loaders import MiniBatch, OfflineLoader, OnlineLoader
from ..loading.pipeline import StageTime
from ..offline.epochs import OfflineEpochs
from ..offline.eval_sets import EvalSet, chunk_batches
from ..store.store import FeatureStore
from ..store.tiers import load_tiers
from ..target import target_for
from .config import TrainConfig
from .options import from_options, save
from .plan import Plan, disk_copies, make_plan, offline_spec, seeds_of
from .report import distributed_line, eval_line, hag_lines, measured_line, placed_line, plan_dict, plan_lines
from .tasks import EVAL_EPOCH
from .workdir import hold_workdir


class Loader:
    """Plans, samples, packs and pipelines a dataset's batches; see the module's docstring. On a heterogeneous
    dataset it is a train/hetero/loader.py HeteroLoader, yielding hetero batches."""

    def __new__(cls, data=None, *, config=None, **options):
        path = data if data is not None else getattr(config, "data", None)
        if cls is Loader and path is not None and is_hetero(read_manifest(path, None)):
            from .hetero.loader import HeteroLoader

            loader = HeteroLoader(data, config=config, **options)
            if loader.cfg.featureless == "table":
                raise UsageError("featureless='table': the tables train inside python -m diskgnn.train (their rows "
                                 "are stepped after each backward pass); a Loader's own loop takes learned or hashed "
                                 "rows")
            return loader
        return super().__new__(cls)

    def __init__(self, data=None, *, config: TrainConfig | None = None, group: Group | None = None,
                 log: Callable[[str], None] | None = print, **options):
        """`data`: a dataset directory (None: the built-in synthetic dataset); `options`: diskgnn.train's
        options (fanouts, batch_size, memory_budget, sampling, features, workdir, ...), or a whole `config`.
        `log` receives the plan's lines (None: silent)."""
        if config is None:
            config = from_options(data=None if data is None else str(data), **options)
        elif data is not None or options:
            raise UsageError("Loader: pass either a config or data and options, not both")
        self.cfg, self.group, self.log = config, group or Group(), log
        cfg = config
        self.data = Path(cfg.data) if cfg.data else default_dataset(cfg.progress)
        self.ds = open_dataset(self.data)
        try:
            self.source = feature_source(self.ds, cfg.features)
        except DiskgnnError as e:
            raise UsageError(f"--features {cfg.features}: {e}") from None
        self.workdir = Path(cfg.workdir) if cfg.workdir else defaults.home() / "runs" / self.data.name
        if self.group.active:  # one machine's ranks must not share a workdir; nothing else assumes a shared one
            self.workdir = self.workdir / f"rank-{self.group.rank}"
        self.labels = np.asarray(self.ds.labels)
        self.train_ids = self.ds.split("train")
        if self.ds.feature_dim == 0 and not cfg.embeddings:
            raise DiskgnnError(f"{self.data}: has no node features: train it with --embeddings D (learnable "
                               "node embeddings of D values)")
        self.task = cfg.task_spec
        self.task.check(self.ds, self.data)
        self.stage_times: dict[str, StageTime] = {}
        # Summed over the trained batches: input rows, each layer's destinations (input layer first), seeds.
        self.trained = {"batches": 0, "input_rows": 0, "destinations": [], "seeds": 0}
        # Tier hits and bytes and disk bytes, summed over finished train passes.
        self.accounting = {"tiers": {}, "disk_bytes": 0}
        # decides the device, the precision, the host gather
        self.plan = make_plan(self.ds, self.source, cfg, self.group.world)
        self.device = self.plan.device
        self.target = target_for(self.device)  # where batches are assembled and steps computed
        self.train_target = self.target  # the train passes' (a Run whose step is captured sets its own: run.py)
        # GAT weights every edge: no shared partial sums; the HAG kernels are the CPU's.
        self.hag = HagBuilder(cfg.hag if not cfg.weighs_every_edge and self.target.hag else "off")
        self._graph_hag = False  # the whole graph's for --eval full (loading/graph_hag.py), or None: at first use
        self.epochs: OfflineEpochs | None = None
        self.tiers = None
        self.eval_sets: dict[str, EvalSet] = {}  # split -> its sampled eval batches, kept or streamed
        self.read_depth = self.plan.read_depth
        self._lock = None  # the workdir's, held while open

    def open(self) -> "Loader":
        """Makes the run's data ready, in this order: the workdir locked and the configuration saved in it, the plan
        printed; then, sampling offline, epoch 0 sampled, the plan refined from it and its rows placed, the eval
        sets sampled and packed, the memory tiers filled. Once (a second call does nothing); returns the loader."""
        if self._lock is not None:
            return self
        self._lock = hold_workdir(self.workdir)
        save(self.cfg, self.workdir / "config.yaml")
        for line in plan_lines(self.plan) + ([distributed_line(self.cfg, self.group, self.workdir)]
                                             if self.group.active else []) + hag_lines(self.cfg, self.hag.mode):
            self.say(line)
        if self.cfg.sampling_mode.ahead:
            self.plan = self._refine(self.plan)
            self._make_eval_sets()
            self.tiers = load_tiers(self.ds, self.epochs.placement, self.device, self.cfg.backend, self.source,
                                    self.plan.host_gather.zero_copy)
            self.read_depth = self.plan.read_depth
        return self

    # -- planning -----------------------------------------------------------------------------
    def _refine(self, plan: Plan) -> Plan:
        """Samples epoch 0 and refines the plan from it (its largest batch, its rows placed, the disk checked),
        then packs epoch 0 as the refined plan says."""
        cfg, ds, group = self.cfg, self.ds, self.group
        self.epochs = OfflineEpochs(ds, self.workdir / "epochs", offline_spec(plan, cfg, self.source, group, self.hag))
        most = self.epochs.sample_first()
        copies = disk_copies(cfg, *self._items(), self.task.eval_batch())
        # a resumed run's embedding table and journal are on disk already, and counted by the plan again
        held = sum(f.stat().st_size for f in (self.workdir / "embeddings").glob("*.bin"))
        bound, plan = plan.batch_rows, plan.refined(ds, self.source, cfg, group.world, self.epochs, most, copies,
                                                    self.workdir, shutil.disk_usage(self.workdir).free + held)
        if plan.batch_rows != bound:
            self.say(measured_line(plan, bound, most))
        # the packer's buffers and the topology's read-ahead follow the refined plan from here on
        self.epochs.follow(offline_spec(plan, cfg, self.source, group, self.hag))
        if len(self.epochs.files(0).samples) == 0:
            raise DiskgnnError(f"{self.data}: {self.task.items_text(ds)} make fewer than {group.world} batches of "
                               f"{cfg.batch_size}: every rank needs one (lower --batch-size)")
        self.say(placed_line(plan, self.workdir))
        return plan

    def _items(self) -> tuple[int, int, int]:
        """What the train epochs and the val and test sets are cut from (nodes, or edges)."""
        return self.task.train_items(self.ds), self.eval_size("val"), self.eval_size("test")

    def _make_eval_sets(self) -> None:
        """The eval sets kept whole (sampled and packed now rather than at the first evaluation, where they would
        pack beside epoch 1's packer), or streamed a chunk at a time past a train epoch's seeds."""
        cfg = self.cfg
        if not cfg.evaluation.sampled:
            return
        chunk = chunk_batches(*seeds_of(cfg, *self._items(), self.task.eval_batch()), self.task.eval_batch())
        for split in ("val", "test"):
            if self.eval_size(split):  # all of them: each rank's set keeps its share of their batches
                seeds, batches = self.task.eval_sets(self, split)
                self.eval_sets[split] = EvalSet(self.epochs, split, seeds=seeds, batches=batches,
                                                fanouts=cfg.eval_fanout_list, epoch_key=EVAL_EPOCH[split],
                                                max_batches=cfg.eval_max_batches, chunk=chunk)
        self.say(eval_line(cfg, self.eval_sets, chunk))

    def say(self, line: str) -> None:
        """Logs on rank 0 only (every rank plans and trains alike)."""
        if self.group.leader and self.log is not None:
            self.log(line)

    def graph_hag(self):
        """The dataset's stored whole-graph HAG under --hag on|auto (searched and stored at first use), else None."""
        if self.hag.mode == "off":
            return None
        if self._graph_hag is False:  # not looked for yet
            self._graph_hag = graph_hag(self.ds, self.hag.mode, fallback_dir=self.workdir, threads=self.cfg.threads,
                                        say=self.say)
        return self._graph_hag

    def eval_size(self, split: str) -> int:
        """A split's items: its nodes, or (--task link) its held-out edges."""
        return self.task.eval_size(self.ds, split)

    def eval_seeds(self, split: str) -> np.ndarray:
        """The split's seeds this rank evaluates (every world-th)."""
        return self.ds.split(split)[self.group.rank::self.group.world]

    # -- passes ---------------------------------------------------------------------------------
    def epoch(self, epoch: int, start: int = 0) -> "Pass":
        """Epoch `epoch`'s train batches from position `start` on (a resumed epoch's next batch), in training order.
        Epoch e + 1 (up to the `epochs` option) is sampled and packed in the background meanwhile, and the files
        of the epochs before e are deleted."""
        self._opened()
        cfg = self.cfg
        if self.epochs is not None:
            for done in range(epoch):
                self.epochs.release(done)
        source = self._train_source(epoch)
        if self.epochs is not None and epoch + 1 < cfg.epochs:
            self.epochs.prefetch(epoch + 1)
        order = self.epochs.order(epoch, len(source)) if self.epochs else np.arange(len(source))
        order = order[: cfg.max_batches] if cfg.max_batches is not None else order
        return Pass(self, source, order, start, train=True)

    @property
    def num_batches(self) -> int:
        """Train batches per epoch (this rank's)."""
        cfg = self.cfg
        n = len(self.epochs.files(0).samples) if self.epochs else -(-self.train_ids.size // cfg.batch_size)
        return min(n, cfg.max_batches) if cfg.max_batches is not None else n

    def evaluation(self, split: str) -> "Pass | EvalPass":
        """The batches of this rank's share of `split` ("val" or "test"), at most `eval_max_batches`; under
        --eval full, full-neighbour inference runs instead (diskgnn/nn/inference.py), not a pass."""
        self._opened()
        cfg = self.cfg
        if split in self.eval_sets:
            return EvalPass(self, self.eval_sets[split], split)
        if not cfg.sampling_mode.online:
            return Pass(self, None, np.arange(0), 0, train=False)  # the split is empty
        source = self._online_source(self.eval_seeds(split), cfg.eval_fanout_list, EVAL_EPOCH[split])
        order = np.arange(len(source))
        order = order[: cfg.eval_max_batches] if cfg.eval_max_batches is not None else order
        return Pass(self, source, order, 0, train=False)

    def _opened(self) -> None:
        if self._lock is None:
            raise UsageError("Loader: open() it first, or use it in a with block (opening samples epoch 0, packs "
                             "the eval sets and fills the memory tiers)")

    def _train_source(self, epoch: int):
        cfg = self.cfg
        if cfg.sampling_mode.online:
            return self._online_source(self.train_ids, cfg.fanout_list, epoch, self.train_target)
        g, owner, n = self.group, cfg.owner, self.ds.num_nodes
        share = (lambda batch: cooperative.exchange_plan(batch, cooperative.owners(batch.nodes, g.world, owner, n),
                                                         g.rank, g.world)) if cfg.distribution.cooperative else None
        return self._offline_source(self.epochs.files(epoch), epoch, share, self.train_target)

    def _online_source(self, seeds: np.ndarray, fanouts, epoch: int, target=None) -> OnlineLoader:
        cfg = self.cfg
        return OnlineLoader(self.ds, seeds, fanouts=fanouts, batch_size=cfg.batch_size, seed=cfg.seed, epoch=epoch,
                            labels=self.labels, target=target or self.target, read_depth=self.read_depth,
                            backend=cfg.backend, features=self.source, sampler=cfg.sampler_spec, hag=self.hag)

    def _offline_source(self, files, split_or_epoch, share=None, target=None) -> OfflineLoader:
        store = FeatureStore(self.ds, self.epochs.placement, files.packs, device=self.device,
                             backend=self.cfg.backend, tiers=self.tiers, features=self.source,
                             read_depth=self.read_depth, slab_rows=self.plan.batch_rows,
                             assembly=self.target.assembly())
        return OfflineLoader(files.samples, store, self.labels, self.read_depth, target or self.target, share, self.hag,
                             self.task.pass_batches(self, split_or_epoch))

    def _finished(self, p: "Pass", pipeline) -> None:
        """Adds a train pass's stage times, tier rows and disk bytes to the run's."""
        if not p.train:
            return
        for name, t in pipeline.times.items():
            acc = self.stage_times.setdefault(name, StageTime())
            acc.busy_s += t.busy_s
            acc.wait_s += t.wait_s
            acc.items += t.items
        for s in p.stats():
            t = self.accounting["tiers"].setdefault(s.name, {"hits": 0, "bytes": 0})
            t["hits"] += s.hits
            t["bytes"] += s.bytes
        self.accounting["disk_bytes"] += p.disk_bytes()
        self.accounting["backend"] = p.source.store.backend  # the reader's, "auto" resolved

    def _count(self, mb: MiniBatch) -> None:
        t = self.trained
        t["batches"] += 1
        t["input_rows"] += int(mb.x.shape[0])
        t["seeds"] += int(mb.labels.numel())
        dst = mb.destinations
        t["destinations"] = [a + b for a, b in zip(t["destinations"], dst)] if t["destinations"] else dst

    # -- what it did ----------------------------------------------------------------------------
    def rows_per_batch(self) -> dict:
        """Mean input rows and destinations per layer (input layer first) of the batches trained so far."""
        n = max(1, self.trained["batches"])
        return {"input": self.trained["input_rows"] / n, "destinations": [d / n for d in self.trained["destinations"]]}

    @property
    def backend(self) -> str:
        """The reader backend the finished train passes read with ("auto" resolved; --backend before any)."""
        return self.accounting.get("backend", self.cfg.backend)

    def stats(self) -> dict:
        """Rows and bytes served by each tier (memory tiers, page cache, disk) over the finished train passes,
        with each tier's share of the rows."""
        tiers = {name: dict(t) for name, t in self.accounting["tiers"].items()}
        rows = sum(t["hits"] for t in tiers.values())
        for t in tiers.values():
            t["hit_rate"] = t["hits"] / rows if rows else 0.0
        return tiers

    def summary(self) -> dict:
        """The data side of summary.json: offline work, pipeline stages, tiers, rows, the plan."""
        times = self.stage_times
        return {
            "sample_s": self.epochs.sample_s if self.epochs else 0.0,
            "pack_s": self.epochs.pack_s if self.epochs else 0.0,
            "offline": dict(self.epochs.phases) if self.epochs else {},
            "stage_times_s": {name: {"busy_s": t.busy_s, "wait_s": t.wait_s, "items": t.items}
                              for name, t in times.items()},
            "bottleneck": max(times, key=lambda n: times[n].busy_s) if times else None,
            "tiers": self.stats(),
            "rows_per_batch": self.rows_per_batch(),
            "hag": {**self.hag.stats.to_dict(),
                    **({"graph": self._graph_hag.stats()} if self._graph_hag not in (False, None) else {})},
            "disk_bytes_read": self.accounting["disk_bytes"],
            "features": self.source.name,
            "feature_row_bytes": self.source.row_bytes,
            "memory_budget_bytes": self.plan.budget,
            "backend": self.backend,
            "device": self.device,
            "host_gather": self.plan.host_gather.line,
            "dataset": str(self.data),
            "plan": plan_dict(self.plan),
        }

    def close(self) -> None:
        """Waits for the background epoch and releases the workdir."""
        if self.epochs is not None:
            self.epochs.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> "Loader":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


class Pass:
    """One pass over batches in order: iterating runs the pipeline and yields MiniBatches as they are ready
    (once; stopping early closes the pipeline). `stats()` and `disk_bytes()` count this pass's rows."""

    def __init__(self, loader: Loader, source, order: np.ndarray, start: int, train: bool):
        self.loader, self.source, self.order, self.start, self.train = loader, source, order, start, train

    def __len__(self) -> int:
        """Batches in the whole pass (those before `start` included)."""
        return len(self.order)

    def __iter__(self):
        if self.source is None or self.start >= len(self.order):
            return
        pipeline = self.source.pipeline(self.order[self.start:])
        try:
            with pipeline:
                for mb in pipeline:
                    mb.wait()  # the consumer's stream waits for the batch's copies
                    if self.train:
                        self.loader._count(mb)
                    yield mb
        finally:
            self.loader._finished(self, pipeline)

    def stats(self) -> list:
        return self.source.stats() if self.source is not None else []

    def disk_bytes(self) -> int:
        return self.source.disk_bytes() if self.source is not None else 0


class EvalPass:
    """An evaluation's batches, chunk by chunk (offline/eval_sets.py), each chunk a Pass."""

    def __init__(self, loader: Loader, eval_set: EvalSet, split: str):
        self.loader, self.eval_set, self.split = loader, eval_set, split

    def __len__(self) -> int:
        return len(self.eval_set)

    def __iter__(self):
        with closing(self.eval_set.chunks()) as chunks:
            for files in chunks:
                source = self.loader._offline_source(files, self.split)
                yield from Pass(self.loader, source, np.arange(len(files.samples)), 0, train=False)
