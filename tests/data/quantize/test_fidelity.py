"""The fidelity report against plain numpy, the refusal of a fit that destroys the features, and what
quantize and train say about it."""

import numpy as np
import pytest

from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.data.quantize import fidelity
from diskgnn.data.quantize.cli import quantize_dataset
from diskgnn.errors import DiskgnnError

from conftest import random_graph, run_module, write_npy_dir
from quantize_cases import SPECS, features, fitted
from test_shapes import sparse_nonnegative


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("make", [features, sparse_nonnegative])
@pytest.mark.parametrize("chunk", [1, 50, 1000])
def test_the_report_matches_numpy(spec, make, chunk):
    x = make()
    q = fitted(spec, x[:150])
    held = x[150:]
    r = fidelity.report(q, held, chunk)
    y = q.decode_numpy(q.encode(held)).astype(np.float64)
    h = held.astype(np.float64)
    assert r["rows"] == 49 and r["on"] == "held-back"
    assert r["relative_error"] == pytest.approx(np.linalg.norm(y - h) / np.linalg.norm(h), rel=1e-6)
    nx, ny = np.linalg.norm(h, axis=1), np.linalg.norm(y, axis=1)
    cos = [1.0 if a == 0 and b == 0 else 0.0 if a == 0 or b == 0 else float(u @ v / (a * b))
           for u, v, a, b in zip(h, y, nx, ny)]
    assert r["mean_cosine"] == pytest.approx(np.mean(cos), rel=1e-6)
    assert r["min_cosine"] == pytest.approx(min(cos), rel=1e-6)
    nz = h != 0
    assert r["nonzeros_lost_share"] == pytest.approx((nz & (y == 0)).sum() / nz.sum())
    assert r["zeros_gained_share"] == pytest.approx((~nz & (y != 0)).sum() / max(1, (~nz).sum()))
    c = q.clipped(held)
    assert r["clipped_share"] == (None if c is None else pytest.approx(c.mean()))


def test_an_empty_and_a_one_row_report():
    q = fitted("sq4", features())
    assert fidelity.report(q, features()[:1], 10)["rows"] == 1
    zero = np.zeros((1, 33), dtype=np.float32)
    r = fidelity.report(fitted("sq4", sparse_nonnegative()), zero, 10)
    assert r["mean_cosine"] == 1.0 and r["relative_error"] == 0.0 and r["nonzeros_lost_share"] == 0.0


def test_thresholds_refuse_what_they_say():
    good = {"mean_cosine": 0.99, "nonzeros_lost_share": 0.0}
    for sparse in (False, True):
        assert fidelity.problems(good, sparse) == []
        assert "decoded to 0" in fidelity.problems({**good, "nonzeros_lost_share": 0.6}, sparse)[0]
    assert "mean cosine" in fidelity.problems({**good, "mean_cosine": fidelity.REFUSE_MEAN_COSINE - 0.01}, False)[0]
    # sparse data is held to more: a cosine dense data passes with refuses it
    between = {**good, "mean_cosine": (fidelity.REFUSE_MEAN_COSINE + fidelity.REFUSE_MEAN_COSINE_SPARSE) / 2}
    assert fidelity.problems(between, False) == []
    assert fidelity.problems(between, True) == [
        f"rows' mean cosine similarity {between['mean_cosine']:.3f} < {fidelity.REFUSE_MEAN_COSINE_SPARSE} "
        "(sparse data)"]


def test_holdout_sizes():
    assert [fidelity.holdout_rows(n) for n in (1, 2, 9, 10, 199, 10 ** 6)] == [0, 1, 1, 1, 19, 10_000]


@pytest.fixture
def sparse_ds(tmp_path):
    g = random_graph(n=400, d=40)
    g["feat"] = sparse_nonnegative(n=400, d=40)
    return prepare(write_npy_dir(tmp_path / "src", g), tmp_path / "ds", progress=False)


def test_a_destroying_fit_is_refused_naming_a_spec_that_passes(sparse_ds):
    before = (sparse_ds / "manifest.json").read_bytes()
    proc = run_module("diskgnn.quantize", sparse_ds, "--spec", "vq:w=40,L=2")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    line = proc.stderr.strip()
    assert "quantize vq:w=40,L=2: refused: rows' mean cosine similarity" in line and "held-back rows" in line
    better = line.split("use ")[1].split(" instead")[0]
    assert better in fidelity.SUGGEST_SPECS and "--force" in line
    assert (sparse_ds / "manifest.json").read_bytes() == before  # nothing stored
    # the spec it names passes
    run_module("diskgnn.quantize", sparse_ds, "--spec", better, check=True)


