"""Every node's predictions of a trained model, out of core, under a memory cap (issue 52).

    python -m bench.infer [--data DIR | --nodes 8000000] [--cap 4GiB] [--budget 3GiB] [--workdir W]
                          [--eval full] [--kill-at 0.5]
    python -m bench.infer --smoke            # 20,000 nodes, for the test suite

The dataset (`--data`, else W2's shape prepared once into --workdir: `prepare synthetic --structure powerlaw
--nodes N --feat-dim 128 --avg-degree 10 --classes 16`); a GraphSAGE (fanouts 10,5, hidden 256) trained for
`--max-batches` batches of one epoch, under the same cap, evaluated as `--eval` says (none; full: its val and
test accuracy with every neighbour, which the written predictions' must equal); then, page cache dropped,
`diskgnn.infer --output predictions --nodes all` in a cgroup capped at --cap (page cache included), under
`--memory-budget --budget`: its wall time, rows per second, the disk's bytes read and written (the device's
counters), the cgroup's peak, and the test accuracy of the written predictions. With `--kill-at F` a second
run is SIGKILLed at F times the first's wall time and run again to the end: its output must be the first's,
byte for byte. Where
the features fit in RAM and PyTorch Geometric is installed, the same model's layer-wise inference in PyG
(SAGEConv with the model's weights, every row and edge in memory, destinations a chunk at a time, as PyG's
layer-wise inference examples do), uncapped, timed in the same run: its predictions must agree.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from diskgnn.units import format_size, parse_size

from .harness.common import REPO, DiskCounter, block_device, drop_caches, machine_info
from .harness.memcap import run_capped
from .harness.output import add_output_args, command_line, write_json
from .harness.workload import prepare_once, w2_options


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.infer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="a dataset (default: W2's shape at --nodes, prepared into --workdir)")
    ap.add_argument("--nodes", type=int, default=8_000_000)
    ap.add_argument("--cap", default="4GiB", help="the cgroup cap of the inference run, page cache included")
    ap.add_argument("--budget", default="3GiB", help="diskgnn.infer's --memory-budget")
    ap.add_argument("--max-batches", type=int, default=100, help="train batches before inferring")
    ap.add_argument("--batch-size", type=int, default=65536, help="diskgnn.infer's rows at a time")
    ap.add_argument("--eval", choices=("none", "full"), default="none", help="the training run's evaluation")
    ap.add_argument("--kill-at", type=float, default=None,
                    help="also SIGKILL a second run at this fraction of the first's wall time, and rerun it")
    ap.add_argument("--pyg", choices=("auto", "off"), default="auto")
    ap.add_argument("--smoke", action="store_true")
    add_output_args(ap, "infer")
    return ap


def train(data: Path, run: Path, args) -> dict:
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--workdir", str(run), "--epochs", "1",
            "--max-batches", str(args.max_batches), "--eval", args.eval, "--fanouts", "10,5", "--hidden", "256",
            "--memory-budget", args.budget, "--no-progress"]
    t0 = time.perf_counter()
    r = run_capped(argv, parse_size(args.cap), cwd=REPO)
    if r.returncode != 0:
        raise SystemExit(f"bench.infer: training failed: {(r.stderr or '').strip().splitlines()[-1:]}")
    summary = json.loads((run / "summary.json").read_text())
    return {"argv": argv, "wall_s": time.perf_counter() - t0, "cgroup": r.summary(), "eval": args.eval,
            "val_acc": summary.get("val_acc"), "test_acc": summary.get("test_acc")}


def infer(argv: list[str], out: Path, cap: int, timeout: float | None = None):
    """diskgnn.infer into `out` under the cap, page cache dropped first (where it can be: `cold`); the run and the
    disk's counters."""
    argv = [*argv, "--out", str(out)]
    cold = drop_caches() is None
    with DiskCounter(block_device(out.parent)) as disk:
        r = run_capped(argv, cap, cwd=REPO, timeout=timeout)
    if r.returncode != 0 and not r.timed_out:
        raise SystemExit(f"bench.infer: diskgnn.infer failed ({'OOM-killed' if r.oom_killed else r.returncode}): "
                         f"{(r.stderr or '').strip().splitlines()[-1:]}")
    return r, disk, cold


