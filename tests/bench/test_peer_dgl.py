"""bench.peers.dgl: GraphBolt's layout checked against numpy oracles of the raw graph; the runner, in DGL's own
venv where `make bench-deps` made it, trains on it; without the venv every DGL row says why."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from bench import epoch as bench_epoch
from bench.harness.runs import loop
from bench.peers import dgl
from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare

from conftest import oracle_csc, random_graph, write_npy_dir

N, D = 199, 33
SPLITS = {"train": np.arange(0, 150, 3), "val": np.arange(1, 199, 3), "test": np.arange(2, 199, 3)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dgl")
    g = random_graph(n=N, e=1500, d=D, classes=5, seed=4)
    g["src"] = np.r_[g["src"], 17, 17]  # a duplicate edge and a self-loop
    g["dst"] = np.r_[g["dst"], 17, 17]
    return prepare(write_npy_dir(tmp / "src", g, splits=SPLITS), tmp / "ds", progress=False), g


def test_layout_matches_the_dataset(dataset, tmp_path):
    path, g = dataset
    ds = open_dataset(path)
    # 4 KiB of chunks: many edge and feature chunks, rows of 132 bytes straddling them
    dgl.write_layout(ds, tmp_path, eval_nodes=7, budget=4096)
    indptr, indices = oracle_csc(N, g["src"], g["dst"])
    edges = np.load(tmp_path / "edges.npy")
    assert edges.shape == (2, ds.num_edges) and edges.dtype == np.int64
    np.testing.assert_array_equal(edges[0], indices)  # sources ...
    np.testing.assert_array_equal(edges[1], np.repeat(np.arange(N), np.diff(indptr)))  # ... into destinations
    np.testing.assert_array_equal(np.load(tmp_path / "feat.npy"), g["feat"])
    for split, n in (("train", len(SPLITS["train"])), ("val", 7), ("test", 7)):
        nodes = np.load(tmp_path / f"{split}_nodes.npy")
        np.testing.assert_array_equal(nodes, np.asarray(ds.split(split))[:n])
        np.testing.assert_array_equal(np.load(tmp_path / f"{split}_labels.npy"), g["labels"][nodes])
    meta = yaml.safe_load((tmp_path / "metadata.yaml").read_text())
    assert meta["graph"] == {"nodes": [{"num": N}], "edges": [{"format": "numpy", "path": "edges.npy"}]}
    assert meta["feature_data"][0]["in_memory"] is False
    task = meta["tasks"][0]
    assert task["num_classes"] == 5
    assert [d["name"] for d in task["train_set"][0]["data"]] == ["seed_nodes", "labels"]  # DGL 2.1's names


def test_rows_say_why_without_the_venv(dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("DISKGNN_HOME", str(tmp_path))
    ok, why = dgl.available()
    assert not ok and why == (f"DGL 2.1.0 is not installed in {tmp_path}/peers/dgl-2.1.0; run make bench-deps "
                              "(python -m bench.peers.dgl --install)")
    args = SimpleArgs()
    row = bench_epoch.dgl("dgl_ondisk", "ondisk", dataset[0], tmp_path, args, None, timeout=10)
    assert row == {"error": why, "not_installed": True}


class SimpleArgs:
    batches, epochs, eval_batches, batch_size, fanouts, hidden = 0, 2, 1, 16, "4,3", 8


@pytest.mark.skipif(not dgl.available()[0], reason="DGL's venv is absent (make bench-deps installs it, ~5 GB): "
                    + dgl.available()[1])
@pytest.mark.parametrize("mode", ["ondisk", "memory"])
def test_runner_trains_on_the_export(dataset, tmp_path, mode):
    path, _ = dataset
    export = dgl.export(path, eval_nodes=16, out=tmp_path / "x")
    assert export["preprocess_s"] > 0 and (tmp_path / "x" / "preprocessed" / "metadata.yaml").exists()
    progress = tmp_path / "p.jsonl"
    argv = dgl.command(Path(export["path"]), mode=mode, epochs=2, batches=None, fanouts="4,3", batch_size=16,
                       hidden=8, lr=0.01, dropout=0.5, seed=0, progress=progress)
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in progress.read_text().splitlines()]
    steps = [x for x in lines if "batch" in x]
    per_epoch = -(-len(SPLITS["train"]) // 16)
    assert [x["batch"] for x in steps] == list(range(2 * per_epoch))
    assert [x["epoch"] for x in steps] == [0] * per_epoch + [1] * per_epoch
    ends = [x for x in lines if "epoch_end" in x]
    assert [x["epoch_end"] for x in ends] == [0, 1] and all(0 <= x["val_acc"] <= 1 for x in ends)
    assert ends[1]["elapsed_s"] > ends[0]["elapsed_s"] > 0
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["mode"] == mode and 0 <= result["test_acc"] <= 1 and lines[-1]["test_acc"] == result["test_acc"]
    # and bench.epoch's reading of the same protocol
    row = loop("dgl", argv, progress, path, SimpleArgs(), None, epochs=2, cold=False, timeout=120)
    assert row["batches_done"] == 2 * per_epoch and not row["extrapolated"] and row["epochs_done"] == 2
    assert len(row["train_s_per_epoch"]) == 2 and 0 <= row["test_acc"] <= 1
