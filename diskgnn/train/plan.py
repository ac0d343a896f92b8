"""The run's plan: what --memory-budget holds and where each byte of it goes, decided before any work.

`make_plan` turns (dataset, feature rows, configuration) into a `Plan`, deciding once what the rest of the
run reads from it: the device, the precision, how host tiers' rows reach a GPU (zero copy or the CPU's
gather, and why: under `--zero-copy auto` a short calibration measures both), the working set
(working_set.py), the reads in flight, each memory tier's bytes (learnable embeddings' hot rows or partition
buffer first), the page cache left (the topology is read ahead into it where it fits), the packer's buffers.
Where the budget cannot hold the defaults it reads fewer batches ahead and packs from smaller buffers before
it refuses. Once epoch 0 is sampled, `Plan.refined` returns it refined once: sized for epoch 0's largest batch
instead of the bound from the fanouts (`resized`), epoch 0's rows placed in those tiers, and the expected hit
rates and the disk the samples and packs take (`placed`). The run reads this one value; report.py writes the
plan's lines and summary.json's "plan" from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from .. import defaults
from ..data.features import FeatureSource
from ..data.quantize import fidelity
from ..data.format import Dataset
from ..errors import DiskgnnError, UsageError
from ..distributed.cooperative import OwnedRows
from ..offline.epochs import EpochSpec
from ..offline.partitions import buffer_plan
from ..offline.sample import topology_bytes
from ..store.records import row_bytes as embedding_row_bytes
from ..store.uva import HostGather, host_gather
from ..target.graphed import StepChoice, choose
from ..target import target_for
from ..units import format_size
from .config import TrainConfig
from .modes import Precision, Sampling
from .working_set import batch_layers, working_set


def seeds_of(cfg, train: int, val: int, test: int, eval_batch: int) -> tuple[int, int]:
    """(a train epoch's seeds, the sampled evaluation's): val and test together, of `eval_batch` a batch, each cut
    to its first batches where --max-batches or --eval-max-batches asks."""
    def cut(n: int, batches: int | None, size: int) -> int:
        return n if batches is None else min(n, batches * size)

    return cut(train, cfg.max_batches, cfg.batch_size), \
        cut(val, cfg.eval_max_batches, eval_batch) + cut(test, cfg.eval_max_batches, eval_batch)


def disk_copies(cfg, train: int, val: int, test: int, eval_batch: int, streamed: bool = True) -> float:
    """How many epochs' samples and packs the workdir holds at once, in train epochs of seeds: the one training
    and (fresh epochs) the next, being made meanwhile, plus the sampled evaluation's: its sets kept, or two of
    its `streamed` chunks, an epoch's at most (offline/eval_sets.py)."""
    copies = 1 if cfg.sampling_mode.replay or cfg.epochs == 1 else 2
    if cfg.evaluation.sampled:
        train_seeds, eval_seeds = seeds_of(cfg, train, val, test, eval_batch)
        copies += (min(eval_seeds, train_seeds) if streamed else eval_seeds) / max(1, train_seeds)
    return copies


def resolve_precision(cfg: TrainConfig, device: str) -> Precision:
    """fp32 or bf16: --precision, with auto resolved by what the device computes natively."""
    import torch

    if cfg.precision_asked is not None:
        return cfg.precision_asked
    native = torch.cuda.is_bf16_supported() if device == "cuda" else torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return Precision.BF16 if native else Precision.FP32


