"""A diskgnn dataset in Ginex's layout and a capped run of Ginex on it.

Layout (what SNU-ARC/Ginex's prepare_dataset.py writes into ./dataset/NAME-ginex;
read by lib/data.py GinexDataset):

    indptr.dat     int64 [num_nodes + 1], CSC column pointer: in-neighbours of v are
                   indices[indptr[v]:indptr[v+1]] (scipy coo(src, dst).tocsc(), as diskgnn's CSC)
    indices.dat    int64 [num_edges], source of each edge (lib/cpp_extension/sample.cpp reads int64
                   through O_DIRECT)
    features.dat   float32 [num_nodes, dim], row-major (gather.cpp reads float rows of at most 4 KiB)
    labels.dat     float32 [num_nodes] (prepare_dataset.py casts labels to float32; -1 where unlabeled)
    conf.json      num_nodes, {indptr,indices,features,labels}_{shape,dtype}, num_classes
    split_idx.pth  torch.save({"train", "valid", "test": int64 tensors}) (OGB's get_idx_split())
    nc_score.pth   torch.save(float32 [num_nodes]): (out-degree + 1e-8) / (in-degree + 1e-8), the
                   neighbour-cache ranking create_neigh_cache.py loads

Files are exactly their data (no padding): lib/data.py reads indptr.dat with
np.fromfile(...).reshape(indptr_shape), which extra bytes would break.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from diskgnn.data.files import StagedDirectory
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.units import format_size, parse_size

from ..harness.common import bytes_read_from, read_ahead_kb
from .common import (
    EXPORT_INFO,
    budget_bytes,
    capped_row,
    csc_edges,
    not_run,
    read_export_info,
    row_chunks,
    write_array,
    write_export_info,
    write_text,
)

NAME = "diskgnn"  # run_ginex.py --dataset NAME reads ./dataset/NAME-ginex
SCORE_EPS = 1e-8  # prepare_dataset.py's eps
MAX_ROW_BYTES = 4096  # gather.cpp reads one row with at most two 4 KiB O_DIRECT blocks
# Ginex's run_ginex.py default superbatch (mini-batches sampled ahead and cached for); its change-set
# precomputation counts a node's uses in an int16 (lib/cache.py), so a superbatch has at most MAX_SB batches.
SB_SIZE, MAX_SB = 1000, 32767
WORKERS = 4  # sampler processes (--num-workers; its default, 2 x the cores, would take GBs of scratch)
# What a Ginex training process holds on the host (its memory model, read from SNU-ARC/Ginex @fc2c085):
# - always: indptr read whole (8 N, lib/data.py) and the labels as float32 (4 N);
# - the feature cache, --feature-cache-size bytes: an int32 address table per node plus K rows,
#   K = (size - 4 N) / (4 F) (lib/cache.py fill_cache);
# - the neighbour cache, --neigh-cache-size bytes: an int64 address table per node plus neighbour lists, alive
#   while a superbatch is sampled (run_ginex.py inspect); the next superbatch's sampling overlaps the feature
#   cache still held for training, so the peak holds both caches;
# - each sampler worker's per-batch scratch: about 70 bytes per input node and 16 + 16 per last-hop edge
#   (lib/cpp_extension/sample.cpp), M input nodes at most B * prod(1 + fanout);
# - the change set's first passes: every batch's input ids of the superbatch, 8 S M bytes (lib/cache.py);
# - on a CPU, the change set's tables too, made on the GPU there (lib/cache.py): passes 1-2 hold frq (int16), its
#   cumsum and iterptr (int64), 18 bytes a node, and iters (int16) per input id of the superbatch; pass 3, beside
#   the sampling, iterptr, cache_table (int8), map_table (int32) and their masks, about 15 bytes a node, and iters;
# - torch, PyG and the CUDA context: RUNTIME_BYTES (an estimate); on a CPU, where the model trains in host memory,
#   256 MiB more (measured: W1 at 2 GiB held up to 1,523 MiB of anonymous memory beside its two caches, where the
#   rest of this model counts 1,295 MiB).
RUNTIME_BYTES = {"cuda": 1 << 30, "cpu": (1 << 30) + (256 << 20)}
# Of the cap, left by the plan. On a CPU run 5 % was not enough: W1 at 2 GiB, planned without the change set's
# tables, was OOM-killed in its third epoch at 1,990 MiB anonymous, the rest the trace files it writes; at 15 %
# without the extra runtime it ran its 3 epochs but peaked at 1,969 MiB.
HEADROOM = {"cuda": 0.05, "cpu": 0.15}


def memory(num_nodes: int, feature_dim: int, batch_size: int, fanouts, *, feature_cache: int, neigh_cache: int,
           sb_size: int = SB_SIZE, workers: int = WORKERS, device: str = "cuda") -> dict:
    """The memory model's peak host bytes of a Ginex run with these caches, its change set made on `device`
    (see above)."""
    rows = batch_size
    for f in fanouts:
        rows *= 1 + f
    last_edges = rows // (1 + fanouts[-1]) * fanouts[-1] if fanouts else 0
    scratch = workers * (70 * rows + 32 * last_edges)
    fixed = RUNTIME_BYTES[device] + 12 * num_nodes
    on_host = device == "cpu"  # the change set's tables
    # a superbatch sampled (pass 3 beside it) beside the cache trained from
    sampling = fixed + feature_cache + neigh_cache + scratch + on_host * (15 * num_nodes + 2 * sb_size * rows)
    change_set = fixed + feature_cache + 8 * sb_size * rows + on_host * (18 * num_nodes + 2 * sb_size * rows)
    return {"input_rows": rows, "sampling_bytes": sampling, "change_set_bytes": change_set,
            "peak_bytes": max(sampling, change_set),
            "cached_rows": max(0, (feature_cache - 4 * num_nodes) // (4 * feature_dim))}


def cache_plan(num_nodes: int, feature_dim: int, batch_size: int, fanouts, cap_bytes: int,
               device: str = "cuda") -> dict:
    """--feature-cache-size, --neigh-cache-size and --sb-size whose run on `device`, by `memory`, fits the cap
    less its HEADROOM: the superbatch at Ginex's default (smaller where its change set would not fit), and what
    the rest leaves split evenly between the two caches beyond their per-node tables. Refused in one line where
    not even the tables fit."""
    room = int(cap_bytes * (1 - HEADROOM[device]))
    tables = {"feature_cache": 4 * num_nodes + 4 * feature_dim, "neigh_cache": 8 * num_nodes, "device": device}
    base = memory(num_nodes, feature_dim, batch_size, fanouts, sb_size=1, **tables)
    per_batch = (10 if device == "cpu" else 8) * base["input_rows"]  # its ids (and, on a CPU, iters) in the change set
    spare = room - base["peak_bytes"]
    if spare < 0:
        raise DiskgnnError(f"--cap {format_size(cap_bytes)}: too small for Ginex, which would need about "
                           f"{format_size(base['peak_bytes'])} for its runtime, per-node tables and samplers alone "
                           "(its memory model: docs/peers.md)")
    sb_size = max(1, min(SB_SIZE, MAX_SB, 1 + spare // 2 // per_batch))
    # Each cache grows by the same share: twice it in the sampling phase (both caches), once in the change
    # set's (the feature cache alone); the largest share both phases hold.
    at = memory(num_nodes, feature_dim, batch_size, fanouts, sb_size=sb_size, **tables)
    share = max(0, min((room - at["sampling_bytes"]) // 2, room - at["change_set_bytes"]))
    caches = {k: v + share for k, v in tables.items() if k != "device"}
    m = memory(num_nodes, feature_dim, batch_size, fanouts, sb_size=sb_size, device=device, **caches)
    return {"feature_cache_bytes": caches["feature_cache"], "neigh_cache_bytes": caches["neigh_cache"],
            "sb_size": sb_size, "num_workers": WORKERS, "peak_bytes": m["peak_bytes"],
            "cached_rows": m["cached_rows"], "device": device}


def export(data, out, *, cap="2GiB", fanouts=(10, 5), batch_size=1024, epochs=1, hidden=256,
           memory_budget="256MiB", overwrite=False, eval_nodes: int | None = None, device: str | None = None) -> dict:
    """Writes dataset `data` to directory `out` in Ginex's layout; returns the export's description (also
    in out/diskgnn-export.json, with the run options `run` uses). `eval_nodes`: the val and test nodes Ginex
    evaluates after each epoch, each split's first ones as every system of bench.epoch evaluates them (None: the
    whole splits, as Ginex's prepare_dataset.py writes them; 0: none, the run --train-only). `device`: where its
    change set is made, which the caches are planned for (None: where Ginex's interpreter would run it).

    Beyond the streamed chunks, the split ids and the node-wide degree counts and score
    (12 bytes a node) are held in memory: torch.save writes whole tensors.
    """
    import torch

    ds = open_dataset(data)
    budget = budget_bytes(memory_budget)
    cap_bytes = parse_size(cap)
    if ds.feature_dim * 4 > MAX_ROW_BYTES:
        raise DiskgnnError(f"{ds.file_path('features')}: rows of {ds.feature_dim} float32 values ({ds.feature_dim * 4} "
                           f"bytes) are longer than the {MAX_ROW_BYTES} bytes Ginex's gather reads a row with "
                           f"(lib/cpp_extension/gather.cpp): at most {MAX_ROW_BYTES // 4} features")
    n, e = ds.num_nodes, ds.num_edges
    fanouts = [int(f) for f in fanouts]
    plan = cache_plan(n, ds.feature_dim, batch_size, fanouts, cap_bytes, device or ginex_device())
    final = Path(out).absolute()
    with StagedDirectory(final, overwrite) as st:
        write_array(st.path("indptr.dat"), row_chunks(ds.indptr, budget, 8), "<i8")
        write_array(st.path("indices.dat"), row_chunks(ds.indices, budget, 8), "<i8")
        write_array(st.path("features.dat"), row_chunks(ds.features, budget, 4), "<f4")
        write_array(st.path("labels.dat"), row_chunks(ds.labels, budget, 4), "<f4")

        # prepare_dataset.py: score = out_num_neighbors / in_num_neighbors, each + eps, from the CSR and CSC
        # indptr; torch promotes the int64 degrees to float32 for it.
        out_degree = np.zeros(n, dtype=np.int64)
        for src, _ in csc_edges(ds, max(1, budget // 40)):
            ids, counts = np.unique(src, return_counts=True)  # a bincount would allocate num_nodes per chunk
            out_degree[ids] += counts
        eps = np.float32(SCORE_EPS)
        score = np.empty(n, dtype=np.float32)
        step = max(1, budget // 24)
        for r0 in range(0, n, step):
            in_degree = np.diff(np.asarray(ds.indptr[r0:r0 + step + 1], dtype=np.int64))
            score[r0:r0 + step] = ((out_degree[r0:r0 + step].astype(np.float32) + eps)
                                   / (in_degree.astype(np.float32) + eps))
        del out_degree
        _save(torch.from_numpy(score), st.path("nc_score.pth"))
        del score

        split = {key: torch.from_numpy(np.array(ds.split(name)[:None if key == "train" else eval_nodes],
                                                dtype=np.int64))
                 for key, name in (("train", "train"), ("valid", "val"), ("test", "test"))}
        _save(split, st.path("split_idx.pth"))

        # Keys, shapes and dtype names as prepare_dataset.py's conf.json (labels_shape is OGB's y.shape, [N, 1]).
        conf = {"num_nodes": n, "indptr_shape": [n + 1], "indptr_dtype": "int64", "indices_shape": [e],
                "indices_dtype": "int64", "features_shape": [n, ds.feature_dim], "features_dtype": "float32",
                "labels_shape": [n, 1], "labels_dtype": "float32", "num_classes": ds.num_classes}
        write_text(st.path("conf.json"), json.dumps(conf))
        options = {"cap_bytes": cap_bytes, "fanouts": fanouts, "batch_size": batch_size, "epochs": epochs,
                   "hidden": hidden, "eval_nodes": eval_nodes, **plan}
        write_export_info(st.path(EXPORT_INFO), ds, "ginex", options)
        st.commit()
    return {"peer": "ginex", "out": str(final), **options}


def _save(obj, path: Path) -> None:
    import torch

    try:
        torch.save(obj, path)
    except OSError as e:
        raise DiskgnnError(f"{path}: cannot write ({e.strerror})") from None


def ginex_device() -> str:
    """Where run_ginex.py puts its model: cuda where Ginex's interpreter sees a GPU, else the CPU (with the
    device edits of docs/peers.md); the change set's tables are on that device."""
    python = os.environ.get("DISKGNN_GINEX_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True,
                           text=True)
    return "cuda" if probe.stdout.strip() == "True" else "cpu"


