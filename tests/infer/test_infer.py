"""diskgnn.infer against a plain in-memory forward pass with every neighbour (the oracle) on Cora: every node,
splits and id lists of awkward sizes (1, 199, duplicates), chunks split by in-edges, .npy and .zarr; the test
accuracy of the written predictions against the run's own --eval full; kill -9 and rerun; one-line refusals."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from tests.conftest import REPO, run_module, shared_dataset


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Cora, a 2-layer SAGE trained for 2 epochs with --eval full (its test accuracy from every neighbour)."""
    from diskgnn.data.prepare import prepare

    tmp = tmp_path_factory.mktemp("infer")
    data = prepare(shared_dataset("planetoid_cora"), tmp / "cora", progress=False)
    run_module("diskgnn.train", "--data", data, "--workdir", tmp / "run", "--epochs", "2", "--fanouts", "5,5",
               "--batch-size", "256", "--hidden", "16", "--lr", "0.01", "--eval", "full", "--no-progress", check=True)
    return data, tmp / "run"


def oracle(data, run, layers: int) -> torch.Tensor:
    """The model's first `layers` layers over the whole graph at once, in memory."""
    from diskgnn.data.format import open_dataset
    from diskgnn.infer.command import build_model, checkpoint_state, run_config
    from diskgnn.loading.blocks import full_block

    ds = open_dataset(data)
    path, state = checkpoint_state(run, "best")
    model = build_model(run_config(run), ds, path, state)
    block, src = full_block(ds.indptr, ds.indices, np.arange(ds.num_nodes))
    assert np.array_equal(src, np.arange(ds.num_nodes))
    h = torch.from_numpy(np.array(ds.features, dtype=np.float32))
    with torch.no_grad():
        for i in range(layers):
            h = model.layer(i, block, h)
    return h


def infer(run, out, *args):
    return run_module("diskgnn.infer", "--workdir", run, "--out", out, "--no-progress", *args)


def read(out):
    from diskgnn.data.resumable import read_output

    return read_output(out)


def test_every_nodes_logits_and_embeddings_equal_the_in_memory_forward(trained, tmp_path):
    data, run = trained
    logits = infer(run, tmp_path / "logits.npy", "--output", "logits")
    assert logits.returncode == 0, logits.stderr
    np.testing.assert_allclose(read(tmp_path / "logits.npy"), oracle(data, run, 2).numpy(), rtol=1e-5, atol=1e-5)
    # the last hidden layer, in a zarr array, in batches of 500 rows split further by a small budget's in-edges
    hidden = infer(run, tmp_path / "hidden.zarr", "--output", "embeddings", "--batch-size", "500",
                   "--memory-budget", "64KiB")
    assert hidden.returncode == 0, hidden.stderr
    got = read(tmp_path / "hidden.zarr")
    assert got.shape == (2708, 16)
    np.testing.assert_allclose(got, oracle(data, run, 1).numpy(), rtol=1e-5, atol=1e-5)
    assert not (tmp_path / "hidden.zarr.layers").exists() and not (tmp_path / "hidden.zarr.progress.json").exists()


def test_predictions_of_a_split_score_as_the_runs_eval_full(trained, tmp_path):
    from diskgnn.data.format import open_dataset

    data, run = trained
    proc = infer(run, tmp_path / "test.npy", "--nodes", "test")
    assert proc.returncode == 0, proc.stderr
    ds = open_dataset(data)
    predicted = read(tmp_path / "test.npy")
    summary = json.loads((run / "summary.json").read_text())
    assert predicted.dtype == np.int32 and predicted.size == ds.split("test").size
    assert (predicted == np.asarray(ds.labels)[ds.split("test")]).mean() == pytest.approx(summary["test_acc"])
    manifest = json.loads((tmp_path / "test.npy.manifest.json").read_text())
    assert manifest["format"] == "diskgnn-inference" and manifest["output"] == "predictions"
    assert manifest["checkpoint_path"].endswith("best.pt") and manifest["model"]["layers"] == 2


