"""Training runs end to end: it learns, the summary, determinism, resume, the modes, checkpoints, Ctrl-C."""

import json

import pytest
import torch

from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.train.checkpoints import Checkpoints
from diskgnn.train.loop import train

from conftest import train_config as config


def test_training_learns_and_the_summary_has_every_field(train_data, tmp_path):
    summary = train(config(train_data, tmp_path / "run", epochs=3, summary_json=str(tmp_path / "s.json")))
    on_disk = json.loads((tmp_path / "s.json").read_text())
    for key in ("epoch_times_s", "sample_s", "pack_s", "stage_times_s", "tiers", "disk_bytes_read",
                "peak_rss_bytes", "peak_anon_bytes", "backend", "val_acc", "test_acc", "versions", "config"):
        assert key in on_disk, key
    assert 0 < on_disk["peak_anon_bytes"] <= on_disk["peak_rss_bytes"]
    assert len(summary["epoch_times_s"]) == 3 and summary["test_acc"] > 0.6  # chance: 0.25
    # time to accuracy: each validation's time from the start, after its epoch's training, before the end
    at_val = summary["wall_s_at_val"]
    assert len(at_val) == 3 and at_val == sorted(at_val) and at_val[-1] < summary["wall_s"]
    assert all(at_val[i] - (at_val[i - 1] if i else 0) >= t for i, t in enumerate(summary["epoch_times_s"]))
    tiers = summary["tiers"]
    assert tiers["host"]["hits"] > 0 and tiers["disk"]["hits"] > 0 and summary["disk_bytes_read"] > 0
    assert set(summary["stage_times_s"]) >= {"sample", "read", "assemble", "train"}
    assert (tmp_path / "run" / "config.yaml").exists() and (tmp_path / "run" / "checkpoints" / "best.pt").exists()
    # the next epoch's files are deleted once it is done; only the last epoch's stay
    assert sorted(p.name for p in (tmp_path / "run" / "epochs").glob("epoch-*.samples")) == ["epoch-00002.samples"]