def _tail(proc) -> str:
    return " | ".join(((proc.stdout or "") + (proc.stderr or "")).strip().splitlines()[-3:])


def installed() -> tuple[bool, str]:
    """Whether DISKGNN_GINEX names a Ginex checkout; if not, how to point the bench at one (one line)."""
    home = os.environ.get("DISKGNN_GINEX")
    if not home:
        return False, ("not installed: set DISKGNN_GINEX to a checkout of SNU-ARC/Ginex with its dependencies "
                       "(and DISKGNN_GINEX_PYTHON to its interpreter; docs/peers.md)")
    missing = [f for f in ("run_ginex.py", "create_neigh_cache.py") if not (Path(home) / f).is_file()]
    if missing:
        return False, f"DISKGNN_GINEX={home} has no {' or '.join(missing)}"
    return True, home


def run(out, *, cap=None, timeout=None) -> dict:
    """Runs Ginex on an export as its README does: the disk's read-ahead off, create_neigh_cache.py (its
    preprocessing, timed), then run_ginex.py --verbose under a cgroup memory cap (default: the export's), with the
    export's fanouts, batch size, epochs and hidden size; run_ginex.py drops the page cache itself before each
    superbatch. On CUDA where Ginex's interpreter sees a GPU, else on the CPU (its device lines edited as
    docs/peers.md says). Epoch times come from its "Epoch time: X ms" lines, the rest from when its lines came
    (`phases`); bytes read from the disk's counters (the run alone on it).

    Needs DISKGNN_GINEX (a Ginex checkout) and root (run_ginex.py writes /proc/sys/vm/drop_caches; the cap needs a
    cgroup). DISKGNN_GINEX_PYTHON names the interpreter with Ginex's dependencies (default: this one).
    """
    ok, why = installed()
    if not ok:
        return not_run("ginex", "not installed", why)
    if os.geteuid() != 0:
        return not_run("ginex", "unavailable", "not root: run_ginex.py writes /proc/sys/vm/drop_caches")
    home = os.environ["DISKGNN_GINEX"]
    opts = read_export_info(out)["options"]
    export_dir = Path(out).absolute()
    # Ginex finds its dataset at ./dataset/NAME-ginex and writes ./trace under its working directory.
    work = export_dir / "ginex-run"
    (work / "dataset").mkdir(parents=True, exist_ok=True)
    link = work / "dataset" / f"{NAME}-ginex"
    if not link.is_symlink():
        link.symlink_to(export_dir)
    python = os.environ.get("DISKGNN_GINEX_PYTHON", sys.executable)
    # torch 2.6 and later load only weights by default, which Ginex's own trace files are not: its loader
    # threads die and the run hangs instead of exiting
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")])),
           "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "PYTHONUNBUFFERED": "1"}
    device = ginex_device()
    nc_size = str(opts["neigh_cache_bytes"])
    argv = [python, "-W", "ignore", str(Path(home) / "run_ginex.py"), "--dataset", NAME, "--verbose",
            "--neigh-cache-size", nc_size, "--feature-cache-size", str(opts["feature_cache_bytes"]),
            "--sb-size", str(opts["sb_size"]), "--sizes", ",".join(map(str, opts["fanouts"])),
            "--batch-size", str(opts["batch_size"]), "--num-epochs", str(opts["epochs"]),
            "--num-workers", str(opts.get("num_workers", WORKERS)), "--num-hiddens", str(opts["hidden"])] \
        + (["--train-only"] if opts.get("eval_nodes") == 0 else [])
    # its C++ extensions are compiled at first import (torch.utils.cpp_extension.load): not in the timed steps
    build = subprocess.run([python, "-c", "import lib.cpp_extension.wrapper"], cwd=home, env=env, capture_output=True,
                           text=True)
    if build.returncode != 0:
        return {"system": "ginex", "status": "failed", "why": f"building its C++ extensions failed: {_tail(build)}"}
    with read_ahead_kb(export_dir, 0):
        t0 = time.perf_counter()
        try:
            prep = subprocess.run([python, str(Path(home) / "create_neigh_cache.py"), "--dataset", NAME,
                                   "--neigh-cache-size", nc_size], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"system": "ginex", "status": "failed", "why": f"create_neigh_cache.py timed out after {timeout} s"}
        if prep.returncode != 0:
            return {"system": "ginex", "status": "failed",
                    "why": f"create_neigh_cache.py exit {prep.returncode}: {_tail(prep)}"}
        preprocess_s = time.perf_counter() - t0
        read_before = bytes_read_from(export_dir)
        row = capped_row("ginex", argv, cap or opts["cap_bytes"], r"Epoch time:\s*([0-9.]+)\s*ms", 1e-3,
                         cwd=work, env=env, timeout=timeout, stamped=phases, log=export_dir / "run_ginex.log")
        row["disk_bytes_read"] = bytes_read_from(export_dir) - read_before
    row.update(conversion_s={"neigh_cache_s": preprocess_s}, device=device)
    if row["status"] == "failed" and device == "cpu" and "cuda" in row.get("why", "").lower():
        row["why"] += " (on a CPU, run_ginex.py and lib/cache.py need the device edits of docs/peers.md)"
    return row


