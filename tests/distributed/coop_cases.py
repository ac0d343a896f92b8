"""The exactness cases of the distributed tests, and their worker: `torchrun --standalone --nproc-per-node P
coop_cases.py DATA OUT` trains one step of every case on P ranks over gloo, cooperative and data-parallel,
and rank 0 saves each case's loss and gradients to OUT/P.pt; test_distributed.py computes the same cases in
one process (the oracle) and compares."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from diskgnn.data.format import open_dataset
from diskgnn.loading.blocks import sampled_blocks
from diskgnn.nn.models import GNN
from diskgnn.offline.sample import open_graph, sample_batch

FANOUTS = [4, 3]
MODELS = ("sage", "gcn", "gat")
OWNERS = ("hash", "range")


def seed_sets(ds) -> dict[str, np.ndarray]:
    """Global batches of awkward sizes: the whole train split, 1 seed (ranks with no seed), 7 seeds."""
    train = ds.split("train")
    return {"all": train, "one": train[:1], "seven": train[3:10]}


def global_batch(ds, seeds: np.ndarray, key: int = 5):
    return sample_batch(open_graph(ds), seeds, key=key, fanouts=FANOUTS, seed=0, threads=1)


def model(kind: str, ds) -> GNN:
    torch.manual_seed(0)
    return GNN(kind, ds.feature_dim, 8, ds.num_classes, len(FANOUTS), dropout=0.0, heads=2)


def gradients(m) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in m.parameters()]


def one_process(kind: str, ds, batches: list) -> tuple[float, list[torch.Tensor]]:
    """The oracle: one process, the mean over `batches` of each batch's mean loss, and its gradients."""
    m = model(kind, ds)
    feats, labels = np.asarray(ds.features), np.asarray(ds.labels)
    total = 0.0
    for batch in batches:
        out = m(sampled_blocks(batch), torch.from_numpy(feats[batch.nodes]))
        loss = F.cross_entropy(out, torch.from_numpy(labels[batch.seeds].astype(np.int64))) / len(batches)
        loss.backward()
        total += loss.item()
    return total, gradients(m)


def _ranks(data: str, out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from diskgnn.distributed import cooperative
    from diskgnn.distributed.group import Group

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    group = Group("cooperative", rank, world, 0, "gloo")
    ds = open_dataset(data)
    feats, labels = np.asarray(ds.features), np.asarray(ds.labels)
    results = {}
    for name, seeds in seed_sets(ds).items():
        batch = global_batch(ds, seeds)
        for owner in OWNERS:
            share = cooperative.exchange_plan(batch, cooperative.owners(batch.nodes, world, owner, ds.num_nodes),
                                              rank, world)
            for kind in MODELS:
                m = model(kind, ds)
                logits, _ = cooperative.forward(m, share, torch.from_numpy(feats[share.input_ids]))
                loss = cooperative.loss(logits, torch.from_numpy(labels[share.seed_ids].astype(np.int64)), share)
                loss.backward()
                cooperative.sum_gradients(m)
                results[("cooperative", name, owner, kind)] = (group.sum([loss.item()])[0], gradients(m))
    # Data parallel: rank r trains batch r of the step, DDP averages the gradients.
    train = ds.split("train")
    for kind in MODELS:
        m = model(kind, ds)
        ddp = DistributedDataParallel(m)
        batch = global_batch(ds, np.array_split(train, world)[rank], key=100 + rank)
        logits = ddp(sampled_blocks(batch), torch.from_numpy(feats[batch.nodes]))
        loss = F.cross_entropy(logits, torch.from_numpy(labels[batch.seeds].astype(np.int64)))
        loss.backward()
        results[("independent", kind)] = (group.sum([loss.item()])[0] / world, gradients(m))
    if rank == 0:
        torch.save(results, f"{out}/{world}.pt")
    del ddp
    dist.barrier()  # no rank tears its connections down while another still uses them
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # as diskgnn.train's ranks do (distributed/group.py, exit_rank): gloo can abort the teardown


if __name__ == "__main__":
    _ranks(sys.argv[1], sys.argv[2])
