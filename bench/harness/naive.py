"""Naive out-of-core baseline: diskgnn's sampler and model, features gathered through np.memmap, no pipeline.

    python -m bench.harness.naive --data DATASET_DIR --batches 200 [--madvise random] [--progress FILE.jsonl]

What a user writes first when the features do not fit in RAM: map the
feature file with np.memmap and index it with each batch's input nodes. The
batches are the ones diskgnn trains (same sampler, seed and stream keys, but
sampled in the loop as the batch comes up), the model, optimiser and step are
diskgnn's, and nothing overlaps: sample, gather (page faults), train, repeat.
`--madvise random` is the careful variant: MADV_RANDOM on the map, so a fault
reads one page instead of read_ahead_kb of its neighbours.

Each finished batch appends a JSON line to --progress (flushed), so a run
killed by a timeout still tells its rate. The last line printed is the
result as JSON.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from diskgnn.data.format import open_dataset
from diskgnn.loading.blocks import sampled_blocks
from diskgnn.nn.models import GNN
from diskgnn.offline.sample import batch_key, epoch_seeds, open_graph, sample_batch

from .common import disk_read_bytes
from .workload import add_loop_args


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.harness.naive", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    add_loop_args(ap)
    ap.add_argument("--madvise", choices=("default", "random"), default="default")
    args = ap.parse_args(argv)
    if args.epochs != 1 or args.eval_nodes:
        ap.error("--epochs and --eval-nodes: the naive loop trains one epoch's first --batches batches (a rate), "
                 "without evaluation")
    fanouts = [int(f) for f in args.fanouts.split(",")]

    ds = open_dataset(args.data)
    features = ds.features  # np.memmap of the whole feature file
    if args.madvise == "random":
        features._mmap.madvise(mmap.MADV_RANDOM)  # numpy keeps the mmap it maps; madvise needs it
    labels = ds.labels
    graph = open_graph(ds)
    seeds = epoch_seeds(ds.split("train"), args.batch_size, args.seed, 0)[: args.batches]
    torch.manual_seed(args.seed)
    model = GNN("sage", ds.feature_dim, args.hidden, ds.num_classes, len(fanouts), args.dropout)
    model.reseed(np.random.SeedSequence([args.seed, 17, 0]))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    threads = max(1, (os.cpu_count() or 1) // 2)
    progress = open(args.progress, "a") if args.progress else None
    model.train()
    start, read_before = time.perf_counter(), disk_read_bytes()
    gather_s = 0.0
    for b, batch_seeds in enumerate(seeds):
        batch = sample_batch(graph, batch_seeds, key=batch_key(0, b), fanouts=fanouts, seed=args.seed,
                             threads=threads, index=b)
        t = time.perf_counter()
        x = torch.from_numpy(features[batch.nodes])
        gather_s += time.perf_counter() - t
        y = torch.from_numpy(np.asarray(labels[batch.seeds], dtype=np.int64))
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(sampled_blocks(batch), x.float()), y)
        loss.backward()
        optimizer.step()
        if progress:
            progress.write(json.dumps({"batch": b, "elapsed_s": time.perf_counter() - start,
                                       "gather_s": gather_s, "disk_bytes_read": disk_read_bytes() - read_before,
                                       "loss": loss.item()}) + "\n")
            progress.flush()
    result = {"batches": len(seeds), "epoch_s": time.perf_counter() - start, "gather_s": gather_s,
              "disk_bytes_read": disk_read_bytes() - read_before,
              "madvise": args.madvise, "final_loss": loss.item() if seeds else float("nan")}
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
