"""A diskgnn dataset in MariusGNN's preprocessed layout, a training config for it, and a capped run.

Layout (what `marius_preprocess` writes; paths in marius-team/marius):

    dataset.yaml                        DatasetConfig as OmegaConf YAML (src/python/tools/preprocess/
                                        converters/writers/torch_writer.py, configuration/marius_config.py)
    nodes/features.bin                  float32 [num_nodes, node_feature_dim], row-major
    nodes/labels.bin                    int32 [num_nodes] (src/cpp/src/storage/io.cpp initializeNodeLabels)
    nodes/{train,validation,test}_nodes.bin
                                        node ids, storage.nodes dtype: int32 ("int") below 2**31 nodes
    edges/train_edges.bin               (src, dst) pairs, storage.edges dtype, ordered by edge bucket
    edges/train_partition_offsets.txt   edges per bucket (src partition i, dst partition j), i-major,
                                        one per line (preprocess/converters/partitioners/torch_partitioner.py)
    edges/{validation,test}_edges.bin   link prediction: the held-out (src, dst) pairs, ordered by edge bucket,
    edges/{validation,test}_partition_offsets.txt   with their bucket sizes (PathConstants in
                                        src/python/tools/configuration/constants.py)
    marius_train.yaml                   the training config (`marius_train marius_train.yaml`)

Link prediction (`task="link"`) is MariusGNN's home workload: no features, a
learnable embedding table (and its Adagrad state, per element) in the
partition buffer, DistMult, negatives shared per chunk of a batch's edges;
evaluation ranks each held-out edge against 1,000 sampled negatives shared by
its batch of 1,000, unfiltered, as diskgnn does (MariusGNN also corrupts the
source: its DistMult scores inverse edges). The run keeps each epoch's model
(model/checkpoint_<epoch>/, the last in model/), and marius_link.evaluate
ranks them after it: see there why not during it.

Node ids are kept (no remapping, so no nodes/node_mapping.txt): MariusGNN's
partitions are contiguous id ranges of ceil(num_nodes / num_partitions) nodes
(storage.cpp PartitionBufferStorage), so the features stay in diskgnn's order.
An edge u -> v (v aggregates u) is the pair (u, v): MariusGNN's sampler takes
column 0 of a node's incoming edges as its neighbours (src/cpp/src/data/samplers/
neighbor.cpp LayeredNeighborSampler::getNeighbors), and the config uses incoming
neighbours only, as diskgnn does.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import yaml

from diskgnn.data.files import StagedDirectory
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.units import format_size, parse_size

from .common import (
    EXPORT_INFO,
    budget_bytes,
    capped_row,
    csc_edges,
    not_run,
    pwrite_all,
    read_export_info,
    row_chunks,
    write_array,
    write_export_info,
    write_text,
)

CONFIG = "marius_train.yaml"
LOSSES = {"bce": "BCE_WITH_LOGITS", "softmax": "SOFTMAX_CE"}  # diskgnn's --link-loss -> MariusGNN's
HELD_OUT = {"val": "validation", "test": "test"}  # edges/<name>_edges.bin
SPLIT_FILES = {"train": "nodes/train_nodes.bin", "val": "nodes/validation_nodes.bin", "test": "nodes/test_nodes.bin"}
# MariusGNN's default num_partitions (PartitionBufferOptions in configuration/datatypes.py), and the most tried:
# more only shave the two prefetched partitions off the buffer, and the edge buckets (partitions^2) grow.
MIN_PARTITIONS, MAX_PARTITIONS = 16, 64
# of the cap, left by the plan: the model's error on W1's calibration runs was up to 4 %, but under W2's caps plans
# with 5 % were killed in 2 of 4 test evaluations (uncapped, the 4 GiB one peaked under the model: the cap's page
# cache); with 15 % the 2 GiB plan ran its 3 epochs and evaluations (docs/peers.md)
HEADROOM = 0.15
# What a MariusGNN process holds (its memory model), from its source and calibrated on W1 (8M nodes, 80M
# edges, 512-byte rows) under cgroup caps (issue 40's table; tests/bench/test_peer_exporters.py holds the plan
# to every row of it):
# - the partition buffer: with prefetching, buffer_capacity + 2 partitions (a partition being read ahead and
#   one being written back beside the buffer: PartitionBuffer::load);
# - its in-memory subgraph of the buffered partitions' edges (initializeInMemorySubGraph keeps several int64
#   copies of them) and the process's own runtime: SUBGRAPH_BASE + SUBGRAPH_EDGE bytes per edge into a
#   buffered partition (measured 0.86, 1.38, 1.89 and 3.09 GiB beside 2 of 23, 3, 4 and 7 of 16 partitions;
#   the least-squares line is within 0.08 GiB of each);
# - evaluation, which needs EVAL_BYTES more than the epoch (runs that trained an epoch were killed in it).
PREFETCHED = 2
SUBGRAPH_BASE = int(0.25 * (1 << 30))
SUBGRAPH_EDGE = 87
EVAL_BYTES = int(0.3 * (1 << 30))


def memory(num_nodes: int, num_edges: int, row_bytes: int, partitions: int, capacity: int) -> dict:
    """The memory model's bytes for a buffer of `capacity` of `partitions` partitions of `row_bytes` rows:
    training's and evaluation's peaks."""
    partition = -(-num_nodes // partitions) * row_bytes
    training = (capacity + PREFETCHED) * partition + SUBGRAPH_BASE + SUBGRAPH_EDGE * num_edges * capacity // partitions
    return {"partition_bytes": partition, "training_bytes": training, "evaluation_bytes": training + EVAL_BYTES}


def id_dtype(num_nodes: int) -> tuple[np.dtype, str]:
    """Node id dtype and its MariusGNN name: "int" (int32) while every id fits, as marius_preprocess writes."""
    if num_nodes < 2**31:
        return np.dtype("<i4"), "int"
    return np.dtype("<i8"), "long"


def buffer_plan(num_nodes: int, num_edges: int, row_bytes: int, cap_bytes: int) -> dict:
    """Partitions and buffer capacity whose run, by `memory`, fits the cap less HEADROOM through evaluation: the
    largest buffered share of the table (capacity / partitions; of equal shares, the fewest partitions). MariusGNN
    needs 2 <= buffer_capacity <= num_partitions; capacity stays below num_partitions so that the table is
    really out of core. Refused in one line where no buffer of 2 partitions fits."""
    best, room = None, int(cap_bytes * (1 - HEADROOM))
    for partitions in range(MIN_PARTITIONS, MAX_PARTITIONS + 1):
        # the model grows linearly with the capacity: the largest that fits, from its line
        empty = memory(num_nodes, num_edges, row_bytes, partitions, 0)["evaluation_bytes"]
        step = memory(num_nodes, num_edges, row_bytes, partitions, 1)["evaluation_bytes"] - empty
        capacity = min(partitions - 1, (room - empty) // max(1, step))
        while capacity >= 2 and memory(num_nodes, num_edges, row_bytes, partitions, capacity)["evaluation_bytes"] \
                > room:
            capacity -= 1  # the edges' share rounds down per capacity, not per step
        if capacity >= 2 and (best is None or capacity * best[0] > best[1] * partitions):
            best = (partitions, capacity)
        if best is not None and best[1] == partitions - 1:
            break  # all but one partition buffered: no larger share exists
    if best is None:
        least = memory(num_nodes, num_edges, row_bytes, MAX_PARTITIONS, 2)["evaluation_bytes"]
        raise DiskgnnError(f"--cap {format_size(cap_bytes)}: too small for MariusGNN, which would need about "
                           f"{format_size(least)} even with 2 of {MAX_PARTITIONS} partitions buffered, and the plan "
                           f"leaves {HEADROOM:.0%} of the cap free (its memory model: docs/peers.md)")
    return buffer_of(num_nodes, num_edges, row_bytes, cap_bytes, *best)


def buffer_of(num_nodes: int, num_edges: int, row_bytes: int, cap_bytes: int, partitions: int, capacity: int) -> dict:
    """The plan of a given buffer: its partitions' rows and the memory model's bytes for it."""
    # MariusGNN samples a node's neighbours among the buffered partitions only: with neighbours spread
    # evenly over the partitions, it sees this share of them (diskgnn and the other peers see all).
    return {"num_partitions": partitions, "buffer_capacity": capacity, "partition_rows": -(-num_nodes // partitions),
            **memory(num_nodes, num_edges, row_bytes, partitions, capacity), "cap_bytes": cap_bytes,
            "neighbour_share": capacity / partitions}


def _write_edges(ds, path: Path, partitions: int, partition_rows: int, dtype: np.dtype, budget: int) -> np.ndarray:
    """Writes (src, dst) pairs grouped by edge bucket (src // rows, dst // rows), bucket-major as
    torch_partitioner.py orders them (stable, so by destination then source within a bucket); two passes
    over the topology, counts then positioned writes. Returns the edges per bucket."""
    max_edges = max(1, budget // 64)  # src, dst, bucket, order (int64) and the pair: ~48 bytes an edge
    buckets = partitions * partitions
    counts = np.zeros(buckets, dtype=np.int64)
    for src, dst in csc_edges(ds, max_edges):
        counts += np.bincount((src // partition_rows) * partitions + dst // partition_rows, minlength=buckets)
    cursor = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pair_bytes = 2 * dtype.itemsize
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        raise DiskgnnError(f"{path}: cannot write ({e.strerror})") from None
    try:
        for src, dst in csc_edges(ds, max_edges):
            bucket = (src // partition_rows) * partitions + dst // partition_rows
            order = np.argsort(bucket, kind="stable")
            bucket = bucket[order]
            pairs = np.empty((len(order), 2), dtype=dtype)
            pairs[:, 0], pairs[:, 1] = src[order], dst[order]
            starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
            for s, e in zip(starts, [*starts[1:], len(bucket)]):
                b = bucket[s]
                pwrite_all(fd, pairs[s:e], int(cursor[b]) * pair_bytes, path)
                cursor[b] += e - s
    finally:
        os.close(fd)
    return counts


def _write_held_out(pairs: np.ndarray, path: Path, partitions: int, partition_rows: int, dtype: np.dtype) -> np.ndarray:
    """Held-out (src, dst) pairs grouped by edge bucket, as _write_edges groups the train edges (they are few:
    in memory at once). Returns the pairs per bucket."""
    bucket = (pairs[:, 0] // partition_rows) * partitions + pairs[:, 1] // partition_rows
    write_array(path, [pairs[np.argsort(bucket, kind="stable")]], dtype)
    return np.bincount(bucket, minlength=partitions * partitions)


def _buffer(plan: dict) -> dict:
    return {"type": "PARTITION_BUFFER",
            "options": {"dtype": "float", "num_partitions": plan["num_partitions"],
                        "buffer_capacity": plan["buffer_capacity"], "prefetching": True,
                        "fine_to_coarse_ratio": 1, "num_cache_partitions": 0,
                        "node_partition_ordering": "DISPERSED"}}


def _sage_layers(dims: list[int], last_activation: str) -> list:
    return [[{"type": "GNN", "options": {"type": "GRAPH_SAGE", "aggregator": "MEAN"}, "input_dim": dims[i],
              "output_dim": dims[i + 1], "bias": True,
              "activation": "RELU" if i < len(dims) - 2 else last_activation}] for i in range(len(dims) - 1)]


def _link_config(out: Path, stats: dict, plan: dict, id_name: str, *, fanouts, batch_size, epochs, lr,
                 device, link: dict) -> dict:
    """Link prediction: an EMBEDDING layer of the table in the partition buffer (GraphSAGE layers over it where
    `fanouts` has hops), DistMult, `link`'s negatives per chunk and loss, Adagrad on the table and Adam on the
    rest."""
    dim = link["embeddings"]
    encoder = {"layers": [[{"type": "EMBEDDING", "output_dim": dim, "bias": False}]]
               + _sage_layers([dim] * (len(fanouts) + 1), "NONE")}
    if fanouts:
        encoder.update(use_incoming_nbrs=True, use_outgoing_nbrs=False,
                       train_neighbor_sampling=[{"type": "UNIFORM", "options": {"max_neighbors": f}} for f in fanouts])
    return {
        "model": {
            "random_seed": 0,
            "learning_task": "LINK_PREDICTION",
            "encoder": encoder,
            "decoder": {"type": "DISTMULT", "options": {"input_dim": dim}},
            "loss": {"type": LOSSES[link["loss"]], "options": {"reduction": "MEAN"}},
            "dense_optimizer": {"type": "ADAM", "options": {"learning_rate": lr}},
            "sparse_optimizer": {"type": "ADAGRAD", "options": {"learning_rate": link["embedding_lr"]}},
        },
        "storage": {"device_type": device, "dataset": stats,
                    "edges": {"type": "FLAT_FILE", "options": {"dtype": id_name}}, "embeddings": _buffer(plan),
                    "prefetch": True, "shuffle_input": True,
                    "full_graph_evaluation": False, "model_dir": str(out / "model") + "/", "log_level": "info"},
        "training": {"batch_size": batch_size, "num_epochs": epochs, "pipeline": {"sync": True},
                     "negative_sampling": {"num_chunks": link["chunks"], "negatives_per_positive": link["negatives"],
                                           "degree_fraction": link["degree_fraction"], "filtered": False},
                     "epochs_per_shuffle": 1, "logs_per_epoch": 10,
                     "save_model": True, "checkpoint": {"interval": 1, "save_state": False}},
        # No evaluation in the run: its buffered one builds the encoder's graph from the held-out edges themselves
        # (and its full-graph one holds the whole table in memory), so each epoch's model is kept and ranked
        # afterwards (marius_link.evaluate).
        "evaluation": {"batch_size": 1000, "pipeline": {"sync": True}, "epochs_per_eval": epochs + 1,
                       "negative_sampling": {"num_chunks": 1, "negatives_per_positive": link["eval_negatives"],
                                             "degree_fraction": 0.0, "filtered": False}},
    }


def _config(out: Path, stats: dict, plan: dict, id_name: str, *, fanouts, batch_size, epochs, hidden, lr,
            device) -> dict:
    """The training config: GraphSAGE (mean) over a FEATURE layer, uniform sampling per hop from the seeds
    outward (sampling_layers_[0] is applied to the batch's nodes: neighbor.cpp), features in the partition
    buffer. Keys as read by configuration/marius_config.py and src/cpp/src/configuration/config.cpp."""
    dims = [stats["node_feature_dim"]] + [hidden] * (len(fanouts) - 1) + [stats["num_classes"]]
    gnn = _sage_layers(dims, "NONE")
    buffer = _buffer(plan)
    return {
        "model": {
            "random_seed": 0,
            "learning_task": "NODE_CLASSIFICATION",
            "encoder": {
                "use_incoming_nbrs": True,
                "use_outgoing_nbrs": False,
                "train_neighbor_sampling": [{"type": "UNIFORM", "options": {"max_neighbors": f}} for f in fanouts],
                "layers": [[{"type": "FEATURE", "output_dim": dims[0], "bias": False}]] + gnn,
            },
            "decoder": {"type": "NODE"},
            "loss": {"type": "CROSS_ENTROPY", "options": {"reduction": "MEAN"}},
            "dense_optimizer": {"type": "ADAM", "options": {"learning_rate": lr}},
        },
        "storage": {
            "device_type": device,
            "dataset": stats,
            # FLAT_FILE: edge buckets are read as their partitions enter the buffer, not held whole.
            "edges": {"type": "FLAT_FILE", "options": {"dtype": id_name}},
            "nodes": {"type": "HOST_MEMORY", "options": {"dtype": id_name}},
            "features": buffer,
            # No EMBEDDING layer, so no embedding table is made; the same partition options here because
            # validation.py validate_storage_config reads num_partitions from storage.embeddings.options.
            "embeddings": copy.deepcopy(buffer),  # a copy: no YAML anchor/alias in the written config
            "prefetch": True,
            "shuffle_input": True,
            "full_graph_evaluation": False,  # evaluation through the buffer too, within the cap
            "model_dir": str(out / "model") + "/",
            "log_level": "info",
        },
        "training": {"batch_size": batch_size, "num_epochs": epochs, "pipeline": {"sync": True},
                     "logs_per_epoch": 10, "save_model": False},
        # every epoch: time to accuracy reads its validation after each
        "evaluation": {"batch_size": batch_size, "pipeline": {"sync": True}, "epochs_per_eval": 1},
    }


def export(data, out, *, cap="2GiB", fanouts=(10, 5), batch_size=1024, epochs=1, hidden=256, lr=0.003,
           device="cpu", memory_budget="256MiB", overwrite=False, link: dict | None = None,
           eval_edges: int | None = None) -> dict:
    """Writes dataset `data` to directory `out` in MariusGNN's layout with its training config; returns
    the export's description (also written to out/diskgnn-export.json). `link` (embeddings, embedding_lr,
    negatives, chunks, degree_fraction, eval_negatives, loss: diskgnn.train's options of those names) makes
    it link prediction over learnable embeddings (`fanouts` may then be empty: the embeddings alone), evaluated on
    the first `eval_edges` held-out edges of each split (default: all; diskgnn's --eval-max-batches B evaluates the
    first B x 1,000)."""
    ds = open_dataset(data)
    budget = budget_bytes(memory_budget)
    cap_bytes = parse_size(cap)
    fanouts = [int(f) for f in fanouts]
    if (not fanouts and link is None) or (fanouts and min(fanouts) < 1):
        raise DiskgnnError(f"--fanouts {fanouts}: MariusGNN's uniform sampling needs positive fanouts")
    if link is not None and "edge_split" not in ds.manifest:
        raise DiskgnnError(f"{data}: link prediction needs held-out edges: prepare it with --edge-split")
    # The buffer holds a table's rows: features, or (link) embeddings and their Adagrad state, per element.
    row_bytes = 4 * (ds.feature_dim if link is None else 2 * link["embeddings"])
    plan = buffer_plan(ds.num_nodes, ds.num_edges, row_bytes, cap_bytes)
    ids, id_name = id_dtype(ds.num_nodes)
    splits = {name: ds.split(name) for name in SPLIT_FILES}
    # MariusGNN's buffered evaluation reads its node list with the train split's length (dataloader.cpp
    # setBufferOrdering: train_nodes->range(0, nodes->getDim0())), so a longer val or test split crashes it
    # (W1's 800,801 val nodes against 800,624 train): an evenly spread subset of at most that many is exported.
    for name in ("val", "test"):
        step = -(-len(splits[name]) // max(1, len(splits["train"])))
        splits[name] = splits[name][::step] if step > 1 else splits[name]
    if link is None and len(splits["train"]) == 0:
        raise DiskgnnError(f"{ds.file_path('train_idx')}: no training nodes; MariusGNN would have nothing to train")
    parts, rows = plan["num_partitions"], plan["partition_rows"]
    final = Path(out).absolute()
    with StagedDirectory(final, overwrite) as st:
        if link is None:
            write_array(st.path("nodes/features.bin"), row_chunks(ds.features, budget, 4), "<f4")
            write_array(st.path("nodes/labels.bin"), row_chunks(ds.labels, budget, 4), "<i4")
            for name, rel in SPLIT_FILES.items():
                write_array(st.path(rel), row_chunks(splits[name], budget, ids.itemsize), ids)
            held_out = {s: len(splits[s]) for s in ("val", "test")}
        else:
            held_out = {}
            for split, name in HELD_OUT.items():
                pairs = np.asarray(ds.held_out_edges(split)[:eval_edges], dtype=np.int64)
                counts = _write_held_out(pairs, st.path(f"edges/{name}_edges.bin"), parts, rows, ids)
                write_text(st.path(f"edges/{name}_partition_offsets.txt"), "".join(f"{c}\n" for c in counts.tolist()))
                held_out[split] = len(pairs)
        counts = _write_edges(ds, st.path("edges/train_edges.bin"), parts, rows, ids, budget)
        write_text(st.path("edges/train_partition_offsets.txt"), "".join(f"{c}\n" for c in counts.tolist()))
        # Field order and `initialized: false` as OmegaConf.to_yaml(DatasetConfig) writes them; -1 marks an
        # absent split (DatasetConfig: "If not given, no validation will be performed") or (link) no features.
        stats = {"dataset_dir": str(final) + "/", "num_edges": ds.num_edges, "num_nodes": ds.num_nodes,
                 "num_relations": 1, "num_train": ds.num_edges if link else len(splits["train"]),
                 "num_valid": held_out["val"] or -1, "num_test": held_out["test"] or -1,
                 "node_feature_dim": -1 if link else ds.feature_dim, "rel_feature_dim": -1,
                 "num_classes": -1 if link else ds.num_classes, "initialized": False}
        write_text(st.path("dataset.yaml"), yaml.safe_dump(stats, sort_keys=False))
        common = dict(fanouts=fanouts, batch_size=batch_size, epochs=epochs, lr=lr, device=device)
        stats = {k: v for k, v in stats.items() if k != "initialized"}
        config = _config(final, stats, plan, id_name, hidden=hidden, **common) if link is None else \
            _link_config(final, stats, plan, id_name, link=link, **common)
        write_text(st.path(CONFIG), yaml.safe_dump(config, sort_keys=False))
        options = {"cap_bytes": cap_bytes, "fanouts": fanouts, "batch_size": batch_size, "epochs": epochs,
                   "hidden": hidden, "lr": lr, "device": device, "buffer_plan": plan,
                   "task": "node" if link is None else "link", **({"link": link, "eval_edges": eval_edges} if link
                                                                  else {})}
        write_export_info(st.path(EXPORT_INFO), ds, "marius", options)
        st.commit()
    return {"peer": "marius", "out": str(final), "config": str(final / CONFIG), **options}


def set_buffer(out, capacity: int) -> None:
    """An export's config and description with `capacity` of its partitions buffered instead of its plan's
    (bench.epoch tries smaller buffers on one export: the files do not depend on the capacity)."""
    out = Path(out)
    info = read_export_info(out)
    plan = info["options"]["buffer_plan"]
    stats = yaml.safe_load((out / "dataset.yaml").read_text())
    info["options"]["buffer_plan"] = buffer_of(stats["num_nodes"], stats["num_edges"],
                                               plan["partition_bytes"] // plan["partition_rows"], plan["cap_bytes"],
                                               plan["num_partitions"], capacity)
    config = yaml.safe_load((out / CONFIG).read_text())
    for key in ("features", "embeddings"):
        if key in config["storage"]:
            config["storage"][key]["options"]["buffer_capacity"] = capacity
    write_text(out / CONFIG, yaml.safe_dump(config, sort_keys=False))
    write_text(out / EXPORT_INFO, json.dumps(info, indent=2, sort_keys=True) + "\n")


def executable() -> str | None:
    """The user's marius_train: DISKGNN_MARIUS, else the one on PATH."""
    return os.environ.get("DISKGNN_MARIUS") or shutil.which("marius_train")


def installed() -> tuple[bool, str]:
    """Whether an installed MariusGNN can be run; if not, how to point the bench at one (one line)."""
    exe = executable()
    if exe is None:
        return False, ("not installed: put marius_train on PATH or set DISKGNN_MARIUS=/path/to/marius_train "
                       "(MariusGNN is built from its own repository; docs/peers.md)")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return False, f"DISKGNN_MARIUS={exe} is not an executable file"
    return True, exe


def run(out, *, cap=None, timeout=None) -> dict:
    """Trains MariusGNN on an export (`marius_train CONFIG`) under a cgroup memory cap (default: the cap
    the export's buffer was sized for).

    Epoch times come from its "Epoch Runtime: 63ms" lines (docs/examples/config/nc_custom.rst), what it
    learned from its evaluations' lines (`metrics`).
    """
    ok, why = installed()
    if not ok:
        return not_run("marius", "not installed", why)
    exe = executable()
    info = read_export_info(out)
    config = Path(out).absolute() / CONFIG
    return capped_row("marius", [exe, str(config)], cap or info["options"]["cap_bytes"],
                      r"Epoch Runtime:\s*([0-9.]+)\s*ms", 1e-3, timeout=timeout, metrics=metrics,
                      log=Path(out).absolute() / "marius_train.log")


def metrics(output: str) -> dict:
    """What MariusGNN reported after each evaluation, in order: `val_acc_per_eval` and `test_acc_per_eval`
    (fractions), or for link prediction `val_mrr_per_eval`, `test_mrr_per_eval`, `test_hits@1_per_eval`, ...
    It prints a block after "Evaluating validation set" (or "test set"): "Accuracy: 84.814815%", or "MRR:
    0.132049" and "Hits@k: ..." lines (docs/examples/config/nc_custom.rst and lp_custom.rst). And seconds from
    its first logged line: `wall_s_at_val` to the end of each validation (the test set's line), `wall_s_at_epoch`
    to the end of each epoch's training ("Finished training epoch N")."""
    found: dict[str, list[float]] = {}
    parts = re.split(r"Evaluating (validation|test) set", output)
    stamps = [_seconds(m) for m in _STAMP.finditer(output)]
    for key, line in (("wall_s_at_val", "Evaluating test set"), ("wall_s_at_epoch", "Finished training epoch")):
        for m in re.finditer(r"(\[[^\]]+\])[^\n]*" + line, output):
            if stamps and (at := _seconds(_STAMP.match(m.group(1)))) is not None and stamps[0] is not None:
                found.setdefault(key, []).append(round(at - stamps[0], 3))
    for split, text in zip(parts[1::2], parts[2::2]):
        name = "val" if split == "validation" else "test"
        for key, pattern, scale in (("acc", r"Accuracy:\s*([0-9.]+)%", 0.01), ("mrr", r"MRR:\s*([0-9.]+)", 1),
                                    ("hits@1", r"Hits@1:\s*([0-9.]+)", 1), ("hits@10", r"Hits@10:\s*([0-9.]+)", 1)):
            if m := re.search(pattern, text):
                found.setdefault(f"{name}_{key}_per_eval", []).append(float(m.group(1)) * scale)
    return found


# Its log lines' stamps: "[2022-04-05 18:41:44.987]" (spdlog) and "[04/05/22 18:41:49.122]".
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d|\d\d/\d\d/\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)\]")


def _seconds(m) -> float | None:
    """A stamp as seconds since its day's start plus its date's ordinal day, for differences."""
    if m is None:
        return None
    date = m.group(1)
    year, month, day = (date.split("-") if "-" in date else (("20" + date[6:8]), date[0:2], date[3:5]))
    days = datetime.date(int(year), int(month), int(day)).toordinal()
    return days * 86400 + int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))
