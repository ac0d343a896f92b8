"""Checkpoints: one checksummed file each, mid-epoch ones, and --resume after a real kill -9 ending with the
same weights, bit for bit, as a run that was never stopped."""

import os
import random
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from diskgnn.errors import DiskgnnError
from diskgnn.train.checkpoints import Checkpoints
from diskgnn.train.options import resolve

from conftest import REPO, kill_once_checkpointed

ARGS = ["--fanouts", "4,3", "--batch-size", "2", "--hidden", "16", "--epochs", "2", "--lr", "0.02",
        "--host-cache", "8KiB", "--no-progress", "--eval-max-batches", "2", "--device", "cpu"]


def test_the_file_is_checked_and_a_missing_one_is_none(tmp_path):
    ck = Checkpoints(tmp_path)
    assert ck.load("last") is None
    ck.save("last", {"w": torch.arange(5.0), "rng": np.random.default_rng(1).bit_generator.state})
    assert torch.equal(ck.load("last")["w"], torch.arange(5.0))
    data = ck.path("last").read_bytes()
    ck.path("last").write_bytes(data[:-20])
    with pytest.raises(DiskgnnError, match="truncated"):
        ck.load("last")
    ck.path("last").write_bytes(data[:40] + bytes([data[40] ^ 1]) + data[41:])
    with pytest.raises(DiskgnnError, match="fails its checksum"):
        ck.load("last")
    ck.path("last").write_bytes(b"PK\x03\x04 an old torch.save zip")
    with pytest.raises(DiskgnnError, match="not a diskgnn checkpoint"):
        ck.load("last")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temporary file stayed behind"


def train_cli(data, workdir, *extra):
    return [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--workdir", str(workdir), *ARGS, *extra]


def weights(workdir):
    return Checkpoints(workdir / "checkpoints").load("last")


def test_resume_after_kill_at_a_random_batch_equals_the_uninterrupted_run(train_data, tmp_path):
    whole = subprocess.run(train_cli(train_data, tmp_path / "whole", "--checkpoint-every", "off"),
                           capture_output=True, text=True, cwd=REPO)
    assert whole.returncode == 0, whole.stderr
    # 100 batches an epoch; killed at a random one once a checkpoint at or past it is on disk
    target = random.Random(os.getpid()).randrange(5, 180)
    run = tmp_path / "killed"
    killed_at, proc = kill_once_checkpointed(train_cli(train_data, run, "--checkpoint-every", "3"), run, 100, target)
    assert killed_at is not None, f"the run ended before batch {target} was checkpointed: {proc.stderr.read()}"
    assert proc.returncode == -signal.SIGKILL
    resumed = subprocess.run(train_cli(train_data, run, "--checkpoint-every", "3", "--resume"),
                             capture_output=True, text=True, cwd=REPO)
    assert resumed.returncode == 0, resumed.stderr
    assert "plan: --resume: from " in resumed.stdout and "training goes on at epoch" in resumed.stdout
    a, b = weights(tmp_path / "whole"), weights(run)
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), f"{key} differs after a kill at {killed_at}"
    assert a["history"]["train_loss"] == b["history"]["train_loss"]
    assert a["history"]["val_acc_per_epoch"] == b["history"]["val_acc_per_epoch"]


def test_resume_without_a_checkpoint_starts_over_and_says_so(train_data, tmp_path):
    proc = subprocess.run(train_cli(train_data, tmp_path / "w", "--resume", "--epochs", "1"), capture_output=True,
                          text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if "--resume" in line)
    assert line == (f"plan: --resume: no checkpoint in {tmp_path / 'w' / 'checkpoints'} (is --workdir the one meant?): "
                    "training starts from the beginning")


def test_resume_under_other_options_is_refused(train_data, tmp_path):
    first = subprocess.run(train_cli(train_data, tmp_path / "w", "--epochs", "1"), capture_output=True, text=True,
                           cwd=REPO)
    assert first.returncode == 0, first.stderr
    other = subprocess.run(train_cli(train_data, tmp_path / "w", "--resume", "--batch-size", "3"),
                           capture_output=True, text=True, cwd=REPO)
    assert other.returncode == 1 and other.stderr.count("\n") == 1
    assert "written by a run with --batch-size 2, not 3" in other.stderr


@pytest.mark.parametrize("text,interval", [("500", ("batches", 500)), ("90s", ("seconds", 90.0)),
                                           ("10min", ("seconds", 600.0)), ("1.5h", ("seconds", 5400.0)),
                                           ("off", None), ("0", None)])
def test_checkpoint_and_val_every_read_times_and_batches(text, interval):
    assert resolve(["--checkpoint-every", text]).checkpoint_interval == interval
    assert resolve(["--val-every", text]).val_interval == interval


def test_a_second_run_in_the_same_workdir_is_refused_while_the_first_holds_it(train_data, tmp_path):
    first = subprocess.Popen(train_cli(train_data, tmp_path / "w", "--epochs", "1000"), cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stdout:
            if line.startswith("epoch 0:"):
                break
        second = subprocess.run(train_cli(train_data, tmp_path / "w"), capture_output=True, text=True, cwd=REPO)
    finally:
        first.kill()
        first.wait()
    assert second.returncode == 1 and f"in use by another run (pid {first.pid})" in second.stderr
