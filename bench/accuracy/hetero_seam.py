"""PyG's own training loop through diskgnn's hetero seam, for the hetero study (issue 50's done-when: PyG's
`to_hetero` model trained through `diskgnn.pyg` within 1.5 points of the in-memory reference).

    python -m bench.accuracy.hetero_seam --data DATASET --seed S --epochs E --out SUMMARY.json

The model is the reference's (bench/accuracy/hetero_reference.py: two SAGEConv((-1, -1)) layers made hetero by
`to_hetero`, learned rows for featureless types looked up by `n_id`); the data side is NodeLoader over
DiskgnnFeatureStore (no host tier: every row read with O_DIRECT), DiskgnnGraphStore and DiskgnnSampler (10
neighbours per relation and hop, batches of 128 train papers, shuffled); val and test are evaluated with every
neighbour (batches of 1,024), and the epoch with the best val metric gives the test metrics.
"""

from __future__ import annotations

import json
import time

import numpy as np
import torch
import torch.nn.functional as F

from .hetero_reference import parser, sage

EVAL_BATCH = 1024  # every neighbour of a batch's seeds: the fewer batches, the fewer rows read twice


def seam(data: str, seed: int, epochs: int, hidden: int, lr: float, dropout: float, batch_size: int,
         fanouts: list[int]) -> dict:
    from torch_geometric.loader import NodeLoader
    from torch_geometric.nn import to_hetero

    from diskgnn.data.format import open_dataset
    from diskgnn.nn.hetero import class_counts, f1_scores
    from diskgnn.pyg import DiskgnnFeatureStore, DiskgnnGraphStore, DiskgnnSampler

    ds = open_dataset(data, typed=True)
    s = ds.schema
    torch.manual_seed(seed)
    stores = (DiskgnnFeatureStore(data, cache=0), DiskgnnGraphStore(data))

    def loader(split: str, fan: list[int], shuffle: bool) -> NodeLoader:
        return NodeLoader(stores, node_sampler=DiskgnnSampler(data, fanouts=fan, seed=seed),
                          input_nodes=(s.target, torch.from_numpy(np.array(ds.split(split)))),
                          batch_size=batch_size if split == "train" else EVAL_BATCH, shuffle=shuffle)

    rows = torch.nn.ModuleDict({t.name: torch.nn.Embedding(t.count, hidden) for t in s.types if not t.feature_dim})
    for e in rows.values():
        torch.nn.init.normal_(e.weight)

    def inputs(batch) -> dict:
        return {t.name: batch[t.name].x if t.feature_dim else rows[t.name](batch[t.name].n_id) for t in s.types}

    first = next(iter(loader("train", fanouts, False)))
    model = to_hetero(sage(hidden, s.num_classes, dropout), first.metadata(), aggr="sum")
    with torch.no_grad():
        model(inputs(first), first.edge_index_dict)
    optimizer = torch.optim.Adam([*model.parameters(), *rows.parameters()], lr=lr)
    loss_fn = F.binary_cross_entropy_with_logits if s.multilabel else F.cross_entropy
    metric = "micro_f1" if s.multilabel else "acc"

    @torch.no_grad()
    def evaluate(split: str) -> dict:
        model.eval()
        c = s.num_classes
        tp, fp, fn, correct, total = np.zeros(c), np.zeros(c), np.zeros(c), 0, 0
        for batch in loader(split, [-1] * len(fanouts), False):
            bs = batch[s.target].batch_size
            out, y = model(inputs(batch), batch.edge_index_dict)[s.target][:bs], batch[s.target].y[:bs]
            counts = class_counts(out, y, s.multilabel, c)
            tp, fp, fn = tp + counts[0], fp + counts[1], fn + counts[2]
            if not s.multilabel:
                correct += int((out.argmax(1) == y).sum())
            total += bs
        micro, macro = f1_scores(tp, fp, fn)
        return {"micro_f1": micro, "macro_f1": macro, **({} if s.multilabel else {"acc": correct / max(1, total)})}

    best, start = {"val": -1.0, "epoch": -1, "test": {}}, time.perf_counter()
    for epoch in range(epochs):
        model.train()
        for batch in loader("train", fanouts, True):
            bs = batch[s.target].batch_size
            optimizer.zero_grad()
            out = model(inputs(batch), batch.edge_index_dict)[s.target][:bs]
            loss_fn(out, batch[s.target].y[:bs]).backward()
            optimizer.step()
        val = evaluate("val")[metric]
        if val > best["val"]:
            best = {"val": val, "epoch": epoch, "test": evaluate("test")}
    return {"metric": metric, f"val_{metric}": best["val"], "best_epoch": best["epoch"],
            **{f"test_{k}": v for k, v in best["test"].items()}, "wall_s": time.perf_counter() - start,
            "features_read": stores[0].stats()}


def main(argv=None) -> None:
    ap = parser("bench.accuracy.hetero_seam", __doc__, 20)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--fanouts", default="10,10")
    args = ap.parse_args(argv)
    result = seam(args.data, args.seed, args.epochs, args.hidden, args.lr, args.dropout, args.batch_size,
                  [int(f) for f in args.fanouts.split(",")])
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