def test_forced_it_is_stored_with_its_report_and_train_refuses_it_unless_forced(sparse_ds, tmp_path):
    proc = run_module("diskgnn.quantize", sparse_ds, "--spec", "vq:w=40,L=2", "--force", check=True)
    assert "kept with --force although refused" in proc.stdout
    report = open_dataset(sparse_ds).manifest["quantized"]["vq:w=40,L=2"]["fit"]["report"]
    assert report["refused"] and report["mean_cosine"] < fidelity.REFUSE_MEAN_COSINE
    args = ["--data", sparse_ds, "--features", "vq:w=40,L=2", "--epochs", 1, "--batch-size", 64, "--hidden", 8,
            "--fanouts", "3,2", "--no-progress", "--eval", "none"]
    refused = run_module("diskgnn.train", *args, "--workdir", tmp_path / "w1")
    assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [
        f"train: error: --features vq:w=40,L=2: its fit was refused ({fidelity.refusal(report)}) and stored "
        "with quantize --force; pass --force-features to train on it anyway"]
    forced = run_module("diskgnn.train", *args, "--workdir", tmp_path / "w2", "--force-features", check=True)
    assert "plan: --features vq:w=40,L=2 fidelity on 40 held-back rows" in forced.stdout


def test_quantize_and_train_show_the_shape_and_the_report(sparse_ds, tmp_path):
    proc = run_module("diskgnn.quantize", sparse_ds, "--spec", "sq8", check=True)
    assert "encoded as non-negative, sparse (exact zeros kept)" in proc.stdout
    assert "quantize: sq8: fidelity on 40 held-back rows: relative error" in proc.stdout
    fit = open_dataset(sparse_ds).manifest["quantized"]["sq8"]["fit"]
    assert fit["shape"] == {"signed": False, "zero": True} and fit["data"]["zero_share"] > 0.5
    assert fit["report"]["mean_cosine"] > 0.99 and fit["report"]["nonzeros_lost_share"] == 0
    out = run_module("diskgnn.train", "--data", sparse_ds, "--features", "sq8", "--epochs", 1, "--batch-size", 64,
                     "--hidden", 8, "--fanouts", "3,2", "--no-progress", "--eval", "none", "--workdir",
                     tmp_path / "w", check=True)
    assert "plan: --features sq8 fidelity on 40 held-back rows: relative error" in out.stdout


def test_write_quantized_refuses_before_encoding(sparse_ds):
    with pytest.raises(DiskgnnError, match="refused"):
        quantize_dataset(sparse_ds, ["vq:w=40,L=2"])
    assert not list(sparse_ds.glob("*vq*")) and not list(sparse_ds.glob(".*tmp*"))


def test_sparse_sq1_is_refused_by_the_sparse_threshold(tmp_path):
    """sq1 on row-normalised sparse rows keeps which values are non-zero but not their sizes: a cosine dense
    data would pass with, refused here (it lost 2.8 points on Coauthor CS summing to 1), naming sq2 or better.
    80 % zeros, sizes uniform in [0.05, 1]: one size for all keeps a cosine of about 0.87."""
    rng = np.random.default_rng(2)
    x = np.where(rng.random((400, 40)) < 0.2, rng.uniform(0.05, 1, (400, 40)), 0.0)
    x[np.arange(400), rng.integers(0, 40, 400)] = 0.5
    g = random_graph(n=400, d=40)
    g["feat"] = (x / x.sum(axis=1, keepdims=True)).astype(np.float32)
    ds = prepare(write_npy_dir(tmp_path / "src", g), tmp_path / "ds", progress=False)
    proc = run_module("diskgnn.quantize", ds, "--spec", "sq1")
    line = proc.stderr.strip()
    assert proc.returncode == 1 and "(sparse data)" in line, line
    cosine = float(line.split("mean cosine similarity ")[1].split(" <")[0])
    assert fidelity.REFUSE_MEAN_COSINE <= cosine < fidelity.REFUSE_MEAN_COSINE_SPARSE
    assert line.split("use ")[1].split(" instead")[0] in fidelity.SUGGEST_SPECS
