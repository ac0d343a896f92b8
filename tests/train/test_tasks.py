"""The trainer's top floor: what a run learns is one Task module (diskgnn/train/tasks/), the modes are typed once,
and a node and a link run repeat their weights bit for bit."""

import hashlib
import re

import numpy as np
import pytest
import torch

from diskgnn.train.checkpoints import Checkpoints
from diskgnn.train.loop import train
from diskgnn.train.tasks import TASKS
from diskgnn.train.tasks.node import NodeTask

from conftest import REPO
from conftest import train_config as config

MODE_TESTS = re.compile(r"cfg\.(task|sampling|distributed|eval|hag|precision) *[!=]=")
RESOLVING = {"train/config.py", "train/validation.py", "train/modes.py"}


def test_no_mode_string_is_compared_past_config():
    """Modes (task, sampling, distributed, eval, hag, precision) compared as strings only where the options are resolved
    and checked, and in the task modules themselves."""
    package = REPO / "diskgnn"
    found = [f"{path.relative_to(package)}:{n}" for path in package.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if MODE_TESTS.search(line) and str(path.relative_to(package)) not in RESOLVING
             and "train/tasks/" not in str(path)]
    assert found == []


class DegreeTask(NodeTask):
    """A third task, test-only and whole in one class: each train node's log in-degree, regressed (MSE); its
    metric the negated error. Registered by one line in TASKS."""

    name, metric = "degree", "neg_mse"

    def output_dim(self, ds) -> int:
        return 1

    def _targets(self, ds, seeds, device):
        indptr = np.asarray(ds.indptr)
        return torch.from_numpy(np.log1p(np.diff(indptr)[seeds]).astype(np.float32)).to(device)

    def loss(self, model, out, mb):
        return torch.nn.functional.mse_loss(out.float()[:, 0], self._targets(self.ds, mb.seeds, out.device)), \
            len(mb.seeds)

    def check(self, ds, data) -> None:
        self.ds = ds

    def eval_sums(self, model, out, mb):
        if mb is None:
            return np.zeros(2)
        return np.array([float(((out[:, 0] - self._targets(self.ds, mb.seeds, out.device)) ** 2).sum()),
                         len(mb.seeds)])

    def score(self, sums, split: str) -> float:
        return -sums[0] / max(1.0, sums[1])

    def result_line(self, test: float, best: dict) -> str:
        return f"test mse {-test:.4f}"


def test_a_third_task_is_one_module_and_its_registration(train_data, tmp_path, monkeypatch):
    monkeypatch.setitem(TASKS, "degree", DegreeTask)
    summary = train(config(train_data, tmp_path, task="degree", epochs=3, lr=0.01))
    assert summary["task"] == "degree" and len(summary["val_neg_mse_per_epoch"]) == 3
    per_epoch = summary["val_neg_mse_per_epoch"]
    assert per_epoch[-1] > per_epoch[0] and np.isfinite(summary["test_neg_mse"])  # it learns the degrees


def _digest(workdir) -> str:
    state = Checkpoints(workdir / "checkpoints").load("last")["model"]
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("task", ["node", "link"])
def test_a_node_and_a_link_run_repeat_their_weights_bit_for_bit(train_data, link_data, tmp_path, task):
    """Two runs of the same options in one process end with the same weights, bit for bit: what a refactoring
    keeps is then checked against an earlier revision on one machine (python -m bench.identity --base REV), not
    against hashes that hold on one CPU only."""
    data, options = (train_data, {}) if task == "node" else (link_data, {"task": "link", "batch_size": 64})
    train(config(data, tmp_path / "a", **options))
    train(config(data, tmp_path / "b", **options))
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
