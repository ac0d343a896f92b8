"""The pipeline and the trainer: stage errors, determinism, resume, modes, CLI errors, the summary."""

import json
import threading

import numpy as np
import pytest
import torch

from diskgnn.config import TrainConfig, resolve
from diskgnn.errors import DiskgnnError, run_cli
from diskgnn.format import open_dataset
from diskgnn.pipeline import Pipeline, PipelineError, Stage
from diskgnn.prepare import prepare
from diskgnn.sample import sample_epoch
from diskgnn.train import MIN_PACK_MEMORY, PACK_MEMORY, READ_DEPTH, batch_layers, train, working_set
from conftest import random_graph, run_module, write_npy_dir


def diskgnn_threads():
    return [t for t in threading.enumerate() if t.name.startswith("diskgnn-")]


def test_pipeline_keeps_order_and_times_stages():
    with Pipeline(range(50), [Stage("double", lambda x: 2 * x), Stage("inc", lambda x: x + 1, depth=4)]) as p:
        assert list(p) == [2 * x + 1 for x in range(50)]
    assert p.times["double"].items == 50 and p.times["train"].items == 50
    assert not diskgnn_threads()


def test_pipeline_error_names_the_stage_and_stops_every_thread():
    def boom(x):
        if x == 7:
            raise ValueError("bad item")
        return x

    with pytest.raises(PipelineError, match="stage 'read' failed: ValueError: bad item") as e:
        list(Pipeline(range(100), [Stage("sample", lambda x: x), Stage("read", boom)]))
    assert isinstance(e.value.__cause__, ValueError)
    assert not diskgnn_threads()


def test_pipeline_user_errors_stay_one_line_and_leaving_early_joins_threads():
    def bad(x):
        raise DiskgnnError("f.packs: region 3 fails its checksum")

    with pytest.raises(DiskgnnError, match="pipeline stage 'assemble': f.packs: region 3"):
        list(Pipeline(range(3), [Stage("assemble", bad)]))
    p = Pipeline(range(10**6), [Stage("sample", lambda x: x)])
    for i in p:
        if i == 3:
            break
    p.close()
    assert not diskgnn_threads()


def test_ctrl_c_that_a_finalizer_swallows_still_stops_the_command(capsys, monkeypatch):
    import gc
    import signal
    import sys

    swallowed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_type))

    class InterruptedInFinalizer:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs here, inside __del__, and Python drops its error

    steps = []

    def main(argv):
        for i in Pipeline(range(10**6), [Stage("sample", lambda x: x)]):
            steps.append(i)
            if i == 2:
                InterruptedInFinalizer()
                gc.collect()

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("pytest runs with its own SIGINT handler here")
    assert run_cli("train", main) == 130
    assert steps == [0, 1, 2], "the loop went on after Ctrl-C"
    assert swallowed == [KeyboardInterrupt]
    assert capsys.readouterr().err.strip().splitlines()[-1] == "train: interrupted"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not diskgnn_threads()
    assert list(Pipeline(range(3), [Stage("sample", lambda x: x)])) == [0, 1, 2], \
        "the interrupt outlived its command and stopped the next pipeline"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    g = random_graph(n=600, e=4000, d=16, classes=4, seed=1)
    # learnable: features carry the label
    g["feat"][np.arange(600), g["labels"]] += 3.0
    src = write_npy_dir(tmp / "src", g, splits={"train": np.arange(0, 600, 3), "val": np.arange(1, 600, 6),
                                                "test": np.arange(2, 600, 6)})
    return prepare(src, tmp / "ds", progress=False)


def config(dataset, workdir, **kw):
    base = dict(data=str(dataset), workdir=str(workdir), fanouts="4,3", batch_size=47, hidden=16, epochs=2,
                lr=0.02, progress=False, memory_budget="2GiB", host_cache="8KiB")
    base.update(kw)
    return TrainConfig(**base)


def test_training_learns_and_the_summary_has_every_field(dataset, tmp_path):
    summary = train(config(dataset, tmp_path / "run", epochs=3, summary_json=str(tmp_path / "s.json")))
    on_disk = json.loads((tmp_path / "s.json").read_text())
    for key in ("epoch_times_s", "sample_s", "pack_s", "stage_times_s", "tiers", "disk_bytes_read",
                "peak_rss_bytes", "peak_anon_bytes", "backend", "val_acc", "test_acc", "versions", "config"):
        assert key in on_disk, key
    assert 0 < on_disk["peak_anon_bytes"] <= on_disk["peak_rss_bytes"]
    assert len(summary["epoch_times_s"]) == 3 and summary["test_acc"] > 0.6  # chance: 0.25
    tiers = summary["tiers"]
    assert tiers["host"]["hits"] > 0 and tiers["disk"]["hits"] > 0 and summary["disk_bytes_read"] > 0
    assert set(summary["stage_times_s"]) >= {"sample", "read", "assemble", "train"}
    assert (tmp_path / "run" / "config.yaml").exists() and (tmp_path / "run" / "checkpoints" / "best.pt").exists()
    # the next epoch's files are deleted once it is done; only the last epoch's stay
    assert sorted(p.name for p in (tmp_path / "run" / "epochs").glob("epoch-*.samples")) == ["epoch-00002.samples"]


