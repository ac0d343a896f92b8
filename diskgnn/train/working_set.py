"""The host memory a run needs besides its caches, from the shape of its batches: what the plan checks against
--memory-budget. Before sampling, a batch's input rows are bounded from the fanouts as if no row were reached
twice; once epoch 0 is sampled the plan may size them from its batches instead (plan.measured)."""

from __future__ import annotations

from .. import defaults
from ..data.features import FeatureSource
from ..data.format import Dataset
from ..nn.models import layer_dims
from ..store.embeddings import working_bytes as embedding_bytes
from ..target import target_for
from .config import TrainConfig


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


def working_set(ds: Dataset, source: FeatureSource, cfg: TrainConfig, read_depth: int = defaults.READ_DEPTH,
                pack_memory: int = defaults.PACK_MEMORY, precision: str = "fp32", device: str = "cpu",
                rows: int | None = None, world: int = 1) -> int:
    """Host memory the run needs besides its caches: an estimate, checked against the budget. `precision`: the
    step's on a CPU; `rows`: a batch's input rows at most (default: batch_layers' bound); `world`: the ranks
    (each packs its share of the epoch, and steps every rank's table rows: train/tables.py)."""
    layers = batch_layers(ds, cfg.seeds_per_batch, cfg.fanout_list)
    rows = layers[0][0] if rows is None else rows
    tables = ds.num_nodes * (5 + 8)  # placement lookup tables, access counts
    dims = layer_dims(ds.feature_dim + cfg.embeddings, cfg.hidden, cfg.task_spec.output_dim(ds), len(layers))
    host = target_for(device).host_bytes(source, cfg, layers, dims, rows, read_depth, precision)
    packs = pack_plan_bytes(ds, cfg, rows, world) if source.row_bytes else 0  # a featureless dataset packs nothing
    return defaults.TRAIN_BASE_RSS + tables + host + pack_memory + packs + embedding_bytes(
        ds.num_nodes, cfg.embeddings, cfg.embedding_optimizer, rows * world)


def pack_plan_bytes(ds: Dataset, cfg: TrainConfig, rows: int, world: int = 1) -> int:
    """The packer's plan while it packs an epoch beside training (offline sampling): at most every input
    row of every batch of the epoch packed (W1 at fanouts 10,5 packs 0.48 of that bound with 10 % cached). Each
    of `world` ranks packs its shard of the batches, or (cooperative) its rows of the global batches: as many."""
    if cfg.sampling_mode.online:
        return 0
    batches = -(-cfg.task_spec.train_items(ds) // (cfg.batch_size * world))
    if cfg.max_batches is not None:
        batches = min(batches, cfg.max_batches)
    recent_table = 8 * ds.num_nodes if cfg.recent_window else 0  # the batch and position each node was last read
    return defaults.PACK_PLAN_BYTES_PER_ROW * rows * batches + recent_table
