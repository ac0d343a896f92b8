"""bench.identity: both sides' runs trained and compared bit for bit; a difference is named."""

import json
import subprocess

import pytest
import torch

from bench import identity

from conftest import REPO


def test_this_checkout_is_identical_to_itself(tmp_path):
    out = tmp_path / "identity.json"
    assert identity.main(["--smoke", "--workdir", str(tmp_path / "work"), "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    run = saved["runs"]["node"]
    assert run["identical"] and run["tensors"] > 0 and run["base"] == run["head"]
    assert len(run["head"]["val_acc_per_epoch"]) == 2 and saved["cpu_capability"]


def test_a_difference_is_named():
    base = {"a.weight": torch.ones(3, 2), "b.bias": torch.zeros(4)}
    assert identity.compare(base, {k: v.clone() for k, v in base.items()})["identical"]
    nudged = {k: v.clone() for k, v in base.items()}
    nudged["b.bias"][3] = torch.nextafter(torch.tensor(0.0), torch.tensor(1.0))  # one ulp
    found = identity.compare(base, nudged)
    assert not found["identical"] and found["why"].startswith("b.bias: differs")
    assert "different tensors: ['c']" in identity.compare(base, {**base, "c": torch.ones(1)})["why"]
    assert "float64" in identity.compare(base, {**base, "a.weight": torch.ones(3, 2, dtype=torch.float64)})["why"]


def test_the_base_is_a_worktree_of_the_revision(tmp_path):
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout")
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "native", "setup.py"], cwd=REPO).returncode != 0:
        pytest.skip("native/ has uncommitted changes: the worktree would build HEAD's extension (minutes)")
    root = identity.base_checkout("HEAD", tmp_path)
    try:
        assert identity.git("rev-parse", "HEAD", cwd=root) == identity.git("rev-parse", "HEAD")
        assert list((root / "diskgnn").glob("_native*.so")) and identity.imported_from(root) == root.resolve()
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(root)], cwd=REPO, check=True)
