"""Link prediction with an embedding table larger than the memory cap: diskgnn and MariusGNN side by side (issue 51).

    python -m bench.link [--nodes 9000000] [--caps 1110MiB,2GiB] [--epochs 3] [--systems diskgnn,marius]
    python -m bench.link --smoke            # 20,000 nodes, 1 epoch, for the test suite

The graph (prepared once into --workdir): `prepare synthetic --nodes N --feat-dim 0 --structure powerlaw
--avg-degree 2 --undirected --edge-split 0.9,0.05,0.05`, no features. Both systems train the same model on it:
learnable embeddings of --embeddings values a node (Adagrad at 0.1 on the table), one mean-SAGE layer over them
with --fanouts neighbours, DistMult, softmax cross-entropy over each positive and its chunk's negatives
(--chunks chunks of --negatives nodes per batch of --batch-size edges, uniform), Adam at 0.003 on the rest;
evaluated after every epoch (diskgnn also every --val-every batches inside its epochs: MariusGNN evaluates after
an epoch only) on the same first --eval-edges held-out edges of each split (the export writes only those to
MariusGNN), ranked against 1,000 unfiltered negatives shared by each batch of 1,000 edges.

For each cap, alone on the machine, page cache dropped before each run: diskgnn (`--embedding-partitions 64`,
its plan's buffer under `--memory-budget CAP`) and an installed MariusGNN (marius_train on PATH or
DISKGNN_MARIUS; its partition buffer sized for the cap by bench.peers.marius), each under a cgroup memory cap
of CAP (page cache included). Per run: epoch times, val MRR after each epoch with the wall time it was reached
at (the offline phase included: diskgnn's bucketing and sampling inside its run, MariusGNN's export before
it; MariusGNN's models are ranked after its run, outside the cap, as bench.peers.marius_link says why, at the
time its epoch's training ended), test MRR and Hits@10, the disk's bytes read and written over the run (the
device's counters, after a sync), the cgroup's peak. Then per cap: each system's best val MRR and the time it
took, and both systems' time to the lower of the two, over every validation and over the epoch ends' only.
Where the protocols still differ is in docs/peers.md ("Link prediction").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from diskgnn.units import parse_size

from .harness.common import REPO, DiskCounter, block_device, drop_caches, machine_info
from .harness.memcap import CapUnavailable, run_capped
from .harness.output import add_output_args, command_line, write_json
from .harness.workload import prepare_once
from .peers import marius, marius_link

SYSTEMS = ("diskgnn", "marius")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.link", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=9_000_000)
    ap.add_argument("--caps", default="1110MiB,2GiB", help="cgroup caps, page cache included (comma-separated)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--embeddings", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--fanouts", default="5")
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--negatives", type=int, default=200)
    ap.add_argument("--eval-edges", type=int, default=50_000, help="held-out edges of each split evaluated")
    ap.add_argument("--partitions", type=int, default=64, help="diskgnn's --embedding-partitions")
    ap.add_argument("--marius-capacity", type=int, default=None,
                    help="MariusGNN's buffer: this many partitions in memory (default: bench.peers.marius's plan, "
                         "whose memory model was calibrated on node classification; at 2 GiB its 13 of 61 table "
                         "partitions were OOM-killed in the first epoch)")
    ap.add_argument("--val-every", default="1000",
                    help="diskgnn validates inside its epochs too, every N batches (its --val-every; off: at epoch "
                         "ends only, as MariusGNN, whose evaluation follows an epoch)")
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="seconds a run may take")
    ap.add_argument("--smoke", action="store_true")
    add_output_args(ap, "link")
    return ap


def link_options(args) -> dict:
    return {"embeddings": args.embeddings, "embedding_lr": 0.1, "negatives": args.negatives, "chunks": args.chunks,
            "degree_fraction": 0.0, "eval_negatives": 1000, "loss": "softmax"}


def run_diskgnn(args, data: Path, work: Path, cap: str) -> dict:
    summary = work / f"diskgnn-{cap}.json"
    link = link_options(args)
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--workdir", str(work / f"diskgnn-{cap}"),
            "--task", "link", "--embeddings", str(args.embeddings), "--embedding-lr", str(link["embedding_lr"]),
            "--embedding-partitions", str(args.partitions), "--decoder", "distmult", "--link-loss", link["loss"],
            "--batch-size", str(args.batch_size), "--fanouts", args.fanouts, "--hidden", str(args.embeddings),
            "--chunks", str(args.chunks), "--negatives", str(args.negatives), "--eval-negatives", "1000",
            "--epochs", str(args.epochs), "--eval-max-batches", str(max(1, args.eval_edges // 1000)),
            "--memory-budget", cap, "--val-every", args.val_every, "--no-progress", "--summary-json", str(summary)]
    r = run_capped(argv, cap, cwd=REPO, timeout=args.timeout)
    row = {"system": "diskgnn", "argv": argv, "cgroup": r.summary()}
    if r.returncode != 0:
        return {**row, "status": "failed", "why": (r.stderr or "").strip().splitlines()[-1:]}
    s = json.loads(summary.read_text())
    test = s.get("test_metrics") or {}
    return {**row, "status": "ok", "epoch_times_s": s["epoch_times_s"], "val_mrr_per_epoch": s["val_mrr_per_epoch"],
            "wall_s_at_val": s["wall_s_at_val"], "validations": s["validations"], "test_mrr": test.get("mrr"),
            "test_hits@10": test.get("hits@10"),
            "offline": s.get("offline"), "embeddings": s.get("embeddings"), "peak_anon_bytes": s["peak_anon_bytes"],
            "plan": s.get("plan")}


def run_marius(args, data: Path, work: Path, cap: str) -> dict:
    ok, why = marius.installed()
    if not ok:
        return {"system": "marius", "status": "not installed", "why": why}
    t0 = time.perf_counter()
    out = work / f"marius-{cap}"
    export = marius.export(data, out, cap=cap, fanouts=[int(f) for f in args.fanouts.split(",")],
                           batch_size=args.batch_size, epochs=args.epochs, hidden=args.embeddings,
                           memory_budget="512MiB", overwrite=True, link=link_options(args),
                           eval_edges=args.eval_edges)
    if args.marius_capacity:
        marius.set_buffer(out, args.marius_capacity)
        export["buffer_plan"] = marius.read_export_info(out)["options"]["buffer_plan"]
    export_s = time.perf_counter() - t0
    drop_caches()
    row = marius.run(out, cap=cap, timeout=args.timeout)
    # its offline phase is the export; its times from its first logged line
    row.update(export_s=export_s, buffer_plan=export["buffer_plan"],
               wall_s_at_val=[export_s + t for t in row.pop("wall_s_at_epoch", [])])
    for key in [k for k in row if k.endswith("_per_eval")]:  # no evaluation in its run (marius_link)
        del row[key]
    return row


def rank_marius(args, work: Path, cap: str, row: dict) -> dict:
    """MariusGNN's saved models ranked after its run (marius_link: why), outside the cap and the disk count;
    their val MRR at the wall time each epoch's training ended."""
    found = marius_link.evaluate(work / f"marius-{cap}", timeout=args.timeout)
    if found.get("eval_why") and row["status"] == "ok":
        row["why"] = found["eval_why"]
    row["wall_s_at_val"] = row["wall_s_at_val"][:len(found.get("val_mrr_per_epoch", []))]
    return {**row, **found}