def resolve_device(device: str) -> str:
    """--device's value (auto, cpu or cuda) as the device the run uses."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: CUDA is not available on this machine (torch "
                           f"{torch.__version__}, built {'with' if torch.version.cuda else 'without'} CUDA)")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


@dataclass(frozen=True)
class Plan:
    """Every number the run's memory and disk follow (bytes unless named otherwise)."""

    dataset: str
    num_nodes: int
    num_edges: int
    feature_dim: int
    feature_dtype: str
    splits: dict[str, int]
    budget_text: str  # --memory-budget as written
    budget: int
    device: str
    precision: Precision  # the step's (--precision auto resolved for the device)
    host_gather: HostGather  # with a device: zero copy or the CPU's gather of host tiers' rows, and why
    step: StepChoice  # the train step captured as a CUDA graph or eager, and why
    sampling: Sampling
    features: str  # the stored rows' name: fp32 or a quantized spec
    features_file: str
    features_fidelity: dict | None  # a quantized variant's report from its fit
    row_bytes: int
    raw_row_bytes: int  # features.bin's
    working_set: int
    read_depth: int
    squeezed: bool  # fewer reads in flight or smaller packer buffers than the defaults, to fit
    pack_floor: int  # the packer's buffers at least (0: online sampling packs nothing)
    tiers: dict[str, int]  # memory tier -> bytes, fastest first
    embedding_dim: int  # --embeddings; its table's bytes on disk (values and optimizer state), its hot rows' in memory
    embedding_table: int
    embedding_host: int
    embedding_buffer: tuple[int, int] | None  # --embedding-partitions: (P, partitions in memory at once)
    workload: str  # the model and the batches, as the memory line names them
    batch_rows: int = 0  # a batch's input rows at most (batch_layers', or measured): what slabs are made for
    page_cache: int = 0  # what the budget leaves beyond the working set and the host cache
    topology_bytes: int = 0
    topology_read_ahead: bool = False
    pack_memory: int = 0
    recent_batches: int = 0  # the window of the recent-rows tier
    # known once epoch 0 is sampled and placed (placed())
    expected_hit_rates: dict[str, float] = field(default_factory=dict)
    input_rows_per_batch: float = 0.0
    tier_rows_placed: dict[str, int] = field(default_factory=dict)
    samples_bytes_per_epoch: int = 0
    packs_bytes_per_epoch: int = 0
    disk_needed: int = 0
    disk_free: int = 0

    @property
    def feature_bytes(self) -> int:
        return self.num_nodes * self.row_bytes

    @property
    def tier_rows(self) -> dict[str, int]:
        return {name: b // max(1, self.row_bytes) for name, b in self.tiers.items()}

    def refined(self, ds: Dataset, source: FeatureSource, cfg: TrainConfig, world: int, epochs, most: int,
                copies: float, workdir, disk_free: int) -> "Plan":
        """The plan once epoch 0 is sampled (the one refinement a run makes): sized for its largest batch's `most`
        input rows (resized), its rows placed in the tiers that sizes (`epochs`: OfflineEpochs, which keeps the
        placement), and what follows from the placement (placed)."""
        sized = self.resized(ds, source, cfg, world, most)
        placement = epochs.plan_placement(list(sized.tiers.items()),  # the hot rows' placement needs the counts
                                          keep_counts=bool(cfg.embeddings) and not sized.embedding_buffer)
        return sized.placed(placement, epochs.samples_bytes(), epochs.epoch0_rows(), copies, workdir, disk_free)

    def resized(self, ds: Dataset, source: FeatureSource, cfg: TrainConfig, world: int, most: int) -> "Plan":
        """Sized for the `most` input rows one of epoch 0's batches reads (with headroom for later epochs') rather
        than the bound, which assumes no row is reached twice (W2 at 1,024 seeds: 62,464 rows, where 34,231 at
        most are read); the host cache and the page cache get what that frees. Kept where evaluation or link
        batches may be larger than epoch 0's train batches."""
        if not cfg.task_spec.sized_from_epoch0 or cfg.eval_fanout_list != cfg.fanout_list \
                or not defaults.MEASURED_ROWS_HEADROOM:
            return self
        rows = min(self.batch_rows, int(most * defaults.MEASURED_ROWS_HEADROOM) + 1)
        return dataclasses.replace(self, **_sizes(ds, source, cfg, self.device, self.precision, world, rows))

    def placed(self, placement, samples_bytes: int, rows: dict, copies: float, workdir, disk_free: int) -> "Plan":
        """The plan with epoch 0's placement and packs' rows (OfflineEpochs.epoch0_rows): expected hit rates of
        the tiers, the recent-rows tier and the packs, and the disk `copies` epochs' samples and packs take at
        once, with headroom (refused with one line where the workdir's file system lacks it)."""
        packs_bytes = rows["pack_bytes"]
        # beside them, --embeddings' table and its undo journal (each row once an interval at most), edge buckets
        disk = int(copies * (packs_bytes + samples_bytes) * defaults.DISK_HEADROOM) + 2 * self.embedding_table \
            + (8 * self.num_edges if self.embedding_buffer else 0)
        if disk > disk_free:
            raise DiskgnnError(f"{workdir}: needs ~{format_size(disk)} of disk for samples, packs and embeddings, "
                               f"{format_size(disk_free)} free (use --workdir elsewhere, raise the "
                               "cache budgets or set --max-blowup)")
        rates = dict(zip(placement.tier_names, placement.expected_hit_rates))
        if self.recent_batches:
            rates["recent"] = rows["recent_rows"] / max(1, rows["input_rows"])
        return dataclasses.replace(
            self, expected_hit_rates=rates, input_rows_per_batch=rows["input_rows_per_batch"],
            tier_rows_placed={n: int(ids.size) for n, ids in zip(placement.tier_names, placement.tier_ids)},
            samples_bytes_per_epoch=samples_bytes, packs_bytes_per_epoch=packs_bytes, disk_needed=disk,
            disk_free=disk_free)


def _fit(source: FeatureSource, cfg: TrainConfig, budget: int, host: int,
         working: Callable[[int, int], int]) -> tuple[int, int, int]:
    """(reads in flight, packer floor, working set): the deepest reads (--read-depth, or READ_DEPTH down to
    1), then the larger packer floor, that the budget holds beside an explicit --host-cache. `working`: the
    working set with (reads in flight, packer floor)."""
    depths = [cfg.read_depth] if cfg.read_depth is not None else range(defaults.READ_DEPTH, 0, -1)
    packs_nothing = cfg.sampling_mode.online or not source.row_bytes  # or a featureless dataset's
    floors = (0,) if packs_nothing else (defaults.PACK_MEMORY, defaults.MIN_PACK_MEMORY)
    for depth in depths:
        for pack in floors:
            need = working(depth, pack)
            if need + host <= budget:
                return depth, pack, need
    smallest = working(depths[-1], floors[-1])
    if host and smallest <= budget:
        raise UsageError(f"--host-cache {cfg.host_cache} plus the working set (about {format_size(smallest)}) "
                           f"exceed --memory-budget {cfg.memory_budget}")
    raise UsageError(f"--memory-budget {cfg.memory_budget} is too small: this run's working set needs "
                       f"about {format_size(smallest)} (lower --batch-size or --fanouts, or raise the budget)")


def _sampler_text(cfg: TrainConfig) -> str:
    return ", ".join(["labor"] + (["layer dependency"] if cfg.layer_dependency else [])
                     + ([f"batch dependency {cfg.batch_dependency}"] if cfg.batch_dependency > 1 else []))


def offline_spec(plan: Plan, cfg: TrainConfig, source: FeatureSource | dict, group, hag,
                 fanouts: tuple | None = None) -> EpochSpec:
    """What the run's offline epochs follow (a typed graph's: `fanouts` per hop and relation, `source` per featured
    type). Under cooperative minibatching every rank samples the whole global
    batch (world x --batch-size seeds) and places, packs and reads only the input rows it owns; under
    data parallelism each rank keeps its shard of the batches. HAGs are stored with the samples except for
    cooperative runs, whose blocks are each rank's share (searched as they are decoded)."""
    coop = cfg.distribution.cooperative
    return EpochSpec(
        fanouts=fanouts or tuple(cfg.fanout_list), batch_size=cfg.batch_size * (group.world if coop else 1),
        seed=cfg.seed,
        pack_memory=plan.pack_memory, features=source, replay=cfg.sampling_mode.replay, max_blowup=cfg.max_blowup,
        threads=cfg.threads, max_batches=cfg.max_batches, read_ahead=plan.topology_read_ahead,
        sampler=cfg.sampler_spec, recent=plan.recent_batches, shard=(0, 1) if coop else (group.rank, group.world),
        rows=(lambda samples: OwnedRows(samples, group.rank, group.world, cfg.owner, plan.num_nodes)) if coop else None,
        eval_batch_size=cfg.batch_size * (group.world if coop else 1), eval_shard=(group.rank, group.world),
        hag=None if coop else hag, link=cfg.link_spec, partitions=plan.embedding_buffer)


def make_plan(ds: Dataset, source: FeatureSource, cfg: TrainConfig, world: int = 1) -> Plan:
    """The plan of one of `world` ranks, before any work: refused with one line where the budget cannot hold it.
    The device, the precision and the host tiers' way to the device are decided here (a calibration runs for
    --zero-copy auto on a GPU) and read from the plan everywhere else."""
    device = resolve_device(cfg.device)
    return plan_for(ds, source, cfg, device, resolve_precision(cfg, device),
                    lambda: host_gather(device, cfg.zero_copy, source.row_bytes), world)


def check_fidelity(source: FeatureSource, cfg: TrainConfig, node_type: str | None = None) -> None:
    """Refuses a quantized variant whose fit was refused (kept with quantize --force) unless --force-features."""
    if source.fidelity and source.fidelity.get("refused") and not cfg.force_features:
        whose = f"{node_type}'s {source.name}" if node_type else "its"
        raise DiskgnnError(f"--features {cfg.features}: {whose} fit was refused ({fidelity.refusal(source.fidelity)}) "
                           "and stored with quantize --force; pass --force-features to train on it anyway")


def plan_for(ds: Dataset, source: FeatureSource, cfg: TrainConfig, device: str, precision: str,
             gather: Callable[[], HostGather], world: int = 1) -> Plan:
    """make_plan's planning, the device's decisions given (`gather` is called once the budget is known to
    hold the run: it may calibrate)."""
    check_fidelity(source, cfg)
    precision = Precision(precision)
    pilot = cfg.task_spec.pilot_rows(ds)
    rows = None if pilot is None else min(pilot, batch_layers(ds, cfg.seeds_per_batch, cfg.fanout_list)[0][0])
    sizes = _sizes(ds, source, cfg, device, precision, world, rows)
    return Plan(
        dataset=str(ds.path), num_nodes=ds.num_nodes, num_edges=ds.num_edges, feature_dim=ds.feature_dim,
        feature_dtype=ds.feature_dtype.name, splits=cfg.task_spec.splits(ds),
        budget_text=cfg.memory_budget, budget=cfg.budget_bytes, device=device, precision=precision,
        host_gather=gather(), step=choose(cfg.cuda_graphs, device, _uncapturable(cfg)),
        sampling=cfg.sampling_mode, features=source.name,
        features_file=source.path.name, features_fidelity=source.fidelity, row_bytes=source.row_bytes,
        raw_row_bytes=ds.row_bytes, embedding_dim=cfg.embeddings,
        workload=f"sampling {cfg.sampling}" + (f" ({_sampler_text(cfg)})" if cfg.sampler != "neighbor" else "")
                 + f"; model {cfg.model} (fanouts {cfg.fanouts}, batch {cfg.batch_size}, hidden {cfg.hidden})"
                 + cfg.task_spec.workload_text(),
        recent_batches=cfg.recent_window, **sizes)


def _uncapturable(cfg: TrainConfig) -> str | None:
    """Why this run's train step cannot be captured as a CUDA graph (target/graphed.py), or None."""
    if cfg.task_spec.uncaptured:
        return f"--task {cfg.task}: {cfg.task_spec.uncaptured}"
    if cfg.embeddings:
        return "--embeddings: the table's rows are gathered and stepped on the host each batch"
    if cfg.distribution.independent or cfg.distribution.cooperative:
        return f"--distributed {cfg.distributed}: its collectives are not captured"
    return None


def _sizes(ds: Dataset, source: FeatureSource, cfg: TrainConfig, device: str, precision: str, world: int,
           rows: int | None) -> dict:
    """Where the budget's bytes go for batches of at most `rows` input rows (None: the fanouts' bound): the
    working set, the reads in flight, each tier, the embeddings' memory, the page cache, the packer."""
    budget = cfg.budget_bytes
    explicit_host, explicit_emb = cfg.host_cache_bytes or 0, cfg.embedding_cache_bytes
    depth, floor, need = _fit(source, cfg, budget, explicit_host + (explicit_emb or 0), lambda depth, pack: working_set(
        ds, source, cfg, depth, pack, precision, device, rows, world))
    features = ds.num_nodes * source.row_bytes
    # no tier larger than its rows; auto: half of what the budget leaves (the rest: page cache), embeddings' first
    table = ds.num_nodes * embedding_row_bytes(cfg.embeddings, cfg.embedding_optimizer)
    left = budget - need - explicit_host  # partitioned, the buffer takes 3/4 of it: a batch reads nothing else
    emb_host = min(table, left * (3 if cfg.embedding_partitions else 2) // 4 if explicit_emb is None else explicit_emb)
    buffer = buffer_plan(cfg.embedding_partitions, ds.num_nodes, table, emb_host) if cfg.embedding_partitions else None
    host = min(features, (budget - need - emb_host) // 2) if cfg.host_cache_bytes is None else explicit_host
    tiers = {"host": host}
    if target_for(device).device_tier:
        if cfg.device_cache_bytes is None:
            import torch

            tiers = {"device": min(features, torch.cuda.mem_get_info()[0] // 4), **tiers}
        else:
            tiers = {"device": cfg.device_cache_bytes, **tiers}
    sizes = dict(working_set=need, read_depth=depth, pack_floor=floor, tiers=tiers, embedding_table=table,
                 squeezed=(cfg.read_depth is None and depth < defaults.READ_DEPTH) or 0 < floor < defaults.PACK_MEMORY,
                 embedding_host=emb_host, embedding_buffer=buffer,
                 batch_rows=rows or batch_layers(ds, cfg.seeds_per_batch, cfg.fanout_list)[0][0])
    if cfg.sampling_mode.online:
        return sizes
    # What the budget leaves to the page cache goes first to the topology (read ahead only where it
    # fits), then half of the rest to the packer: it stages one buffer per batch, so on a fixed
    # budget its writes shrink as an epoch's batches grow in number (W1 at 16M nodes: 124 KiB with
    # 256 MiB, 590 KiB with 1 GiB; packing 26 s against 23 s, where 8M nodes took 11 s).
    page_cache = budget - need - min(features, host) - emb_host
    topology = topology_bytes(ds)
    read_ahead = topology <= page_cache
    spare = max(0, page_cache - (topology if read_ahead else 0))
    return dict(sizes, page_cache=page_cache, topology_bytes=topology, topology_read_ahead=read_ahead,
                pack_memory=floor + min(defaults.MAX_PACK_MEMORY - floor, spare // 2))
