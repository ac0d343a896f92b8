"""What a heterogeneous run does not do (yet), each refused in one line naming its flag before any work."""

from __future__ import annotations

from ...errors import UsageError


def refuse(cfg, ds) -> None:
    """A UsageError for the first option that does not apply to heterogeneous graphs."""
    if cfg.task_spec.name != "node":
        raise UsageError(f"--task {cfg.task}: heterogeneous graphs train node classification only (so far)")
    if cfg.distribution.cooperative:
        raise UsageError("--distributed cooperative: its exchange plan owns one node type's rows; on heterogeneous "
                         "graphs train with --distributed independent")
    if cfg.distribution.independent and cfg.featureless == "table":
        raise UsageError("--featureless table under --distributed: each rank's table would be its own file, its "
                         "rows learned apart; use learned (in memory, averaged by DDP) or hashed")
    if not cfg.hag_mode.off:
        raise UsageError(f"--hag {cfg.hag}: HAGs share partial sums of one relation's neighbour lists; not built for "
                         "heterogeneous graphs")
    if cfg.embeddings:
        raise UsageError("--embeddings: featureless node types of a heterogeneous graph get theirs from --featureless "
                         "(table: the same store, out of core, per type; learned; hashed)")
    if cfg.embedding_partitions:
        raise UsageError(f"--embedding-partitions {cfg.embedding_partitions}: MariusGNN's buffer order is built for "
                         "link prediction on homogeneous graphs")
    if cfg.embedding_cache != "auto":
        raise UsageError(f"--embedding-cache {cfg.embedding_cache}: a heterogeneous run's tables keep their hot rows "
                         "in its one host tier, ranked with the feature rows; size it with --host-cache")
    if cfg.bases < 0:
        raise UsageError(f"--bases {cfg.bases}: must be 0 (a full matrix per relation) or more")
