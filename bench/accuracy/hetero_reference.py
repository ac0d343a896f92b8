"""The in-memory reference for the hetero study: PyG's `to_hetero` GraphSAGE on the whole graph, full batch.

    python -m bench.accuracy.hetero_reference --data DATASET --seed S --epochs E --out SUMMARY.json

It reads a diskgnn heterogeneous dataset (so the splits, features and relations are the ones diskgnn trains
on), builds a HeteroData in memory, and trains `to_hetero(two SAGEConv((-1, -1)) layers, aggr="sum")` on every
neighbour, one full-batch step an epoch, with Adam; featureless types get a learned row each (as diskgnn's
`--featureless learned`); dropout 0.5 between the layers; CE, or BCE where multi-label. The epoch with the best
val metric (accuracy; micro-F1 where multi-label) gives the test metrics.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F


def sage(hidden: int, classes: int, dropout: float) -> torch.nn.Module:
    """The homogeneous model both PyG runs make hetero with `to_hetero`: two SAGEConv((-1, -1)), ReLU and
    dropout between them."""
    from torch_geometric.nn import SAGEConv

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = SAGEConv((-1, -1), hidden), SAGEConv((-1, -1), classes)
            self.drop = torch.nn.Dropout(dropout)

        def forward(self, x, edge_index):
            return self.c2(self.drop(self.c1(x, edge_index).relu()), edge_index)

    return Sage()


def reference(data: str, seed: int, epochs: int, hidden: int, lr: float, dropout: float) -> dict:
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import to_hetero

    from diskgnn.data.format import open_dataset
    from diskgnn.nn.hetero import class_counts, f1_scores

    ds = open_dataset(data, typed=True)
    s = ds.schema
    torch.manual_seed(seed)
    graph = HeteroData()
    rows = torch.nn.ParameterDict()
    for t in s.types:
        if t.feature_dim:
            graph[t.name].x = torch.from_numpy(np.array(ds.type_features(t.name), dtype=np.float32))
        else:
            graph[t.name].num_nodes = t.count
            rows[t.name] = torch.nn.Parameter(torch.randn(t.count, hidden))
    for i, r in enumerate(s.relations):
        indptr, indices = ds.csc(i)
        dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        # PyG's to_hetero joins type names with "__": keep the relation's name free of "-"
        graph[r.src, r.name.replace("-", "_"), r.dst].edge_index = torch.from_numpy(
            np.stack([np.asarray(indices, np.int64), dst]))

    model = to_hetero(sage(hidden, s.num_classes, dropout), graph.metadata(), aggr="sum")

    def inputs():
        return {**{t: graph[t].x for t in graph.node_types if "x" in graph[t]}, **dict(rows.items())}

    with torch.no_grad():
        model(inputs(), graph.edge_index_dict)  # sizes the lazy layers
    optimizer = torch.optim.Adam([*model.parameters(), *rows.parameters()], lr=lr)
    labels = torch.from_numpy(np.asarray(ds.labels).astype(np.float32 if s.multilabel else np.int64))
    split = {k: torch.from_numpy(np.array(ds.split(k))) for k in ("train", "val", "test")}
    loss_fn = F.binary_cross_entropy_with_logits if s.multilabel else F.cross_entropy

    def scores(out, ids) -> dict:
        micro, macro = f1_scores(*class_counts(out[ids], labels[ids], s.multilabel, s.num_classes))
        res = {"micro_f1": micro, "macro_f1": macro}
        if not s.multilabel:
            res["acc"] = float((out[ids].argmax(1) == labels[ids]).float().mean())
        return res

    metric = "micro_f1" if s.multilabel else "acc"
    best, start = {"val": -1.0, "epoch": -1, "test": {}}, time.perf_counter()
    for epoch in range(epochs):
        model.train()
        optimizer.zero_grad()
        out = model(inputs(), graph.edge_index_dict)[s.target]
        loss_fn(out[split["train"]], labels[split["train"]]).backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            out = model(inputs(), graph.edge_index_dict)[s.target]
        val = scores(out, split["val"])[metric]
        if val > best["val"]:
            best = {"val": val, "epoch": epoch, "test": scores(out, split["test"])}
    return {"metric": metric, f"val_{metric}": best["val"], "best_epoch": best["epoch"],
            **{f"test_{k}": v for k, v in best["test"].items()}, "wall_s": time.perf_counter() - start}


def parser(module: str, doc: str, epochs: int) -> argparse.ArgumentParser:
    """The options the hetero study's PyG runs share (the study passes the same values to diskgnn.train)."""
    ap = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--out", required=True)
    return ap


def main(argv=None) -> None:
    args = parser("bench.accuracy.hetero_reference", __doc__, 100).parse_args(argv)
    result = reference(args.data, args.seed, args.epochs, args.hidden, args.lr, args.dropout)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
