"""The DGL peer: GraphBolt (DGL 2.1.0) trains GraphSAGE on a diskgnn dataset, in its own virtual environment.

    python -m bench.peers.dgl --install            # the venv under $DISKGNN_HOME/peers/ (idempotent)
    python -m bench.peers.dgl --export --data DIR  # the OnDiskDataset, converted by GraphBolt (cached)

PyPI's last Linux wheel of DGL is 2.1.0, built for torch 2.0.0-2.2.1 with
torchdata 0.7 and numpy < 2, none of which can live beside the project's torch,
so DGL gets a venv of its own (docs/peers.md). The project side (this module)
exports the dataset as GraphBolt's documented on-disk layout -- metadata.yaml,
edges.npy, feat.npy with `in_memory: false`, a task with train, validation and
test sets -- and runs GraphBolt's own preprocessing on it (the peer's
conversion time). bench/peers/dgl_runner.py, run by the venv's Python, trains
on it: features memory-mapped (on disk) or loaded into RAM (in memory).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from diskgnn import defaults
from diskgnn.data.files import StagedDirectory
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError, run_cli

from .common import EXPORT_INFO, csc_edges, read_export_info, row_chunks, write_export_info, write_text

DGL_VERSION = "2.1.0"
# DGL 2.1.0's graphbolt ships libraries for torch 2.0.0-2.2.1 and needs torchdata <= 0.9; numpy 2 breaks
# torch 2.2's numpy bridge; graphbolt imports pandas (2.3 dropped what it uses) and pydantic.
PINS = (f"dgl=={DGL_VERSION}", "torch==2.2.1", "torchdata==0.7.1", "numpy<2", "pandas<2.3", "pydantic", "pyyaml")
RUNNER = Path(__file__).with_name("dgl_runner.py")
INSTALL_FAILED = "install-failed.txt"
READY = "ready.json"  # written after the venv imported dgl.graphbolt once: what `available` trusts
EXPORT_BUDGET = 256 << 20


def venv_dir() -> Path:
    return defaults.home() / "peers" / f"dgl-{DGL_VERSION}"


def python() -> Path:
    return venv_dir() / "bin" / "python"


def runner(*args: str) -> list[str]:
    # -I: the script's directory stays off sys.path, where this module would shadow the dgl package
    return [str(python()), "-I", str(RUNNER), *args]


def available() -> tuple[bool, str]:
    """Whether the DGL venv is installed and imported once; if not, why (one line, for the report's row)."""
    ready = venv_dir() / READY
    if ready.exists() and python().exists():
        v = json.loads(ready.read_text())
        return True, f"dgl {v['dgl']}, torch {v['torch']} in {venv_dir()}"
    failed = venv_dir().parent / f"dgl-{DGL_VERSION}-{INSTALL_FAILED}"
    hint = (f"the last install failed: {failed.read_text().strip()}" if failed.exists()
            else "run make bench-deps (python -m bench.peers.dgl --install)")
    return False, f"DGL {DGL_VERSION} is not installed in {venv_dir()}; {hint}"


def install() -> None:
    """Creates the venv and pip-installs PINS into it (a CUDA build of torch 2.2.1 from PyPI, about 5 GB,
    which runs on the CPU), then checks that graphbolt imports. Nothing happens when it is ready; a failure
    leaves its one-line reason beside the venv and raises DiskgnnError."""
    ok, why = available()
    if ok:
        print(f"bench.peers.dgl: {why}; nothing to do")
        return
    venv = venv_dir()
    failed = venv.parent / f"dgl-{DGL_VERSION}-{INSTALL_FAILED}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    failed.unlink(missing_ok=True)
    log = venv.parent / f"dgl-{DGL_VERSION}-install.log"

    def fail(reason: str):
        failed.write_text(reason + "\n")
        raise DiskgnnError(reason)

    print(f"bench.peers.dgl: installing DGL {DGL_VERSION} into {venv} (about 5 GB, a few minutes); log {log}",
          flush=True)
    start = time.perf_counter()
    with open(log, "w") as f:
        steps = [[sys.executable, "-m", "venv", "--clear", str(venv)],
                 [str(python()), "-m", "pip", "install", "--no-input", *PINS]]
        for argv in steps:
            if subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
                lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()
                         and "is ignored" not in x]
                fail(f"{' '.join(argv[:4])} failed: {lines[-1][:300] if lines else 'no output'} (log: {log})")
    check = subprocess.run(runner("--versions"), capture_output=True, text=True)
    if check.returncode != 0:
        fail(f"installed, but graphbolt does not import: {(check.stdout + check.stderr).strip().splitlines()[-1]}")
    (venv / READY).write_text(check.stdout.strip().splitlines()[-1] + "\n")
    print(f"bench.peers.dgl: ready in {time.perf_counter() - start:.0f} s ({available()[1]})")


def _write_npy(path: Path, chunks, dtype, shape: tuple) -> None:
    """A .npy file streamed from row chunks (GraphBolt's `format: numpy` files are np.load-ed)."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                                "shape": shape})
    with open(path, "ab") as f:
        for chunk in chunks:
            f.write(np.ascontiguousarray(chunk, dtype=dtype).data)


def metadata(ds) -> dict:
    """GraphBolt's OnDiskDataset metadata for the files export() writes (DGL 2.1 names the ids seed_nodes)."""
    def items(split):
        return [{"data": [{"name": "seed_nodes", "format": "numpy", "path": f"{split}_nodes.npy"},
                          {"name": "labels", "format": "numpy", "path": f"{split}_labels.npy"}]}]

    return {"dataset_name": Path(ds.path).name,
            "graph": {"nodes": [{"num": ds.num_nodes}], "edges": [{"format": "numpy", "path": "edges.npy"}]},
            "feature_data": [{"domain": "node", "name": "feat", "format": "numpy", "in_memory": False,
                              "path": "feat.npy"}],
            "tasks": [{"name": "node_classification", "num_classes": ds.num_classes,
                       "train_set": items("train"), "validation_set": items("val"), "test_set": items("test")}]}