def killed_and_rerun(argv: list[str], work: Path, cap: int, first, fraction: float) -> dict:
    """A run SIGKILLed at `fraction` of the first's wall time, run again: whether its output is the first's."""
    out = work / "killed.npy"
    for stale in work.glob("killed.npy*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    cut, _, _ = infer(argv, out, cap, timeout=fraction * first.wall_s)
    if not cut.timed_out:
        return {"status": f"finished in {cut.wall_s:.1f} s before the kill at {fraction * first.wall_s:.1f} s"}
    if out.exists():  # its output was whole (renamed into place) before the kill reached the process's exit
        return {"status": f"finished writing before the kill at {cut.wall_s:.1f} s",
                "byte_identical": filecmp.cmp(out, work / "predictions.npy", shallow=False)}
    progress = out.with_name(out.name + ".progress.json")
    rows_recorded = json.loads(progress.read_text())["rows_done"] if progress.exists() else 0
    layers = sorted(p.name for p in out.with_name(out.name + ".layers").glob("*"))
    again, disk, _ = infer(argv, out, cap)
    same = filecmp.cmp(out, work / "predictions.npy", shallow=False)
    print(f"killed at {cut.wall_s:.1f} s (output rows recorded {rows_recorded:,}; layer files {layers}), rerun "
          f"{again.wall_s:.1f} s: output {'byte-identical' if same else 'DIFFERS'}")
    return {"status": "ok", "killed_at_s": cut.wall_s, "output_rows_recorded": rows_recorded, "layer_files": layers,
            "rerun_wall_s": again.wall_s, "rerun_read_bytes": disk.read, "rerun_cgroup": again.summary(),
            "byte_identical": same}


def accuracy(ds, predictions: np.ndarray, split: str = "test") -> float:
    ids = ds.split(split)
    return float((predictions[ids] == np.asarray(ds.labels)[ids]).mean()) if ids.size else float("nan")


def pyg_layerwise(ds, model, chunk: int = 65536) -> np.ndarray:
    """The model's logits with every neighbour through PyG's SAGEConv, everything in memory: each layer over
    all nodes, destinations `chunk` at a time (their in-edges as a bipartite edge_index)."""
    from torch_geometric.nn import SAGEConv

    x = torch.from_numpy(np.array(ds.features, dtype=np.float32))
    indptr, indices = np.array(ds.indptr), np.array(ds.indices)
    n = ds.num_nodes
    for i, layer in enumerate(model.layers):
        conv = SAGEConv(layer.self_lin.in_features, layer.self_lin.out_features, aggr="mean")
        with torch.no_grad():
            conv.lin_l.weight.copy_(layer.neigh_lin.weight)
            conv.lin_l.bias.copy_(layer.self_lin.bias)
            conv.lin_r.weight.copy_(layer.self_lin.weight)
        out = torch.empty(n, layer.self_lin.out_features)
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            src = torch.from_numpy(indices[indptr[lo]: indptr[hi]].astype(np.int64))
            dst = torch.from_numpy(np.repeat(np.arange(hi - lo), np.diff(indptr[lo: hi + 1])))
            with torch.no_grad():
                out[lo:hi] = conv((x, x[lo:hi]), torch.stack([src, dst]), size=(n, hi - lo))
        x = out.relu_() if i < len(model.layers) - 1 else out
    return x.numpy()


def pyg_row(ds, run: Path, predictions: np.ndarray, args) -> dict:
    """PyG's layer-wise inference of the same model, where it can run: its time and agreement."""
    if args.pyg == "off":
        return {"status": "off"}
    if importlib.util.find_spec("torch_geometric") is None:
        return {"status": "not installed", "why": "pip install torch-geometric (the pyg extra)"}
    # the features beside the first layer's outputs (hidden 256, ReLU in place), the topology, a chunk's edges
    need = ds.num_nodes * (ds.feature_dim + 256) * 4 + ds.num_edges * 12 + (512 << 20)
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))
    if need > 0.8 * available:
        return {"status": "does not fit", "why": f"needs ~{format_size(need)} in RAM"}
    from diskgnn.infer.command import build_model, checkpoint_state, run_config

    path, state = checkpoint_state(run, "best")
    model = build_model(run_config(run), ds, path, state)
    if model.kind != "sage":
        return {"status": "skipped", "why": f"the mapping to SAGEConv is for sage, not {model.kind}"}
    t0 = time.perf_counter()
    logits = pyg_layerwise(ds, model)
    wall = time.perf_counter() - t0
    ours = logits.argmax(1)
    return {"status": "ok", "wall_s": wall, "rows_per_s": ds.num_nodes / wall,
            "agreement": float((ours == predictions).mean()), "differing": int((ours != predictions).sum()),
            "test_acc": accuracy(ds, ours)}


