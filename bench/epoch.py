"""Training epoch benchmark: diskgnn under memory caps against its compute limit, the peers and a naive loop.

    python -m bench.epoch [--data W1_DIR] [--batches 200] [--epochs 1] [--eval-batches 0] [--caps 1GiB,2GiB,4GiB]
    python -m bench.epoch --smoke                     # tiny, for the test suite

In one run, on W1 (prepare synthetic --nodes 8000000 --feat-dim 128
--avg-degree 10 --classes 16 --seed 0; sage, 2 layers, fanouts 10,5, batch
1024, hidden 256, Adam 0.003), each system in its own process, for --epochs
epochs of --batches batches (0: whole epochs), evaluated after each epoch on
the same val and test nodes when --eval-batches is set:

  uncapped, once:
    diskgnn_all_cached  `python -m diskgnn.train` with every feature row in the
                        host cache: no disk reads, its compute limit here;
    dgl_memory          DGL 2.1 GraphBolt, features read into RAM
                        (bench.peers.dgl, DGL's own venv): its ceiling;
    pyg_memory          PyG's NeighborLoader + GraphSAGE with topology and
                        features in RAM, page cache warm (bench.peers.pyg):
                        what users get when the graph fits;
  under each cgroup memory cap (page cache included), page cache dropped first:
    diskgnn             `python -m diskgnn.train --memory-budget CAP`;
    dgl_ondisk          GraphBolt's OnDiskDataset with `in_memory: false`
                        features (a memory map), its topology in RAM;
    marius, ginex       an installed MariusGNN (marius_train on PATH or
                        DISKGNN_MARIUS) or Ginex (DISKGNN_GINEX), on W1
                        exported for the cap; otherwise "not installed";
    pyg_memmap_default  PyG with topology and features np.memmap'ed;
    pyg_memmap_random   the same with MADV_RANDOM on every map;
    naive_default       bench.harness.naive: diskgnn's sampler and model,
                        features gathered through np.memmap, nothing
                        overlapped;
    naive_random        the same with MADV_RANDOM.

PyG and diskgnn train on the same seed nodes per batch; GraphBolt shuffles
its own. Epoch times are training only (diskgnn's offline sampling and
packing, PyG's and DGL's conversions are reported beside them). A loop (DGL,
PyG, naive) that hits --loop-timeout is stopped and its rate taken from the
batches it finished, said as such; one that finished none is reported as
slower than the timeout. The naive loop gives a rate only (its first
--batches, or 200, batches).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from pathlib import Path

import torch

from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.units import format_size, parse_size

from .harness.common import drop_caches, machine_info
from .harness.output import add_output_args, finish
from .harness.runs import describe, loop, trainer
from .harness.workload import (LR, add_data_arg, add_training_args, apply_smoke, batches_per_epoch,
                               dataset_or_w1, training_options)

CAPPED = ("diskgnn", "dgl_ondisk", "pyg_memmap_default", "pyg_memmap_random", "naive_default", "naive_random",
          "marius", "marius_at_target", "ginex")
UNCAPPED = ("diskgnn_all_cached", "dgl_memory", "pyg_memory")
# bench.harness.naive's batches when the grid trains whole epochs (it gives a rate, not accuracy)
NAIVE_BATCHES = 200
# With CUDA, diskgnn also trains on the GPU (the rows above stay on the CPU, like the PyG and naive loops).
GPU_CAPPED, GPU_UNCAPPED = ("diskgnn_cuda",), ("diskgnn_cuda_all_cached",)


def naive(name: str, madvise: str, data: Path, work: Path, args, cap: int | None, **kw) -> dict:
    """bench.harness.naive on the first --batches batches (NAIVE_BATCHES when the grid trains whole
    epochs): a rate, extrapolated to the epoch, not an accuracy."""
    progress = work / f"{name}.jsonl"
    argv = [sys.executable, "-m", "bench.harness.naive", "--data", str(data), "--madvise", madvise,
            "--progress", str(progress), *training_options(args, 1, args.batches or NAIVE_BATCHES)]
    return loop(name, argv, progress, data, args, cap, **kw)


def pyg(name: str, mode: str, madvise: str, data: Path, work: Path, args, cap: int | None, **kw) -> dict:
    """A bench.peers.pyg run, or why PyG cannot run here."""
    from .peers import pyg as peer

    ok, why = peer.available()
    if not ok:
        return {"error": f"PyG not installed: {why}", "not_installed": True}
    conversion = {}
    if mode == "memmap":
        # made once, outside every capped and timed run
        conversion["indices_int64_s"] = peer.int64_indices(open_dataset(data))[1]
    progress = work / f"{name}.jsonl"
    argv = [sys.executable, "-m", "bench.peers.pyg", "--data", str(data), "--mode", mode, "--madvise", madvise,
            "--progress", str(progress), "--eval-nodes", str(args.eval_batches * args.batch_size),
            *training_options(args, args.epochs)]
    return {**loop(name, argv, progress, data, args, cap, epochs=args.epochs, **kw), "conversion_s": conversion}


def dgl(name: str, mode: str, data: Path, work: Path, args, cap: int | None, **kw) -> dict:
    """A GraphBolt run (bench.peers.dgl, in DGL's own venv), or why DGL cannot run here. The export and
    GraphBolt's preprocessing happen once, outside every capped and timed run."""
    from .peers import dgl as peer

    ok, why = peer.available()
    if not ok:
        return {"error": why, "not_installed": True}
    try:
        export = peer.export(data, eval_nodes=args.eval_batches * args.batch_size)
    except DiskgnnError as e:
        return {"error": f"{name}: {e}"}
    progress = work / f"{name}.jsonl"
    argv = peer.command(Path(export["path"]), mode=mode, epochs=args.epochs, batches=args.batches,
                        fanouts=args.fanouts, batch_size=args.batch_size, hidden=args.hidden, lr=LR,
                        dropout=0.5, seed=0, progress=progress)
    conversion = {k: export[k] for k in ("export_s", "preprocess_s")}
    return {**loop(name, argv, progress, data, args, cap, epochs=args.epochs, **kw), "conversion_s": conversion}


def installed_peer(name: str, data: Path, work: Path, args, cap_text: str, timeout: float | None) -> dict:
    """MariusGNN or Ginex from the user's own installation, on W1 exported for this cap; without one, a row
    saying how to point the bench at it."""
    from .peers import ginex, marius

    peer = {"marius": marius, "ginex": ginex}[name]
    ok, why = peer.installed()
    if not ok:
        return {"error": why, "not_installed": True}
    out = work / f"{name}-{cap_text}"
    try:
        # Ginex evaluates the val and test nodes diskgnn does (--eval-batches), not the whole splits
        extra = {"eval_nodes": args.eval_batches * args.batch_size} if name == "ginex" else {}
        return peer_row(peer, out, data, args, export_peer(peer, data, out, args, cap_text, **extra), timeout)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # a full copy of the features: gigabytes on W1


def export_peer(peer, data: Path, out: Path, args, cap_text: str, **extra) -> float:
    """Exports the run's dataset for a peer at this cap (`extra`: the peer's own export options); the seconds it
    took."""
    t0 = time.perf_counter()
    peer.export(data, out, cap=cap_text, fanouts=[int(f) for f in args.fanouts.split(",")],
                batch_size=args.batch_size, epochs=args.epochs, hidden=args.hidden, overwrite=True, **extra)
    return time.perf_counter() - t0


def peer_row(peer, out: Path, data: Path, args, export_s: float, timeout: float | None) -> dict:
    """Runs a peer (bench.peers.marius or .ginex) on its export (the page cache dropped first) and makes its row:
    a run that died after some epochs keeps them, and says how it died."""
    from .peers.common import read_export_info

    name = peer.__name__.rsplit(".", 1)[1]
    drop_caches()
    row = peer.run(out, timeout=timeout)
    plan = read_export_info(out)["options"].get("buffer_plan", {})
    if not row.get("epoch_times_s"):
        return {"error": f"{name}: {row['status']}: {row.get('why', '')}", "row": row}
    times = row["epoch_times_s"]
    batches = batches_per_epoch(data, args)
    died = {} if row["status"] == "ok" else {"died": _death(row.get("why", row["status"]))}
    return {**peer_accuracy(row), **died, "epoch_s": sum(times) / len(times), "epochs_done": len(times),
            "train_s_per_epoch": times,
            "per_batch_s": sum(times) / (batches * len(times)), "batches": batches * len(times),
            "cap_bytes": row["cap_bytes"], "cgroup_peak_bytes": row["cgroup_peak_bytes"],
            "conversion_s": {"export_s": export_s, **row.get("conversion_s", {})}, "row": row,
            **{k: row[k] for k in ("disk_bytes_read", "phases_per_epoch", "device") if k in row},
            **({"neighbour_share": plan["neighbour_share"],
                "buffer": [plan["buffer_capacity"], plan["num_partitions"]]} if "neighbour_share" in plan else {})}


def _death(why: str) -> str:
    """A peer's end in a few words: how ("OOM-killed: <its last lines, ' | '-joined>") and its last log lines."""
    how, _, last = why.partition(":")
    lines = [re.sub(r"^\[[^]]*\]\s*", "", x.strip()) for x in last.split(" | ")]
    said = [x for x in lines if x and not set(x) <= set("=-")]
    return how.strip() + (f" (its last lines: {'; '.join(said[-2:])})" if said else "")


def marius_at_target(data: Path, work: Path, args, cap_text: str, diskgnn: dict, planned: dict) -> dict:
    """The fair MariusGNN row: the smallest buffer (of its planned partitions, up to the planned capacity, the
    most its memory model lets the cap hold) whose best validation accuracy reaches diskgnn's best. The smaller
    buffers share one export: only the config's buffer capacity differs (marius.set_buffer)."""
    from .peers import marius

    if not diskgnn.get("val_acc_per_epoch"):
        return {"error": "diskgnn has no validation accuracy to reach (--eval-batches 0?)"}
    if "buffer" not in planned:  # not installed (the row says how to fix that), or its run failed
        return planned if planned.get("not_installed") else \
            {"error": f"MariusGNN did not run at its planned buffer: {planned.get('error')}"}
    target, (most, partitions) = max(diskgnn["val_acc_per_epoch"]), planned["buffer"]
    # Where the largest buffer the cap holds falls short, the smaller ones (seeing fewer neighbours) are not run.
    reached = max(planned.get("val_acc_per_epoch") or [-1.0]) >= target
    out, export_s = work / f"marius-{cap_text}-smaller", None
    try:
        for capacity in range(2, most + 1) if reached else ():
            if capacity == most:
                row = planned
            else:
                export_s = export_s if export_s is not None else export_peer(marius, data, out, args, cap_text)
                marius.set_buffer(out, capacity)
                row = peer_row(marius, out, data, args, export_s, args.loop_timeout)
            if max(row.get("val_acc_per_epoch") or [-1.0]) >= target:
                return {**row, "target_val_acc": target}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"error": f"MariusGNN reached no val accuracy of {target:.4f} (diskgnn's best) even with {most} of "
                     f"{partitions} partitions buffered, the most the cap holds"}


