"""The accuracy benchmark at a tiny size (Cora, 1 seed, 3 epochs), so that it cannot rot."""

import json
import math

import pytest

from conftest import shared_dataset


def test_accuracy_bench_smoke(tmp_path):
    shared_dataset("planetoid_cora")
    from bench import accuracy

    out, md = tmp_path / "accuracy.json", tmp_path / "accuracy.md"
    # A quarter of the features in the host tier, so that offline batches also read their packs.
    accuracy.main(["--smoke", "--host-cache-fraction", "0.25", "--workdir", str(tmp_path / "work"),
                   "--out", str(out), "--markdown", str(md)])
    saved = json.loads(out.read_text())
    for key in ("machine", "versions", "command", "hyperparameters", "datasets", "runs", "aggregate", "wall_s"):
        assert key in saved
    assert saved["datasets"]["cora"]["splits"] == {"train": 140, "val": 500, "test": 1000}  # the public split
    assert saved["datasets"]["cora"]["epochs"] == 3
    runs = {(r["model"], r["mode"]) for r in saved["runs"]}
    assert runs == {(m, mode) for m in ("sage", "gcn") for mode in ("reference", "offline", "online")}
    for r in saved["runs"]:
        assert math.isfinite(r["test_acc"]) and 0 <= r["test_acc"] <= 1, r
        assert 0 <= r["best_epoch"] < 3
    offline = [r for r in saved["runs"] if r["mode"] == "offline"]
    assert all(0 < r["tier_hit_rates"]["host"] < 1 for r in offline)
    assert [(a["dataset"], a["model"]) for a in saved["aggregate"]] == [("cora", "sage"), ("cora", "gcn")]
    for a in saved["aggregate"]:
        assert a["offline_minus_reference"] == pytest.approx(100 * (a["offline"]["mean"] - a["reference"]["mean"]))
        assert isinstance(a["pass_reference"], bool) and isinstance(a["pass_online"], bool)
    text = md.read_text()
    assert "| cora | sage |" in text and "| cora | gcn |" in text and saved["command"] in text
    # The workdirs of the runs are removed; only the logs stay.
    assert not any((tmp_path / "work" / "runs").iterdir())


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_trainer_without_sampling_or_dropout_follows_the_reference(tmp_path, model):
    """All neighbours (fanouts -1,-1), no dropout, one batch: diskgnn.train and the reference take the same
    Adam steps from the same weights, so their val curves agree epoch by epoch (up to float summation order)."""
    shared = shared_dataset("planetoid_cora").parent
    from bench import accuracy, reference
    from diskgnn.config import TrainConfig
    from diskgnn.train import train

    data = accuracy.prepared("cora", shared, tmp_path / "data")
    hp = {**accuracy.HPARAMS, "dropout": 0.0}
    ref = reference.reference_train(data, model, epochs=8, seed=3, **hp)
    cfg = TrainConfig(data=str(data), model=model, fanouts="-1,-1", batch_size=accuracy.BATCH_SIZE, epochs=8,
                      seed=3, workdir=str(tmp_path / "run"), progress=False, **hp)
    summary = train(cfg)
    tolerance = 2 / 500  # two of Cora's 500 val nodes
    assert summary["val_acc_per_epoch"] == pytest.approx(ref["val_acc_per_epoch"], abs=tolerance)
    assert summary["test_acc"] == pytest.approx(ref["test_acc"], abs=2 / 1000)
    assert max(ref["val_acc_per_epoch"]) > 0.7  # it learned: equal curves are not two flat lines