def test_same_seed_same_result_and_online_sampling_sees_the_same_batches(dataset, tmp_path):
    a = train(config(dataset, tmp_path / "a"))
    # b's budget is its working set plus a host cache of every row: no page cache left to read the topology into
    ds = open_dataset(dataset)
    features = ds.num_nodes * ds.row_bytes
    need = working_set(ds, ds.feature_source(), config(dataset, tmp_path))
    b = train(config(dataset, tmp_path / "b", memory_budget=str(need + features), host_cache=str(features)))
    assert a["plan"]["topology_read_ahead"] and not b["plan"]["topology_read_ahead"]
    online = train(config(dataset, tmp_path / "c", sampling="online"))
    assert a["train_loss"] == b["train_loss"] and a["test_acc"] == b["test_acc"]
    assert online["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)
    assert online["val_acc"] == a["val_acc"]


def test_resume_continues_to_the_same_result(dataset, tmp_path):
    straight = train(config(dataset, tmp_path / "s", epochs=3))
    train(config(dataset, tmp_path / "r", epochs=2))
    resumed = train(config(dataset, tmp_path / "r", epochs=3, resume=True))
    assert resumed["train_loss"] == pytest.approx(straight["train_loss"], rel=1e-6)
    assert resumed["test_acc"] == straight["test_acc"]


@pytest.mark.parametrize("kw", [dict(sampling="replay", max_blowup=1.0), dict(model="gat", eval="full"),
                                dict(model="gcn", max_batches=2, eval_max_batches=1, read_depth=1)])
def test_modes_run(dataset, tmp_path, kw):
    summary = train(config(dataset, tmp_path / "m", **kw))
    assert 0 <= summary["test_acc"] <= 1
    if "max_batches" in kw:
        assert summary["stage_times_s"]["train"]["items"] == 2 * 2


def test_corrupted_checkpoint_is_refused(dataset, tmp_path):
    train(config(dataset, tmp_path / "k", epochs=1))
    last = tmp_path / "k" / "checkpoints" / "last.pt"
    data = bytearray(last.read_bytes())
    data[-10] ^= 0xFF
    last.write_bytes(bytes(data))
    with pytest.raises(DiskgnnError, match="last.pt: fails its checksum"):
        train(config(dataset, tmp_path / "k", epochs=2, resume=True))


@pytest.mark.parametrize("fanouts", [[4, 3], [-1, 3], [50, 50]])
def test_batch_layers_bound_every_sampled_batch(dataset, tmp_path, fanouts):
    ds = open_dataset(dataset)
    bounds = batch_layers(ds, 47, fanouts)
    for batch in sample_epoch(ds, tmp_path / "s.samples", fanouts=fanouts, batch_size=47, seed=0, epoch=0,
                              seeds=ds.split("train")):
        actual = [(b.num_src, b.num_dst, b.indices.size) for b in batch.blocks[::-1]]
        assert actual[0][0] == batch.nodes.size
        for got, bound in zip(actual, bounds):
            assert all(g <= b for g, b in zip(got, bound)), (got, bound)


STEP_MEMORY = """
import json, sys
import numpy as np, torch, torch.nn.functional as F
from diskgnn.format import open_dataset
from diskgnn.memory import AnonPeak, limit_malloc_arenas, _status_kib
from diskgnn.models import GNN, activation_bytes, layer_dims, sampled_blocks
from diskgnn.sample import sample_epoch
limit_malloc_arenas()
data, kind, work = sys.argv[1:4]
ds = open_dataset(data)
batch = next(iter(sample_epoch(ds, work, fanouts=[10, 5], batch_size=512, seed=0, epoch=0, seeds=ds.split("train"))))
blocks = sampled_blocks(batch)
x = torch.from_numpy(np.array(ds.features)[batch.nodes])
y = torch.from_numpy(np.asarray(ds.labels)[batch.seeds].astype(np.int64))
model = GNN(kind, ds.feature_dim, 128, ds.num_classes, 2, 0.5)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
base = _status_kib("RssAnon:") * 1024
with AnonPeak(0.0005) as peak:
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(blocks, x), y).backward()
        opt.step()
layers = [(b.num_src, b.num_dst, b.indices.size) for b in batch.blocks[::-1]]
dims = layer_dims(ds.feature_dim, 128, ds.num_classes, len(layers))
print(json.dumps({"measured": peak.peak_bytes - base, "estimate": activation_bytes(kind, layers, dims, 4)}))
"""


@pytest.fixture(scope="module")
def wide_dataset(tmp_path_factory):
    """Large enough that one step's temporaries (tens of MiB) stand out of the allocator's noise."""
    tmp = tmp_path_factory.mktemp("wide")
    g = random_graph(n=20000, e=200000, d=64, classes=8, seed=2)
    return prepare(write_npy_dir(tmp / "src", g), tmp / "ds", progress=False)


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_activation_bytes_bound_what_a_training_step_takes(wide_dataset, tmp_path, kind):
    import subprocess
    import sys

    # a fresh process: memory freed by earlier tests would otherwise be reused unseen
    proc = subprocess.run([sys.executable, "-c", STEP_MEMORY, str(wide_dataset), kind, str(tmp_path / "s")],
                          capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout)
    assert r["measured"] > 4 << 20, r  # the measurement saw the step at all
    assert r["estimate"] >= r["measured"], r


def test_small_budget_reads_fewer_batches_ahead_and_packs_with_smaller_buffers(dataset, tmp_path):
    ds = open_dataset(dataset)
    source = ds.feature_source()
    cfg = config(dataset, tmp_path / "f", epochs=1, host_cache="auto")
    tight = working_set(ds, source, cfg, read_depth=2, pack_memory=MIN_PACK_MEMORY)
    assert tight < working_set(ds, source, cfg, read_depth=1, pack_memory=PACK_MEMORY)
    summary = train(config(dataset, tmp_path / "f", epochs=1, host_cache="auto", memory_budget=str(tight)))
    plan = summary["plan"]
    assert plan["read_depth"] == 2 and plan["working_set_bytes"] == tight
    assert MIN_PACK_MEMORY <= plan["pack_memory_bytes"] < PACK_MEMORY
    roomy = train(config(dataset, tmp_path / "g", epochs=1))
    assert roomy["plan"]["read_depth"] == READ_DEPTH and roomy["train_loss"] == summary["train_loss"]
    with pytest.raises(DiskgnnError, match="is too small"):  # an explicit depth is kept, not lowered
        train(config(dataset, tmp_path / "h", epochs=1, host_cache="auto", memory_budget=str(tight),
                      read_depth=READ_DEPTH))


def test_config_file_and_flags(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("model: gcn\nbatch-size: 77\nfanouts: [5, 5]\n")
    cfg = resolve(["--config", str(cfg_file), "--batch-size", "99"])
    assert (cfg.model, cfg.batch_size, cfg.fanout_list) == ("gcn", 99, [5, 5])
    cfg_file.write_text("modle: gcn\n")
    with pytest.raises(DiskgnnError, match="unknown option 'modle'"):
        resolve(["--config", str(cfg_file)])


@pytest.mark.parametrize("args,message", [
    (["--fanouts", "10,0"], "--fanouts 10,0: each must be positive or -1"),
    (["--memory-budget", "100MiB"], "--memory-budget 100MiB is too small"),
    (["--host-cache", "3GiB"], "--host-cache 3GiB plus the working set"),
    (["--device", "cuda"], "--device cuda: CUDA is not available"),
    (["--batch-size", "x"], "batch-size: cannot read 'x'"),
    (["--features", "sq3"], "--features sq3: expected fp32 or a quantized variant: quantize spec 'sq3': sq bits"),
    (["--features", "vq:L=256,w=16"], "--features vq:L=256,w=16: {data}: no quantized features vq:w=16,L=256 "
                                     "(stored: none); add them with python -m diskgnn.quantize {data} --spec "
                                     "vq:w=16,L=256"),
])
def test_cli_refuses_bad_settings_in_one_line(dataset, tmp_path, args, message):
    if args[0] == "--device" and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    proc = run_module("diskgnn.train", "--data", dataset, "--workdir", tmp_path / "w", "--no-progress", *args)
    assert proc.returncode == 2
    message = message.format(data=dataset)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_ctrl_c_stops_cleanly_in_one_line(dataset, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    def as_from_a_shell():
        # A child inherits ignored and blocked signals. In the full suite, the pytest process (its libraries'
        # threads) can hand SIGINT down ignored or blocked, which a terminal never does; start from its state.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen([sys.executable, "-m", "diskgnn.train", "--data", str(dataset), "--workdir",
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
