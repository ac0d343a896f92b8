"""`diskgnn.Loader`: the data side of a run, for one's own training loop (and diskgnn.train's), on either kind of graph.

    import diskgnn
    with diskgnn.Loader("data/w1", fanouts=[10, 5], batch_size=1024, memory_budget="2GiB") as loader:
        for epoch in range(3):
            for mb in loader.epoch(epoch):      # MiniBatch: blocks, x, labels (or mb.to_pyg())
                loss = F.cross_entropy(model(mb.blocks, mb.x), mb.labels)
                ...
        print(loader.stats(), loader.summary())

On a typed dataset the same Loader yields typed MiniBatches: `blocks[layer][relation]`, `x[type]`, `rows` (the node
ids per type), the target type's labels; `model` (opened) is the typed model its plan was sized with (e.g.
`out = loader.model(mb.blocks, mb.x, mb.rows)`).

Constructing it plans exactly as `python -m diskgnn.train` does with the same
options (the flags' names in snake case; `train.config`): the budget is
checked and the device decided (train/plan.py; a typed graph's plan:
train/typed_plan.py). Opening it (`open()`, or the with block) does the work,
in order: the workdir locked, epoch 0 sampled, the plan refined from it and
its hottest rows placed in the memory tiers, epoch 0 packed, the eval sets
sampled and packed (or streamed: offline/eval_sets.py), the tiers loaded.
`epoch(e)` runs e's pipeline (sample -> read -> assemble -> copy) while the
caller consumes its batches, and starts sampling and packing epoch e + 1 in
the background; `evaluation(split)` runs the val or test batches. The model
options (model, hidden, lr, ...) are the trainer's and are not used here,
except that the plan sizes the working set from `hidden` (a typed plan: from
the model's parameters). diskgnn.train is this object's first user: its Run
adds the step, evaluation and checkpoints.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .. import defaults
from ..data.builtin import default_dataset
from ..data.features import feature_source, type_variants
from ..data.format import open_dataset
from ..data.schema import relation_fanouts
from ..distributed import cooperative
from ..distributed.group import Group
from ..errors import DiskgnnError, UsageError
from ..loading.graph_hag import graph_hag
from ..loading.hag import HagBuilder
from ..loading.loaders import OfflineLoader, OnlineLoader
from ..offline.epochs import OfflineEpochs
from ..offline.eval_sets import EvalSet, chunk_batches
from ..offline.sample import open_graph
from ..store.by_type import TypedRows
from ..store.store import FeatureStore
from ..store.tiers import load_tiers
from ..target import target_for
from .config import TrainConfig
from .model import new_model
from .options import from_options, save
from .passes import EvalPass, Pass, PassAccounting
from .plan import Plan, check_fidelity, disk_copies, make_plan, offline_spec, seeds_of
from .report import data_summary, distributed_line, eval_line, hag_lines, measured_line, placed_line, plan_lines
from .tables import TypeTables
from .tasks import EVAL_EPOCH
from .typed_plan import TypedPlan
from .validation import validate_graph_kind
from .workdir import hold_workdir


class Loader(PassAccounting):
    """Plans, samples, packs and pipelines a dataset's batches; see the module's docstring."""

    def __init__(self, data=None, *, config: TrainConfig | None = None, group: Group | None = None,
                 log: Callable[[str], None] | None = print, steps_tables: bool = False, steps_captured: bool = False,
                 **options):
        """`data`: a dataset directory (None: the built-in synthetic dataset); `options`: diskgnn.train's
        options (fanouts, batch_size, memory_budget, sampling, features, workdir, ...), or a whole `config`.
        `log` receives the plan's lines (None: silent). `steps_tables`: the caller steps a typed run's tables
        (--featureless table, --embeddings) after each backward pass, as diskgnn.train's Run does; `steps_captured`:
        where the plan captures the step, the caller's makes the blocks (the Run's: target/graphed.py)."""
        if config is None:
            config = from_options(data=None if data is None else str(data), **options)
        elif data is not None or options:
            raise UsageError("Loader: pass either a config or data and options, not both")
        self.cfg, self.group, self.log = config, group or Group(), log
        cfg = config
        self.data = Path(cfg.data) if cfg.data else default_dataset(cfg.progress)
        self.ds = open_dataset(self.data, typed=True)
        self.typed = self.ds.typed
        validate_graph_kind(cfg, self.typed)
        if self.typed and (cfg.featureless == "table" or cfg.embeddings) and not steps_tables:
            raise UsageError("featureless='table' or embeddings: a typed run's tables train inside python -m "
                             "diskgnn.train (their rows are stepped after each backward pass); a Loader's own loop "
                             "takes learned or hashed rows")
        self.workdir = Path(cfg.workdir) if cfg.workdir else defaults.home() / "runs" / self.data.name
        if self.group.active:  # one machine's ranks must not share a workdir; nothing else assumes a shared one
            self.workdir = self.workdir / f"rank-{self.group.rank}"
        self.labels = np.asarray(self.ds.labels)
        self.train_ids = self.ds.split("train")
        self.task = cfg.task_spec
        self.model = None  # a typed run's, made as it opens (its parameters size the plan); the Run trains it
        self.tables = None  # a typed run's tables (--embeddings: every type's; --featureless table)
        if self.typed:
            self._typed_side()
        else:
            self._plain_side()
        # the HAG search for blocks (a typed batch's per relation); GAT weights every edge: no shared partial sums;
        # the HAG kernels are the CPU's
        self.hag = HagBuilder(cfg.hag if not cfg.weighs_every_edge and target_for(self.plan.device).hag else "off")
        PassAccounting.__init__(self)
        self.device = self.plan.device
        self.target = target_for(self.device)  # where batches are assembled and steps computed
        self.train_target = self.target.for_captured_steps() if steps_captured and self.plan.step.graphed \
            else self.target  # the train passes'
        self._graph_hag = False  # the whole graph's for --eval full (loading/graph_hag.py), or None: at first use
        self._graph = None  # a typed graph's relations mapped for online sampling, at its first pass
        self.epochs: OfflineEpochs | None = None
        self.tiers = None
        self.eval_sets: dict[str, EvalSet] = {}  # split -> its sampled eval batches, kept or streamed
        self.read_depth = self.plan.read_depth
        self._lock = None  # the workdir's, held while open

    def _plain_side(self) -> None:
        """One node type's rows (a feature source), its plan, its fanouts."""
        cfg = self.cfg
        try:
            self.source = feature_source(self.ds, cfg.features)
        except DiskgnnError as e:
            raise UsageError(f"--features {cfg.features}: {e}") from None
        if self.ds.feature_dim == 0 and not cfg.embeddings:
            raise DiskgnnError(f"{self.data}: has no node features: train it with --embeddings D (learnable "
                               "node embeddings of D values)")
        self.task.check(self.ds, self.data)
        # decides the device, the precision, the host gather
        self.plan: Plan | TypedPlan = make_plan(self.ds, self.source, cfg, self.group.world)
        self.fanouts, self.eval_fanouts = cfg.fanout_list, cfg.eval_fanout_list

    def _typed_side(self) -> None:
        """Each featured type's rows (as stored or a quantized variant's codes, --features), the tables it
        learns (train/tables.py TypeTables), the plan made before any work, the fanouts per hop and relation."""
        cfg, schema = self.cfg, self.ds.schema
        self.task.check(self.ds, self.data)  # node classification on the target type
        self.fanouts = relation_fanouts(cfg.fanouts, schema)
        layers = len(self.fanouts)
        self.eval_fanouts = ([[-1] * len(schema.relations)] * layers if cfg.evaluation.full else
                             relation_fanouts(cfg.eval_fanouts or cfg.fanouts, schema, "--eval-fanouts"))
        if len(self.eval_fanouts) != layers:
            raise UsageError(f"--eval-fanouts {cfg.eval_fanouts}: needs {layers} layers, as --fanouts has")
        self.plan = TypedPlan.made(cfg)
        self.source = TypedRows(self.ds, cfg.backend, type_variants(cfg.features, schema))
        for name, src in self.source.sources.items():
            check_fidelity(src, cfg, name)
        self.tables = TypeTables(cfg, schema, self.workdir, self.group)

    def open(self, model: torch.nn.Module | None = None) -> "Loader":
        """Makes the run's data ready, in this order: the workdir locked and the configuration saved in it, the plan
        printed; then, sampling offline, epoch 0 sampled, the plan refined from it and its rows placed, the eval
        sets sampled and packed, the memory tiers filled. A typed run's plan is refined from epoch 0 under online
        sampling too, sized with `model` (None: one made as the options say). Once; returns the loader."""
        if self._lock is not None:
            return self
        cfg = self.cfg
        self._lock = hold_workdir(self.workdir)
        save(cfg, self.workdir / "config.yaml")
        if self.typed:
            torch.manual_seed(cfg.seed)
            self.model = model or new_model(cfg, self.ds).to(self.device)
            lines = [TypedPlan.schema_line(cfg, self.ds, self.fanouts)] + hag_lines(cfg, self.hag.mode)
        else:
            lines = plan_lines(self.plan) + hag_lines(cfg, self.hag.mode)
        if self.group.active:
            lines.insert(1, distributed_line(cfg, self.group, self.workdir))
        for line in lines:
            self.say(line)
        if cfg.sampling_mode.ahead or self.typed:
            self.plan = self._refine(self.plan)
            self.read_depth = self.plan.read_depth
        if cfg.sampling_mode.ahead:
            self._make_eval_sets()
            if not self.typed:
                self.tiers = load_tiers(self.ds, self.epochs.placement, self.device, cfg.backend, self.source,
                                        self.plan.host_gather.zero_copy)
        return self

    # -- planning -----------------------------------------------------------------------------
    def _refine(self, plan):
        """Samples epoch 0 and refines the plan from it (its largest batch, its rows placed, the disk checked),
        then packs epoch 0 as the refined plan says."""
        cfg, ds, group = self.cfg, self.ds, self.group
        self.epochs = OfflineEpochs(ds, self.workdir / "epochs", self._spec(plan))
        most = self.epochs.sample_first()
        if len(self.epochs.samples0) == 0:
            raise DiskgnnError(f"{self.data}: {self.task.items_text(ds)} make fewer than {group.world} batches of "
                               f"{cfg.batch_size}: every rank needs one (lower --batch-size)")
        if self.typed:
            plan = plan.refined(self, self.model)
            self.source.place(self.epochs.place_held(plan.held))  # the featured types' rows of the host tier
            self.tables.hold(plan.held, self.say)  # and the tables' hot rows
        else:
            copies = disk_copies(cfg, *self._items(), self.task.eval_batch())
            # a resumed run's embedding table and journal are on disk already, and counted by the plan again
            held = sum(f.stat().st_size for f in (self.workdir / "embeddings").glob("*.bin"))
            bound, plan = plan.batch_rows, plan.refined(ds, self.source, cfg, group.world, self.epochs, most, copies,
                                                        self.workdir, shutil.disk_usage(self.workdir).free + held)
            if plan.batch_rows != bound:
                self.say(measured_line(plan, bound, most))
        # the packer's buffers and the topology's read-ahead follow the refined plan from here on
        self.epochs.follow(self._spec(plan))
        if cfg.sampling_mode.ahead:
            self.epochs.files(0)  # packed now, as the refined plan says
        if not self.typed:
            self.say(placed_line(plan, self.workdir))
        return plan

    def _spec(self, plan):
        features = self.source.sources if self.typed else self.source
        fanouts = tuple(tuple(hop) for hop in self.fanouts) if self.typed else None
        return offline_spec(plan, self.cfg, features, self.group, self.hag, fanouts)

    def eager_steps(self) -> None:
        """The captured step's capture failed: from here on the train passes make the eager step's blocks."""
        self.train_target = self.target

    def held_on_disk(self) -> int:
        """Bytes of earlier runs' epoch and eval files in the workdir, which this run replaces."""
        return sum(f.stat().st_size for d in ("epochs", "eval") if (self.workdir / d).is_dir()
                   for f in (self.workdir / d).iterdir() if f.is_file() and f != self.epochs.samples0.path)

    def _items(self) -> tuple[int, int, int]:
        """What the train epochs and the val and test sets are cut from (nodes, or edges)."""
        return self.task.train_items(self.ds), self.eval_size("val"), self.eval_size("test")

    def _make_eval_sets(self) -> None:
        """The eval sets kept whole (sampled and packed now rather than at the first evaluation, where they would
        pack beside epoch 1's packer), or streamed a chunk at a time past a train epoch's seeds. A typed run's
        --eval full is sampled with every neighbour."""
        cfg = self.cfg
        if not (cfg.evaluation.sampled or (self.typed and cfg.evaluation.full)):
            return
        chunk = chunk_batches(*seeds_of(cfg, *self._items(), self.task.eval_batch()), self.task.eval_batch())
        for split in ("val", "test"):
            if self.eval_size(split):  # all of them: each rank's set keeps its share of their batches
                seeds, batches = self.task.eval_sets(self, split)
                self.eval_sets[split] = EvalSet(self.epochs, split, seeds=seeds, batches=batches,
                                                fanouts=self.eval_fanouts, epoch_key=EVAL_EPOCH[split],
                                                max_batches=cfg.eval_max_batches, chunk=chunk)
        self.say(eval_line(cfg, self.eval_sets, chunk))

    def say(self, line: str) -> None:
        """Logs on rank 0 only (every rank plans and trains alike)."""
        if self.group.leader and self.log is not None:
            self.log(line)

    def graph_hag(self):
        """The dataset's stored whole-graph HAG under --hag on|auto (searched and stored at first use), else None."""
        if self.typed or self.hag.mode == "off":  # a typed run's --eval full is sampled (every neighbour)
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
    def epoch(self, epoch: int, start: int = 0) -> Pass:
        """Epoch `epoch`'s train batches from position `start` on (a resumed epoch's next batch), in training order.
        Epoch e + 1 (up to the `epochs` option) is sampled and packed in the background meanwhile, and the files
        of the epochs before e are deleted."""
        self._opened()
        cfg = self.cfg
        ahead = cfg.sampling_mode.ahead
        if ahead:
            for done in range(epoch):
                self.epochs.release(done)
        source = self._train_source(epoch)
        if ahead and epoch + 1 < cfg.epochs:
            self.epochs.prefetch(epoch + 1)
        order = self.epochs.order(epoch, len(source)) if ahead else np.arange(len(source))
        order = order[: cfg.max_batches] if cfg.max_batches is not None else order
        return Pass(self, source, order, start, train=True)

    @property
    def num_batches(self) -> int:
        """Train batches per epoch (this rank's)."""
        cfg = self.cfg
        n = len(self.epochs.samples0) if self.epochs else -(-self.train_ids.size // cfg.batch_size)
        return min(n, cfg.max_batches) if cfg.max_batches is not None else n

    def evaluation(self, split: str) -> Pass | EvalPass:
        """The batches of this rank's share of `split` ("val" or "test"), at most `eval_max_batches`; under
        --eval full on a plain graph, full-neighbour inference runs instead (diskgnn/nn/inference.py)."""
        self._opened()
        cfg = self.cfg
        if split in self.eval_sets:
            return EvalPass(self, self.eval_sets[split], split)
        if not cfg.sampling_mode.online:
            return Pass(self, None, np.arange(0), 0, train=False)  # the split is empty
        seeds = self.ds.split(split) if self.typed else self.eval_seeds(split)
        source = self._online_source(seeds, self.eval_fanouts, EVAL_EPOCH[split])
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
            return self._online_source(self.train_ids, self.fanouts, epoch, self.train_target)
        g, owner = self.group, cfg.owner
        share = (lambda batch: cooperative.exchange_plan(batch, cooperative.owners(
            batch.nodes, g.world, owner, self.ds.num_nodes), g.rank, g.world)) if cfg.distribution.cooperative else None
        return self._offline_source(self.epochs.files(epoch), epoch, share, self.train_target)

    def _online_source(self, seeds: np.ndarray, fanouts, epoch: int, target=None) -> OnlineLoader:
        cfg = self.cfg
        if self.typed:  # rows by id through each featured type's tier chain; the relations mapped once
            self._graph = self._graph or open_graph(self.ds)
            typed = {"graph": self._graph, "store": self.source.store(None, self.read_depth)}
        return OnlineLoader(self.ds, seeds, fanouts=fanouts, batch_size=cfg.batch_size, seed=cfg.seed, epoch=epoch,
                            labels=self.labels, target=self._target(target), read_depth=self.read_depth,
                            backend=cfg.backend, sampler=cfg.sampler_spec, hag=self.hag,
                            **(typed if self.typed else {"features": self.source}))

    def _offline_source(self, files, split_or_epoch, share=None, target=None) -> OfflineLoader:
        if self.typed:
            store = self.source.store(files.packs, self.read_depth)  # its slabs for the reads in flight
        else:
            store = FeatureStore(self.ds, self.epochs.placement, files.packs, device=self.device,
                                 backend=self.cfg.backend, tiers=self.tiers, features=self.source,
                                 read_depth=self.read_depth, slab_rows=self.plan.batch_rows,
                                 assembly=self.target.assembly())
        return OfflineLoader(files.samples, store, self.labels, self.read_depth, self._target(target), share,
                             self.hag, self.task.pass_batches(self, split_or_epoch))

    def _target(self, target):
        """Where a pass's batches are laid out: a typed one's on the host, moved to the device as they come
        (passes.py)."""
        return target_for("cpu") if self.typed else target or self.target

    def summary(self) -> dict:
        """The data side of summary.json (report.data_summary)."""
        return data_summary(self)

    def close(self) -> None:
        """Waits for the background epoch and releases the workdir."""
        if self.epochs is not None:
            self.epochs.close()
        if self.tables is not None:
            self.tables.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> "Loader":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
