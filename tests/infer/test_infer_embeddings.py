"""diskgnn.infer on an --embeddings run (Cora, 8 learned values a node beside its features): the model's outputs,
layer-wise and sampled, equal an in-memory forward over the features joined to the table as last checkpointed;
--output table is the table's values; a checkpoint the table has moved on from is refused in one line."""

import json

import numpy as np
import pytest
import torch

from tests.conftest import run_module, shared_dataset


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from diskgnn.data.prepare import prepare

    tmp = tmp_path_factory.mktemp("infer-emb")
    data = prepare(shared_dataset("planetoid_cora"), tmp / "cora", progress=False)
    run_module("diskgnn.train", "--data", data, "--workdir", tmp / "run", "--epochs", "1", "--fanouts", "5,5",
               "--batch-size", "256", "--hidden", "16", "--lr", "0.01", "--embeddings", "8", "--embedding-lr", "0.1",
               "--no-progress", check=True)
    return data, tmp / "run"


def learned(run) -> np.ndarray:
    meta = json.loads((run / "embeddings" / "table.json").read_text())
    return np.fromfile(run / "embeddings" / "table.bin", np.float32).reshape(meta["num_nodes"], -1)[:, : meta["dim"]]


def oracle(data, run) -> torch.Tensor:
    """The last checkpoint's model over the whole graph at once, its input the features beside the table."""
    from diskgnn.data.format import open_dataset
    from diskgnn.infer.command import build_model, checkpoint_state, run_config
    from diskgnn.loading.blocks import full_block

    ds = open_dataset(data)
    model = build_model(run_config(run), ds, *checkpoint_state(run, "last"))
    block, _ = full_block(ds.indptr, ds.indices, np.arange(ds.num_nodes))
    h = torch.from_numpy(np.concatenate([np.array(ds.features, dtype=np.float32), learned(run)], 1))
    assert h.shape[1] == ds.feature_dim + 8
    with torch.no_grad():
        for i in range(len(model.layers)):
            h = model.layer(i, block, h)
    return h


def infer(run, out, *args):
    return run_module("diskgnn.infer", "--workdir", run, "--out", out, "--no-progress", *args)


@pytest.mark.parametrize("how", [[], ["--fanouts", "200,200", "--nodes", "test"]], ids=["layer-wise", "sampled"])
def test_the_outputs_read_the_table_beside_the_features(trained, tmp_path, how):
    from diskgnn.data.format import open_dataset
    from diskgnn.data.resumable import read_output

    data, run = trained
    proc = infer(run, tmp_path / "o.npy", "--output", "logits", *how)
    assert proc.returncode == 0, proc.stderr
    want = oracle(data, run).numpy()
    if how:
        want = want[open_dataset(data).split("test")]
    np.testing.assert_allclose(read_output(tmp_path / "o.npy"), want, rtol=1e-5, atol=1e-5)
    manifest = json.loads((tmp_path / "o.npy.manifest.json").read_text())
    assert manifest["checkpoint_path"].endswith("last.pt") and "+table(generation 1" in manifest["model"]["features"]


def test_the_table_output_is_the_learned_values(trained, tmp_path):
    from diskgnn.data.format import open_dataset
    from diskgnn.data.resumable import read_output

    data, run = trained
    proc = infer(run, tmp_path / "t.npy", "--output", "table", "--nodes", "test", "--batch-size", "7")
    assert proc.returncode == 0, proc.stderr
    assert np.array_equal(read_output(tmp_path / "t.npy"), learned(run)[open_dataset(data).split("test")])


def test_the_best_checkpoint_of_the_tables_generation_runs_and_an_older_one_is_refused(trained, tmp_path):
    """One epoch: best.pt is the last epoch's, of the table's generation; a checkpoint of generation 0 is not."""
    from diskgnn.data.resumable import read_output
    from diskgnn.train.checkpoints import Checkpoints

    data, run = trained
    proc = infer(run, tmp_path / "best.npy", "--checkpoint", "best", "--output", "logits")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(read_output(tmp_path / "best.npy"), oracle(data, run).numpy(), rtol=1e-5, atol=1e-5)
    state = Checkpoints(run / "checkpoints").load("best")
    assert state["embeddings"]["generation"] == 1
    Checkpoints(tmp_path / "old").save("best", {**state, "embeddings": {"generation": 0}})
    proc = infer(run, tmp_path / "b.npy", "--checkpoint", str(tmp_path / "old" / "best.pt"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "holds values written after the checkpoint" in lines[0], lines
    assert not list(tmp_path.glob("b.npy*"))


def test_a_featureless_link_runs_embeddings_are_its_table_through_the_model(tmp_path):
    """--task link on a featureless graph: the model's input is the learned values alone."""
    from diskgnn.data.prepare import prepare
    from diskgnn.data.resumable import read_output

    data = prepare("synthetic", tmp_path / "ds", undirected=True, progress=False, edge_split=(0.8, 0.1, 0.1),
                   synthetic=dict(structure="powerlaw", nodes=1999, feat_dim=0, avg_degree=8, classes=2, seed=0))
    run_module("diskgnn.train", "--data", data, "--task", "link", "--workdir", tmp_path / "run", "--epochs", "2",
               "--batch-size", "256", "--hidden", "16", "--fanouts", "5", "--negatives", "5", "--embeddings", "8",
               "--eval-max-batches", "2", "--no-progress", check=True)
    proc = infer(tmp_path / "run", tmp_path / "e.npy", "--nodes", "all")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(read_output(tmp_path / "e.npy"), oracle(data, tmp_path / "run").numpy(), rtol=1e-5,
                               atol=1e-5)
