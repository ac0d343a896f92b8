"""A TrainConfig's validation: every bad value refused in one line naming its flag, before any work (config.py
holds the options and what follows from them)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..data.features import RAW_FEATURES
from ..data.quantize.spec import canonical_spec
from ..errors import DiskgnnError, UsageError, closest


def validate(cfg) -> None:
    """Every option of a TrainConfig (`cfg`) checked, each bad value refused in one line naming its flag."""
    for f in dataclasses.fields(cfg):
        choices = f.metadata.get("choices")
        value = getattr(cfg, f.name)
        if choices and value not in choices:
            raise UsageError(f"--{f.name.replace('_', '-')} {value}: expected one of {', '.join(choices)}"
                             + closest(str(value), choices))
    # each property refuses a bad value now, not an epoch in
    cfg.checkpoint_interval, cfg.val_interval, cfg.dist_timeout_s  # noqa: B018
    if cfg.val_interval is not None and cfg.eval == "none":
        raise UsageError(f"--val-every {cfg.val_every}: nothing to validate with --eval none")
    if cfg.val_interval is not None and cfg.val_interval[0] == "seconds" and cfg.distributed != "none":
        raise UsageError(f"--val-every {cfg.val_every}: under --distributed, a number of batches (every rank "
                         "validates at the same one)")
    if cfg.distributed != "none" and cfg.sampling == "online":
        raise UsageError(f"--distributed {cfg.distributed}: needs --sampling offline or replay (each rank "
                         "trains batches sampled ahead)")
    if cfg.recent_batches != "auto" and not (cfg.recent_batches.isdigit() and int(cfg.recent_batches) <= 64):
        raise UsageError(f"--recent-batches {cfg.recent_batches}: expected auto or a number of batches "
                         "from 0 to 64")
    if cfg.batch_dependency < 1:
        raise UsageError(f"--batch-dependency {cfg.batch_dependency}: must be at least 1")
    if cfg.sampler != "labor" and (cfg.layer_dependency or cfg.batch_dependency > 1):
        raise UsageError("--layer-dependency and --batch-dependency need --sampler labor")
    if not cfg.per_relation:  # else checked against the heterogeneous dataset's relations as it opens
        fanouts = cfg.fanout_list
        if any(f == 0 or f < -1 for f in fanouts):
            raise UsageError(f"--fanouts {cfg.fanouts}: each must be positive or -1 (all neighbours)")
        if len(cfg.eval_fanout_list) != len(fanouts):
            raise UsageError(f"--eval-fanouts {cfg.eval_fanouts}: needs {len(fanouts)} values, one per layer")
    for name in ("batch_size", "hidden", "epochs", "heads", "max_batches", "eval_max_batches", "threads",
                 "read_depth"):
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(cfg, name)}: must be at least 1")
    if not 0 <= cfg.dropout < 1:
        raise UsageError(f"--dropout {cfg.dropout}: must be in [0, 1)")
    if cfg.lr <= 0:
        raise UsageError(f"--lr {cfg.lr}: must be positive")
    if cfg.max_blowup is not None and cfg.max_blowup <= 0:
        raise UsageError(f"--max-blowup {cfg.max_blowup}: must be positive")
    if cfg.model == "gat" and cfg.hag == "on":
        raise UsageError("--hag on: gat weights every edge, so shared partial sums do not apply (sage, gcn)")
    if cfg.model == "gat" and cfg.hidden % cfg.heads:
        raise UsageError(f"--hidden {cfg.hidden}: gat needs a multiple of --heads {cfg.heads}")
    if cfg.features != RAW_FEATURES:
        # a misspelt spec is refused before any work; whether it is stored, when the data is opened (as are a
        # typed graph's `type=variant` pairs, whose types only the data knows)
        try:
            if "=" not in cfg.features.split(":")[0]:
                canonical_spec(cfg.features)
        except DiskgnnError as e:
            raise UsageError(f"--features {cfg.features}: expected {RAW_FEATURES} or a quantized variant: "
                             f"{e}") from None
    if cfg.embedding_partitions and (cfg.task != "link" or not cfg.embeddings or not 2 <= cfg.embedding_partitions
                                     <= 64):
        # MariusGNN's buffer order: a link epoch's edges ordered by the table's partitions
        raise UsageError(f"--embedding-partitions {cfg.embedding_partitions}: 2 to 64, with --task link and "
                         "--embeddings")
    if cfg.task == "link":
        _validate_link(cfg)
    if cfg.embeddings:
        _validate_embeddings(cfg)
    if cfg.summary_json and not Path(cfg.summary_json).absolute().parent.is_dir():
        raise UsageError(f"--summary-json {cfg.summary_json}: its directory does not exist")
    cfg.budget_bytes, cfg.host_cache_bytes, cfg.device_cache_bytes, cfg.embedding_cache_bytes  # noqa: B018

def _validate_link(cfg) -> None:
    for name in ("negatives", "chunks", "eval_negatives"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(cfg, name)}: must be at least 1")
    if not 0 <= cfg.degree_fraction <= 1:
        raise UsageError(f"--degree-fraction {cfg.degree_fraction}: must be in [0, 1]")
    _only(cfg, "--task link")

def _validate_embeddings(cfg) -> None:
    if cfg.embeddings < 0 or cfg.embedding_lr <= 0:
        raise UsageError(f"--embeddings {cfg.embeddings} --embedding-lr {cfg.embedding_lr}: a width of at "
                         "least 0 and a positive rate")
    _only(cfg, f"--embeddings {cfg.embeddings}", ("none", "independent"))

def _only(cfg, what: str, distributed=("none",)) -> None:
    """Refuses the options `what` is not built for yet (issue 39), rather than running them wrong."""
    for flag, value, supported in (("--sampling", cfg.sampling, ("offline",)), ("--eval", cfg.eval, (
            "sampled", "none")), ("--distributed", cfg.distributed, distributed), ("--hag", cfg.hag, ("off",))):
        if value not in supported:
            raise UsageError(f"{flag} {value}: {what} trains with {flag} {' or '.join(supported)} only, so far")


def validate_graph_kind(cfg, typed: bool) -> None:
    """What only one kind of dataset takes, refused on the other in one line before any work: per-relation
    options on a plain graph; on a typed graph what its technique does not define there, or the engine does
    not build yet (each saying which). An --embedding-cache with no table to cache, on either kind."""
    if cfg.embedding_cache != "auto" and not (cfg.embeddings or typed and cfg.featureless == "table"):
        raise UsageError(f"--embedding-cache {cfg.embedding_cache}: the run learns no tables (--embeddings N"
                         + (", or --featureless table)" if typed else ")"))
    if not typed:
        if cfg.per_relation:
            raise UsageError(f"--fanouts {cfg.fanouts}: counts per relation need a heterogeneous dataset")
        if cfg.model == "rgcn":
            raise UsageError("--model rgcn: needs a heterogeneous dataset (its relations)")
        return
    if cfg.cuda_graphs == "on":
        raise UsageError("--cuda-graphs on: a heterogeneous run's step is eager, so far")
    if cfg.task_spec.name != "node":
        raise UsageError(f"--task {cfg.task}: heterogeneous graphs train node classification only (so far)")
    if cfg.distribution.cooperative:
        raise UsageError("--distributed cooperative: its exchange plan owns one node type's rows; on heterogeneous "
                         "graphs train with --distributed independent")
    if cfg.bases < 0:
        raise UsageError(f"--bases {cfg.bases}: must be 0 (a full matrix per relation) or more")