@pytest.mark.parametrize("ids", [[5], list(range(0, 2708, 14))[:199], [7, 7, 3, 2707, 7, 0]])
def test_listed_ids_of_awkward_sizes_and_duplicates(trained, tmp_path, ids):
    data, run = trained
    np.save(tmp_path / "ids.npy", np.asarray(ids, dtype=np.int32))
    proc = infer(run, tmp_path / "o.npy", "--output", "logits", "--nodes", tmp_path / "ids.npy", "--batch-size", "4")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(read(tmp_path / "o.npy"), oracle(data, run, 2).numpy()[ids], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ids", [None, [5], [7, 7, 3, 2707, 7, 0]], ids=["all", "one", "duplicates"])
def test_sampled_with_fanouts_past_every_degree_is_the_exact_forward(trained, tmp_path, ids):
    """Cora's largest in-degree is 168: fanouts of 200 sample every neighbour, so the sampled outputs are exact."""
    data, run = trained
    nodes = []
    if ids is not None:
        np.save(tmp_path / "ids.npy", np.asarray(ids, dtype=np.int64))
        nodes = ["--nodes", str(tmp_path / "ids.npy")]
    proc = infer(run, tmp_path / "s.npy", "--output", "logits", "--fanouts", "200,200", "--batch-size", "100", *nodes)
    assert proc.returncode == 0, proc.stderr
    want = oracle(data, run, 2).numpy()
    np.testing.assert_allclose(read(tmp_path / "s.npy"), want if ids is None else want[ids], rtol=1e-5, atol=1e-5)
    assert json.loads((tmp_path / "s.npy.manifest.json").read_text())["neighbours"].startswith("sampled: fanouts 200")


def test_sampled_outputs_from_a_batchs_start_are_a_whole_runs_bytes(trained):
    """Small fanouts: a node's output depends on its batch's sample, keyed by the batch's place, so a rerun from
    batch 3 (an interrupted output taken up) computes the same bytes, and the hidden layer is a 1-hop sample's."""
    from diskgnn import defaults
    from diskgnn.data.features import feature_source
    from diskgnn.data.format import open_dataset
    from diskgnn.infer.command import build_model, checkpoint_state, run_config
    from diskgnn.infer.sampled import sampled_outputs

    data, run = trained
    ds, cfg = open_dataset(data), run_config(run)
    model = build_model(cfg, ds, *checkpoint_state(run, "best"))
    nodes = np.r_[np.arange(0, 2708, 3), 7, 7]

    def outputs(k, start):
        got = sampled_outputs(model, ds, nodes, k, [3, 2], 64, start, source=feature_source(ds), device="cpu",
                              seed=cfg.seed, sampler=cfg.sampler_spec, backend="auto", read_depth=defaults.READ_DEPTH)
        with torch.no_grad():
            firsts, rows = zip(*got)
        assert list(firsts) == list(range(start // 64 * 64, nodes.size, 64))
        return torch.cat(rows)

    whole = outputs(2, 0)
    assert whole.shape == (nodes.size, 7) and torch.equal(outputs(2, 200), whole[192:])
    assert torch.equal(whole[-1], whole[-2])  # a duplicate: the same node in one batch, one sample
    assert not torch.allclose(whole, oracle(data, run, 2)[nodes], atol=1e-3)  # 3 neighbours of many: not exact
    assert outputs(1, 0).shape == (nodes.size, 16)


def test_killed_midway_and_rerun_the_output_is_byte_identical(trained, tmp_path):
    data, run = trained
    whole = infer(run, tmp_path / "whole.npy", "--output", "logits", "--batch-size", "64")
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "killed.npy"
    argv = [sys.executable, "-m", "diskgnn.infer", "--workdir", str(run), "--out", str(out), "--output", "logits",
            "--batch-size", "64", "--no-progress"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "DISKGNN_INFER_RECORD_S": "0.001"})  # a record every batch
    progress, done = out.with_name("killed.npy.progress.json"), 0
    while proc.poll() is None:
        try:
            done = json.loads(progress.read_text())["rows_done"]
        except (OSError, ValueError):
            done = 0
        if done >= 400:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and 400 <= done < 2708, f"ended before it was killed: {done}"
    assert not out.exists()
    again = infer(run, out, "--output", "logits", "--batch-size", "64")
    assert again.returncode == 0, again.stderr
    assert out.read_bytes() == (tmp_path / "whole.npy").read_bytes()
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "whole.npy.manifest.json",
                                                        tmp_path / "killed.npy.manifest.json")]
    assert manifests[0]["checksum"] == manifests[1]["checksum"]


def test_bad_input_is_one_line(trained, tmp_path, capsys):
    from diskgnn.data.prepare import prepare
    from diskgnn.errors import run_cli
    from diskgnn.infer.command import main

    data, run = trained
    other = prepare(shared_dataset("planetoid_citeseer"), tmp_path / "citeseer", progress=False)
    np.save(tmp_path / "far.npy", np.array([0, 2708]))
    from diskgnn.nn.models import GNN
    from diskgnn.train.checkpoints import Checkpoints

    Checkpoints(tmp_path / "wide").save("best", {"model": GNN("sage", 1433, 32, 7, 2, 0.0).state_dict()})
    (tmp_path / "done.npy").write_bytes(b"x")
    x = ["--workdir", str(run), "--out", str(tmp_path / "x.npy"), "--no-progress"]
    for argv, want in ((x + [f"--data={other}"], "trained on another dataset"),
                       (x + ["--nodes", str(tmp_path / "far.npy")], "node id 2708 out of range [0, 2708)"),
                       (x + ["--nodes", "everything"], "--nodes everything: not all|train|val|test"),
                       (x + ["--output", "table"], "--output table: the run learned no --embeddings table"),
                       (x + ["--fanouts", "5"], "--fanouts 5: the model has 2 layers"),
                       (x + ["--fanouts", "5,x"], "--fanouts 5,x: expected comma-separated integers"),
                       (x + ["--checkpoint", str(tmp_path / "none.pt")], "no such file"),
                       (x + ["--checkpoint", str(tmp_path / "wide" / "best.pt")], "not a checkpoint of a sage model "
                                                                                   "with hidden 16"),
                       (x[:2] + ["--out", str(tmp_path / "x.csv")], "name a .npy file or a .zarr directory"),
                       (x[:2] + ["--out", str(tmp_path / "done.npy")], "exists (pass --overwrite"),
                       (["--workdir", str(tmp_path), "--out", str(tmp_path / "y.npy")], "no config.yaml")):
        code = run_cli("infer", main, argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert code != 0 and len(err) == 1 and want in err[0], (argv, err)
    assert not list(tmp_path.glob("x.npy*")) and (tmp_path / "done.npy").read_bytes() == b"x"
