"""diskgnn.infer on a typed run: the target type's outputs against the model's forward over the whole graph at once
(the oracle: every paper a seed, every neighbour), for every node, duplicates and one node a batch; sampled
--fanouts per relation; the test accuracy of the written predictions against the run's own; a --featureless table
run's tables read beside the features."""

import json

import numpy as np
import pytest
import torch

from tests.conftest import run_module, small_hetero, whole_graph_batch


@pytest.fixture(scope="module")
def typed_run(tmp_path_factory):
    """The small typed graph, a 2-layer RGraphSAGE trained 3 epochs, its evaluation with every neighbour."""
    tmp = tmp_path_factory.mktemp("infer-typed")
    data = small_hetero(tmp, learnable=True)
    run_module("diskgnn.train", "--data", data, "--workdir", tmp / "run", "--epochs", "3", "--fanouts", "4,4",
               "--batch-size", "32", "--hidden", "16", "--lr", "0.02", "--eval", "full", "--no-progress", check=True)
    return data, tmp / "run"


def oracle(data, run, checkpoint: str = "best", layers: int = 2) -> torch.Tensor:
    from diskgnn.data.format import open_dataset
    from diskgnn.infer.command import build_model, checkpoint_state, run_config

    ds = open_dataset(data, typed=True)
    path, state = checkpoint_state(run, checkpoint)
    model = build_model(run_config(run), ds, path, state)
    blocks, x, nodes = whole_graph_batch(ds)
    with torch.no_grad():
        return model.outputs(blocks, x, nodes, layers)


def infer(run, out, *args):
    return run_module("diskgnn.infer", "--workdir", run, "--out", out, "--no-progress", *args)


def test_every_paper_matches_the_whole_graph_forward(typed_run, tmp_path):
    data, run = typed_run
    want = oracle(data, run)
    proc = infer(run, tmp_path / "all.npy", "--output", "logits", "--batch-size", "64")
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "all.npy")
    assert got.shape == (199, 3)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    manifest = json.loads((tmp_path / "all.npy.manifest.json").read_text())
    assert manifest["neighbours"].startswith("all (sampled per relation") and manifest["model"]["layers"] == 2


def test_duplicates_one_node_a_batch_and_embeddings(typed_run, tmp_path):
    data, run = typed_run
    ids = np.array([198, 5, 5, 0, 198], np.int64)
    np.save(tmp_path / "ids.npy", ids)
    assert infer(run, tmp_path / "few.npy", "--output", "logits", "--nodes", tmp_path / "ids.npy",
                 "--batch-size", "1").returncode == 0
    np.testing.assert_allclose(np.load(tmp_path / "few.npy"), oracle(data, run).numpy()[ids], rtol=1e-5, atol=1e-5)
    assert infer(run, tmp_path / "h.npy", "--output", "embeddings", "--nodes", tmp_path / "ids.npy").returncode == 0
    np.testing.assert_allclose(np.load(tmp_path / "h.npy"), oracle(data, run, layers=1).numpy()[ids],
                               rtol=1e-5, atol=1e-5)
    np.save(tmp_path / "bad.npy", np.array([199]))
    proc = infer(run, tmp_path / "bad-out.npy", "--nodes", tmp_path / "bad.npy")
    assert proc.returncode == 1 and "node id 199 out of range [0, 199)" in proc.stderr


def test_predictions_score_as_the_run_tested(typed_run, tmp_path):
    from diskgnn.data.format import open_dataset

    data, run = typed_run
    assert infer(run, tmp_path / "test.npy", "--nodes", "test").returncode == 0
    ds = open_dataset(data, typed=True)
    test = ds.split("test")
    acc = float((np.load(tmp_path / "test.npy") == np.asarray(ds.labels)[test]).mean())
    summary = json.loads((run / "summary.json").read_text())
    assert acc == pytest.approx(summary["test_acc"]) and acc > 0.5


def test_sampled_fanouts_per_relation_repeat_their_bytes(typed_run, tmp_path):
    data, run = typed_run
    for name in ("a", "b"):
        proc = infer(run, tmp_path / f"{name}.npy", "--output", "logits", "--fanouts", "2,2", "--batch-size", "40")
        assert proc.returncode == 0, proc.stderr
    a, b = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
    assert a.shape == (199, 3) and np.array_equal(a, b)
    assert not np.allclose(a, oracle(data, run).numpy())  # a sample, not every neighbour
    proc = infer(run, tmp_path / "c.npy", "--fanouts", "2")
    assert proc.returncode == 2 and "--fanouts 2: the model has 2 layers" in proc.stderr


@pytest.mark.parametrize("flags", [["--featureless", "table"], ["--embeddings", "3"]])
def test_a_table_run_reads_its_tables(tmp_path, flags):
    """--featureless table (the authors' rows) or --embeddings 3 (every type's, beside the papers' and terms'
    features): read from the run's tables beside the features; the last checkpoint by default, the one the run
    tested with its tables."""
    from diskgnn.data.format import open_dataset
    from diskgnn.infer.command import build_model, checkpoint_state, run_config

    data = small_hetero(tmp_path, learnable=True)
    run = tmp_path / "run"
    run_module("diskgnn.train", "--data", data, "--workdir", run, "--epochs", "2", "--fanouts", "4,4",
               "--batch-size", "32", "--hidden", "16", "--no-progress", *flags, check=True)
    assert infer(run, tmp_path / "all.npy", "--output", "logits").returncode == 0
    ds = open_dataset(data, typed=True)
    path, state = checkpoint_state(run, "last")
    model = build_model(run_config(run), ds, path, state)
    blocks, x, nodes = whole_graph_batch(ds)
    for t in ds.schema.types:
        if (run / "embeddings" / t.name).is_dir():
            dim = json.loads((run / "embeddings" / t.name / "table.json").read_text())["dim"]
            records = np.fromfile(run / "embeddings" / t.name / "table.bin", np.float32).reshape(t.count, -1)
            values = torch.from_numpy(records[nodes[t.name], :dim].copy())
            x[t.name] = torch.cat([x[t.name], values], 1) if t.name in x else values
    assert len(x) == 3
    with torch.no_grad():
        want = model(blocks, x, nodes)
    np.testing.assert_allclose(np.load(tmp_path / "all.npy"), want.numpy(), rtol=1e-5, atol=1e-5)
    proc = infer(run, tmp_path / "t.npy", "--output", "table")
    assert proc.returncode == 2 and "--output table: the run learned no --embeddings table" in proc.stderr
