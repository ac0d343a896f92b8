"""In-memory, full-neighbour reference trainer: the oracle diskgnn's accuracy is checked against.

    python -m bench.harness.reference --data DATASET_DIR --model sage --seed 0

Plain PyTorch, no sampling, no disk: the whole dataset (features, labels,
CSC graph, splits) is loaded into memory; every layer aggregates over every
in-neighbour; every epoch is one full-batch Adam step on the train split.
It runs the same `diskgnn.models.GNN` (same layers, same arithmetic) with the
same hyper-parameters, so a gap between it and `diskgnn.train` measures what
sampling (and the out-of-core machinery) costs in accuracy, nothing else.

- Initialisation: `torch.manual_seed(seed)` right before the model is built,
  as `diskgnn.train` does, so both start from the same weights.
- Training step: the loss depends only on the train nodes' outputs, so the
  step runs on their L-hop receptive field with all neighbours (the blocks
  `full_block` builds hop by hop from the train nodes: exactly the blocks a
  sampled batch with fanouts -1 has). Its outputs equal those of the
  full-graph pass for these nodes; it is only cheaper.
- Dropout: reseeded every epoch from (seed, epoch), so seeds differ and a run
  is repeatable.
- Evaluation: model in eval mode, every neighbour, on the val nodes' and
  the test nodes' L-hop receptive fields (outputs equal to a full-graph
  pass for them, as in training). Val accuracy after every epoch.
- Model selection: the epoch with the best val accuracy; a later epoch
  replaces it only when strictly better (the rule of `diskgnn.train`). Its
  weights are kept and the test accuracy is computed once, with them, at
  the end, as `diskgnn.train` does with its best checkpoint (a test pass
  per epoch would cost more than training on Coauthor CS's 17,583 test
  nodes and 6,805 features).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from diskgnn.data.format import open_dataset
from diskgnn.loading.blocks import TensorBlock, full_block
from diskgnn.nn.models import GNN


@dataclass
class InMemoryGraph:
    """A whole dataset in memory."""

    num_nodes: int
    x: torch.Tensor  # float32 [N, D]
    y: torch.Tensor  # int64 [N] (-1: unlabeled)
    indptr: np.ndarray  # int64 [N + 1], CSC: in-neighbours of v are indices[indptr[v]:indptr[v + 1]]
    indices: np.ndarray  # int64 [E]
    splits: dict  # name -> int64 node ids
    num_classes: int


def load(dataset_dir) -> InMemoryGraph:
    ds = open_dataset(dataset_dir)
    return InMemoryGraph(
        num_nodes=ds.num_nodes,
        x=torch.from_numpy(np.array(ds.features, dtype=np.float32)),
        y=torch.from_numpy(np.array(ds.labels, dtype=np.int64)),
        indptr=np.array(ds.indptr, dtype=np.int64),
        indices=np.array(ds.indices, dtype=np.int64),
        splits={s: np.array(ds.split(s), dtype=np.int64) for s in ("train", "val", "test")},
        num_classes=ds.num_classes,
    )


def receptive_blocks(g: InMemoryGraph, seeds: np.ndarray, layers: int) -> tuple[list[TensorBlock], np.ndarray]:
    """All-neighbour blocks for `seeds` (input hop first) and the input nodes they read."""
    blocks, dst = [], np.asarray(seeds, dtype=np.int64)
    for _ in range(layers):
        block, src = full_block(g.indptr, g.indices, dst)
        blocks.append(block)
        dst = src
    return blocks[::-1], dst


class EvalSet:
    """One split's nodes with the all-neighbour blocks and input rows of their receptive field."""

    def __init__(self, g: InMemoryGraph, ids: np.ndarray, layers: int):
        self.size = ids.size
        self.blocks, inputs = receptive_blocks(g, ids, layers)
        self.x, self.y = g.x[torch.from_numpy(inputs)], g.y[torch.from_numpy(ids)]

    @torch.no_grad()
    def accuracy(self, net: GNN) -> float:
        if self.size == 0:
            return float("nan")
        return float((net(self.blocks, self.x).argmax(1) == self.y).float().mean())


def reference_train(dataset_dir, model: str = "sage", hidden: int = 64, lr: float = 0.01,
                    weight_decay: float = 5e-4, dropout: float = 0.5, epochs: int = 200, seed: int = 0, *,
                    layers: int = 2, heads: int = 4, graph: InMemoryGraph | None = None) -> dict:
    """Trains `model` full-batch with full neighbours; returns val_acc and test_acc at the best-val epoch.

    `graph` (from `load`) saves reloading the dataset across seeds.
    """
    g = graph if graph is not None else load(dataset_dir)
    start = time.perf_counter()
    train_ids = g.splits["train"]
    train_blocks, inputs = receptive_blocks(g, train_ids, layers)
    train_x, train_y = g.x[torch.from_numpy(inputs)], g.y[torch.from_numpy(train_ids)]
    val_set = EvalSet(g, g.splits["val"], layers)

    torch.manual_seed(seed)  # as diskgnn.train, right before the model is built: the same initial weights
    net = GNN(model, g.x.shape[1], hidden, g.num_classes, layers, dropout, heads)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    best = {"val_acc": -1.0, "epoch": -1}
    history = []
    for epoch in range(epochs):
        net.train()
        net.reseed([seed, epoch])
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(train_blocks, train_x), train_y)
        loss.backward()
        optimizer.step()
        net.eval()
        val = val_set.accuracy(net)
        history.append(val)
        if not val <= best["val_acc"]:  # strictly better (and the first epoch), as diskgnn.train
            best = {"val_acc": val, "epoch": epoch, "state": copy.deepcopy(net.state_dict())}
    net.load_state_dict(best["state"])
    net.eval()
    test = EvalSet(g, g.splits["test"], layers).accuracy(net)
    return {"val_acc": best["val_acc"], "test_acc": test, "best_epoch": best["epoch"],
            "val_acc_per_epoch": history, "final_loss": float(loss.detach()),
            "wall_s": time.perf_counter() - start}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.harness.reference", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="dataset directory (python -m diskgnn.prepare)")
    ap.add_argument("--model", default="sage", choices=("sage", "gcn", "gat"))
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="also write the result JSON here")
    args = ap.parse_args(argv)
    result = reference_train(args.data, args.model, args.hidden, args.lr, args.weight_decay, args.dropout,
                             args.epochs, args.seed, layers=args.layers)
    print(f"reference {args.model} seed {args.seed}: val acc {result['val_acc']:.4f}, test acc "
          f"{result['test_acc']:.4f} at epoch {result['best_epoch']} ({result['wall_s']:.1f} s)")
    if args.out:
        Path(args.out).write_text(json.dumps({**vars(args), **result}, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
