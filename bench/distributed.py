"""Training on several processes: data parallelism (independent) against cooperative minibatching, on W1.

    python -m bench.distributed [--data W1_DIR] [--procs 1,2,4] [--nodes 2x2] [--cap-per-process 2GiB]
    python -m bench.distributed --smoke                 # tiny, for the test suite
    python -m bench.distributed --ownership DIR[,DIR...] [--procs 2,4]   # hash against range ownership

Each setting is `torchrun ... -m diskgnn.train --distributed MODE` (sage, fanouts 10,5, batch 1024 seeds per
rank, hidden 256, --epochs whole epochs or --batches steps each), its page cache dropped first, under a cgroup memory
cap of P x --cap-per-process for the launcher and its P processes (page cache included), each with
--memory-budget = --cap-per-process. "N nodes x M" runs N torchrun invocations at once, M processes each,
with a localhost rendezvous and a workdir and a cgroup each, as N machines would run. Per setting, over all
ranks: feature bytes read from disk per seed and per epoch, bytes sent all-to-all per seed (rows forward,
their gradients back), input rows (sampled vertices) per seed, mean epoch time, and test accuracy after the
epochs (val and test sharded over the ranks). Ratios: cooperative / independent at the same layout, in the
same run. This machine has 2 cores: with 4 processes they share them, so times say little about a cluster;
the byte ratios do not depend on it. JSON to bench/results/distributed.json; with --report, a section of
docs/benchmarks.md per dataset and docs/bench/distributed-NAME.png.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
from pathlib import Path

from diskgnn.data.format import open_dataset
from diskgnn.units import format_size, parse_size

from .harness.common import drop_caches, machine_info
from .harness.memcap import run_capped
from .harness.output import add_output_args, command_line, finish, report_markers
from .harness.plots import legend, overlaid_bars, save, with_figure
from .harness.workload import LR, add_data_arg, add_training_args, apply_smoke, dataset_or_w1


def markers(dataset: str) -> tuple[str, str]:
    """The report section of one dataset's table (one per dataset directory name)."""
    return report_markers("bench.distributed", dataset)


MODES = ("independent", "cooperative")


