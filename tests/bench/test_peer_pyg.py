"""bench.peers.pyg: PyG's batches are diskgnn's seeds with real edges and the dataset's rows, memmap mode
trains on maps of the files themselves, the modes give the same losses, and a missing PyG is a reason."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from bench.peers import pyg
from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.errors import DiskgnnError
from diskgnn.offline.sample import epoch_seeds

from conftest import REPO

OK, WHY = pyg.available()
needs_pyg = pytest.mark.skipif(not OK, reason=f"PyG peer not installed here: {WHY}")
FANOUTS, BATCH = (4, 3), 16


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("pyg") / "ds"
    prepare("synthetic", path, undirected=True, progress=False,
            synthetic=dict(nodes=700, feat_dim=12, avg_degree=6, classes=4, seed=1))
    return open_dataset(path)


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("DISKGNN_HOME", str(tmp_path / "home"))


def mapped_file(ptr: int) -> str:
    """The file mapped at address ptr in this process, or "" for anonymous memory."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            lo, hi = (int(a, 16) for a in fields[0].split("-"))
            if lo <= ptr < hi:
                return fields[5].strip() if len(fields) > 5 else ""
    return ""


def test_available_says_why_when_pyg_or_its_backend_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_sparse", None)
    ok, why = pyg.available()
    assert not ok and "torch_sparse: ModuleNotFoundError" in why and "python -m bench.peers.pyg --install" in why
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    cache = pyg.wheel_cache()
    cache.mkdir(parents=True)
    (cache / pyg.INSTALL_FAILED).write_text("building torch_sparse 0.6.18 failed: csrc/x.cpp: error: no\n")
    ok, why = pyg.available()
    assert not ok and "torch_geometric: ModuleNotFoundError" in why
    assert why.endswith("the last --install failed: building torch_sparse 0.6.18 failed: csrc/x.cpp: error: no")
    assert "\n" not in why


def test_a_failed_build_leaves_the_compilers_error_for_the_report(monkeypatch):
    monkeypatch.setattr(pyg, "available", lambda: (False, "missing"))
    calls = []

    def failing_pip(args, log, env=None):
        calls.append(args)
        log.write_text("  building 'torch_scatter._scatter_cpu' extension\n"
                       "  csrc/scatter.cpp:5:10: error: 'foo' was not declared in this scope\n"
                       "  error: subprocess-exited-with-error\nERROR: Failed building wheel for torch_scatter\n")
        return 1

    monkeypatch.setattr(pyg, "_pip", failing_pip)
    with pytest.raises(DiskgnnError) as e:
        pyg.install()
    assert len(calls) == 1 and calls[0][0] == "wheel" and "torch_scatter==2.1.2" in calls[0]
    reason = str(e.value)
    assert reason.startswith("building torch_scatter 2.1.2 against torch ")
    assert "failed: csrc/scatter.cpp:5:10: error: 'foo' was not declared in this scope (log: " in reason
    assert (pyg.wheel_cache() / pyg.INSTALL_FAILED).read_text() == reason + "\n"


def test_bad_options_are_one_line_errors(dataset):
    for args, message in ((["--mode", "memory", "--madvise", "random"], "applies to --mode memmap only"),
                          ([], "--data DIR is required")):
        argv = [sys.executable, "-m", "bench.peers.pyg", *args] + (["--data", str(dataset.path)] if args else [])
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        assert proc.returncode != 0 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@needs_pyg
@pytest.mark.parametrize("mode", ["memory", "memmap"])
def test_batches_are_diskgnn_seeds_with_real_edges_and_the_datasets_rows(dataset, mode):
    data, info = pyg.graph_data(dataset, mode, "random" if mode == "memmap" else "default")
    seeds = epoch_seeds(dataset.split("train"), BATCH, 0, 0)
    loader = pyg.make_loader(dataset, data, fanouts=FANOUTS, batch_size=BATCH, batches=len(seeds), seed=0)
    indptr, indices = np.asarray(dataset.indptr), np.asarray(dataset.indices)
    degree = np.diff(indptr)
    edges = set(zip(indices.tolist(), np.repeat(np.arange(dataset.num_nodes), degree).tolist()))
    torch.manual_seed(0)
    batches = list(loader)
    assert len(batches) == len(seeds) > 2
    for batch, want in zip(batches, seeds):
        n_id = batch.n_id.numpy()
        np.testing.assert_array_equal(n_id[: batch.batch_size], want)
        np.testing.assert_array_equal(batch.x.numpy(), dataset.features[n_id])
        np.testing.assert_array_equal(batch.y.numpy(), dataset.labels[n_id])
        # adj_t row = the node aggregating, col = the neighbour whose message it takes
        dst, src, _ = batch.adj_t.coo()
        assert set(zip(n_id[src.numpy()].tolist(), n_id[dst.numpy()].tolist())) <= edges
        taken = np.bincount(dst.numpy(), minlength=n_id.size)
        np.testing.assert_array_equal(taken[: batch.batch_size], np.minimum(FANOUTS[0], degree[want]))
        rest = taken[batch.batch_size:]
        assert np.all((rest == 0) | (rest == np.minimum(FANOUTS[1], degree[n_id[batch.batch_size:]])))
        assert rest.any()
    # What the loader and its sampler read is the file itself in memmap mode, never a copy.
    sampler = loader.node_sampler
    arrays = {"features.bin": data.x, "indptr.bin": sampler.colptr, "indices": sampler.row,
              "labels.bin": data.y}
    for name, tensor in arrays.items():
        where = mapped_file(tensor.data_ptr())
        if mode == "memory":
            assert where == "" or where.startswith("["), (name, where)
        else:
            assert name in where if name != "indices" else where == info["indices_int64"], (name, where)
    assert sampler.row.data_ptr() == data.adj_t.storage.col().data_ptr()


@needs_pyg
def test_modes_train_alike_and_report_the_progress_protocol(dataset, tmp_path):
    runs = {}
    for mode, madvise in (("memory", "default"), ("memmap", "default"), ("memmap", "random")):
        progress = tmp_path / f"{mode}-{madvise}.jsonl"
        argv = pyg.command(dataset.path, mode=mode, madvise=madvise, batches=3, fanouts="4,3", batch_size=BATCH,
                           hidden=8, progress=progress)
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        lines = [json.loads(x) for x in progress.read_text().splitlines()]
        assert [x["batch"] for x in lines] == [0, 1, 2] and result["batches"] == 3
        for line in lines:
            assert {"elapsed_s", "sample_s", "gather_s", "disk_bytes_read", "loss"} <= line.keys()
        assert lines[-1]["loss"] == result["final_loss"] and result["epoch_s"] >= lines[-1]["elapsed_s"]
        runs[mode, madvise] = result, [x["loss"] for x in lines]
    losses = [r[1] for r in runs.values()]
    assert losses[0] == losses[1] == losses[2] and len(set(losses[0])) == 3
    made = runs["memmap", "default"][0]
    wide = np.fromfile(made["indices_int64"], dtype="<i8")
    np.testing.assert_array_equal(wide, dataset.indices)
    assert made["indices_int64_made_s"] > 0 and runs["memmap", "random"][0]["indices_int64_made_s"] == 0