def test_same_seed_same_result_and_online_sampling_sees_the_same_batches(train_data, tmp_path):
    a = train(config(train_data, tmp_path / "a"))
    # b's budget is its working set (as made again from epoch 0's batches: a's) plus a host cache of every row:
    # no page cache left to read the topology into
    ds = open_dataset(train_data)
    features = ds.num_nodes * ds.row_bytes
    need = a["plan"]["working_set_bytes"]
    b = train(config(train_data, tmp_path / "b", memory_budget=str(need + features), host_cache=str(features)))
    assert b["plan"]["working_set_bytes"] == need and b["plan"]["page_cache_bytes"] == 0
    assert a["plan"]["topology_read_ahead"] and not b["plan"]["topology_read_ahead"]
    online = train(config(train_data, tmp_path / "c", sampling="online"))
    assert a["train_loss"] == b["train_loss"] and a["test_acc"] == b["test_acc"]
    assert online["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)
    assert online["val_acc"] == a["val_acc"]


def test_labor_with_batch_dependency_trains_the_same_with_and_without_the_recent_rows_tier(train_data, tmp_path):
    """The recent-rows tier changes where rows come from, never their values: the same samples trained with
    it (auto: the last batch's rows) and without it (--recent-batches 0) give the same losses, bit for bit,
    and online sampling sees the same LABOR batches."""
    kw = dict(sampler="labor", layer_dependency=True, batch_dependency=8, epochs=2, batch_size=16)
    kept = train(config(train_data, tmp_path / "k", **kw))
    packed = train(config(train_data, tmp_path / "p", recent_batches="0", **kw))
    online = train(config(train_data, tmp_path / "o", sampling="online", **kw))
    assert kept["plan"]["recent_batches"] == 1 and packed["plan"]["recent_batches"] == 0
    assert kept["tiers"]["recent"]["hits"] > 0 and "recent" not in packed["tiers"]
    assert kept["train_loss"] == packed["train_loss"] and kept["test_acc"] == packed["test_acc"]
    assert kept["tiers"]["disk"]["hits"] < packed["tiers"]["disk"]["hits"]
    assert online["train_loss"] == pytest.approx(kept["train_loss"], rel=1e-5) and online["val_acc"] == kept["val_acc"]
    assert kept["test_acc"] > 0.6  # chance: 0.25


def test_resume_continues_to_the_same_result(train_data, tmp_path):
    straight = train(config(train_data, tmp_path / "s", epochs=3))
    train(config(train_data, tmp_path / "r", epochs=2))
    resumed = train(config(train_data, tmp_path / "r", epochs=3, resume=True))
    assert resumed["train_loss"] == pytest.approx(straight["train_loss"], rel=1e-6)
    assert resumed["test_acc"] == straight["test_acc"]


def test_validating_inside_epochs_changes_no_weight_and_keeps_the_best(train_data, tmp_path):
    """--val-every 2: each epoch (5 batches) stops after batches 2 and 4 for a validation and goes on in a new pass:
    the losses, weights and epoch-end validations are a run's without it, bit for bit (dropout's stream goes on
    across the stop); every validation is recorded, and best.pt is the best of them all."""
    plain = train(config(train_data, tmp_path / "p", dropout=0.5))
    checked = train(config(train_data, tmp_path / "v", dropout=0.5, val_every="2"))
    assert checked["train_loss"] == plain["train_loss"] and checked["val_acc_per_epoch"] == plain["val_acc_per_epoch"]
    a, b = (Checkpoints(tmp_path / w / "checkpoints").load("last")["model"] for w in ("p", "v"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert checked["stage_times_s"]["train"]["items"] == plain["stage_times_s"]["train"]["items"] == 10
    found = [(v["epoch"], v["batch"]) for v in checked["validations"]]
    assert found == [(0, 2), (0, 4), (0, None), (1, 2), (1, 4), (1, None)]
    assert [v["val"] for v in checked["validations"] if v["batch"] is None] == plain["val_acc_per_epoch"]
    times = [v["wall_s"] for v in checked["validations"]]
    assert times == sorted(times) and [times[2], times[5]] == checked["wall_s_at_val"]
    best = max(checked["validations"], key=lambda v: v["val"])  # the first of the best
    assert checked["val_acc"] == best["val"] and (checked["best_epoch"], checked["best_batch"]) == (
        best["epoch"], best["batch"])
    saved = Checkpoints(tmp_path / "v" / "checkpoints").load("best")
    assert (saved["epoch"], saved["batch"]) == (best["epoch"], best["batch"])


@pytest.mark.parametrize("kw", [dict(sampling="replay", max_blowup=1.0), dict(model="gat", eval="full"),
                                dict(model="gcn", max_batches=2, eval_max_batches=1, read_depth=1)])
def test_modes_run(train_data, tmp_path, kw):
    summary = train(config(train_data, tmp_path / "m", **kw))
    assert 0 <= summary["test_acc"] <= 1
    if "max_batches" in kw:
        assert summary["stage_times_s"]["train"]["items"] == 2 * 2


def test_corrupted_checkpoint_is_refused(train_data, tmp_path):
    train(config(train_data, tmp_path / "k", epochs=1))
    last = tmp_path / "k" / "checkpoints" / "last.pt"
    data = bytearray(last.read_bytes())
    data[-10] ^= 0xFF
    last.write_bytes(bytes(data))
    with pytest.raises(DiskgnnError, match="last.pt: fails its checksum"):
        train(config(train_data, tmp_path / "k", epochs=2, resume=True))


def test_ctrl_c_stops_cleanly_in_one_line(train_data, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    def as_from_a_shell():
        # A child inherits ignored and blocked signals. In the full suite, the pytest process (its libraries'
        # threads) can hand SIGINT down ignored or blocked, which a terminal never does; start from its state.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen([sys.executable, "-m", "diskgnn.train", "--data", str(train_data), "--workdir",
                             str(tmp_path / "run"), "--fanouts", "4,3", "--batch-size", "1", "--hidden", "16",
                             "--epochs", "100000", "--host-cache", "8KiB", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_shell)
    parent_state = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    try:
        # Interrupt while epoch 1 trains (its packer ran beside epoch 0). The epochs are tiny here, so
        # there are more than can finish before the signal lands on a busy or an idle machine.
        for line in proc.stdout:
            if line.startswith("epoch 0:"):
                break
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, (err, parent_state)
    assert err.strip().splitlines()[-1] == "train: interrupted" and "Traceback" not in err


def test_accounting_restored_without_tier_counters_counts_on():
    """A last.pt written before the passes counted tiers for typed runs restores accounting without "tiers": the
    next finished train pass adds its rows to fresh counters rather than failing."""
    from types import SimpleNamespace

    from diskgnn.store.tiers import TierStats
    from diskgnn.train.passes import PassAccounting

    acc = PassAccounting()
    acc.typed = False
    acc.accounting = {"disk_bytes": 5}  # as such a checkpoint restores it
    assert acc.stats() == {}
    done = SimpleNamespace(train=True, stats=lambda: [TierStats("host", 2, 8), TierStats("disk", 1, 4)],
                           disk_bytes=lambda: 4, source=SimpleNamespace(store=SimpleNamespace(backend="pread")))
    acc._finished(done, SimpleNamespace(times={}))
    assert acc.accounting["disk_bytes"] == 9 and acc.stats()["host"] == {"hits": 2, "bytes": 8, "hit_rate": 2 / 3}