_EVAL = re.compile(r"Valid loss: [0-9.naif]+, Valid acc: ([0-9.]+), Test loss: [0-9.naif]+, Test acc: ([0-9.]+)")


def phases(lines: list[tuple[float, str]]) -> dict:
    """What run_ginex.py --verbose said, with when it said it (seconds from its start): per epoch, the seconds of
    its superbatch steps (1: sampling, the change set's pass 3 beside it in the main process; 2: the switch that
    fills the feature cache; 3: training) and of the change set's passes (1 and 2 before sampling, 3), summed
    over its superbatches, and of the evaluation after it; each evaluation's val and test accuracy and the wall
    time it printed at."""
    steps = {"Step 1: Superbatch": ("sampling_s", "Step 1: Done"), "Step 2: Switch": ("switch_s", "Step 2: Done"),
             "Step 3: Main Loop": ("training_s", "Step 3: Done"), "Loading ids": ("pass_1_2_s", None),
             "Pass 3:": ("pass_3_s", None)}
    epochs, vals, tests, walls, current, opened = [], [], [], [], None, {}
    for t, line in lines:
        line = line.strip()
        if line.startswith("Running Epoch"):
            current = dict.fromkeys(("sampling_s", "switch_s", "training_s", "pass_1_2_s", "pass_3_s", "eval_s"),
                                    0.0)
            epochs.append(current)
            opened = {}
        elif line.startswith("Epoch time:"):
            opened = {"eval_s": t}  # the evaluation's superbatches are not the epoch's
        elif (m := _EVAL.search(line)) is not None:
            vals.append(float(m.group(1)))
            tests.append(float(m.group(2)))
            walls.append(t)
            if current is not None and "eval_s" in opened:
                current["eval_s"] += t - opened.pop("eval_s")
        elif current is None or "eval_s" in opened:
            continue
        elif line.startswith("Pass 2:"):
            opened["pass_2"] = True
        elif line == "Done!" and ("pass_3_s" in opened or opened.pop("pass_2", False)):
            key = "pass_3_s" if "pass_3_s" in opened else "pass_1_2_s"  # their passes' last "Done!"
            current[key] += t - opened.pop(key, t)
        else:
            for begin, (key, end) in steps.items():
                if line.startswith(begin):
                    opened[key] = t
                elif end is not None and line.startswith(end) and key in opened:
                    current[key] += t - opened.pop(key)
    return {"phases_per_epoch": epochs, "val_acc_per_eval": vals, "test_acc_per_eval": tests, "wall_s_at_val": walls}