def eval_seeds(ds, split: str, eval_nodes: int) -> np.ndarray:
    """The nodes every system evaluates on: the split's first `eval_nodes` ids, as diskgnn.train
    --eval-max-batches takes them."""
    return np.asarray(ds.split(split)[:eval_nodes], dtype=np.int64)


def export_dir(ds, eval_nodes: int) -> Path:
    return defaults.home() / "peers" / "dgl-data" / f"{ds.manifest['manifest_checksum'][:16]}-eval{eval_nodes}"


def write_layout(ds, directory: Path, eval_nodes: int, budget: int = EXPORT_BUDGET) -> None:
    """GraphBolt's input files for `ds` in `directory`, streamed within `budget` bytes of chunks."""
    # (2, E) as GraphBolt's numpy edges: row 0 sources, row 1 destinations (u -> v: v aggregates u), written
    # as two passes over the edges.
    path = directory / "edges.npy"
    chunk = max(1, budget // 32)
    _write_npy(path, (s for s, _ in csc_edges(ds, chunk)), "<i8", (2, ds.num_edges))
    with open(path, "ab") as f:
        for _, d in csc_edges(ds, chunk):
            f.write(np.ascontiguousarray(d, dtype="<i8").data)
    _write_npy(directory / "feat.npy", row_chunks(ds.features, budget, 4), "<f4", (ds.num_nodes, ds.feature_dim))
    for split in ("train", "val", "test"):
        ids = np.asarray(ds.split(split), dtype=np.int64) if split == "train" else eval_seeds(ds, split, eval_nodes)
        np.save(directory / f"{split}_nodes.npy", ids)
        np.save(directory / f"{split}_labels.npy", np.asarray(ds.labels[ids], dtype=np.int64))
    write_text(directory / "metadata.yaml", yaml.safe_dump(metadata(ds), sort_keys=False))


def export(data, *, eval_nodes: int, out=None, budget: int = EXPORT_BUDGET) -> dict:
    """The dataset in GraphBolt's layout, preprocessed by GraphBolt, under export_dir (reused when there).
    Returns its path and the seconds diskgnn's export and GraphBolt's preprocessing took when it was made."""
    ds = open_dataset(data)
    final = Path(out) if out else export_dir(ds, eval_nodes)
    if (final / EXPORT_INFO).exists():
        return {"path": str(final), **read_export_info(final)["options"]["conversion"], "reused": True}
    ok, why = available()
    if not ok:
        raise DiskgnnError(why)
    final.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with StagedDirectory(final, overwrite=True) as st:
        write_layout(ds, st.tmp, eval_nodes, budget)
        export_s = time.perf_counter() - start
        # GraphBolt's conversion: the CSC sampling graph and copies of every file under preprocessed/.
        t0 = time.perf_counter()
        proc = subprocess.run(runner("--preprocess", str(st.tmp)), capture_output=True,
                              text=True)
        if proc.returncode != 0:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            raise DiskgnnError(f"GraphBolt's preprocessing of {final} failed: {tail}")
        conversion = {"export_s": export_s, "preprocess_s": time.perf_counter() - t0}
        write_export_info(st.path(EXPORT_INFO), ds, "dgl", {"eval_nodes": eval_nodes, "conversion": conversion})
        # The staged directory moves: GraphBolt's preprocessed metadata holds paths relative to it.
        st.commit()
    return {"path": str(final), **conversion, "reused": False}


def command(export: Path, *, mode: str, epochs: int, batches: int | None, fanouts: str, batch_size: int,
            hidden: int, lr: float, dropout: float, seed: int, progress) -> list[str]:
    """The runner's argv (for a harness that caps and times it, like bench.epoch)."""
    argv = [*runner("--export", str(export)), "--mode", mode, "--epochs", str(epochs),
            "--fanouts", fanouts, "--batch-size", str(batch_size), "--hidden", str(hidden), "--lr", str(lr),
            "--dropout", str(dropout), "--seed", str(seed), "--progress", str(progress)]
    return argv + (["--batches", str(batches)] if batches else [])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.peers.dgl", description=__doc__.split("\n\n")[0])
    ap.add_argument("--install", action="store_true", help="make the DGL venv (idempotent)")
    ap.add_argument("--export", action="store_true", help="export --data and run GraphBolt's preprocessing")
    ap.add_argument("--data")
    ap.add_argument("--eval-nodes", type=int, default=20 * 1024, help="val and test nodes kept for evaluation")
    ap.add_argument("--out", help="export directory (default: under $DISKGNN_HOME/peers/dgl-data)")
    args = ap.parse_args(argv)
    if args.install:
        install()
    if args.export:
        if not args.data:
            raise DiskgnnError("--export needs --data DIR")
        print(json.dumps(export(args.data, eval_nodes=args.eval_nodes, out=args.out)))
    if not (args.install or args.export):
        ap.error("nothing to do: pass --install and/or --export")


if __name__ == "__main__":
    sys.exit(run_cli("python -m bench.peers.dgl", main))