def peer_accuracy(row: dict) -> dict:
    """A peer's accuracies as the report reads diskgnn's: val per epoch, test at the best val epoch, and the
    wall seconds at each validation (where the peer reports them: MariusGNN's evaluation blocks)."""
    vals, tests = row.get("val_acc_per_eval") or [], row.get("test_acc_per_eval") or []
    if not vals:
        return {}
    best = vals.index(max(vals))
    return {"val_acc_per_epoch": vals, "test_acc": tests[best] if best < len(tests) else None,
            **({"wall_s_at_val": row["wall_s_at_val"]} if row.get("wall_s_at_val") else {})}


def diskgnn_backend(result: dict) -> str | None:
    """The I/O backend diskgnn's runs used (the first run that got far enough to say)."""
    runs = [*result["uncapped"].values()] + [c["runs"]["diskgnn"] for c in result["caps"].values()]
    return next((r["backend"] for r in runs if "backend" in r), None)


def _ratio(a: dict, b: dict) -> float | None:
    return a["per_batch_s"] / b["per_batch_s"] if "per_batch_s" in a and "per_batch_s" in b else None


def ratios(uncapped: dict, capped: dict) -> dict:
    """Per-batch ratios at one cap: diskgnn against its compute limit and PyG in memory; the rest against diskgnn."""
    d = capped["diskgnn"]
    out = {"diskgnn_over_all_cached": _ratio(d, uncapped["diskgnn_all_cached"]),
           "diskgnn_over_dgl_memory": _ratio(d, uncapped["dgl_memory"]),
           "diskgnn_over_pyg_memory": _ratio(d, uncapped["pyg_memory"])}
    for name in CAPPED[1:]:
        out[f"{name}_over_diskgnn"] = _ratio(capped[name], d)
    if "diskgnn_cuda" in capped:
        out["diskgnn_cuda_over_diskgnn"] = _ratio(capped["diskgnn_cuda"], d)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.epoch", description=__doc__.split("\n\n")[0])
    add_data_arg(ap)
    add_training_args(ap)
    ap.add_argument("--caps", default="2GiB",
                    help="comma-separated cgroup memory caps (page cache included) of the capped runs")
    ap.add_argument("--loop-timeout", type=float, default=300.0,
                    help="seconds before a DGL, PyG or naive run is stopped (its rate from the batches done); "
                         "uncapped in-memory runs get twice this")
    ap.add_argument("--systems", help="comma-separated: run only these rows (the others say so); default all")
    ap.add_argument("--no-cap", action="store_true", help="run the 'capped' systems uncapped (no cgroup here)")
    add_output_args(ap, "epoch")
    args = ap.parse_args(argv)
    apply_smoke(args)
    if args.batches < 0 or args.epochs < 1 or args.eval_batches < 0:
        raise SystemExit("bench.epoch: --batches and --eval-batches must be at least 0, --epochs at least 1")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = dataset_or_w1(args.data, work, args.smoke)
    ds = open_dataset(data)
    feature_bytes = ds.num_nodes * ds.row_bytes
    caps = ["none"] if args.no_cap else args.caps.split(",")
    info = machine_info(work)
    print(f"machine: {info['summary']}; data {data}: {ds.num_nodes:,} nodes, features "
          f"{format_size(feature_bytes)}; caps {', '.join(caps)}; {args.batches} batches")

    cuda = torch.cuda.is_available()
    everything = (*UNCAPPED, *CAPPED, *(GPU_UNCAPPED + GPU_CAPPED if cuda else ()))
    chosen = set(args.systems.split(",")) if args.systems else set(everything)
    if chosen - set(everything):
        raise SystemExit(f"bench.epoch: --systems: unknown {sorted(chosen - set(everything))}; choose from "
                         f"{', '.join(everything)}")

    def pick(name: str, label: str, fn) -> dict:
        r = fn() if name in chosen else {"error": "not selected (--systems)", "not_selected": True}
        print(label + describe(name, r), flush=True)
        return r

    # All rows in the host cache; the budget leaves the working set room beside them.
    cached = dict(memory_budget=format_size(feature_bytes + (6 << 30)), host_cache=format_size(feature_bytes + (1 << 20)),
                  cap=None)
    uncapped = {"diskgnn_all_cached": pick("diskgnn_all_cached", "", lambda: trainer(
        "diskgnn_all_cached", data, work, args, device="cpu", **cached))}
    if cuda:
        uncapped["diskgnn_cuda_all_cached"] = pick("diskgnn_cuda_all_cached", "", lambda: trainer(
            "diskgnn_cuda_all_cached", data, work, args, device="cuda", **cached))
    # Warm: these loops load every file into RAM before they time anything; twice the timeout leaves that room.
    warm = dict(cold=False, timeout=2 * args.loop_timeout)
    uncapped["dgl_memory"] = pick("dgl_memory", "", lambda: dgl("dgl_memory", "memory", data, work, args, None,
                                                                   **warm))
    uncapped["pyg_memory"] = pick("pyg_memory", "", lambda: pyg("pyg_memory", "memory", "default", data, work, args,
                                                                   None, **warm))
    per_cap = {}
    for cap_text in caps:
        cap = None if cap_text == "none" else parse_size(cap_text)
        budget = cap_text if cap else "2GiB"
        at = f"cap {cap_text}: "
        runs = {"diskgnn": pick("diskgnn", at, lambda: trainer(f"diskgnn-{cap_text}", data, work, args,
                                                               memory_budget=budget, host_cache="auto", cap=cap,
                                                               device="cpu"))}
        if cuda:
            runs["diskgnn_cuda"] = pick("diskgnn_cuda", at, lambda: trainer(
                f"diskgnn_cuda-{cap_text}", data, work, args, memory_budget=budget, host_cache="auto", cap=cap,
                device="cuda"))
        runs["dgl_ondisk"] = pick("dgl_ondisk", at, lambda: dgl(f"dgl_ondisk-{cap_text}", "ondisk", data, work, args,
                                                                cap, timeout=args.loop_timeout))
        for madvise in ("default", "random"):
            runs[f"pyg_memmap_{madvise}"] = pick(f"pyg_memmap_{madvise}", at, lambda: pyg(
                f"pyg_memmap_{madvise}-{cap_text}", "memmap", madvise, data, work, args, cap,
                timeout=args.loop_timeout))
            runs[f"naive_{madvise}"] = pick(f"naive_{madvise}", at, lambda: naive(
                f"naive_{madvise}-{cap_text}", madvise, data, work, args, cap, timeout=args.loop_timeout))
        for peer in ("marius", "ginex"):
            runs[peer] = pick(peer, at, lambda: installed_peer(peer, data, work, args, cap_text, args.loop_timeout))
        runs["marius_at_target"] = pick("marius_at_target", at, lambda: marius_at_target(
            data, work, args, cap_text, runs["diskgnn"], runs["marius"]))
        per_cap[cap_text] = {"runs": runs, "ratios": ratios(uncapped, runs)}
        print(f"cap {cap_text}: ratios " + ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} n/a"
                                                     for k, v in per_cap[cap_text]["ratios"].items()), flush=True)
    result = {"benchmark": "epoch", "machine": info, "dataset": str(data), "nodes": ds.num_nodes,
              "edges": ds.num_edges, "feature_bytes": feature_bytes, "batches": args.batches,
              "epochs": args.epochs, "eval_batches": args.eval_batches,
              "batches_per_epoch": batches_per_epoch(data, args),
              "fanouts": args.fanouts, "batch_size": args.batch_size, "hidden": args.hidden,
              "loop_timeout_s": args.loop_timeout, "cuda": cuda,
              "uncapped": uncapped, "caps": per_cap}
    result["backend"] = diskgnn_backend(result)
    return finish(result, args.out)


if __name__ == "__main__":
    main()
