"""Models over heterogeneous blocks: RGraphSAGE and R-GCN with basis decomposition.

A batch's layer l holds one block per relation (offline/batches.py's hop L-1-l): relation r's destinations
are the first nodes of its destination type, its sources positions among its source type's nodes. Layer l
makes every type's new representation from its relations' neighbour means.

- `sage` (RGraphSAGE, as PyG's `to_hetero` turns a SAGEConv into one per relation): per relation a linear map
  of the source type's mean (with bias) plus a linear map of the destination's own row, summed (or averaged,
  `relation_aggr="mean"`) over the relations into the type. The first layer reads each type's features at
  their own width.
- `gcn` and `gat` per relation (as `to_hetero` makes one layer per relation, summed or averaged into the type):
  a relation whose two ends are one type runs the plain GCNLayer or GATLayer (nn/models.py), one whose ends
  differ its RelationGCN or RelationGAT, the destination's own row (GCN's and GAT's self-loop) through its own map.
  GAT's hidden layers concatenate `heads` heads, its last one has one.
- `rgcn` (Schlichtkrull et al.): each type's features projected to `hidden` first; per layer
  h'_v = W_0 h_v + sum_r W_r mean_{u in N_r(v)} h_u + b, with W_r = sum_b a_rb V_b over `bases` shared
  matrices (0: one full matrix per relation).

Types without features get a learned table (`featureless="learned"`, in memory), rows the caller passes in `x`
as it does features (`"table"`: a learnable table out of core, train/tables.py, `hidden` values a row) or
a fixed vector per node hashed from (type, id) (`"hashed"`: a fixed random projection of the node's one-hot id,
no memory, no training). A type that no relation reaches at a hop keeps its own row through a linear map, so no node a
later layer needs is dropped.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..data.schema import Schema
from ..hashing import mix64, unit_interval
from .dropout import Dropout, ReseededDropout
from .models import GATLayer, GCNLayer, RelationGAT, RelationGCN

HETERO_MODELS = ("sage", "gcn", "gat", "rgcn")


def hashed_rows(type_index: int, ids: np.ndarray, dim: int) -> torch.Tensor:
    """Fixed N(0, 1)-ish rows (sums of two uniforms, centred and scaled) keyed by (type, id, column)."""
    keys = (np.asarray(ids, dtype=np.uint64)[:, None] * np.uint64(dim) + np.arange(dim, dtype=np.uint64))
    u = unit_interval(mix64(keys, 0x7E7E + type_index)) + unit_interval(mix64(keys, 0x5A5A + type_index))
    return torch.from_numpy(((u - 1.0) * np.sqrt(6.0)).astype(np.float32))


class HeteroLayer(nn.Module):
    """One layer over one hop's relation blocks: dict type -> rows in, dict type -> rows out."""

    def __init__(self, schema: Schema, kind: str, in_dims: dict[str, int], d_out: int, bases: int,
                 relation_aggr: str, heads: int = 1):
        super().__init__()
        self.schema, self.kind, self.relation_aggr = schema, kind, relation_aggr
        rels = schema.relations
        reached = {r.dst for r in rels}
        # types nothing flows into keep their own row
        self.keep = nn.ModuleDict({t.name: nn.Linear(in_dims[t.name], d_out) for t in schema.types
                                   if t.name not in reached})
        if kind == "gcn":
            self.convs = nn.ModuleList(GCNLayer(in_dims[r.src], d_out) if r.src == r.dst else
                                       RelationGCN(in_dims[r.src], in_dims[r.dst], d_out) for r in rels)
        elif kind == "gat":
            self.convs = nn.ModuleList(GATLayer(in_dims[r.src], d_out, heads, heads > 1) if r.src == r.dst else
                                       RelationGAT(in_dims[r.src], in_dims[r.dst], d_out, heads, heads > 1)
                                       for r in rels)
        elif kind == "sage":
            self.neigh = nn.ModuleList(nn.Linear(in_dims[r.src], d_out) for r in rels)
            self.root = nn.ModuleList(nn.Linear(in_dims[r.dst], d_out, bias=False) for r in rels)
        else:
            d_in = next(iter(in_dims.values()))
            self.root = nn.Linear(d_in, d_out)
            if bases:
                self.bases = nn.Parameter(torch.empty(bases, d_in, d_out))
                self.coeff = nn.Parameter(torch.empty(len(rels), bases))
                nn.init.xavier_uniform_(self.bases.view(bases * d_in, d_out))
                nn.init.xavier_uniform_(self.coeff)
            else:
                self.weights = nn.Parameter(torch.empty(len(rels), d_in, d_out))
                nn.init.xavier_uniform_(self.weights.view(len(rels) * d_in, d_out))

    def relation_weights(self) -> torch.Tensor:
        """R-GCN's W_r, [R, d_in, d_out]."""
        if hasattr(self, "bases"):
            return torch.einsum("rb,bio->rio", self.coeff, self.bases)
        return self.weights

    def forward(self, blocks, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        count: dict[str, int] = {}
        weights = self.relation_weights() if self.kind == "rgcn" else None
        for r, (rel, block) in enumerate(zip(self.schema.relations, blocks)):
            if block is None or rel.src not in h or rel.dst not in h:
                continue
            if self.kind in ("gcn", "gat"):
                conv = self.convs[r]
                y = conv(block, h[rel.src]) if rel.src == rel.dst else conv(block, h[rel.src], h[rel.dst])
            elif self.kind == "sage":
                y = self.neigh[r](block.mean_neighbours(h[rel.src])) + self.root[r](h[rel.dst][: block.num_dst])
            else:
                y = block.mean_neighbours(h[rel.src]) @ weights[r].to(h[rel.src].dtype)
            out[rel.dst] = y if rel.dst not in out else out[rel.dst] + y
            count[rel.dst] = count.get(rel.dst, 0) + 1
        for name in list(out):
            n = out[name].shape[0]
            if self.kind == "rgcn":
                out[name] = out[name] + self.root(h[name][:n])
            elif self.relation_aggr == "mean":
                out[name] = out[name] / count[name]
        for name, lin in self.keep.items():
            if name in h and name not in out:
                out[name] = lin(h[name])
        return out


class HeteroGNN(ReseededDropout, nn.Module):
    """`layers` hetero layers over a schema; the target type's rows of the last one are the output."""

    def __init__(self, schema: Schema, kind: str, hidden: int, out_dim: int, layers: int, dropout: float, *,
                 featureless: str = "learned", bases: int = 0, relation_aggr: str = "sum", heads: int = 4,
                 embeddings: int = 0):
        """`embeddings`: learned values a node of every type beside its features (train/tables.py's tables,
        handed in `x`), the featureless types' rows whatever `featureless` says."""
        super().__init__()
        if kind not in HETERO_MODELS:
            raise ValueError(f"model {kind!r}: expected one of {', '.join(HETERO_MODELS)}")
        if kind == "gat" and hidden % heads:
            raise ValueError(f"gat: hidden size {hidden} must be a multiple of {heads} heads")
        self.schema, self.kind, self.featureless, self.hidden = schema, kind, featureless, hidden
        self.embeddings = nn.ModuleDict({t.name: nn.Embedding(t.count, hidden) for t in schema.types
                                         if not t.feature_dim and featureless == "learned" and not embeddings})
        for e in self.embeddings.values():
            nn.init.normal_(e.weight, std=1.0)
        dims = {t.name: t.feature_dim + embeddings or hidden for t in schema.types}
        if kind == "rgcn":  # R-GCN's relation matrices need one width: every type projected to it first
            self.project = nn.ModuleDict({t.name: nn.Linear(dims[t.name], hidden) for t in schema.types
                                          if t.feature_dim or dims[t.name] != hidden})
            dims = {t.name: hidden for t in schema.types}
        self.layers = nn.ModuleList()
        for i in range(layers):
            d_out = out_dim if i == layers - 1 else hidden
            self.layers.append(HeteroLayer(schema, kind, dims, d_out, bases, relation_aggr,
                                           1 if i == layers - 1 else heads))
            dims = {t.name: d_out for t in schema.types}
        self.dropout = Dropout(dropout)

    def inputs(self, x: dict[str, torch.Tensor], nodes: dict[str, np.ndarray], device) -> dict[str, torch.Tensor]:
        """Every type's input rows: its features or table rows (`x`), or its learned or hashed rows by node id."""
        h = {}
        for i, t in enumerate(self.schema.types):
            if t.name in x:
                h[t.name] = x[t.name]
            elif self.featureless == "table":
                raise ValueError(f"featureless='table': type {t.name}'s rows are missing from x")
            elif t.name in self.embeddings:
                ids = torch.as_tensor(np.array(nodes[t.name], dtype=np.int64), device=device)
                h[t.name] = self.embeddings[t.name](ids)
            else:
                h[t.name] = hashed_rows(i, nodes[t.name], self.hidden).to(device)
            if self.kind == "rgcn" and t.name in self.project:
                h[t.name] = self.project[t.name](h[t.name])
        return h

    def forward(self, blocks, x: dict[str, torch.Tensor], nodes: dict[str, np.ndarray]) -> torch.Tensor:
        """`blocks[l][r]`: relation r's block of layer l, input layer first (a typed MiniBatch's `blocks`, its
        `rows` the `nodes`: `model(mb.blocks, mb.x, mb.rows)`, as a plain GNN is called); returns the target
        type's output rows (its seeds first)."""
        if len(blocks) != len(self.layers):
            raise ValueError(f"{len(blocks)} layers of blocks for a {len(self.layers)}-layer model")
        return self.outputs(blocks, x, nodes, len(self.layers))

    def outputs(self, blocks, x: dict[str, torch.Tensor], nodes: dict[str, np.ndarray], k: int) -> torch.Tensor:
        """The target type's rows after the first `k` layers (over `blocks[:k]`; below the last layer: a hidden
        layer's, activated), as diskgnn.infer's --output embeddings takes them."""
        h = self.inputs(x, nodes, next(self.parameters()).device)
        for i in range(k):
            h = self.layers[i](blocks[i], h)
            if i < len(self.layers) - 1:
                h = {name: self.dropout(v, relu=True) for name, v in h.items()}
        return h[self.schema.target]


def f1_scores(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> tuple[float, float]:
    """(micro-F1, macro-F1) from per-class counts of true positives, false positives and false negatives."""
    micro = 2 * tp.sum() / max(1, 2 * tp.sum() + fp.sum() + fn.sum())
    per_class = 2 * tp / np.maximum(1, 2 * tp + fp + fn)
    return float(micro), float(per_class.mean())


def class_counts(logits: torch.Tensor, labels: torch.Tensor, multilabel: bool, classes: int):
    """Per-class (tp, fp, fn) of a batch's predictions: argmax for single-label, logit > 0 for multi-label."""
    if multilabel:
        pred, true = (logits > 0), labels.bool()
    else:
        pred = F.one_hot(logits.argmax(1), classes).bool()
        true = F.one_hot(labels.long(), classes).bool()
    return ((pred & true).sum(0).cpu().numpy(), (pred & ~true).sum(0).cpu().numpy(),
            (~pred & true).sum(0).cpu().numpy())
