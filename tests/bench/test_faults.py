"""A few fault trials of bench.faults on real processes and devices (the benchmark runs dozens): a kill -9 of
prepare and of quantize, reads failing with EIO mid-epoch through a FUSE mirror, a disk filling up under a run.
kill -9 of train and --resume are in tests/train/test_checkpoints.py; the embedding table's write-back meeting a
kill and a full disk is here too."""

import os

import pytest

from bench.harness.faultfs import available
from bench.faults import Trials


@pytest.fixture(scope="module")
def trials(tmp_path_factory):
    return Trials(tmp_path_factory.mktemp("faults"), nodes=5_000, seed=os.getpid())


@pytest.mark.parametrize("kind", ["kill-prepare", "kill-quantize"])
def test_a_killed_command_reruns_to_a_sound_dataset(trials, kind):
    result = trials.run(kind, 0)
    assert result["survived"], result


def test_eio_mid_epoch_ends_the_run_in_one_line_with_the_checkpoint_intact(trials):
    ok, why = available()
    if not ok:
        pytest.skip(f"no FUSE mirror here: {why}")
    result = trials.run("eio-packs", 1)
    assert result["survived"], result
    assert "epoch-00000.packs: read of" in result["line"] and "at offset" in result["line"]


def test_a_disk_filling_up_under_training_keeps_the_last_checkpoint(trials):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill needs root")
    result = trials.run("full-checkpoint", 2)
    assert result["survived"], result
    assert result["finished_before_full"] or "no space left on device" in result["line"]


@pytest.mark.parametrize("kind", ["kill-embeddings", "full-embeddings"])
def test_embedding_write_back_killed_or_out_of_disk_resumes_to_the_same_table(trials, kind):
    if kind == "full-embeddings" and os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill needs root")
    result = trials.run(kind, 3 if kind == "kill-embeddings" else 4)
    assert result["survived"] and result["same_table"] and result["same_weights"], result
    if kind == "full-embeddings":
        assert result["finished_before_full"] or "no space left on device" in result["line"]
