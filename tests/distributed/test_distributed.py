"""Training on several processes: real torchrun groups over gloo on this machine, checked against one process.

Exactness: a cooperative step on P = 2 and 3 ranks computes the loss and the gradients one process computes
on the whole global batch (every model, both ownerships, batches of 1 and 7 seeds that leave ranks without
seeds or rows), and a data-parallel step equals one process accumulating the same P batches. End to end:
`torchrun -m diskgnn.train --distributed cooperative` trains the weights one process trains on batches of
P x B seeds; independent runs; a rank killed mid-run ends the group with one line, not a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import coop_cases
from bench.distributed import free_port
from conftest import REPO, run_module
from diskgnn.data.format import open_dataset
from diskgnn.distributed.cooperative import OwnedRows, exchange_plan, owners
from diskgnn.train.checkpoints import Checkpoints

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def torchrun(nproc: int, *args, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=timeout, env=env, **kw)


def test_owners_are_a_balanced_function_of_the_id():
    ids = np.arange(10_000)
    for world in (1, 2, 3, 4):
        for scheme in ("hash", "range"):
            own = owners(ids, world, scheme, ids.size)
            assert own.min() >= 0 and own.max() == world - 1
            assert np.array_equal(own[::-1], owners(ids[::-1], world, scheme, ids.size))  # of the id alone
            counts = np.bincount(own, minlength=world)
            assert counts.max() - counts.min() <= 0.05 * ids.size / world, (scheme, world, counts)
    assert np.all(np.diff(owners(ids, 4, "range", ids.size)) >= 0)  # contiguous ranges


def test_shares_cover_the_global_batch_once(train_data):
    """Every vertex of every layer is computed by exactly one rank, every input row read by exactly one, and
    what one rank sends is what the other receives."""
    ds = open_dataset(train_data)
    batch = coop_cases.global_batch(ds, ds.split("train")[:50])
    for world in (1, 2, 3):
        own = owners(batch.nodes, world, "hash", ds.num_nodes)
        shares = [exchange_plan(batch, own, r, world) for r in range(world)]
        assert np.array_equal(np.sort(np.concatenate([s.input_ids for s in shares])), np.sort(batch.nodes))
        assert np.array_equal(np.sort(np.concatenate([s.seed_ids for s in shares])), np.sort(batch.seeds))
        for layer, gb in enumerate(batch.blocks[::-1]):
            assert sum(s.layers[layer].block.num_dst for s in shares) == gb.num_dst
            assert sum(s.layers[layer].block.indices.numel() for s in shares) == gb.indices.size
            for r in range(world):
                for q in range(world):
                    assert shares[r].layers[layer].send_counts[q] == shares[q].layers[layer].recv_counts[r]
        view = OwnedRows([batch], 0, world, "hash", ds.num_nodes)
        assert np.array_equal(view[0].nodes, shares[0].input_ids)


@pytest.fixture(scope="module")
def rank_results(train_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    results = {}
    for world in (2, 3):
        proc = torchrun(world, Path(coop_cases.__file__), train_data, out)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[world] = torch.load(out / f"{world}.pt", weights_only=False)
    return results


@pytest.mark.parametrize("world", [2, 3])
def test_cooperative_step_equals_one_process_on_the_global_batch(rank_results, train_data, world):
    ds = open_dataset(train_data)
    for name, seeds in coop_cases.seed_sets(ds).items():
        batch = coop_cases.global_batch(ds, seeds)
        for kind in coop_cases.MODELS:
            loss, grads = coop_cases.one_process(kind, ds, [batch])
            for owner in coop_cases.OWNERS:
                got_loss, got = rank_results[world][("cooperative", name, owner, kind)]
                assert got_loss == pytest.approx(loss, rel=1e-5), (name, owner, kind)
                for g, e in zip(got, grads):
                    torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6, msg=f"{name} {owner} {kind}")


@pytest.mark.parametrize("world", [2, 3])
def test_data_parallel_step_equals_gradient_accumulation(rank_results, train_data, world):
    ds = open_dataset(train_data)
    parts = np.array_split(ds.split("train"), world)
    batches = [coop_cases.global_batch(ds, p, key=100 + r) for r, p in enumerate(parts)]
    for kind in coop_cases.MODELS:
        loss, grads = coop_cases.one_process(kind, ds, batches)
        got_loss, got = rank_results[world][("independent", kind)]
        assert got_loss == pytest.approx(loss, rel=1e-5)
        for g, e in zip(got, grads):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6, msg=kind)


TRAIN = ["--fanouts", "4,3", "--hidden", "16", "--lr", "0.02", "--no-progress", "--memory-budget", "1GiB",
         "--host-cache", "8KiB", "--dropout", "0", "--checkpoint-every", "off"]


def _weights(workdir: Path) -> dict:
    return Checkpoints(workdir / "checkpoints").load("last")["model"]


def test_cooperative_training_equals_one_process_with_the_global_batch(train_data, tmp_path):
    """2 ranks x 47 seeds train, batch for batch, the weights one process trains with batches of 94: with dropout
    too, since a node's mask is keyed by the batch and the node, not by the rank that computes it (independent
    streams per rank made 10 seeds of Amazon Computers differ by up to 39 points between the two, from the
    masks alone)."""
    common = ["--data", train_data, "--epochs", "2", *TRAIN, "--dropout", "0.5"]
    proc = torchrun(2, "-m", "diskgnn.train", *common, "--batch-size", "47", "--distributed", "cooperative",
                    "--workdir", tmp_path / "coop")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_module("diskgnn.train", *common, "--batch-size", "94", "--workdir", tmp_path / "one", check=True)
    coop, one = _weights(tmp_path / "coop" / "rank-0"), _weights(tmp_path / "one")
    for name, w in one.items():
        torch.testing.assert_close(coop[name], w, rtol=1e-4, atol=1e-5, msg=name)
    assert not (tmp_path / "coop" / "rank-1" / "summary.json").exists()  # rank 0 alone writes it
    import json

    summary = json.loads((tmp_path / "coop" / "rank-0" / "summary.json").read_text())
    d = summary["distributed"]
    assert d["world_size"] == 2 and d["exchange_bytes"] > 0 and d["seeds"] == 2 * 200  # 200 train seeds, 2 epochs
    assert summary["test_acc"] > 0.4  # chance is 0.25
    # The ranks evaluate one process's eval batches, every other one each: the same accuracies, epoch by epoch.
    alone = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["val_acc_per_epoch"] == pytest.approx(alone["val_acc_per_epoch"], abs=1e-9)
    assert summary["test_acc"] == pytest.approx(alone["test_acc"], abs=1e-9)


def test_resume_restarts_the_group_from_rank_0s_checkpoint(train_data, tmp_path):
    """A cooperative group stopped after epoch 0 and resumed (rank 0 reads last.pt and sends it to rank 1) ends
    with the weights of a group that was never stopped; a group of another size is refused in one line."""
    common = ["--data", train_data, *TRAIN, "--batch-size", "47", "--distributed", "cooperative"]
    for args in (["--epochs", "2", "--workdir", tmp_path / "straight"], ["--epochs", "1", "--workdir", tmp_path / "r"],
                 ["--epochs", "2", "--workdir", tmp_path / "r", "--resume"]):
        proc = torchrun(2, "-m", "diskgnn.train", *common, *args)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert "training goes on at epoch 1, batch 0" in proc.stdout
    straight, resumed = _weights(tmp_path / "straight" / "rank-0"), _weights(tmp_path / "r" / "rank-0")
    for name, w in straight.items():
        torch.testing.assert_close(resumed[name], w, rtol=1e-5, atol=1e-6, msg=name)
    proc = torchrun(3, "-m", "diskgnn.train", *common, "--epochs", "3", "--workdir", tmp_path / "r", "--resume")
    assert proc.returncode != 0 and "written by 2 processes, not 3" in proc.stderr


def test_independent_training_runs_and_every_rank_trains_its_share(train_data, tmp_path):
    proc = torchrun(2, "-m", "diskgnn.train", "--data", train_data, "--epochs", "2", *TRAIN, "--batch-size", "47",
                    "--distributed", "independent", "--workdir", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    summary = json.loads((tmp_path / "rank-0" / "summary.json").read_text())
    # 200 seeds make 5 batches of 47: 2 steps of 2 batches per epoch, the fifth dropped
    assert summary["distributed"]["rank_batches"] == 2 * 2 * 2
    assert summary["distributed"]["seeds"] == 2 * 4 * 47
    assert summary["test_acc"] > 0.4
    assert "the epoch's last batches beyond a multiple of 2 are dropped" in proc.stdout


def test_independent_training_on_a_typed_graph(tmp_path_factory, tmp_path):
    """--distributed independent on a heterogeneous graph: each rank trains its share of the typed batches with
    DDP, evaluation is summed over the ranks, the model learns, and last.pt names the world; cooperative is
    refused in one line."""
    import json

    from conftest import small_hetero

    hds = small_hetero(tmp_path_factory.mktemp("dh"), learnable=True)
    args = ("-m", "diskgnn.train", "--data", hds, "--epochs", "6", "--no-progress", "--hidden", "16", "--lr", "0.005",
            "--fanouts", "4,4", "--batch-size", "11", "--memory-budget", "1GiB")
    proc = torchrun(2, *args, "--distributed", "independent", "--workdir", tmp_path / "d")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "d" / "rank-0" / "summary.json").read_text())
    # 100 train papers make 10 batches of 11 (the last of 1 seed): 5 steps of 2 batches an epoch
    assert summary["distributed"]["rank_batches"] == 6 * 10 and summary["distributed"]["world_size"] == 2
    assert summary["distributed"]["seeds"] == 6 * 100 and summary["distributed"]["disk_bytes_read"] > 0
    assert summary["test_acc"] > 0.6, proc.stdout[-2000:]  # chance: a third
    checkpoints = Checkpoints(tmp_path / "d" / "rank-0" / "checkpoints")  # rank 0 writes them
    assert checkpoints.load("last")["world"] == 2
    assert checkpoints.load("best")["dataset"] == checkpoints.load("last")["dataset"]
    more = torchrun(2, *[a if a != "6" else "7" for a in args], "--distributed", "independent", "--workdir",
                    tmp_path / "d", "--resume")
    assert more.returncode == 0, more.stderr[-3000:]
    resumed = json.loads((tmp_path / "d" / "rank-0" / "summary.json").read_text())
    assert resumed["resumed"] and resumed["train_loss"][:6] == summary["train_loss"] and len(resumed["train_loss"]) == 7
    coop = torchrun(2, *args, "--distributed", "cooperative", "--workdir", tmp_path / "c")
    assert coop.returncode != 0 and "--distributed cooperative: its exchange plan" in coop.stderr


def test_a_rank_that_dies_ends_the_group_with_one_line(train_data, tmp_path):
    """Two "machines" (two torchrun invocations, one process each, a localhost rendezvous): node 1's process is
    killed (SIGKILL) while the group trains; node 0's rank fails its next collective at once and ends with one
    line naming itself, well before --dist-timeout, and both launchers exit non-zero."""
    port = free_port()
    nodes = []
    for node in (0, 1):
        args = [*TORCHRUN, "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=1", "--master-addr=127.0.0.1",
                f"--master-port={port}", "-m", "diskgnn.train", "--data", train_data, "--epochs", "500", *TRAIN,
                "--batch-size", "8", "--distributed", "cooperative", "--workdir", tmp_path / f"node{node}",
                "--dist-timeout", "10min"]
        nodes.append(subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, "OMP_NUM_THREADS": "1"}))
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "node0" / "rank-0" / "checkpoints" / "last.pt").exists():  # training has begun
            assert all(p.poll() is None for p in nodes) and time.monotonic() < deadline, \
                nodes[0].communicate()[1][-3000:]
            time.sleep(0.2)
        os.kill(int((tmp_path / "node1" / "rank-1" / ".lock").read_text()), signal.SIGKILL)
        killed = time.monotonic()
        _, err = nodes[0].communicate(timeout=120)
        assert time.monotonic() - killed < 60
        assert nodes[0].returncode != 0 and nodes[1].wait(timeout=60) != 0
        lines = [line for line in err.splitlines() if line.startswith("train: error: rank 0 of 2")]
        assert lines and "the process group failed" in lines[0], err[-3000:]
        assert "Traceback" not in err.split("train: error: rank 0 of 2")[0]  # none from the rank itself
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
                p.communicate()


def test_distributed_needs_torchrun_and_torchrun_needs_distributed(train_data, tmp_path):
    proc = run_module("diskgnn.train", "--data", train_data, "--distributed", "cooperative", "--workdir", tmp_path)
    assert proc.returncode == 2 and "start it with torchrun" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_module("diskgnn.train", "--data", train_data, "--distributed", "independent", "--sampling", "online")
    assert proc.returncode == 2 and "--sampling offline or replay" in proc.stderr
    proc = run_module("diskgnn.train", "--data", train_data, "--dist-timeout", "soon")
    assert proc.returncode == 2 and "--dist-timeout soon" in proc.stderr


@pytest.mark.parametrize("typed", [False, True])
def test_tables_under_data_parallel_stay_one_table(train_data, tmp_path_factory, tmp_path, typed):
    """Out-of-core tables under --distributed independent (--embeddings on a plain graph, --featureless table on a
    typed one's authors): every rank steps every rank's rows with their gradients averaged, so each rank's copy of
    a table equals the other's byte for byte; a group stopped after epoch 0 and resumed ends with the tables and
    weights of one never stopped; the model learns."""
    import json

    from conftest import small_hetero

    if typed:
        data = small_hetero(tmp_path_factory.mktemp("dt"), learnable=True)
        args = ["--data", data, "--featureless", "table", "--fanouts", "4,4", "--batch-size", "11", "--lr", "0.005"]
        floor = 0.6  # chance: a third
    else:
        args, floor = ["--data", train_data, "--embeddings", "8", *TRAIN, "--batch-size", "47"], 0.4  # chance: 0.25
    args = ["-m", "diskgnn.train", *args, "--hidden", "16", "--no-progress", "--memory-budget", "1GiB",
            "--distributed", "independent"]
    for run in (["--epochs", "2", "--workdir", tmp_path / "straight"], ["--epochs", "1", "--workdir", tmp_path / "r"],
                ["--epochs", "2", "--workdir", tmp_path / "r", "--resume"]):
        proc = torchrun(2, *args, *run)
        assert proc.returncode == 0, proc.stderr[-3000:]

    def tables(workdir: Path) -> dict:
        found = {f.relative_to(workdir): f.read_bytes() for f in (workdir / "embeddings").rglob("*.bin")}
        assert found, workdir
        return found

    straight = tables(tmp_path / "straight" / "rank-0")
    assert tables(tmp_path / "straight" / "rank-1") == straight
    assert tables(tmp_path / "r" / "rank-0") == straight == tables(tmp_path / "r" / "rank-1")
    for name, w in _weights(tmp_path / "straight" / "rank-0").items():
        torch.testing.assert_close(_weights(tmp_path / "r" / "rank-0")[name], w, rtol=1e-5, atol=1e-6, msg=name)
    summary = json.loads((tmp_path / "straight" / "rank-0" / "summary.json").read_text())
    assert summary["test_acc"] > floor and summary["embeddings"], summary
