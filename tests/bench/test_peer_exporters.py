"""bench.peers: MariusGNN and Ginex exports checked byte for byte against numpy oracles built from the raw
graph; atomic output, errors, and runners that say why a peer did not run."""

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from bench.peers import ginex, marius
from bench.peers.common import EXPORT_INFO, csc_edges, read_export_info
from diskgnn.data.prepare import prepare
from diskgnn.errors import DiskgnnError

from conftest import oracle_csc, random_graph, run_module, write_npy_dir

N, D, CLASSES = 61, 33, 4
ISOLATED = np.r_[20:36, 55:61]  # nodes without any edge, in the middle and at the end
SPLITS = {"train": np.array([7]), "val": np.arange(50, 58), "test": np.arange(20, 31)}  # one train node


@pytest.fixture(scope="module")
def graph():
    g = random_graph(n=N, e=300, d=D, classes=CLASSES, seed=3)
    connected = np.setdiff1d(np.arange(N), ISOLATED)
    g["src"], g["dst"] = connected[g["src"] % len(connected)], connected[g["dst"] % len(connected)]
    return g


@pytest.fixture(scope="module")
def dataset(graph, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("peers")
    return prepare(write_npy_dir(tmp / "src", graph, splits=SPLITS), tmp / "ds", progress=False)


def edges(graph):
    """(src, dst) of the stored graph: duplicates merged, sorted by destination then source."""
    indptr, indices = oracle_csc(N, graph["src"], graph["dst"])
    return indptr, indices, np.repeat(np.arange(N), np.diff(indptr))


def files(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def export_marius(dataset, out, **kw):
    base = dict(cap="1GiB", fanouts=(4, 3), batch_size=16, epochs=2, hidden=8, lr=0.01, memory_budget=4096)
    return marius.export(dataset, out, **{**base, **kw})


def test_marius_files_byte_for_byte(dataset, graph, tmp_path):
    info = export_marius(dataset, tmp_path / "m")
    out = tmp_path / "m"
    plan = info["buffer_plan"]
    parts, rows, capacity = plan["num_partitions"], plan["partition_rows"], plan["buffer_capacity"]
    # several partitions, N not a multiple of them, all but one buffered (the model fits them in 1 GiB)
    assert rows == -(-N // parts) and N % parts and 2 <= capacity < parts
    assert plan["evaluation_bytes"] <= (1 << 30) * (1 - marius.HEADROOM)

    _, src, dst = edges(graph)
    bucket = (src // rows) * parts + dst // rows
    order = np.lexsort((src, dst, bucket))  # bucket-major, then destination, then source
    pairs = np.stack([src[order], dst[order]], axis=1).astype("<i4")
    assert (out / "edges/train_edges.bin").read_bytes() == pairs.tobytes()
    offsets = [int(x) for x in (out / "edges/train_partition_offsets.txt").read_text().splitlines()]
    assert offsets == np.bincount(bucket, minlength=parts * parts).tolist() and sum(offsets) == len(src)
    assert offsets[-1] == 0  # the last partition holds only isolated nodes

    assert (out / "nodes/features.bin").read_bytes() == graph["feat"].astype("<f4").tobytes()
    assert (out / "nodes/labels.bin").read_bytes() == graph["labels"].astype("<i4").tobytes()
    for name, rel in (("train", "train_nodes"), ("val", "validation_nodes"), ("test", "test_nodes")):
        # at most as many as the train split: MariusGNN's buffered evaluation reads no more (one node here)
        assert (out / f"nodes/{rel}.bin").read_bytes() == SPLITS[name][:1].astype("<i4").tobytes()

    stats = yaml.safe_load((out / "dataset.yaml").read_text())
    assert list(stats) == ["dataset_dir", "num_edges", "num_nodes", "num_relations", "num_train", "num_valid",
                           "num_test", "node_feature_dim", "rel_feature_dim", "num_classes", "initialized"]
    assert stats == {"dataset_dir": f"{out}/", "num_edges": len(src), "num_nodes": N, "num_relations": 1,
                     "num_train": 1, "num_valid": 1, "num_test": 1, "node_feature_dim": D, "rel_feature_dim": -1,
                     "num_classes": CLASSES, "initialized": False}


def test_marius_config_matches_the_run(dataset, tmp_path):
    info = export_marius(dataset, tmp_path / "m")
    text = (tmp_path / "m" / marius.CONFIG).read_text()
    cfg = yaml.safe_load(text)
    assert "&id" not in text  # plain YAML, no anchors
    stats = yaml.safe_load((tmp_path / "m" / "dataset.yaml").read_text())
    model, storage, training = cfg["model"], cfg["storage"], cfg["training"]
    assert model["learning_task"] == "NODE_CLASSIFICATION" and model["decoder"]["type"] == "NODE"
    encoder = model["encoder"]
    assert encoder["use_incoming_nbrs"] is True and encoder["use_outgoing_nbrs"] is False
    assert [s["options"]["max_neighbors"] for s in encoder["train_neighbor_sampling"]] == [4, 3]
    assert all(s["type"] == "UNIFORM" for s in encoder["train_neighbor_sampling"])
    feature, *gnn = encoder["layers"]
    assert feature == [{"type": "FEATURE", "output_dim": D, "bias": False}]
    assert [(layer["options"]["type"], layer["input_dim"], layer["output_dim"]) for [layer] in gnn] == \
        [("GRAPH_SAGE", D, 8), ("GRAPH_SAGE", 8, CLASSES)]
    assert model["dense_optimizer"]["options"]["learning_rate"] == 0.01
    assert storage["dataset"] == {k: v for k, v in stats.items() if k != "initialized"}
    features = storage["features"]
    assert features["type"] == "PARTITION_BUFFER" and storage["embeddings"] == features
    assert features["options"]["num_partitions"] == info["buffer_plan"]["num_partitions"]
    assert features["options"]["buffer_capacity"] == info["buffer_plan"]["buffer_capacity"]
    assert storage["edges"] == {"type": "FLAT_FILE", "options": {"dtype": "int"}}
    assert storage["nodes"]["options"]["dtype"] == "int" and storage["model_dir"] == f"{tmp_path / 'm'}/model/"
    assert training["batch_size"] == 16 and training["num_epochs"] == 2
    assert json.loads((tmp_path / "m" / EXPORT_INFO).read_text())["options"]["fanouts"] == [4, 3]


def test_edge_chunks_cross_runs_of_nodes_without_in_edges():
    rng = np.random.default_rng(0)
    degree = rng.integers(0, 4, 500)
    degree[100:400] = 0  # wider than any chunk: dst comes from a search, not per-node arrays
    indptr = np.concatenate([[0], np.cumsum(degree)])
    ds = SimpleNamespace(indptr=indptr, indices=rng.integers(0, 500, indptr[-1]), num_edges=int(indptr[-1]))
    for max_edges in (1, 7, 64, 10**6):
        chunks = list(csc_edges(ds, max_edges))
        assert max(len(src) for src, _ in chunks) <= max_edges
        assert np.concatenate([src for src, _ in chunks]).tolist() == ds.indices.tolist()
        assert np.concatenate([dst for _, dst in chunks]).tolist() == np.repeat(np.arange(500), degree).tolist()


# MariusGNN (main @2f27ffe, CPU) on W1 (8M nodes, 79,956,231 edges, 512-byte feature rows), one epoch and its
# evaluation under a cgroup cap, as issue 40 measured it: (partitions, buffer capacity, cap GiB, what happened).
W1 = (8_000_000, 79_956_231, 512)
MEASURED = [(16, 7, 4, "killed in training"), (16, 3, 2, "killed in training"), (16, 5, 4, "killed in evaluation"),
            (16, 4, 4, "ran"), (16, 3, 4, "ran"), (16, 2, 2, "killed in evaluation"), (23, 2, 2, "ran"),
            (16, 7, 16, "ran")]
# Its anonymous memory beside the buffered partitions: (partitions, capacity, GiB).
SUBGRAPHS = [(23, 2, 0.86), (16, 3, 1.38), (16, 4, 1.89), (16, 7, 3.09)]


@pytest.mark.parametrize("partitions,capacity,cap_gib,what", MEASURED)
def test_the_memory_model_holds_every_measured_marius_run(partitions, capacity, cap_gib, what):
    m = marius.memory(*W1, partitions, capacity)
    cap = cap_gib << 30
    if what == "ran":
        assert m["evaluation_bytes"] <= cap
    elif what == "killed in evaluation":
        assert m["evaluation_bytes"] > cap
    else:
        assert m["training_bytes"] > cap


@pytest.mark.parametrize("partitions,capacity,gib", SUBGRAPHS)
def test_the_model_of_the_subgraph_is_within_a_tenth_of_a_gib_of_each_measurement(partitions, capacity, gib):
    m = marius.memory(*W1, partitions, capacity)
    beside = m["training_bytes"] - (capacity + marius.PREFETCHED) * m["partition_bytes"]
    assert abs(beside / (1 << 30) - gib) < 0.1


def test_buffer_plan_fits_the_cap_at_scale():
    for cap in (2 << 30, 4 << 30):
        plan = marius.buffer_plan(*W1, cap)
        parts, buffered = plan["num_partitions"], plan["buffer_capacity"]
        assert plan["evaluation_bytes"] <= cap * (1 - marius.HEADROOM) and 2 <= buffered < parts
        assert plan["partition_rows"] * parts >= 8_000_000
        # the share of a node's neighbours MariusGNN can sample: those in buffered partitions
        assert plan["neighbour_share"] == buffered / parts < 0.5
        # no buffer with a larger share fits
        for partitions in range(marius.MIN_PARTITIONS, marius.MAX_PARTITIONS + 1):
            capacity = buffered * partitions // parts + 1
            if capacity < partitions:
                assert marius.memory(*W1, partitions, capacity)["evaluation_bytes"] > cap * (1 - marius.HEADROOM)
    small = marius.buffer_plan(1000, 5000, 64, 2 << 30)  # fits easily: MariusGNN's 16 partitions, all but one
    assert (small["num_partitions"], small["buffer_capacity"], small["neighbour_share"]) == (16, 15, 15 / 16)
    with pytest.raises(DiskgnnError, match="--cap 1.0 GiB: too small for MariusGNN, which would need about"):
        marius.buffer_plan(*W1, 1 << 30)


def test_ginex_files_byte_for_byte(dataset, graph, tmp_path):
    info = ginex.export(dataset, tmp_path / "g", cap="2GiB", fanouts=(4, 3), batch_size=16, memory_budget=4096)
    out = tmp_path / "g"
    indptr, src, dst = edges(graph)
    assert (out / "indptr.dat").read_bytes() == indptr.astype("<i8").tobytes()
    assert (out / "indices.dat").read_bytes() == src.astype("<i8").tobytes()
    assert (out / "features.dat").read_bytes() == graph["feat"].astype("<f4").tobytes()
    assert (out / "labels.dat").read_bytes() == graph["labels"].astype("<f4").tobytes()
    assert json.loads((out / "conf.json").read_text()) == {
        "num_nodes": N, "indptr_shape": [N + 1], "indptr_dtype": "int64", "indices_shape": [len(src)],
        "indices_dtype": "int64", "features_shape": [N, D], "features_dtype": "float32", "labels_shape": [N, 1],
        "labels_dtype": "float32", "num_classes": CLASSES}

    split = torch.load(out / "split_idx.pth", weights_only=True)
    assert sorted(split) == ["test", "train", "valid"]
    for key, name in (("train", "train"), ("valid", "val"), ("test", "test")):
        assert split[key].dtype == torch.int64 and split[key].tolist() == SPLITS[name].tolist()

    # prepare_dataset.py's score, computed its way: torch degrees from the CSC and CSR indptr, + eps
    eps = 0.00000001
    in_num = torch.from_numpy(np.diff(indptr)) + eps
    out_num = torch.from_numpy(np.bincount(src, minlength=N)) + eps
    score = torch.load(out / "nc_score.pth", weights_only=True)
    assert score.dtype == torch.float32 and torch.equal(score, out_num / in_num)
    assert info["neigh_cache_bytes"] - 8 * N == info["feature_cache_bytes"] - 4 * N - 4 * D > 0  # the model's plan
    assert info["peak_bytes"] <= (2 << 30) * (1 - ginex.HEADROOM[info["device"]])


@pytest.mark.parametrize("peer", ["marius", "ginex"])
def test_exports_stream_in_small_chunks_and_convert_half_features(graph, peer, tmp_path):
    ds = prepare(write_npy_dir(tmp_path / "src", graph, splits=SPLITS), tmp_path / "ds16",
                 feature_dtype="float16", progress=False)
    export = {"marius": export_marius, "ginex": ginex.export}[peer]
    export(ds, tmp_path / "small", memory_budget=4096)
    export(ds, tmp_path / "large", memory_budget="64MiB")
    small, large = files(tmp_path / "small"), files(tmp_path / "large")
    assert small.keys() == large.keys()
    for name in small:  # the chunking shows nowhere but in the export's recorded path
        assert small[name].replace(bytes(tmp_path / "small"), bytes(tmp_path / "large")) == large[name], name
    feature_file = {"marius": "nodes/features.bin", "ginex": "features.dat"}[peer]
    assert small[feature_file] == graph["feat"].astype(np.float16).astype("<f4").tobytes()


def test_ginex_refuses_rows_longer_than_its_gather_reads(tmp_path):
    g = random_graph(n=5, e=8, d=1025, classes=2, seed=0)
    ds = prepare(write_npy_dir(tmp_path / "src", g), tmp_path / "wide", progress=False)
    with pytest.raises(DiskgnnError, match="features.bin: rows of 1025 float32 values .* at most 1024"):
        ginex.export(ds, tmp_path / "g")
    assert not (tmp_path / "g").exists()


def test_output_is_never_half_written(dataset, tmp_path, monkeypatch):
    out = tmp_path / "m"
    export_marius(dataset, out)
    with pytest.raises(DiskgnnError, match="already exists"):
        export_marius(dataset, out)
    before = files(out)

    def fail(*args, **kw):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(marius, "_write_edges", fail)  # after features, labels and splits are written
    with pytest.raises(OSError):
        export_marius(dataset, out, overwrite=True)
    assert files(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    monkeypatch.undo()
    (out / "stale").write_text("from an older export")
    export_marius(dataset, out, overwrite=True, fanouts=(2,))
    assert not (out / "stale").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_bad_inputs_are_one_line_errors_naming_the_file(dataset, tmp_path):
    with pytest.raises(DiskgnnError, match="nope: not a dataset directory"):
        marius.export(tmp_path / "nope", tmp_path / "m")
    with pytest.raises(DiskgnnError, match="--cap 100 B: too small for MariusGNN"):
        export_marius(dataset, tmp_path / "m", cap=100)
    with pytest.raises(DiskgnnError, match=f"{tmp_path}/missing: the output's parent"):
        export_marius(dataset, tmp_path / "missing" / "m")
    assert not (tmp_path / "m").exists()
    with pytest.raises(DiskgnnError, match=f"{EXPORT_INFO}: cannot read"):
        read_export_info(tmp_path)


def test_cli_exports_and_reports_errors_in_one_line(dataset, tmp_path):
    ok = run_module("bench.peers.export", "--data", dataset, "--to", "ginex", "--out", tmp_path / "g",
                    "--fanouts", "3,2", "--memory-budget", "1MiB", check=True)
    assert "exported" in ok.stdout and (tmp_path / "g" / "conf.json").exists()
    assert json.loads((tmp_path / "g" / EXPORT_INFO).read_text())["options"]["fanouts"] == [3, 2]
    bad = run_module("bench.peers.export", "--data", tmp_path / "nope", "--to", "marius", "--out", tmp_path / "m")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1  # a data error
    assert bad.stderr.startswith("python -m bench.peers.export: error:") and "nope" in bad.stderr
    assert run_module("bench.peers.export", "--data", dataset, "--to", "dgl", "--out", tmp_path / "x").returncode == 2


def test_runners_say_why_a_peer_did_not_run(dataset, tmp_path, monkeypatch):
    export_marius(dataset, tmp_path / "m")
    ginex.export(dataset, tmp_path / "g")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("DISKGNN_MARIUS", raising=False)
    row = marius.run(tmp_path / "m")
    assert row["status"] == "not installed" and "set DISKGNN_MARIUS=/path/to/marius_train" in row["why"]
    monkeypatch.setenv("DISKGNN_MARIUS", str(empty / "marius_train"))
    assert "is not an executable file" in marius.run(tmp_path / "m")["why"]
    monkeypatch.delenv("DISKGNN_GINEX", raising=False)
    row = ginex.run(tmp_path / "g")
    assert row["status"] == "not installed" and "set DISKGNN_GINEX to a checkout" in row["why"]
    home = tmp_path / "ginex"
    home.mkdir()
    monkeypatch.setenv("DISKGNN_GINEX", str(home))
    row = ginex.run(tmp_path / "g")
    assert row["status"] == "not installed" and "has no run_ginex.py or create_neigh_cache.py" in row["why"]
    (home / "create_neigh_cache.py").write_text("raise SystemExit('no neighbour cache today')\n")
    (home / "run_ginex.py").write_text("raise SystemExit('must not run')\n")
    if os.geteuid() != 0:
        assert ginex.run(tmp_path / "g")["why"] == "not root: run_ginex.py writes /proc/sys/vm/drop_caches"
        return
    row = ginex.run(tmp_path / "g")
    assert row["status"] == "failed" and "building its C++ extensions failed" in row["why"], row
    (home / "lib" / "cpp_extension").mkdir(parents=True)
    (home / "lib" / "cpp_extension" / "wrapper.py").write_text("")
    row = ginex.run(tmp_path / "g")
    assert row["status"] == "failed" and "create_neigh_cache.py exit 1: no neighbour cache today" in row["why"], row


# run_ginex.py --verbose as it prints an epoch of two superbatches (the first sampled only) and its evaluation
FAKE_GINEX = """
import os, sys, time
def say(line, pause=0.0):
    time.sleep(pause)
    print(line)
disk = sys.argv[sys.argv.index('--disk') + 1] if '--disk' in sys.argv else None
say('read_ahead_kb ' + open(disk).read().strip() if disk else 'no disk')
say('weights_only ' + os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', 'unset'))
for epoch in range(2):
    say('Running Epoch %d...' % epoch)
    say('Step 1: Superbatch Sample'); say('Step 1: Done', 0.05)
    say('Step 1: Superbatch Sample'); say('Loading ids...'); say('Done!', 0.01)
    say('Pass 1: calculating frequency and initial cache indices...'); say('Done!', 0.02)
    say('Pass 2: making two key data structures (iterptr & iters)...'); say('Done!', 0.02)
    say('Pass 3: Computing changesets...'); say('Done!', 0.1); say('Step 1: Done', 0.02)
    say('Step 2: Switch'); say('Step 2: Done', 0.01)
    say('Step 3: Main Loop'); say('Step 3: Done', 0.2)
    say('Epoch %02d, Loss: 1.2345, Approx. Train: 0.5000' % epoch); say('Epoch time: %d.5000 ms' % (400 + epoch))
    say('Step 1: Superbatch Sample'); say('Pass 3: Computing changesets...'); say('Done!', 0.6)
    say('Valid loss: 1.0000, Valid acc: 0.%d000, Test loss: 1.1000, Test acc: 0.%d500,' % (5 + epoch, 5 + epoch), 0.1)
say('Final Test acc: {final_test_acc:.4f}')
"""


def test_ginex_runner_reads_its_epochs_phases_and_accuracy(dataset, tmp_path, monkeypatch):
    """A stand-in for an installed Ginex: the row has its epoch times, the seconds of its superbatch steps and
    change-set passes (the evaluation's apart), each evaluation's accuracies and when it printed them, the
    neighbour cache's preprocessing time; it ran with the disk's read-ahead off and torch's weights-only load
    off, and the read-ahead is restored after."""
    if os.geteuid() != 0:
        pytest.skip("Ginex's runner needs root (run_ginex.py drops the page cache itself)")
    ginex.export(dataset, tmp_path / "g")
    home = tmp_path / "ginex"
    home.mkdir()
    (home / "create_neigh_cache.py").write_text("import time; time.sleep(0.05)\n")
    (home / "lib" / "cpp_extension").mkdir(parents=True)
    (home / "lib" / "cpp_extension" / "wrapper.py").write_text("")
    (home / "run_ginex.py").write_text(FAKE_GINEX)
    monkeypatch.setenv("DISKGNN_GINEX", str(home))
    from bench.harness.common import _sysfs_block

    block = _sysfs_block(tmp_path)
    knob = next(q / "queue" / "read_ahead_kb" for q in (block, block.parent) if (q / "queue").is_dir())
    before = knob.read_text()
    real = ginex.capped_row
    monkeypatch.setattr(ginex, "capped_row", lambda system, argv, *a, **kw: real(
        system, [*argv, "--disk", str(knob)], *a, **kw))
    row = ginex.run(tmp_path / "g")
    if row["status"] == "unavailable":
        pytest.skip(row["why"])
    assert row["status"] == "ok", row
    out = (tmp_path / "g" / "run_ginex.log").read_text()
    assert "read_ahead_kb 0" in out and "weights_only 1" in out and knob.read_text() == before
    assert row["epoch_times_s"] == [0.4005, 0.4015] and row["device"] in ("cpu", "cuda")
    assert row["val_acc_per_eval"] == [0.5, 0.6] and row["test_acc_per_eval"] == [0.55, 0.65]
    assert len(row["wall_s_at_val"]) == 2 and 0 < row["wall_s_at_val"][0] < row["wall_s_at_val"][1] < row["wall_s"]
    assert row["conversion_s"]["neigh_cache_s"] >= 0.05 and row["disk_bytes_read"] >= 0
    for p in row["phases_per_epoch"]:  # the evaluation's 0.6 s pass 3 is its own, not the epoch's
        assert 0.1 <= p["pass_3_s"] < 0.5 and 0.2 <= p["training_s"] and 0.2 <= p["sampling_s"] < 0.6
        assert 0.05 <= p["pass_1_2_s"] and 0 < p["switch_s"] and 0.7 <= p["eval_s"]


def test_marius_runner_parses_epoch_times(dataset, tmp_path, monkeypatch):
    export_marius(dataset, tmp_path / "m")
    fake = tmp_path / "bin" / "marius_train"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "[info] Epoch Runtime: 63ms"\necho "[info] Epoch Runtime: 1.5ms" >&2\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    row = marius.run(tmp_path / "m", cap="256MiB")
    if row["status"] == "unavailable":  # no memory cgroup here (not root): the row says so
        assert row["why"].startswith("cannot apply the memory cap")
        return
    assert row["status"] == "ok" and row["epoch_times_s"] == pytest.approx([0.063, 0.0015])
    assert row["argv"] == [str(fake), str(tmp_path / "m" / marius.CONFIG)] and row["cap_bytes"] == 256 << 20
    fake.write_text("#!/bin/sh\necho out of memory >&2\nexit 3\n")
    row = marius.run(tmp_path / "m", cap="256MiB")
    assert row["status"] == "failed" and row["why"] == "exit 3: out of memory"


# MariusGNN's evaluation blocks as its documentation prints them (docs/examples/config/nc_custom.rst,
# lp_custom.rst), two epochs each; the last has no test block (a run killed in its evaluation).
NC_LOG = """[04/05/22 18:41:49.199] Epoch Runtime: 63ms
[04/05/22 18:41:49.199] Evaluating validation set
=================================
Node Classification: 270 nodes evaluated
Accuracy: 12.962963%
=================================
[04/05/22 18:41:49.213] Evaluating test set
=================================
Node Classification: 272 nodes evaluated
Accuracy: 16.176471%
=================================
[04/05/22 18:41:49.872] Epoch Runtime: 51ms
[04/05/22 18:41:49.872] Evaluating validation set
=================================
Node Classification: 270 nodes evaluated
Accuracy: 84.814815%
=================================
[04/05/22 18:41:49.883] Evaluating test set
"""
LP_LOG = """[04/04/22 17:11:59.408] Epoch Runtime: 1758ms
[04/04/22 17:11:59.408] Evaluating validation set
=================================
Link Prediction: 116624 edges evaluated
Mean Rank: 10927.984317
MRR: 0.088246
Hits@1: 0.043936
Hits@3: 0.091285
Hits@10: 0.176499
Hits@100: 0.414872
=================================
[04/04/22 17:12:00.444] Evaluating test set
=================================
Link Prediction: 116625 edges evaluated
MRR: 0.088237
Hits@1: 0.043798
Hits@10: 0.176377
=================================
"""


def test_marius_metrics_are_parsed_from_its_evaluation_blocks():
    nc = marius.metrics(NC_LOG)
    # from the first stamp (18:41:49.199) to each test set's line, where its validation has ended
    assert nc == {"val_acc_per_eval": pytest.approx([0.12962963, 0.84814815]),
                  "test_acc_per_eval": pytest.approx([0.16176471]), "wall_s_at_val": [0.014, 0.684]}
    lp = marius.metrics(LP_LOG)
    assert lp == {"wall_s_at_val": [1.036], "val_mrr_per_eval": [0.088246], "val_hits@1_per_eval": [0.043936],
                  "val_hits@10_per_eval": [0.176499], "test_mrr_per_eval": [0.088237],
                  "test_hits@1_per_eval": [0.043798], "test_hits@10_per_eval": [0.176377]}
    assert marius.metrics("Epoch Runtime: 5ms\n") == {}
    # as the report reads it: val per epoch, test at the best val epoch (here none: its test block is missing)
    from bench.epoch import peer_accuracy
    assert peer_accuracy({**nc, "epoch_times_s": [0.063, 0.051]}) == {
        "val_acc_per_epoch": nc["val_acc_per_eval"], "test_acc": None, "wall_s_at_val": [0.014, 0.684]}


@pytest.fixture(scope="module")
def link_dataset(tmp_path_factory):
    return prepare("synthetic", tmp_path_factory.mktemp("peers-link") / "ds", undirected=True, progress=False,
                   synthetic=dict(structure="powerlaw", nodes=199, feat_dim=0, avg_degree=6, classes=2, seed=0),
                   edge_split=(0.7, 0.15, 0.15))


def test_marius_link_export_holds_the_held_out_edges_by_bucket(link_dataset, tmp_path):
    from diskgnn.data.format import open_dataset

    link = {"embeddings": 8, "embedding_lr": 0.1, "negatives": 7, "chunks": 3, "degree_fraction": 0.5,
            "eval_negatives": 50, "loss": "softmax"}
    info = marius.export(link_dataset, tmp_path / "m", cap="1GiB", fanouts=(), batch_size=64, epochs=2, lr=0.01,
                         memory_budget=4096, link=link)
    out, ds = tmp_path / "m", open_dataset(link_dataset)
    plan = info["buffer_plan"]
    parts, rows = plan["num_partitions"], plan["partition_rows"]
    assert plan["partition_bytes"] == rows * 2 * 8 * 4  # rows of values and Adagrad state
    for split, name in marius.HELD_OUT.items():
        pairs = np.asarray(ds.held_out_edges(split), dtype=np.int64)
        bucket = (pairs[:, 0] // rows) * parts + pairs[:, 1] // rows
        got = np.fromfile(out / "edges" / f"{name}_edges.bin", "<i4").reshape(-1, 2)
        np.testing.assert_array_equal(got, pairs[np.argsort(bucket, kind="stable")])
        offsets = np.loadtxt(out / "edges" / f"{name}_partition_offsets.txt", dtype=np.int64)
        np.testing.assert_array_equal(offsets, np.bincount(bucket, minlength=parts * parts))
    train = np.fromfile(out / "edges" / "train_edges.bin", "<i4").reshape(-1, 2)
    assert len(train) == ds.num_edges and not (out / "nodes").exists()
    config = yaml.safe_load((out / marius.CONFIG).read_text())
    model = config["model"]
    assert model["learning_task"] == "LINK_PREDICTION" and model["decoder"]["type"] == "DISTMULT"
    assert model["encoder"]["layers"] == [[{"type": "EMBEDDING", "output_dim": 8, "bias": False}]]
    assert model["sparse_optimizer"] == {"type": "ADAGRAD", "options": {"learning_rate": 0.1}}
    assert config["training"]["negative_sampling"] == {"num_chunks": 3, "negatives_per_positive": 7,
                                                       "degree_fraction": 0.5, "filtered": False}
    assert config["evaluation"]["negative_sampling"]["negatives_per_positive"] == 50
    # trains and keeps each epoch's model; ranked after the run (marius_link), never during it
    assert config["evaluation"]["epochs_per_eval"] > config["training"]["num_epochs"] == 2
    assert config["training"]["save_model"] and config["training"]["checkpoint"]["interval"] == 1
    assert config["storage"]["embeddings"]["options"]["num_partitions"] == parts
    stats = config["storage"]["dataset"]
    assert (stats["num_valid"], stats["num_test"]) == tuple(len(ds.held_out_edges(s)) for s in ("val", "test"))
    without_split = prepare(write_npy_dir(tmp_path / "src", random_graph(n=30, e=90, d=4, classes=2, seed=1)),
                            tmp_path / "plain", progress=False)
    with pytest.raises(DiskgnnError, match="link prediction needs held-out edges"):
        marius.export(without_split, tmp_path / "x", cap="1GiB", fanouts=(), link=link)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_ginex_caches_are_planned_from_its_memory_model(device):
    """Ginex's model (read from its source, calibrated on a CPU run of W1 at 2 GiB): both caches and their
    per-node tables, the samplers' scratch and the superbatch's change set (on a CPU its tables too) fit the cap
    less the device's headroom."""
    n, f = 8_000_000, 128
    room = {cap: cap * (1 - ginex.HEADROOM[device]) for cap in (2 << 30, 4 << 30)}
    for cap in room:
        plan = ginex.cache_plan(n, f, 1024, [10, 5], cap, device)
        assert plan["peak_bytes"] <= room[cap] and plan["device"] == device
        assert plan["feature_cache_bytes"] > 4 * n and plan["neigh_cache_bytes"] > 8 * n  # Ginex refuses less
        assert 1 <= plan["sb_size"] <= ginex.MAX_SB
        assert plan["cached_rows"] == (plan["feature_cache_bytes"] - 4 * n) // (4 * f)  # lib/cache.py's K
        bigger = ginex.memory(n, f, 1024, [10, 5], feature_cache=plan["feature_cache_bytes"] + (64 << 20),
                              neigh_cache=plan["neigh_cache_bytes"] + (64 << 20), sb_size=plan["sb_size"],
                              device=device)
        assert bigger["peak_bytes"] > room[cap]  # the caches take what is left
    small = ginex.cache_plan(n, f, 1024, [10, 5], 2 << 30, device)
    assert small["sb_size"] < ginex.SB_SIZE  # at 2 GiB the change set of 1,000 batches does not fit beside them
    if device == "cpu":  # the change set's tables and the larger headroom leave the caches less than on a GPU
        gpu = ginex.cache_plan(n, f, 1024, [10, 5], 2 << 30, "cuda")
        assert small["feature_cache_bytes"] < gpu["feature_cache_bytes"] and small["sb_size"] < gpu["sb_size"]
    with pytest.raises(DiskgnnError, match="--cap 1.0 GiB: too small for Ginex, which would need about"):
        ginex.cache_plan(n, f, 1024, [10, 5], 1 << 30, device)


def fake_marius(dataset, tmp_path, monkeypatch, epochs: int, script: str) -> tuple[dict, SimpleNamespace]:
    """bench.epoch's MariusGNN row at 1 GiB for `epochs` epochs, DISKGNN_MARIUS a stand-in marius_train that runs
    `script` (Python, after `import sys`); and the options it ran with."""
    import sys

    from bench.epoch import installed_peer

    if os.geteuid() != 0:
        pytest.skip("the runs go under a cgroup memory cap, which needs root")
    fake = tmp_path / "bin" / "marius_train"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport sys\n{script}")
    fake.chmod(0o755)
    monkeypatch.setenv("DISKGNN_MARIUS", str(fake))
    args = SimpleNamespace(fanouts="4,3", batch_size=16, epochs=epochs, hidden=8, batches=0, loop_timeout=60.0)
    row = installed_peer("marius", dataset, tmp_path, args, "1GiB", 60.0)
    if "error" in row and "cannot apply the memory cap" in str(row.get("row", {}).get("why")):
        pytest.skip(f"no memory cgroup here: {row['row']['why']}")
    return row, args


def test_marius_at_target_runs_the_smallest_buffer_that_reaches_diskgnns_val(dataset, tmp_path, monkeypatch):
    """bench.epoch's fair MariusGNN row, against a stand-in marius_train whose accuracy grows with its buffer
    (40 % + 5 points a buffered partition): diskgnn's best val 62 % is first reached with 5 partitions."""
    from bench.epoch import marius_at_target

    planned, args = fake_marius(dataset, tmp_path, monkeypatch, 1, (
        "import yaml\nc = yaml.safe_load(open(sys.argv[1]))['storage']['features']['options']['buffer_capacity']\n"
        "print('[04/05/22 18:41:49.100] Start initialization')\n"
        "print('[04/05/22 18:41:49.199] Epoch Runtime: 63ms')\n"
        "print('[04/05/22 18:41:49.199] Evaluating validation set')\nprint(f'Accuracy: {40 + 5 * c}%')\n"
        "print('[04/05/22 18:41:49.213] Evaluating test set')\nprint(f'Accuracy: {41 + 5 * c}%')\n"))
    assert planned["buffer"] == [15, 16] and planned["val_acc_per_epoch"] == [pytest.approx(1.15)]
    row = marius_at_target(dataset, tmp_path, args, "1GiB", {"val_acc_per_epoch": [0.55, 0.62]}, planned)
    assert row["buffer"] == [5, 16] and row["target_val_acc"] == 0.62
    assert row["val_acc_per_epoch"] == [pytest.approx(0.65)] and row["test_acc"] == pytest.approx(0.66)
    assert row["wall_s_at_val"] == [0.113] and row["neighbour_share"] == 5 / 16
    missed = marius_at_target(dataset, tmp_path, args, "1GiB", {"val_acc_per_epoch": [1.2]}, planned)
    assert missed["error"] == ("MariusGNN reached no val accuracy of 1.2000 (diskgnn's best) even with 15 of 16 "
                              "partitions buffered, the most the cap holds")


def test_a_peer_that_dies_after_an_epoch_keeps_it_and_says_how(dataset, tmp_path, monkeypatch):
    """A stand-in marius_train that trains and evaluates one epoch, then dies in its next evaluation: the row keeps
    the epoch (time, accuracy) and the report says how it ended, in a few words."""
    from bench.report.tables import peer_table

    row, _ = fake_marius(dataset, tmp_path, monkeypatch, 2, (
        "print('[04/05/22 18:41:49.199] Epoch Runtime: 63ms')\n"
        "print('[04/05/22 18:41:49.199] Evaluating validation set')\nprint('Accuracy: 40%')\n"
        "print('[04/05/22 18:41:49.213] Evaluating test set')\nprint('Accuracy: 41%')\n"
        "print('=================================')\n"
        "print('[04/05/22 18:41:50.001] Evaluating test set')\nsys.exit(3)\n"))
    assert row["epochs_done"] == 1 and row["val_acc_per_epoch"] == [pytest.approx(0.40)]
    assert row["died"] == "exit 3 (its last lines: Accuracy: 41%; Evaluating test set)"
    epoch = {"uncapped": {}, "caps": {"1GiB": {"runs": {"marius": row}}}, "batches": 0, "batches_per_epoch": 4}
    line = next(x for x in peer_table(epoch, ran_only=True).splitlines() if x.startswith("| MariusGNN |"))
    assert "then exit 3 (its last lines: Accuracy: 41%; Evaluating test set)" in line and "| 41.00 % |" in line


def test_ginex_in_the_report_has_its_phases_its_accuracy_and_its_preprocessing(dataset, tmp_path, monkeypatch):
    """bench.epoch's Ginex row from the stand-in above: the report names its epochs' split (so a reader sees which
    part a GPU would take), its test accuracy, its time to the val target with the neighbour cache's seconds, the
    val and test nodes every system evaluates."""
    from bench.epoch import installed_peer
    from bench.report.tables import peer_table

    if os.geteuid() != 0:
        pytest.skip("Ginex's runner needs root (run_ginex.py drops the page cache itself)")
    home = tmp_path / "ginex"
    (home / "lib" / "cpp_extension").mkdir(parents=True)
    (home / "lib" / "cpp_extension" / "wrapper.py").write_text("")
    (home / "create_neigh_cache.py").write_text("")
    # the stand-in stops unless the export's split_idx.pth holds the val nodes every system evaluates
    from diskgnn.data.format import open_dataset

    want = min(2 * 16, open_dataset(dataset).split("val").size)
    (home / "run_ginex.py").write_text(
        "import sys, torch\nn = torch.load('dataset/diskgnn-ginex/split_idx.pth')['valid'].numel()\n"
        f"if n != {want}:\n    sys.exit('valid nodes %d' % n)\n" + FAKE_GINEX)
    monkeypatch.setenv("DISKGNN_GINEX", str(home))
    args = SimpleNamespace(fanouts="4,3", batch_size=16, epochs=2, hidden=8, batches=0, loop_timeout=60.0,
                           eval_batches=2)
    row = installed_peer("ginex", dataset, tmp_path, args, "2GiB", 60.0)
    if "cannot apply the memory cap" in str(row.get("row", {}).get("why")):
        pytest.skip(f"no memory cgroup here: {row['row']['why']}")
    assert row["epochs_done"] == 2 and row["val_acc_per_epoch"] == [0.5, 0.6] and row["test_acc"] == 0.65, row
    epoch = {"uncapped": {}, "caps": {"2GiB": {"runs": {"ginex": row}}}, "batches": 0, "batches_per_epoch": 4}
    line = next(x for x in peer_table(epoch, ran_only=True).splitlines() if x.startswith("| Ginex |"))
    assert "an epoch's superbatch steps" in line and "pass 3" in line and "| 65.00 % |" in line, line
    assert "Ginex's neighbour cache" in line and "export" in line, line
