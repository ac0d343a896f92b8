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
import subprocess
import sys
from pathlib import Path

import numpy as np

from diskgnn.data.files import StagedDirectory
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.units import parse_size

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
# Ginex's run_ginex.py default superbatch (mini-batches sampled ahead and cached for).
SB_SIZE = 1000


def export(data, out, *, cap="2GiB", fanouts=(10, 5), batch_size=1024, epochs=1, hidden=256,
           memory_budget="256MiB", overwrite=False) -> dict:
    """Writes dataset `data` to directory `out` in Ginex's layout; returns the export's description (also
    in out/diskgnn-export.json, with the run options `run` uses).

    Beyond the streamed chunks, the split ids and the node-wide degree counts and score
    (12 bytes a node) are held in memory: torch.save writes whole tensors.
    """
    import torch

    ds = open_dataset(data)
    budget = budget_bytes(memory_budget)
    cap_bytes = parse_size(cap)
    if ds.feature_dim * 4 > MAX_ROW_BYTES:
        raise DiskgnnError(f"{ds.features_path}: rows of {ds.feature_dim} float32 values ({ds.feature_dim * 4} "
                           f"bytes) are longer than the {MAX_ROW_BYTES} bytes Ginex's gather reads a row with "
                           f"(lib/cpp_extension/gather.cpp): at most {MAX_ROW_BYTES // 4} features")
    n, e = ds.num_nodes, ds.num_edges
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

        split = {key: torch.from_numpy(np.array(ds.split(name), dtype=np.int64))
                 for key, name in (("train", "train"), ("valid", "val"), ("test", "test"))}
        _save(split, st.path("split_idx.pth"))

        # Keys, shapes and dtype names as prepare_dataset.py's conf.json (labels_shape is OGB's y.shape, [N, 1]).
        conf = {"num_nodes": n, "indptr_shape": [n + 1], "indptr_dtype": "int64", "indices_shape": [e],
                "indices_dtype": "int64", "features_shape": [n, ds.feature_dim], "features_dtype": "float32",
                "labels_shape": [n, 1], "labels_dtype": "float32", "num_classes": ds.num_classes}
        write_text(st.path("conf.json"), json.dumps(conf))
        options = {"cap_bytes": cap_bytes, "fanouts": [int(f) for f in fanouts], "batch_size": batch_size,
                   "epochs": epochs, "hidden": hidden, "sb_size": SB_SIZE,
                   # Ginex's README splits an 8 GB cgroup into 6 GB + 6 GB of caches with swap behind them;
                   # without swap a quarter of the cap each leaves room for the sampler and the model.
                   "neigh_cache_bytes": cap_bytes // 4, "feature_cache_bytes": cap_bytes // 4}
        write_export_info(st.path(EXPORT_INFO), ds, "ginex", options)
        st.commit()
    return {"peer": "ginex", "out": str(final), **options}


def _save(obj, path: Path) -> None:
    import torch

    try:
        torch.save(obj, path)
    except OSError as e:
        raise DiskgnnError(f"{path}: cannot write ({e.strerror})") from None


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
    """Runs Ginex on an export: create_neigh_cache.py, then run_ginex.py --train-only under a cgroup memory
    cap (default: the export's), with the export's fanouts, batch size, epochs and hidden size.

    Needs DISKGNN_GINEX (a Ginex checkout), a CUDA device (run_ginex.py puts the model on
    cuda:N) and root (run_ginex.py writes /proc/sys/vm/drop_caches every superbatch; the
    cap needs a cgroup). DISKGNN_GINEX_PYTHON names the interpreter with Ginex's dependencies
    (default: this one). Epoch times come from its "Epoch time: X ms" lines.
    """
    ok, why = installed()
    if not ok:
        return not_run("ginex", "not installed", why)
    home = os.environ["DISKGNN_GINEX"]
    import torch

    if not torch.cuda.is_available():
        return not_run("ginex", "unavailable", "no CUDA device: run_ginex.py puts the model on cuda:N")
    if os.geteuid() != 0:
        return not_run("ginex", "unavailable", "not root: run_ginex.py writes /proc/sys/vm/drop_caches")
    opts = read_export_info(out)["options"]
    export_dir = Path(out).absolute()
    # Ginex finds its dataset at ./dataset/NAME-ginex and writes ./trace under its working directory.
    work = export_dir / "ginex-run"
    (work / "dataset").mkdir(parents=True, exist_ok=True)
    link = work / "dataset" / f"{NAME}-ginex"
    if not link.is_symlink():
        link.symlink_to(export_dir)
    python = os.environ.get("DISKGNN_GINEX_PYTHON", sys.executable)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")]))}
    nc_size = str(opts["neigh_cache_bytes"])
    try:
        prep = subprocess.run([python, str(Path(home) / "create_neigh_cache.py"), "--dataset", NAME,
                               "--neigh-cache-size", nc_size], cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"system": "ginex", "status": "failed", "why": f"create_neigh_cache.py timed out after {timeout} s"}
    if prep.returncode != 0:
        return {"system": "ginex", "status": "failed",
                "why": f"create_neigh_cache.py exit {prep.returncode}: {_tail(prep)}"}
    argv = [python, "-W", "ignore", str(Path(home) / "run_ginex.py"), "--dataset", NAME,
            "--neigh-cache-size", nc_size, "--feature-cache-size", str(opts["feature_cache_bytes"]),
            "--sb-size", str(opts["sb_size"]), "--sizes", ",".join(map(str, opts["fanouts"])),
            "--batch-size", str(opts["batch_size"]), "--num-epochs", str(opts["epochs"]),
            "--num-hiddens", str(opts["hidden"]), "--train-only"]
    return capped_row("ginex", argv, cap or opts["cap_bytes"], r"Epoch time:\s*([0-9.]+)\s*ms", 1e-3,
                      cwd=work, env=env, timeout=timeout)