def layouts(procs: list[int], nodes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(nodes, processes per node) of every setting: one node with each of `procs`, then the multi-node ones."""
    return [(1, p) for p in procs] + nodes


def free_port() -> int:
    """A TCP port on localhost that nothing listens on now (a rendezvous for torchrun)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(name: str, mode: str, nodes: int, per_node: int, data: Path, work: Path, args, cap: int | None) -> dict:
    """One setting: its torchrun invocations (one per node) at once; rank 0's summary and each node's cgroup."""
    world = nodes * per_node
    summary_path = work / f"{name}.summary.json"
    summary_path.unlink(missing_ok=True)
    threads = max(1, (os.cpu_count() or 1) // world)
    train = ["-m", "diskgnn.train", "--data", str(data), "--model", "sage", "--fanouts", args.fanouts,
             "--batch-size", str(args.batch_size), "--hidden", str(args.hidden), "--epochs", str(args.epochs), "--seed", "0",
             "--lr", str(LR), "--memory-budget", args.cap_per_process, "--host-cache", args.host_cache,
             "--threads", str(threads),
             "--distributed", mode, "--owner", args.owner, "--summary-json", str(summary_path), "--no-progress",
             "--checkpoint-every", "off",
             *(["--eval", "sampled", "--eval-max-batches", str(args.eval_batches)] if args.eval_batches
               else ["--eval", "none"]),
             *(["--max-batches", str(args.batches)] if args.batches else [])]
    port = free_port()
    argvs = []
    for node in range(nodes):
        rendezvous = ["--standalone"] if nodes == 1 else [f"--nnodes={nodes}", f"--node-rank={node}",
                                                          "--master-addr=127.0.0.1", f"--master-port={port}"]
        argvs.append([sys.executable, "-m", "torch.distributed.run", *rendezvous, f"--nproc-per-node={per_node}",
                      *train, "--workdir", str(work / name / f"node{node}")])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cold_note = drop_caches()
    results: list = [None] * nodes

    def run(node: int) -> None:
        if cap is None:
            import subprocess

            p = subprocess.run(argvs[node], capture_output=True, text=True, env=env, timeout=args.timeout)
            results[node] = {"returncode": p.returncode, "stderr": p.stderr, "peak": None}
        else:
            r = run_capped(argvs[node], per_node * cap, env=env, timeout=args.timeout)
            results[node] = {"returncode": r.returncode, "stderr": r.stderr, "peak": r.peak_bytes,
                             "oom_killed": r.oom_killed, "timed_out": r.timed_out}

    runners = [threading.Thread(target=run, args=(n,)) for n in range(nodes)]
    for t in runners:
        t.start()
    for t in runners:
        t.join()
    import shutil

    shutil.rmtree(work / name, ignore_errors=True)  # its packs: gigabytes on W1
    failed = [r for r in results if r["returncode"] != 0]
    if failed or not summary_path.exists():
        r = failed[0] if failed else results[0]
        why = "OOM-killed" if r.get("oom_killed") else "timed out" if r.get("timed_out") else \
            next((line for line in reversed((r["stderr"] or "").splitlines()) if "error:" in line),
                 f"exit {r['returncode']}")
        return {"error": why}
    s = json.loads(summary_path.read_text())
    d = s["distributed"]
    seeds = max(1, d["seeds"])
    train_seeds = int(open_dataset(data).split("train").size)
    times = s["epoch_times_s"]
    return {"epoch_s": sum(times) / len(times), "epochs": len(times), "test_acc": s["test_acc"], "seeds": d["seeds"],
            "read_bytes_per_seed": d["disk_bytes_read"] / seeds, "read_bytes": d["disk_bytes_read"],
            "read_bytes_per_epoch": d["disk_bytes_read"] / seeds * train_seeds,
            "exchange_bytes_per_seed": d["exchange_bytes"] / seeds, "input_rows_per_seed": d["input_rows"] / seeds,
            "peak_anon_bytes_per_rank": d["peak_anon_bytes_per_rank"],
            "cgroup_peak_bytes": [r["peak"] for r in results], "cold_cache": cold_note is None,
            "step_ms": 1e3 * s["stage_times_s"]["train"]["busy_s"] / max(1, s["stage_times_s"]["train"]["items"])}


def ownership(data: Path, procs: list[int], args, batches: int = 20) -> list[dict]:
    """Cooperative minibatching's cost under each ownership, from the epoch's first global batches sampled as
    the trainer samples them (no training): rows sent all-to-all per seed (forward; the gradients above the
    input layer go back the same way) and the busiest rank's input rows over the mean (1 = balanced)."""
    import numpy as np

    from diskgnn.distributed.cooperative import OWNERS, exchange_plan, owners
    from diskgnn.offline.sample import epoch_seeds, open_graph, sample_batch

    ds = open_dataset(data)
    graph = open_graph(ds)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    out = []
    for world in procs:
        seeds = epoch_seeds(ds.split("train"), world * args.batch_size, 0, 0)[:batches]
        sampled = [sample_batch(graph, s, key=b, fanouts=fanouts, seed=0, threads=os.cpu_count() or 1)
                   for b, s in enumerate(seeds)]
        for scheme in OWNERS:
            sent = rows = busiest = 0.0
            for batch in sampled:
                own = owners(batch.nodes, world, scheme, ds.num_nodes)
                shares = [exchange_plan(batch, own, r, world) for r in range(world)]
                sent += sum(sum(sum(layer.send_counts) for layer in s.layers) for s in shares)
                counts = np.bincount(own, minlength=world)
                rows += batch.nodes.size
                busiest += counts.max() / counts.mean()
            total = sum(b.num_seeds for b in sampled)
            out.append({"dataset": data.name, "world": world, "owner": scheme, "sent_rows_per_seed": sent / total,
                        "input_rows_per_seed": rows / total, "input_imbalance": busiest / len(sampled)})
            print(f"{data.name}, {world} ranks, {scheme}: {sent / total:.2f} rows sent per seed, "
                  f"{rows / total:.2f} input rows per seed, busiest rank {busiest / len(sampled):.3f}x the mean",
                  flush=True)
    return out


def label(nodes: int, per_node: int) -> str:
    return f"{per_node} process" + ("es" if per_node > 1 else "") if nodes == 1 else f"{nodes} nodes x {per_node}"


def _accuracy(acc: float) -> str:
    return "not evaluated" if acc != acc else f"{acc:.2%}"


def table(result: dict) -> str:
    lines = [f"{Path(result['dataset']).name} ({result['nodes']:,} nodes), fanouts {result['fanouts']}, batch "
             f"{result['batch_size']} seeds per rank, {result['per_epoch']}, cap {result['cap_per_process'] or 'none'} "
             f"per process, owner {result['owner']}; `{result['command']}`. Ratios: cooperative / independent at the "
             "same layout, same run.", "",
             "| layout | mode | read / seed | read / epoch | all-to-all / seed | input rows / seed | epoch | test acc |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['layout']} | {r['mode']} | failed: {r['error']} | | | | | |")
            continue

        def ratio(key):
            v = r.get(f"{key}_vs_independent")
            return f" ({v:.2f}x)" if v is not None else ""

        lines.append(f"| {r['layout']} | {r['mode']} | {format_size(int(r['read_bytes_per_seed']))}"
                     f"{ratio('read_bytes_per_seed')} | {format_size(int(r['read_bytes_per_epoch']))} | "
                     f"{format_size(int(r['exchange_bytes_per_seed']))} | {r['input_rows_per_seed']:.1f}"
                     f"{ratio('input_rows_per_seed')} | {r['epoch_s']:.1f} s{ratio('epoch_s')} | "
                     f"{_accuracy(r['test_acc'])} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    ok = [r for r in result["rows"] if "error" not in r]
    plt, fig, ax = overlaid_bars(f"Cooperative vs independent on {Path(result['dataset']).name}: bytes per seed",
                                 result["machine"]["summary"], [f"{r['layout']}, {r['mode']}" for r in ok],
                                 ("read from disk per seed (KiB)", [r["read_bytes_per_seed"] / 1024 for r in ok]),
                                 ("all-to-all per seed (KiB)", [r["exchange_bytes_per_seed"] / 1024 for r in ok]),
                                 "KiB per seed")
    legend(ax)
    save(plt, fig, path)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.distributed", description=__doc__.split("\n\n")[0])
    add_data_arg(ap)
    add_training_args(ap, batches=0)
    ap.add_argument("--procs", default="1,2,4", help="processes on one node, comma-separated")
    ap.add_argument("--nodes", default="2x2", help="multi-node layouts NxM (N torchrun invocations of M processes), "
                                                   "comma-separated; '' for none")
    ap.add_argument("--modes", default="independent,cooperative")
    ap.add_argument("--owner", default="hash", help="cooperative: diskgnn.train --owner")
    ap.add_argument("--cap-per-process", default="2GiB", help="--memory-budget of each process; the cgroup of one "
                                                              "torchrun invocation is capped at that times its processes")
    ap.add_argument("--host-cache", default="auto", help="diskgnn.train --host-cache of each process")
    ap.add_argument("--no-cap", action="store_true", help="run uncapped (no cgroup here)")
    ap.add_argument("--ownership", metavar="DIRS", help="instead: the ownership study over these comma-separated "
                    "dataset directories (sampling only; JSON to --out)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per setting")
    add_output_args(ap, "distributed", report=True,
                    report_help="write the table into this markdown file's section for the dataset (default "
                                "docs/benchmarks.md) and the plot beside it in bench/distributed-NAME.png")
    args = ap.parse_args(argv)
    apply_smoke(args)
    if args.smoke:
        args.procs, args.nodes, args.batch_size, args.hidden, args.host_cache = "2", "2x1", 64, 16, "0"
        args.eval_batches = 2
    procs = [int(p) for p in args.procs.split(",") if p]
    if args.ownership:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        rows = [r for d in args.ownership.split(",") for r in ownership(Path(d), [p for p in procs if p > 1], args)]
        finish({"benchmark": "distributed-ownership", "machine": machine_info(Path(args.workdir)),
                "fanouts": args.fanouts, "batch_size": args.batch_size, "rows": rows}, args.out)
        return {"rows": rows}
    nodes = [tuple(int(x) for x in spec.split("x")) for spec in args.nodes.split(",") if spec]
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES for m in modes):
        raise SystemExit(f"bench.distributed: --modes {args.modes}: expected some of {', '.join(MODES)}")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = dataset_or_w1(args.data, work, args.smoke)
    ds = open_dataset(data)
    cap = None if args.no_cap else parse_size(args.cap_per_process)
    info = machine_info(work)
    print(f"machine: {info['summary']}; data {data}: {ds.num_nodes:,} nodes; cap "
          f"{args.cap_per_process if cap else 'none'} per process", flush=True)
    rows = []
    for n, m in layouts(procs, nodes):
        base = None
        for mode in modes if n * m > 1 else modes[:1]:  # one process: both modes are the same run
            name = f"{n}x{m}-{mode}"
            r = {"layout": label(n, m), "mode": mode if n * m > 1 else "one process", "world": n * m,
                 **launch(name, mode, n, m, data, work, args, cap)}
            if mode == "independent" and "error" not in r:
                base = r
            if mode == "cooperative" and base is not None and "error" not in r:
                for key in ("read_bytes_per_seed", "input_rows_per_seed", "epoch_s"):
                    r[f"{key}_vs_independent"] = r[key] / base[key] if base[key] else None
            rows.append(r)
            print(f"{r['layout']}, {r['mode']}: " + (f"FAILED: {r['error']}" if "error" in r else
                  f"read {format_size(int(r['read_bytes_per_seed']))}/seed, all-to-all "
                  f"{format_size(int(r['exchange_bytes_per_seed']))}/seed, {r['input_rows_per_seed']:.1f} input "
                  f"rows/seed, epoch {r['epoch_s']:.1f} s, test {_accuracy(r['test_acc'])}"), flush=True)
    result = {"benchmark": "distributed", "machine": info, "dataset": str(data), "nodes": ds.num_nodes,
              "fanouts": args.fanouts, "batch_size": args.batch_size, "hidden": args.hidden, "owner": args.owner,
              "per_epoch": f"{args.epochs} x {args.batches} steps (per epoch: extrapolated per seed)" if args.batches
              else f"{args.epochs} whole epoch" + ("s" if args.epochs > 1 else ""), "cap_per_process": args.cap_per_process if cap else None,
              "command": command_line("bench.distributed", argv), "rows": rows}
    name = data.name
    return finish(result, args.out, table=table(result), report=args.report, markers=markers(name),
                  section=lambda md: with_figure(md, f"distributed-{name}", f"cooperative vs independent on {name}",
                                                 lambda png: plot(result, png), table(result)))


if __name__ == "__main__":
    main()
