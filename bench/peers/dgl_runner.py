"""GraphSAGE trained by DGL 2.1's GraphBolt on an export of bench.peers.dgl; run by the DGL venv's Python.

    python dgl_runner.py --versions
    python dgl_runner.py --preprocess EXPORT_DIR
    python dgl_runner.py --export DIR --mode ondisk|memory [--epochs 3] [--batches N] [--fanouts 10,5]
        [--batch-size 1024] [--hidden 256] [--lr 0.003] [--dropout 0.5] [--seed 0] --progress FILE.jsonl

It imports neither diskgnn nor bench (the venv has DGL's torch and numpy, not
the project's). GraphBolt's documented pipeline: OnDiskDataset(...).load(),
ItemSampler over the task's train set (shuffled each epoch), sample_neighbor
with the fanouts, fetch_feature, gb.DataLoader; DGL's SAGEConv (mean) on the
sampled blocks. `--mode ondisk` keeps the export's `in_memory: false`
features, GraphBolt's memory map of the .npy; `--mode memory` reads them into
RAM first. The topology is GraphBolt's FusedCSCSamplingGraph, in RAM either
way (GraphBolt 2.1 has no on-disk topology).

Progress protocol (bench.epoch reads it): one flushed JSON line per finished
batch, one per finished epoch ({"epoch_end", "elapsed_s", "val_acc", "wall_s"}),
then one with the test accuracy of the best-val epoch's weights. elapsed_s
times training only; wall_s is the process's age after the epoch's
evaluation (time to accuracy).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import sys
import time

os.environ.setdefault("DGLBACKEND", "pytorch")


def disk_read_bytes() -> int:
    """Bytes this process made the kernel read from storage (bench.harness.common's, restated: this venv
    cannot import bench)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))


def process_age_s() -> float:
    """Seconds since this process started (diskgnn.memory's, restated: this venv cannot import diskgnn)."""
    with open("/proc/self/stat") as f:
        started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        return max(0.0, float(f.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK"))


def versions() -> dict:
    import dgl
    import dgl.graphbolt  # noqa: F401 - the import that fails when torch and graphbolt's library disagree
    import torch

    return {"dgl": dgl.__version__, "torch": torch.__version__}


def sage(in_dim: int, hidden: int, classes: int, layers: int, dropout: float):
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            dims = [in_dim] + [hidden] * (layers - 1) + [classes]
            self.layers = torch.nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(dims, dims[1:]))
            self.dropout = torch.nn.Dropout(dropout)

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h)
                if i < len(self.layers) - 1:
                    h = self.dropout(F.relu(h))
            return h

    return SAGE()


def pipeline(gb, item_set, graph, features, fanouts, batch_size: int, shuffle: bool):
    # GraphBolt's fanouts run from the outermost layer in; ours from the seeds out.
    datapipe = gb.ItemSampler(item_set, batch_size=batch_size, shuffle=shuffle)
    datapipe = datapipe.sample_neighbor(graph, list(reversed(fanouts)))
    datapipe = datapipe.fetch_feature(features, node_feature_keys=["feat"])
    return gb.DataLoader(datapipe, num_workers=0)


def accuracy(gb, model, item_set, graph, features, fanouts, batch_size: int) -> float:
    import torch

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for mb in pipeline(gb, item_set, graph, features, fanouts, batch_size, shuffle=False):
            pred = model(mb.blocks, mb.node_features["feat"].float()).argmax(1)
            correct += int((pred == mb.labels).sum())
            total += mb.labels.numel()
    model.train()
    return correct / max(1, total)


def train(args) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import dgl.graphbolt as gb

    fanouts = [int(f) for f in args.fanouts.split(",")]
    start = time.perf_counter()
    # force_preprocess=False: the export was preprocessed once; a None here would hash every file first.
    dataset = gb.OnDiskDataset(args.export, force_preprocess=False).load()
    graph, features = dataset.graph, dataset.feature
    if args.mode == "memory":
        in_ram = torch.from_numpy(np.array(features.read("node", None, "feat").numpy()))  # a copy of the map
        features = gb.BasicFeatureStore({("node", None, "feat"): gb.TorchBasedFeature(in_ram)})
    task = dataset.tasks[0]
    load_s = time.perf_counter() - start
    torch.manual_seed(args.seed)
    dim = features.size("node", None, "feat")[0]
    model = sage(dim, args.hidden, task.metadata["num_classes"], len(fanouts), args.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    progress = open(args.progress, "a")

    def emit(line: dict) -> None:
        progress.write(json.dumps(line) + "\n")
        progress.flush()

    elapsed = fetch = 0.0
    read0 = disk_read_bytes()
    best = {"val_acc": -1.0, "epoch": -1, "state": None}
    step = 0
    for epoch in range(args.epochs):
        loader = iter(pipeline(gb, task.train_set, graph, features, fanouts, args.batch_size, shuffle=True))
        t = time.perf_counter()
        for b in range(len(task.train_set) // args.batch_size + 1):
            if args.batches and b >= args.batches:
                break
            f0 = time.perf_counter()
            try:
                mb = next(loader)  # sampling and the feature gather both happen in here
            except StopIteration:
                break
            fetch += time.perf_counter() - f0
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(mb.blocks, mb.node_features["feat"].float()), mb.labels.long())
            loss.backward()
            optimizer.step()
            emit({"batch": step, "epoch": epoch, "elapsed_s": elapsed + time.perf_counter() - t,
                  "gather_s": fetch, "disk_bytes_read": disk_read_bytes() - read0, "load_s": load_s,
                  "loss": loss.item()})
            step += 1
        elapsed += time.perf_counter() - t
        val = accuracy(gb, model, task.validation_set, graph, features, fanouts, args.batch_size)
        emit({"epoch_end": epoch, "elapsed_s": elapsed, "val_acc": val, "wall_s": process_age_s()})
        if val > best["val_acc"]:
            best = {"val_acc": val, "epoch": epoch, "state": copy.deepcopy(model.state_dict())}
    model.load_state_dict(best["state"])
    test = accuracy(gb, model, task.test_set, graph, features, fanouts, args.batch_size)
    result = {"system": "dgl", "mode": args.mode, "batches": step, "epochs": args.epochs, "train_s": elapsed,
              "test_acc": test, "best_epoch": best["epoch"], "val_acc": best["val_acc"], "load_s": load_s,
              "disk_bytes_read": disk_read_bytes() - read0,
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "versions": versions()}
    emit({"test_acc": test, "best_epoch": best["epoch"]})
    print(json.dumps(result), flush=True)
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="dgl_runner.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", action="store_true")
    ap.add_argument("--preprocess", metavar="DIR")
    ap.add_argument("--export")
    ap.add_argument("--mode", choices=("ondisk", "memory"), default="ondisk")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batches", type=int, help="at most this many batches per epoch")
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress")
    args = ap.parse_args(argv)
    if args.versions:
        print(json.dumps(versions()))
    elif args.preprocess:
        import dgl.graphbolt as gb

        gb.OnDiskDataset(args.preprocess)
    elif args.export and args.progress:
        train(args)
    else:
        sys.exit("dgl_runner.py: pass --versions, --preprocess DIR, or --export DIR with --progress FILE")


if __name__ == "__main__":
    main()
