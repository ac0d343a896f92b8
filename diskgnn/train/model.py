"""The model a run of some options trains on a dataset, for both graph kinds (diskgnn.infer rebuilds it so)."""

from __future__ import annotations

from torch import nn

from ..data.schema import relation_fanouts
from ..nn.hetero import HeteroGNN
from ..nn.models import GNN
from .config import TrainConfig


def new_model(cfg: TrainConfig, ds, layers: int | None = None) -> nn.Module:
    """A plain graph's GNN with its task's head, or a typed graph's HeteroGNN (layers per relation, the target
    type's classes), of `layers` layers (default: --fanouts'). Its weights are drawn from torch's generator: the
    caller seeds it."""
    if ds.typed:
        layers = layers or len(relation_fanouts(cfg.fanouts, ds.schema))
        return HeteroGNN(ds.schema, cfg.model, cfg.hidden, ds.schema.num_classes, layers, cfg.dropout,
                         featureless=cfg.featureless, bases=cfg.bases, relation_aggr=cfg.relation_aggr,
                         heads=cfg.heads, embeddings=cfg.embeddings)
    layers = layers or len(cfg.fanout_list)
    model = GNN(cfg.model, ds.feature_dim + cfg.embeddings, cfg.hidden, cfg.task_spec.output_dim(ds), layers,
                cfg.dropout, cfg.heads)
    cfg.task_spec.head(model)
    return model