def main(argv=None) -> dict:
    from diskgnn.data.format import open_dataset

    args = parser().parse_args(argv)
    command = command_line("bench.infer", argv)
    if args.smoke:
        args.nodes, args.max_batches, args.cap, args.budget, args.batch_size = 20_000, 5, "1536MiB", "1GiB", 4096
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    info = machine_info(work)
    print(f"machine: {info['summary']}; reader: memory-mapped features and layer files (page cache), read "
          "forwards by the tiled passes of mean layers")
    data = Path(args.data) if args.data else work / f"w2-{args.nodes}"
    prepared = None if args.data else prepare_once(data, w2_options(args.nodes), "bench.infer")
    ds = open_dataset(data)
    run, out = work / "run", work / "predictions.npy"
    trained = train(data, run, args)
    for stale in (out, out.with_name(out.name + ".manifest.json")):
        stale.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "diskgnn.infer", "--workdir", str(run), "--memory-budget", args.budget,
            "--batch-size", str(args.batch_size), "--no-progress"]
    r, disk, cold = infer(argv, out, parse_size(args.cap))
    from diskgnn.data.resumable import read_output

    predictions = read_output(out)
    row = {"argv": argv, "wall_s": r.wall_s, "rows_per_s": ds.num_nodes / r.wall_s, "disk_read_bytes": disk.read,
           "disk_written_bytes": disk.written, "cgroup": r.summary(), "page_cache_dropped": cold,
           "test_acc": accuracy(ds, predictions), "val_acc": accuracy(ds, predictions, "val"),
           "manifest": json.loads(out.with_name(out.name + ".manifest.json").read_text())}
    print(f"diskgnn.infer: {ds.num_nodes:,} nodes in {r.wall_s:.1f} s ({row['rows_per_s']:,.0f} rows/s) under "
          f"{args.cap}, peak {format_size(r.peak_bytes or 0)}, read {disk.read / 1e9:.2f} GB, written "
          f"{disk.written / 1e9:.2f} GB; test acc {row['test_acc']:.4f}")
    if args.eval == "full":
        print(f"the training run's --eval full: val {trained['val_acc']:.4f}, test {trained['test_acc']:.4f}; the "
              f"written predictions: val {row['val_acc']:.4f}, test {row['test_acc']:.4f}")
    if args.kill_at is not None:
        row["killed"] = killed_and_rerun(argv, work, parse_size(args.cap), r, args.kill_at)
    pyg = pyg_row(ds, run, predictions, args)
    if pyg["status"] == "ok":
        print(f"PyG in memory: {pyg['wall_s']:.1f} s ({pyg['rows_per_s']:,.0f} rows/s), agreement "
              f"{pyg['agreement']:.4%} ({pyg['differing']:,} predictions differ); ratio diskgnn/PyG "
              f"{r.wall_s / pyg['wall_s']:.2f}")
    else:
        print(f"PyG: {pyg['status']} ({pyg.get('why', '')})")
    result = {"benchmark": "infer", "machine": info, "command": command,
              "prepare": prepared, "dataset": {"path": str(data), "nodes": ds.num_nodes, "edges": ds.num_edges,
                                               "feature_bytes": ds.num_nodes * ds.feature_dim * 4},
              "train": trained, "diskgnn": row, "pyg": pyg}
    write_json(Path(args.out), result)
    return result


if __name__ == "__main__":
    main()
