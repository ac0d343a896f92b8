"""The PyG peer ("PyG+"): PyTorch Geometric's NeighborLoader and GraphSAGE trained on a diskgnn dataset.

    python -m bench.peers.pyg --install
    python -m bench.peers.pyg --data DIR --mode memory|memmap [--madvise default|random] [--batches 200]
        [--fanouts 10,5] [--batch-size 1024] [--hidden 256] [--lr 0.003] [--dropout 0.5] [--seed 0]
        [--progress FILE.jsonl]

The batches are diskgnn's (the same seeds per batch, fed as NeighborLoader's
input nodes in order); sampling, feature gathering, the model (PyG's
GraphSAGE) and the step are PyG's. `--mode memory` copies the topology and the
features into RAM before the loop (the speed users get when the graph fits);
`--mode memmap` wraps memory maps of the dataset's files without copying them
(the out-of-core use of PyG), with `--madvise random` putting MADV_RANDOM on
every map. Only the training loop is timed, its first batch included. The
progress protocol is bench.harness.naive's: one flushed JSON line per finished batch
in --progress, the result as the last JSON line printed. docs/peers.md says
what was checked.
"""

from __future__ import annotations

import argparse
import copy
import json
import mmap
import os
import re
import resource
import subprocess
import sys
import sysconfig
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bench.harness.common import disk_read_bytes
from bench.harness.workload import add_loop_args
from diskgnn import defaults
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.memory import process_age_s
from diskgnn.offline.sample import epoch_seeds

PYG_VERSION = "2.8.1"
# PyG's loader reads an adjacency given as torch_sparse.SparseTensor without converting it, and
# torch-sparse samples when pyg-lib is absent (pyg-lib has no wheels on the package index here).
# torch-sparse imports torch-scatter. Both are source-only on PyPI, so they are built once per torch.
BACKEND = (("torch_scatter", "2.1.2"), ("torch_sparse", "0.6.18"))
INSTALL_FAILED = "pyg-install-failed.txt"
CONVERT_CHUNK = 1 << 24  # indices widened 16 Mi at a time (128 MiB of int64)


def wheel_cache() -> Path:
    """Where the built wheels live: one directory per torch version, since they link against its ABI."""
    return defaults.home() / "wheels" / f"torch-{torch.__version__}"


