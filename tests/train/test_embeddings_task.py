"""--embeddings: learnable node embeddings trained out of core. Where a row is served from (memory, the write
queue, the table file) changes no bit of the run, a featureless graph learns its links from embeddings alone,
and a kill -9 in the middle of the write-back resumes to the uninterrupted run's table and weights, bit for bit."""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from diskgnn.data.prepare import prepare
from diskgnn.errors import run_cli
from diskgnn.train.__main__ import main as train_main
from diskgnn.train.checkpoints import Checkpoints

from conftest import REPO, kill_once_checkpointed


@pytest.fixture(scope="module")
def featureless(tmp_path_factory):
    return prepare("synthetic", tmp_path_factory.mktemp("featureless") / "ds", undirected=True, progress=False,
                   synthetic=dict(structure="powerlaw", nodes=1999, feat_dim=0, avg_degree=8, classes=2, seed=0),
                   edge_split=(0.8, 0.1, 0.1))


def argv(data, workdir, *extra):
    return ["--data", str(data), "--task", "link", "--workdir", str(workdir), "--no-progress", "--epochs", "3",
            "--batch-size", "256", "--hidden", "16", "--fanouts", "5", "--negatives", "20", "--chunks", "4",
            "--eval-negatives", "100", "--dropout", "0", "--lr", "0.01", "--embeddings", "8", "--embedding-lr",
            "0.1", "--checkpoint-every", "off", "--eval-max-batches", "3", *extra]


def run(data, workdir, *extra) -> dict:
    assert run_cli("train", train_main, argv(data, workdir, *extra)) == 0
    return json.loads((workdir / "summary.json").read_text())


def table(workdir) -> np.ndarray:
    return np.fromfile(workdir / "embeddings" / "table.bin", np.float32)


