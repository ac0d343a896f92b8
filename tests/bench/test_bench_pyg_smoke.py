"""bench.pyg's smoke runs on the trainer's small dataset: the accuracy study (two seeds, three epochs) and the speed
table (three batches, uncapped), each writing its JSON and its marked section of a doc."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("torch_geometric", reason="torch_geometric is the optional extra diskgnn[pyg]")


def bench(*args, home):
    proc = subprocess.run([sys.executable, "-m", "bench.pyg", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "DISKGNN_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_accuracy_study_smoke(train_data, tmp_path):
    doc = tmp_path / "accuracy.md"
    doc.write_text("# kept\n")
    common = ["--data", train_data, "--epochs", "3", "--allow-extras", "--reference-python", sys.executable,
              "--out", tmp_path / "a.json", "--doc", doc]
    bench("accuracy", "--seeds", "0,1", "--references", "full", *common, home=tmp_path / "home")
    result = json.loads((tmp_path / "a.json").read_text())
    assert [r["seed"] for r in result["runs"]] == [0, 1]
    for run in result["runs"]:
        assert 0.4 < run["adapters"]["test_acc"] <= 1 and 0.4 < run["full"]["test_acc"] <= 1  # chance 0.25
    text = doc.read_text()
    assert text.startswith("# kept\n") and "| ds | 3 | full batch in RAM | 2 |" in text
    # --resume runs only the seed missing and keeps the two runs as they were
    bench("accuracy", "--seeds", "0-2", "--references", "full", "--resume", *common, home=tmp_path / "home")
    resumed = json.loads((tmp_path / "a.json").read_text())
    assert [r["seed"] for r in resumed["runs"]] == [0, 1, 2] and resumed["runs"][:2] == result["runs"]
    (row,) = resumed["rows"]
    assert row["full"]["seeds"] == [0, 1, 2]
    assert row["full"]["delta"] == pytest.approx(sum(row["full"]["deltas"]) / 3)
    assert "| ds | 3 | full batch in RAM | 3 |" in doc.read_text()


def test_accuracy_study_adds_the_neighbor_loader_reference(train_data, tmp_path):
    if not any(importlib.util.find_spec(m) for m in ("pyg_lib", "torch_sparse")):
        pytest.skip("PyG's NeighborLoader needs pyg-lib or torch-sparse, neither installed here")
    common = ["--data", train_data, "--epochs", "3", "--allow-extras", "--reference-python", sys.executable,
              "--out", tmp_path / "a.json", "--doc", tmp_path / "a.md", "--seeds", "0"]
    bench("accuracy", "--references", "full", *common, home=tmp_path / "home")
    first = json.loads((tmp_path / "a.json").read_text())["runs"][0]
    bench("accuracy", "--resume", *common, home=tmp_path / "home")  # both references: only the loader's is run
    (run,) = json.loads((tmp_path / "a.json").read_text())["runs"]
    assert run["adapters"] == first["adapters"] and run["full"] == first["full"]
    assert 0.4 < run["loader"]["test_acc"] <= 1
    assert "| ds | 3 | PyG's NeighborLoader in RAM | 1 |" in (tmp_path / "a.md").read_text()


def test_speed_table_smoke(train_data, tmp_path):
    doc = tmp_path / "benchmarks.md"
    bench("speed", "--data", train_data, "--cap", "none", "--batches", "3", "--batch-size", "47", "--fanouts", "4,3",
          "--hidden", "16", "--cache", "2KiB", "--memory-budget", "1GiB", "--out", tmp_path / "s.json", "--doc", doc,
          home=tmp_path / "home")
    runs = json.loads((tmp_path / "s.json").read_text())["runs"]
    for name in ("diskgnn.pyg node", "diskgnn.pyg diskgnn"):
        assert runs[name]["batches"] == 3 and runs[name]["ms_per_batch"] > 0 and runs[name]["backend"]
    peer = runs["PyG NeighborLoader (memmap, MADV_RANDOM)"]
    assert peer.get("batches") == 3 or "PyG is not usable" in peer["skipped"]
    assert "| diskgnn.pyg node | " in doc.read_text()