def available() -> tuple[bool, str]:
    """Whether the peer can run here; if not, why (one line, for the report's row)."""
    missing = []
    for module in ("torch_geometric", "torch_sparse"):
        try:
            __import__(module)
        except Exception as e:  # a wheel built for another torch fails with OSError or RuntimeError
            missing.append(f"{module}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if not missing:
        return True, f"torch_geometric {_version('torch_geometric')}, torch_sparse {_version('torch_sparse')}"
    failed = wheel_cache() / INSTALL_FAILED
    hint = (f"the last --install failed: {failed.read_text().strip()}" if failed.exists()
            else "run python -m bench.peers.pyg --install")
    return False, "PyG is not usable (" + "; ".join(missing) + f"); {hint}"


def _version(module: str) -> str:
    return getattr(sys.modules[module], "__version__", "?")


def _first_error(log: Path) -> str:
    """The compiler's first error in a build log (pip's own summary lines say nothing), else its last line."""
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    for line in lines:
        if re.search(r"\berror\b", line) and "subprocess-exited-with-error" not in line \
                and not line.startswith(("error:", "ERROR:", "×", "╰─>", "note:")):
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def _pip(args: list[str], log: Path, env=None) -> int:
    with open(log, "w") as f:
        return subprocess.run([sys.executable, "-m", "pip", *args], stdout=f, stderr=subprocess.STDOUT,
                              env=env).returncode


def install() -> None:
    """Makes PyG usable in this interpreter's environment: builds the torch-scatter/torch-sparse wheels
    into wheel_cache() unless they are there, then pip-installs them and torch_geometric (pinned).
    On failure leaves the one-line reason in wheel_cache()/pyg-install-failed.txt and raises DiskgnnError."""
    ok, why = available()
    if ok:
        print(f"bench.peers.pyg: PyG is usable ({why}); nothing to do")
        return
    cache = wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    failed = cache / INSTALL_FAILED
    failed.unlink(missing_ok=True)

    def fail(reason: str):
        failed.write_text(reason + "\n")
        raise DiskgnnError(reason)

    # Their setup.py imports torch: an isolated build would fetch another torch and build against its ABI.
    # Python's CFLAGS carry -g; -g0 after it drops debug info (of torch's headers, mostly), which only
    # makes the build slower and the wheels larger. setuptools compiles C++ with CXXFLAGS (older
    # versions with CFLAGS) and takes the variable instead of Python's flags, so it restates them.
    python_flags = sysconfig.get_config_var("CFLAGS") or ""
    env = {**os.environ, "MAX_JOBS": str(os.cpu_count() or 1),
           **{var: os.environ.get(var, python_flags) + " -g0" for var in ("CFLAGS", "CXXFLAGS")}}
    if torch.version.cuda is None:
        env["FORCE_ONLY_CPU"] = "1"
    for name, version in BACKEND:
        if any(cache.glob(f"{name}-{version}-*.whl")):
            print(f"bench.peers.pyg: reusing the cached {name} {version} wheel in {cache}")
            continue
        log = cache / f"build-{name}.log"
        print("=" * 78 + f"\nbench.peers.pyg: BUILDING {name} {version} FROM SOURCE against torch {torch.__version__}"
              f"\n  (PyPI has no wheels for it; 12 to 40 minutes on 2 cores, done once)\n"
              f"  wheel cached in {cache}\n  log: {log}\n" + "=" * 78, flush=True)
        start = time.perf_counter()
        # --no-binary: a wheel some index offers was built against some other torch.
        rc = _pip(["wheel", "--no-deps", "--no-build-isolation", "--no-binary", name, "-w", str(cache),
                   f"{name}=={version}"], log, env)
        if rc != 0:
            fail(f"building {name} {version} against torch {torch.__version__} failed: {_first_error(log)} "
                 f"(log: {log})")
        print(f"bench.peers.pyg: built {name} in {time.perf_counter() - start:.0f} s", flush=True)
    log = cache / "pip-install.log"
    # --only-binary: pip must take the cached wheels, never start another source build.
    rc = _pip(["install", "--find-links", str(cache), "--only-binary", ",".join(n for n, _ in BACKEND),
               f"torch_geometric=={PYG_VERSION}", *(f"{n}=={v}" for n, v in BACKEND)], log)
    if rc != 0:
        fail(f"pip install of torch_geometric {PYG_VERSION} and the wheels failed: {_first_error(log)} (log: {log})")
    # This process imported torch_geometric before the backend existed; a fresh one tells the truth.
    check = subprocess.run([sys.executable, "-c", "from bench.peers.pyg import available; ok, why = available(); "
                            "print(why); raise SystemExit(0 if ok else 1)"], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[2])
    if check.returncode != 0:
        fail(f"installed, but: {(check.stdout + check.stderr).strip().splitlines()[-1]}")
    print(f"bench.peers.pyg: PyG is usable ({check.stdout.strip()})")


def int64_indices(ds) -> tuple[Path, float]:
    """The dataset's indices widened to int64 on disk (torch-sparse's sampler reads int64 only), written
    once under $DISKGNN_HOME/pyg/MANIFEST_CHECKSUM/ (the dataset directory is left as it is), and the
    seconds spent writing it now (0 when reused).

    Its pages and the source's are dropped from the page cache afterwards, so a cold run that had to
    make it is not warmed by it."""
    path = defaults.home() / "pyg" / ds.manifest["manifest_checksum"] / "indices-int64.bin"
    if path.exists() and path.stat().st_size == 8 * ds.num_edges:
        return path, 0.0
    start = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    src = ds.indices
    with open(tmp, "wb") as f:
        for e0 in range(0, ds.num_edges, CONVERT_CHUNK):
            f.write(np.asarray(src[e0:e0 + CONVERT_CHUNK], dtype="<i8").data)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    os.replace(tmp, path)
    fd = os.open(ds.file_path("indices"), os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path, time.perf_counter() - start


def _map(array: np.ndarray, madvise: str) -> torch.Tensor:
    if madvise == "random" and isinstance(array, np.memmap):
        array._mmap.madvise(mmap.MADV_RANDOM)  # numpy keeps the mmap it maps; madvise needs it
    with warnings.catch_warnings():
        # The maps are read-only and nothing here writes to them; torch warns about that regardless.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def graph_data(ds, mode: str, madvise: str = "default"):
    """A torch_geometric Data holding the dataset: x, y and adj_t (a SparseTensor whose rowptr/col are
    diskgnn's indptr/indices: row v of adj_t lists v's in-neighbours, the nodes whose messages v
    aggregates, which is the CSC PyG's sampler wants; it takes adj_t.csr() as (colptr, row) unchanged).

    Returns (data, info): info has load_s (memory mode: reading and copying into RAM) and, in memmap
    mode, the int64 indices file and the seconds spent making it."""
    from torch_geometric.data import Data
    from torch_sparse import SparseTensor

    start = time.perf_counter()
    info = {}
    if mode == "memory":
        indptr = torch.from_numpy(np.array(ds.indptr, dtype=np.int64))
        indices = torch.from_numpy(np.array(ds.indices, dtype=np.int64))
        x = torch.from_numpy(np.array(ds.features))
        y = torch.from_numpy(np.array(ds.labels))
    elif mode == "memmap":
        if ds.indices.dtype == np.int64:
            wide = ds.indices
        else:
            path, info["indices_int64_made_s"] = int64_indices(ds)
            info["indices_int64"] = str(path)
            wide = np.memmap(path, dtype="<i8", mode="r", shape=(ds.num_edges,))
        indptr, indices = _map(ds.indptr, madvise), _map(wide, madvise)
        x, y = _map(ds.features, madvise), _map(ds.labels, madvise)
    else:
        raise DiskgnnError(f"--mode {mode}: expected memory or memmap")
    n = ds.num_nodes
    adj_t = SparseTensor(rowptr=indptr, col=indices, sparse_sizes=(n, n), is_sorted=True, trust_data=True)
    info["load_s"] = time.perf_counter() - start
    return Data(x=x, y=y, adj_t=adj_t, num_nodes=n), info


def make_loader(ds, data, *, fanouts, batch_size: int, batches: int | None, seed: int, epoch: int = 0):
    """NeighborLoader over diskgnn's first `batches` (None: all) seed batches of `epoch`, in order."""
    from torch_geometric.loader import NeighborLoader

    seeds = epoch_seeds(ds.split("train"), batch_size, seed, epoch)[:batches]
    nodes = torch.from_numpy(np.concatenate(seeds)) if seeds else torch.empty(0, dtype=torch.int64)
    # Every batch but an epoch's last is full, so consecutive slices of batch_size are diskgnn's batches.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation is deprecated.*")
        return NeighborLoader(data, num_neighbors=list(fanouts), input_nodes=nodes, batch_size=batch_size,
                              shuffle=False)


def _timed(obj, name: str, totals: dict) -> None:
    """Wraps obj.name so the seconds spent in it add up in totals[name]: PyG samples and gathers inside
    one next(loader), and the report wants them apart."""
    inner = getattr(obj, name)

    def wrapper(*args, **kw):
        t = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            totals[name] += time.perf_counter() - t

    setattr(obj, name, wrapper)


def command(data, *, mode: str, madvise: str = "default", batches: int = 200, fanouts: str = "10,5",
            batch_size: int = 1024, hidden: int = 256, seed: int = 0, progress=None) -> list[str]:
    """The argv of one run of the loop (for a harness that caps and times it, like bench.epoch)."""
    argv = [sys.executable, "-m", "bench.peers.pyg", "--data", str(data), "--mode", mode, "--madvise", madvise,
            "--batches", str(batches), "--fanouts", fanouts, "--batch-size", str(batch_size),
            "--hidden", str(hidden), "--seed", str(seed)]
    return argv + (["--progress", str(progress)] if progress else [])


def accuracy(model, data, nodes: np.ndarray, *, fanouts, batch_size: int) -> float:
    """Sampled evaluation on `nodes` (NeighborLoader, the training fanouts), as diskgnn's --eval sampled."""
    from torch_geometric.loader import NeighborLoader

    model.eval()
    correct = total = 0
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation is deprecated.*")
        for batch in NeighborLoader(data, num_neighbors=list(fanouts), input_nodes=torch.from_numpy(nodes),
                                    batch_size=batch_size, shuffle=False):
            pred = model(batch.x.float(), batch.adj_t)[: batch.batch_size].argmax(1)
            correct += int((pred == batch.y[: batch.batch_size].long()).sum())
            total += batch.batch_size
    model.train()
    return correct / max(1, total)


def train(args) -> dict:
    """Epochs of diskgnn's batches (the same seeds per batch as diskgnn.train, epoch by epoch; at most
    --batches of each), then, with --eval-nodes, each epoch's val accuracy and the best epoch's test
    accuracy on the splits' first --eval-nodes nodes (diskgnn.train --eval-max-batches takes the same)."""
    if args.mode == "memory" and args.madvise != "default":
        raise DiskgnnError("--madvise random applies to --mode memmap only (memory mode has no maps)")
    ok, why = available()
    if not ok:
        raise DiskgnnError(why)
    from torch_geometric.nn import GraphSAGE

    fanouts = [int(f) for f in args.fanouts.split(",")]
    ds = open_dataset(args.data)
    data, info = graph_data(ds, args.mode, args.madvise)
    # One generator draws the weights, dropout and torch-sparse's neighbour choices: a seed fixes the run.
    torch.manual_seed(args.seed)
    model = GraphSAGE(ds.feature_dim, args.hidden, len(fanouts), ds.num_classes, dropout=args.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    totals = {"sample_from_nodes": 0.0, "filter_fn": 0.0}
    progress = open(args.progress, "a") if args.progress else None

    def emit(line: dict) -> None:
        if progress:
            progress.write(json.dumps(line) + "\n")
            progress.flush()

    model.train()
    loss = None
    done = 0
    elapsed, read_before = 0.0, disk_read_bytes()
    best = {"val_acc": -1.0, "epoch": -1, "state": None}
    for epoch in range(args.epochs):
        loader = make_loader(ds, data, fanouts=fanouts, batch_size=args.batch_size, batches=args.batches or None,
                             seed=args.seed, epoch=epoch)
        _timed(loader.node_sampler, "sample_from_nodes", totals)
        _timed(loader, "filter_fn", totals)
        start = time.perf_counter()
        for batch in loader:
            optimizer.zero_grad(set_to_none=True)
            out = model(batch.x.float(), batch.adj_t)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size].long())
            loss.backward()
            optimizer.step()
            emit({"batch": done, "epoch": epoch, "elapsed_s": elapsed + time.perf_counter() - start,
                  "sample_s": totals["sample_from_nodes"], "gather_s": totals["filter_fn"],
                  "disk_bytes_read": disk_read_bytes() - read_before, "load_s": info["load_s"],
                  "loss": loss.item()})
            done += 1
        elapsed += time.perf_counter() - start
        if args.eval_nodes:
            val = accuracy(model, data, np.asarray(ds.split("val")[: args.eval_nodes]), fanouts=fanouts,
                           batch_size=args.batch_size)
            emit({"epoch_end": epoch, "elapsed_s": elapsed, "val_acc": val, "wall_s": process_age_s()})
            if val > best["val_acc"]:
                best = {"val_acc": val, "epoch": epoch, "state": copy.deepcopy(model.state_dict())}
    test = None
    if args.eval_nodes and best["state"] is not None:
        model.load_state_dict(best["state"])
        test = accuracy(model, data, np.asarray(ds.split("test")[: args.eval_nodes]), fanouts=fanouts,
                        batch_size=args.batch_size)
        emit({"test_acc": test, "best_epoch": best["epoch"]})
    result = {"system": "pyg", "mode": args.mode, "madvise": args.madvise, "batches": done, "epochs": args.epochs,
              "epoch_s": elapsed, "sample_s": totals["sample_from_nodes"],
              "gather_s": totals["filter_fn"], "disk_bytes_read": disk_read_bytes() - read_before,
              "final_loss": loss.item() if loss is not None else float("nan"), "test_acc": test,
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, **info,
              "versions": {"torch": torch.__version__, "torch_geometric": _version("torch_geometric"),
                           "torch_sparse": _version("torch_sparse")}}
    print(json.dumps(result), flush=True)
    return result


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(prog="python -m bench.peers.pyg", description=__doc__.split("\n\n")[0])
    ap.add_argument("--install", action="store_true", help="make PyG usable here (builds its backend once)")
    ap.add_argument("--data")
    ap.add_argument("--mode", choices=("memory", "memmap"), default="memmap")
    ap.add_argument("--madvise", choices=("default", "random"), default="default")
    add_loop_args(ap)
    args = ap.parse_args(argv)
    try:
        if args.install:
            install()
            return None
        if not args.data:
            raise DiskgnnError("--data DIR is required (or --install)")
        return train(args)
    except DiskgnnError as e:
        raise SystemExit(f"bench.peers.pyg: {e}") from None


if __name__ == "__main__":
    main()