def test_a_featureless_graph_learns_and_the_rows_place_changes_nothing(featureless, tmp_path):
    hot = run(featureless, tmp_path / "hot")
    cold = run(featureless, tmp_path / "cold", "--embedding-cache", "0")
    assert hot["embeddings"]["hot_rows"] == 1999 and hot["embeddings"]["rows_disk"] == 0
    e = cold["embeddings"]
    assert e["hot_rows"] == 0 and e["rows_disk"] > 0 and e["rows_queued"] > 0, e  # both other places served
    assert e["bytes_written"] > 0 and e["journal_bytes"] > 0
    assert np.array_equal(table(tmp_path / "hot"), table(tmp_path / "cold"))
    a, b = (Checkpoints(tmp_path / w / "checkpoints").load("last")["model"] for w in ("hot", "cold"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert hot["val_mrr_per_epoch"] == cold["val_mrr_per_epoch"]
    mrr = hot["val_mrr_per_epoch"]
    assert mrr[-1] > mrr[0] and hot["test_mrr"] > 3 * (1 / 101), hot  # far above chance against 100 negatives
    assert not np.array_equal(table(tmp_path / "hot").reshape(1999, 9)[:, :8], np.zeros((1999, 8), np.float32))


def test_a_featureless_graph_without_embeddings_is_refused_in_one_line(featureless, tmp_path, capsys):
    args = [a for a in argv(featureless, tmp_path / "w") if a not in ("--embeddings", "8", "--embedding-lr", "0.1")]
    assert run_cli("train", train_main, args) != 0
    assert "has no node features: train it with --embeddings D" in capsys.readouterr().err
    args = argv(featureless, tmp_path / "w2", "--task", "node", "--sampling", "online")
    assert run_cli("train", train_main, args) != 0
    assert "--sampling online: --embeddings 8 trains with --sampling offline only" in capsys.readouterr().err
    for extra, message in ((["--task", "node", "--embedding-partitions", "4"], "--embedding-partitions 4: 2 to 64, "
                            "with --task link"),
                           (["--embedding-partitions", "65"], "--embedding-partitions 65: 2 to 64"),
                           (["--embedding-partitions", "5", "--embedding-cache", "20000B"], "--embedding-partitions 5: "
                            "a partition is 14.1 KiB and the buffer gets 19.5 KiB, less than two")):
        assert run_cli("train", train_main, argv(featureless, tmp_path / "w3", *extra)) != 0
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_partitioned_epochs_learn_in_buffer_order(featureless, tmp_path, capsys):
    """--embedding-partitions 5 with two partitions' memory (1999 rows of 36 bytes, 400 a partition): every state
    turns the buffer, the table is read and written whole partitions at a time, and the links are learnt."""
    s = run(featureless, tmp_path / "p", "--embedding-partitions", "5", "--embedding-cache", "30000B")
    assert "5 partitions of 14.1 KiB, 2 in memory at once" in capsys.readouterr().out
    e = s["embeddings"]
    assert e["partitions_read"] >= 3 * 10 and e["partitions_written"] > 0 and e["journal_bytes"] > 0, e
    assert e["rows_queued"] == 0  # a train batch reads buffered rows only: nothing waits for the writer
    mrr = s["val_mrr_per_epoch"]
    assert mrr[-1] > mrr[0] and s["test_mrr"] > 3 * (1 / 101), s
    assert s["plan"]["embedding_buffer"] == [5, 2]
    # Validated inside its epochs too (--val-every): the same table and weights; best.pt stays an epoch end's (it
    # names a table generation, which only a checkpoint commits)
    again = run(featureless, tmp_path / "again", "--embedding-partitions", "5", "--embedding-cache", "30000B",
                "--val-every", "20")
    assert np.array_equal(table(tmp_path / "p"), table(tmp_path / "again"))
    a, b = (Checkpoints(tmp_path / w / "checkpoints").load("last")["model"] for w in ("p", "again"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    inside = [v for v in again["validations"] if v["batch"] is not None]
    assert again["val_mrr_per_epoch"] == mrr and len(inside) >= 3 and {v["batch"] for v in inside} == {20, 40}
    assert (again["best_epoch"], again["best_batch"]) == (int(np.argmax(mrr)), None) and again["val_mrr"] == max(mrr)


@pytest.mark.parametrize("optimizer,partitioned", [("adagrad", False), ("adam", False), ("adagrad", True)])
def test_kill_during_write_back_then_resume_equals_the_uninterrupted_run(featureless, tmp_path, optimizer, partitioned):
    extra = ["--embedding-cache", "30000B" if partitioned else "1KiB", "--checkpoint-every", "4",
             "--embedding-optimizer", optimizer, *(["--embedding-partitions", "5"] if partitioned else [])]
    cmd = [sys.executable, "-m", "diskgnn.train"]
    whole = subprocess.run(cmd + argv(featureless, tmp_path / "whole", *extra), capture_output=True, text=True,
                           cwd=REPO)
    assert whole.returncode == 0, whole.stderr
    batches = json.loads((tmp_path / "whole" / "summary.json").read_text())["stage_times_s"]["sample"]["items"] // 3
    rng = random.Random(os.getpid())
    target = rng.randrange(3, 3 * batches - 4)
    run_dir = tmp_path / "killed"
    # a few batches past the checkpoint: the rows written since are on disk, or being written
    killed_at, proc = kill_once_checkpointed(cmd + argv(featureless, run_dir, *extra), run_dir, batches, target,
                                             rng.uniform(0.02, 0.08))
    assert killed_at is not None, f"the run ended before batch {target} was checkpointed: {proc.stderr.read()}"
    resumed = subprocess.run(cmd + argv(featureless, run_dir, *extra, "--resume"), capture_output=True, text=True,
                             cwd=REPO)
    assert resumed.returncode == 0, resumed.stderr
    assert np.array_equal(table(tmp_path / "whole"), table(run_dir)), f"tables differ after a kill at {killed_at}"
    a, b = (Checkpoints(w / "checkpoints").load("last") for w in (tmp_path / "whole", run_dir))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["history"]["val_acc_per_epoch"] == b["history"]["val_acc_per_epoch"]
