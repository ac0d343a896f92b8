"""Scaling benchmark: diskgnn on W1 at 1/4, 1/2, 1 and 2 x its nodes (same degree and feature size).

    python -m bench.scaling [--nodes 8000000] [--scales 0.25,0.5,1,2] [--memory-budget 2GiB] [--cap 4GiB]
    python -m bench.scaling --smoke

Each scale trains one whole epoch (every train node: the batch count grows
with the nodes) with `python -m diskgnn.train --memory-budget BUDGET` under a
cgroup cap of CAP (page cache included, dropped first), and reports the
epoch's training time and its offline time (sampling + packing). Both should
grow linearly with the nodes: each is fitted by least squares to a line
through the origin, t = k * nodes, and every point's deviation from that line
is reported; linear means every deviation within 10 %. The cap leaves room
beyond the budget (diskgnn's own memory) for the page cache of the code and
the memory-mapped topology and samples, which grow with the graph: at 16M
nodes a 2 GiB cap equal to the budget left ~100 MiB for them and training
thrashed on re-reading torch's code.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from diskgnn.format import open_dataset
from diskgnn.units import format_size, parse_size

from .common import machine_info, synthetic_workload, write_json
from .epoch import REPO, add_training_args, apply_smoke, describe, trainer

LINEAR_TOLERANCE = 0.10


def linear_fit(nodes: list[int], times: list[float]) -> dict:
    """Least-squares t = k * n through the origin, and each point's relative deviation from it."""
    n, t = np.asarray(nodes, dtype=np.float64), np.asarray(times, dtype=np.float64)
    k = float(n @ t / (n @ n))
    deviation = (t / (k * n) - 1).tolist()
    return {"seconds_per_million_nodes": k * 1e6, "deviation": deviation,
            "max_abs_deviation": max(abs(d) for d in deviation),
            "linear": all(abs(d) <= LINEAR_TOLERANCE for d in deviation)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, help="W1's nodes at scale 1 (default 8,000,000; --smoke 20,000)")
    ap.add_argument("--scales", default="0.25,0.5,1,2")
    ap.add_argument("--memory-budget", default="2GiB", help="diskgnn.train --memory-budget of every run")
    ap.add_argument("--cap", default="4GiB", help="cgroup memory cap of every run (page cache included)")
    ap.add_argument("--no-cap", action="store_true", help="run uncapped (no cgroup here)")
    add_training_args(ap, batches=None)
    ap.add_argument("--workdir", default=str(REPO / "bench" / "results" / "workloads"),
                    help="where the W1-like datasets are prepared once and reused")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "scaling.json"))
    args = ap.parse_args(argv)
    apply_smoke(args)
    base = args.nodes or (20_000 if args.smoke else 8_000_000)
    scales = [float(s) for s in args.scales.split(",")]
    if any(s <= 0 for s in scales) or base < 1:
        raise SystemExit("bench.scaling: --nodes and every scale must be positive")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    cap = None if args.no_cap else parse_size(args.cap)
    info = machine_info(work)
    print(f"machine: {info['summary']}; W1 at {scales} x {base:,} nodes; budget {args.memory_budget}, cap "
          f"{args.cap if cap else 'none'}")
    points = []
    for scale in scales:
        data = synthetic_workload(work, int(round(base * scale)))
        ds = open_dataset(data)
        r = trainer(f"scaling-{ds.num_nodes}", data, work, args, memory_budget=args.memory_budget,
                    host_cache="auto", cap=cap)
        print(f"x{scale:g} ({ds.num_nodes:,} nodes, features {format_size(ds.num_nodes * ds.row_bytes)}): "
              + describe("diskgnn", r) + (f"; offline {r['sample_s'] + r['pack_s']:.1f} s" if "error" not in r
                                          else ""), flush=True)
        points.append({"scale": scale, "nodes": ds.num_nodes, "edges": ds.num_edges,
                       "feature_bytes": ds.num_nodes * ds.row_bytes, **r,
                       **({"offline_s": r["sample_s"] + r["pack_s"]} if "error" not in r else {})})
    ok = [p for p in points if "error" not in p]
    fits = {}
    if len(ok) >= 2:
        nodes = [p["nodes"] for p in ok]
        fits = {"epoch": linear_fit(nodes, [p["epoch_s"] for p in ok]),
                "offline": linear_fit(nodes, [p["offline_s"] for p in ok])}
        for name, f in fits.items():
            print(f"{name}: {f['seconds_per_million_nodes']:.2f} s per million nodes, deviations "
                  + ", ".join(f"{d:+.1%}" for d in f["deviation"]) + (" (linear)" if f["linear"] else
                                                                       " (NOT within 10 % of linear)"))
    result = {"benchmark": "scaling", "machine": info, "base_nodes": base, "scales": scales,
              "cap": args.cap if cap else None, "memory_budget": args.memory_budget, "fanouts": args.fanouts, "batch_size": args.batch_size,
              "hidden": args.hidden, "linear_tolerance": LINEAR_TOLERANCE, "points": points, "fits": fits,
              "backend": ok[0]["backend"] if ok else None}
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
