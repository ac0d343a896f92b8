"""PyG's GraphSAGE trained on a diskgnn dataset with PyG's own NodeLoader: only the data side is diskgnn's.

    python examples/pyg_graphsage.py DATA [--loader node|diskgnn] [--epochs 3] [--max-batches N]
        [--fanouts 10,5] [--eval-fanouts F] [--batch-size 1024] [--hidden 256] [--cache 512MiB]
        [--memory-budget 2GiB] [--eval-batches N] [--device auto|cpu|cuda] [--seed 0] [--json OUT.json]

`--loader node` (default): torch_geometric.loader.NodeLoader over DiskgnnFeatureStore and
DiskgnnGraphStore with DiskgnnSampler (the seeds are NodeLoader's; features from a memory tier
of --cache bytes and O_DIRECT reads). `--loader diskgnn`: DiskgnnLoader, diskgnn.train's
pipeline (offline samples, packs, tiers sized from --memory-budget) yielding the same Data,
already on the training device (--device; auto: CUDA where torch sees one); NodeLoader's
batches are moved there in the loop. The training loop is PyG's usual one either way. The dataset may be far larger than memory:

    python -m bench.memcap --cap 2GiB --drop-caches -- python examples/pyg_graphsage.py data/w1 --max-batches 100

prints the time per batch (the loop's, data loading included) and test accuracy; --json
writes them.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.loader import NodeLoader
from torch_geometric.nn.models import GraphSAGE

import diskgnn
from diskgnn.pyg import DiskgnnFeatureStore, DiskgnnGraphStore, DiskgnnLoader, DiskgnnSampler
from diskgnn.train.plan import resolve_device


def node_loader(stores, sampler, ids: np.ndarray, batch_size: int, shuffle: bool) -> NodeLoader:
    return NodeLoader(stores, node_sampler=sampler, input_nodes=torch.from_numpy(np.array(ids, dtype=np.int64)),
                      batch_size=batch_size, shuffle=shuffle)


@torch.no_grad()
def accuracy(model, batches, max_batches: int | None, device: str) -> float:
    model.eval()
    correct = total = 0
    for i, data in enumerate(batches):
        if max_batches is not None and i >= max_batches:
            break
        data = data.to(device)
        pred = model(data.x, data.edge_index)[: data.batch_size].argmax(1)
        correct += int((pred == data.y[: data.batch_size]).sum())
        total += data.batch_size
    return correct / max(1, total)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", type=Path)
    p.add_argument("--loader", choices=("node", "diskgnn"), default="node")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-batches", type=int, default=None, help="stop each epoch after N batches")
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--eval-fanouts", default=None, help="evaluation's (default: --fanouts; -1,-1: every neighbour, "
                   "which gives the whole graph's outputs)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--cache", default="512MiB", help="--loader node: feature bytes kept in memory")
    p.add_argument("--memory-budget", default="2GiB", help="--loader diskgnn: the pipeline's budget")
    p.add_argument("--eval-batches", type=int, default=None, help="evaluate on at most N batches")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where the model trains (auto: CUDA where torch sees one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    eval_fanouts = [int(f) for f in args.eval_fanouts.split(",")] if args.eval_fanouts else fanouts
    torch.manual_seed(args.seed)
    began = time.perf_counter()
    ds = diskgnn.open_dataset(args.data)

    if args.loader == "node":
        stores = (DiskgnnFeatureStore(args.data, cache=args.cache), DiskgnnGraphStore(args.data))
        sampler = DiskgnnSampler(args.data, fanouts=fanouts, seed=args.seed)
        evaluator = DiskgnnSampler(args.data, fanouts=eval_fanouts, seed=args.seed + 1)
        train = node_loader(stores, sampler, ds.split("train"), args.batch_size, shuffle=True)
        epochs = (train for _ in range(args.epochs))
        splits = {s: (lambda s=s: node_loader(stores, evaluator, ds.split(s), args.batch_size, shuffle=False))
                  for s in ("val", "test")}
    else:
        loader = DiskgnnLoader(args.data, fanouts=fanouts, batch_size=args.batch_size, seed=args.seed,
                               eval_fanouts=eval_fanouts, epochs=args.epochs, max_batches=args.max_batches,
                               memory_budget=args.memory_budget,
                               eval_max_batches=args.eval_batches, device=args.device, progress=False)
        epochs = (loader for _ in range(args.epochs))
        splits = {s: (lambda s=s: loader.evaluation(s)) for s in ("val", "test")}

    device = loader.device if args.loader == "diskgnn" else resolve_device(args.device)
    model = GraphSAGE(ds.feature_dim, args.hidden, num_layers=len(fanouts), out_channels=ds.num_classes,
                      dropout=args.dropout).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    best, best_state, batch_times = -1.0, None, []
    setup_s = time.perf_counter() - began  # DiskgnnLoader: epoch 0 sampled and packed, the tiers loaded
    for epoch, batches in enumerate(epochs):
        model.train()
        start = time.perf_counter()
        for i, data in enumerate(batches):
            if args.max_batches is not None and i >= args.max_batches:
                break
            data = data.to(device)
            optimizer.zero_grad()
            out = model(data.x, data.edge_index)[: data.batch_size]
            loss = F.cross_entropy(out, data.y[: data.batch_size])
            loss.backward()
            optimizer.step()
            now = time.perf_counter()
            batch_times.append(now - start)
            start = now
        val = accuracy(model, splits["val"](), args.eval_batches, device)
        print(f"epoch {epoch}: loss {loss.item():.4f}, val acc {val:.4f}, "
              f"{1000 * np.mean(batch_times[-(i + 1):]):.1f} ms/batch", flush=True)
        if val > best:
            best, best_state = val, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    test = accuracy(model, splits["test"](), args.eval_batches, device)
    result = {"loader": args.loader, "dataset": str(args.data), "batches": len(batch_times),
              "ms_per_batch": 1000 * float(np.mean(batch_times)),
              "ms_per_batch_after_first": 1000 * float(np.mean(batch_times[1:])) if len(batch_times) > 1 else None,
              "setup_s": setup_s, "val_acc": best, "test_acc": test, "fanouts": fanouts, "eval_fanouts": eval_fanouts,
              "batch_size": args.batch_size, "device": device}
    if args.loader == "node":
        result.update(feature_tiers=stores[0].stats(), backend=stores[0].backend)
    else:
        result.update(feature_tiers=loader.loader.stats(), backend=loader.loader.backend)
        loader.close()
    print(f"done: test acc {test:.4f}, best val acc {best:.4f}, {result['ms_per_batch']:.1f} ms/batch over "
          f"{len(batch_times)} batches", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    from diskgnn.errors import run_cli

    sys.exit(run_cli("pyg_graphsage", main))