def validations(row: dict, inside: bool = True) -> list[tuple[float, float]]:
    """The row's (val MRR, seconds from the start) of every validation: diskgnn's inside epochs too (unless not
    `inside`), MariusGNN's after each epoch."""
    if inside and row.get("validations"):
        return [(v["val"], v["wall_s"]) for v in row["validations"]]
    return list(zip(row.get("val_mrr_per_epoch", []), row.get("wall_s_at_val", [])))


def time_to(row: dict, target: float, inside: bool = True) -> float | None:
    """Seconds until the row's val MRR first reached `target` (None: never)."""
    for mrr, at in validations(row, inside):
        if mrr is not None and at is not None and mrr >= target:
            return at
    return None


def compare(rows: list[dict]) -> dict:
    """Each system's best val MRR and the time to it, every system's time to the lowest of the bests, and the
    same at epoch ends only (diskgnn's validations inside epochs left out)."""
    done = [r for r in rows if r.get("val_mrr_per_epoch")]  # a run that died later keeps the epochs it ranked
    best = {r["system"]: max(m for m, _ in validations(r)) for r in done}
    out = {"best_val_mrr": best, "time_to_best_s": {r["system"]: time_to(r, best[r["system"]]) for r in done}}
    if len(done) > 1:
        common = min(best.values())
        out.update(common_target=common, time_to_common_s={r["system"]: time_to(r, common) for r in done})
        common = min(max(r["val_mrr_per_epoch"]) for r in done)
        out["at_epoch_ends"] = {"common_target": common,
                                "time_to_common_s": {r["system"]: time_to(r, common, inside=False) for r in done}}
    return out


def main(argv=None) -> dict:
    args = parser().parse_args(argv)
    if args.smoke:
        args.nodes, args.epochs, args.caps, args.batch_size, args.negatives, args.eval_edges, args.partitions = \
            20_000, 1, "1GiB", 500, 20, 2000, 4
        args.val_every = "20"
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    info = machine_info(work)
    backend = "io_uring + O_DIRECT (features), page cache (embedding table)"
    print(f"machine: {info['summary']}; reader: {backend}")
    data = work / f"lp-{args.nodes}"
    prepared = prepare_once(data, ["synthetic", "--nodes", str(args.nodes), "--feat-dim", "0", "--structure",
                                   "powerlaw", "--avg-degree", "2", "--undirected", "--edge-split", "0.9,0.05,0.05"],
                            "bench.link")
    device = block_device(work)
    systems = [s for s in args.systems.split(",") if s]
    result = {"benchmark": "link", "machine": info, "command": command_line("bench.link", argv),
              "prepare": prepared, "options": {**vars(args), **link_options(args)}, "caps": {}}
    for cap in args.caps.split(","):
        rows = []
        for system in systems:
            dropped = drop_caches()
            try:
                with DiskCounter(device) as disk:
                    row = (run_diskgnn if system == "diskgnn" else run_marius)(args, data, work, cap)
            except CapUnavailable as e:
                row = {"system": system, "status": "unavailable", "why": f"cannot apply the memory cap: {e}"}
            row.update(page_cache_dropped=dropped is None, disk_read_bytes=disk.read, disk_written_bytes=disk.written)
            if system == "marius" and row.get("wall_s_at_val"):  # an epoch or more trained, even if it died later
                row = rank_marius(args, work, cap, row)
            rows.append(row)
            print(f"{cap} {system}: {row['status']}: epochs {row.get('epoch_times_s')}, val MRR "
                  f"{row.get('val_mrr_per_epoch')}, test MRR {row.get('test_mrr')}, read {disk.read / 1e9:.1f} GB, "
                  f"written {disk.written / 1e9:.1f} GB" + (f" ({row['why']})" if row.get("why") else ""))
        result["caps"][cap] = {"cap_bytes": parse_size(cap), "rows": rows, "comparison": compare(rows)}
        print(f"{cap}: {json.dumps(result['caps'][cap]['comparison'])}")
    write_json(Path(args.out), result)
    return result


if __name__ == "__main__":
    main()
