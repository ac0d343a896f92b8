"""Bad input: one line naming the file and the problem, non-zero exit, no traceback, nothing left behind."""

import os
import subprocess

import numpy as np
import pytest

from conftest import random_graph, run_module, write_npy_dir


def fails(tmp_path, source, *flags, match, out=None):
    out = out or tmp_path / "out"
    proc = run_module("diskgnn.prepare", source, "--out", out, "--no-progress", *flags)
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert match in lines[0], lines[0]
    leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    assert not leftovers, leftovers
    return lines[0]


@pytest.fixture
def good(tmp_path):
    return write_npy_dir(tmp_path / "src", random_graph())


def test_missing_file(tmp_path, good):
    (good / "labels.npy").unlink()
    fails(tmp_path, good, match="labels.npy: missing")


def test_wrong_shape_and_dtype(tmp_path, good):
    np.save(good / "feat.npy", np.zeros(199, dtype=np.float32))
    fails(tmp_path, good, match="feat.npy: features must be 2-D")
    np.save(good / "feat.npy", np.zeros((199, 3), dtype=np.float32))
    np.save(good / "labels.npy", np.zeros(199, dtype=np.float32))
    fails(tmp_path, good, match="labels.npy: labels must be integers")


def test_mismatched_lengths(tmp_path, good):
    np.save(good / "labels.npy", np.zeros(198, dtype=np.int64))
    fails(tmp_path, good, match="198 labels but")


@pytest.mark.parametrize("bad,what", [(-1, "source id -1 out of range"), (199, "destination id 199 out of range")])
def test_out_of_range_ids(tmp_path, good, bad, what):
    ei = np.load(good / "edge_index.npy")
    ei[0 if bad < 0 else 1, 17] = bad
    np.save(good / "edge_index.npy", ei)
    fails(tmp_path, good, match=what)


def test_bad_split_ids(tmp_path, good):
    np.save(good / "train_idx.npy", np.array([1, 500]))
    fails(tmp_path, good, match="train split has node id 500")
    np.save(good / "train_idx.npy", np.array([1, 2]))
    np.save(good / "val_idx.npy", np.array([2]))
    fails(tmp_path, good, match="overlap")


def test_nonfinite_features_refused_unless_allowed(tmp_path, good):
    feat = np.load(good / "feat.npy")
    feat[42, 3] = np.nan
    np.save(good / "feat.npy", feat)
    fails(tmp_path, good, match="feature row 42 has NaN or inf")
    proc = run_module("diskgnn.prepare", good, "--out", tmp_path / "ok", "--allow-nonfinite", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert run_module("diskgnn.verify", tmp_path / "ok").returncode == 0


def test_float16_overflow_is_nonfinite(tmp_path, good):
    feat = np.load(good / "feat.npy")
    feat[7, 0] = 1e6
    np.save(good / "feat.npy", feat)
    fails(tmp_path, good, "--feature-dtype", "float16", match="feature row 7 has NaN or inf after conversion")


def test_empty_graph(tmp_path, good):
    np.save(good / "feat.npy", np.zeros((0, 4), dtype=np.float32))
    np.save(good / "labels.npy", np.zeros(0, dtype=np.int64))
    fails(tmp_path, good, match="empty graph")


def test_no_train_nodes(tmp_path, good):
    np.save(good / "labels.npy", np.full(199, -1))
    fails(tmp_path, good, match="no train nodes")


def test_truncated_npy(tmp_path, good):
    data = (good / "feat.npy").read_bytes()
    (good / "feat.npy").write_bytes(data[:-100])
    fails(tmp_path, good, match="feat.npy: truncated")


def test_unknown_format_and_missing_source(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "readme.txt").write_text("hi")
    fails(tmp_path, tmp_path / "junk", match="unknown format")
    fails(tmp_path, tmp_path / "nothing", match="no such file or directory")


def test_existing_output_needs_overwrite(tmp_path, good):
    (tmp_path / "out").mkdir()
    fails(tmp_path, good, match="already exists (pass --overwrite")


def test_bad_flags(tmp_path, good):
    fails(tmp_path, good, "--memory-budget", "12", match="--memory-budget 12 B is too small")
    fails(tmp_path, good, "--memory-budget", "lots", match="--memory-budget lots: cannot read as a size")
    fails(tmp_path, good, "--split-ratios", "0.9,0.9,0.1", match="sum to at most 1")


def test_train_fraction_conflicts_are_refused(tmp_path, good):
    line = fails(tmp_path, good, "--train-fraction", "0.5", match="--train-fraction 0.5 with val 0.1 and test 0.8 from "
                 "--split-ratios would take 1.4 of the labeled nodes (at most 1)")
    assert line.endswith("e.g. --split-ratios 0,0.0556,0.444")
    fails(tmp_path, good, "--train-fraction", "0", match="--train-fraction 0.0: must be in (0, 1]")
    fails(tmp_path, good, "--train-fraction", "0.1", "--split-per-class", "2,3",
          match="--train-fraction and --split-per-class both choose the train nodes")
    given = write_npy_dir(tmp_path / "given", random_graph(), splits={"train": [1, 2], "val": [3], "test": [4]})
    fails(tmp_path, given, "--train-fraction", "0.05", match="--train-fraction: ")
    proc = run_module("diskgnn.prepare", good, "--out", tmp_path / "out", "--train-fraction", "2")
    assert proc.returncode == 2, proc.stderr


def test_no_space_left_on_device(tmp_path, good, monkeypatch):
    """A dataset the disk cannot hold is refused in one line before anything is written, naming what it needs;
    and where the estimate is passed (an input whose edge count is not known ahead), a write that finds the disk
    full ends in one line too, with nothing half-written left."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs to fill needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount tmpfs here")
    np.save(good / "feat.npy", np.ones((199, 200), dtype=np.float32))  # 160 KB: more than the 64 KiB there
    try:
        line = fails(tmp_path, good, match=f"--out {mnt / 'ds'}: needs ~", out=mnt / "ds")
        assert "features 155.5 KiB" in line and "KiB free there" in line
        assert list(mnt.iterdir()) == []
        from diskgnn.data import prepare as prep
        from diskgnn.errors import DiskgnnError

        monkeypatch.setattr(prep, "check_disk", lambda *args: None)
        with pytest.raises(DiskgnnError, match="no space left on device"):
            prep.prepare(good, mnt / "ds", progress=False)
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)])


def test_verify_reports_missing_dataset(tmp_path):
    proc = run_module("diskgnn.verify", tmp_path / "none")
    assert proc.returncode != 0 and "not a dataset directory" in proc.stderr and "Traceback" not in proc.stderr


def test_normalize_features_refuses_negative_values(tmp_path, good):
    feat = np.abs(np.load(good / "feat.npy"))
    feat[150, 2] = -0.5
    np.save(good / "feat.npy", feat)
    fails(tmp_path, good, "--normalize-features",
          match="feat.npy: --normalize-features: feature row 150 has negative values")
