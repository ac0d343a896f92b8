"""HAG: where shared partial sums pay, on sampled blocks and on whole graphs, and end to end.

    python -m bench.hag [--w1 W1_DIR] [--w1-graph] [--datasets cora,citeseer,amazon_computers,coauthor_cs] [--report]
    python -m bench.hag --smoke                 # tiny, for the test suite

Blocks: W1's first --batches batches sampled as training samples them (fanouts 10,5 and 25,10 with
neighbour sampling, and 10,5 with LABOR and layer dependency), each block searched (native/hag.h,
capacity a quarter of its destinations) and its neighbour sums timed forward and backward, plain and
through the HAG (native, on torch's threads), at the model's widths (features in, hidden 256 above), backward
only above the input layer (the input rows need no gradient, so training runs none there); the train
step's time beside them gives the share of a step that aggregation is (the ceiling of any saving).
Whole graphs: each dataset's full-neighbour block over all nodes, at width 256, timed three ways: plain, the
HAG's rewritten lists alone (its aggregation rows given), and the HAG in full. These calibrate the cost model
(loading/hag.py): what a removed row read cost against a mean one (s) and what one aggregation node costs (a),
pooled over the graphs, forward and backward. Layer-wise inference (--eval full) over each whole graph with and
without its stored HAG (loading/graph_hag.py), sage at hidden 256. With --w1-graph, W1's whole graph (8M nodes,
80M edges) searched chunk by chunk into its stored HAG, in a process of its own whose peak memory is reported.
End to end: one `diskgnn.train` epoch per setting with --hag off and on (sage; full neighbours on the real
graphs, the sampled fanouts on W1, cut to --train-batches; HAGs searched as the batches are sampled and stored
with them), epoch time and test accuracy.
JSON to bench/results/hag.json; with --report, a section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from diskgnn import _native
from diskgnn.data.format import open_dataset
from diskgnn.loading.blocks import full_block, sampled_blocks
from diskgnn.loading.hag import search
from diskgnn.nn.inference import full_neighbour_logits
from diskgnn.nn.models import GNN
from diskgnn.loading.graph_hag import GraphHag, graph_hag
from diskgnn.offline.sample import Sampler, epoch_seeds, open_graph, sample_batch

from .accuracy.datasets import SHARED, prepared
from .harness.common import REPO, machine_info
from .harness.output import add_output_args, command_line, finish, report_markers
from .harness.workload import dataset_or_w1

MARKERS = report_markers("bench.hag")
SAMPLED = {"neighbor 10,5": ("10,5", Sampler()), "neighbor 25,10": ("25,10", Sampler()),
           "labor + layer dep. 10,5": ("10,5", Sampler("labor", True))}


def timed(fns: dict, repeat: int) -> dict:
    """Median seconds of each function, run in turns (the VM's speed drifts between runs minutes apart)."""
    for fn in fns.values():
        fn()  # warm
    times = {name: [] for name in fns}
    for _ in range(max(1, repeat)):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def sums(block, found, width: int, repeat: int, backward: bool = True) -> dict:
    """The native kernels' seconds for the block's neighbour sums, forward and (where training runs one)
    backward: plain, the HAG's rewritten lists alone ("rewritten": its aggregation rows given) and through the
    HAG (`found`: search(block)'s result)."""
    hag, plain, through = found
    threads = torch.get_num_threads()
    h = torch.randn(block.num_src, width).numpy()
    grad = torch.randn(block.num_dst, width).numpy()
    ext = np.concatenate([h, np.random.default_rng(0).standard_normal((hag.num_agg, width), np.float32)])
    out = np.empty((block.num_dst, width), np.float32)
    g_src, g_ext = np.empty_like(h), np.empty_like(ext)
    ptr, idx = block.indptr.numpy(), block.indices.numpy()
    hptr, hidx = hag.indptr, hag.indices  # copies out of the native HAG: taken once, not in the timings
    fwd = {"plain": lambda: _native.csc_sum(ptr, idx, h, out, threads, None, False),
           "rewritten": lambda: _native.csc_sum(hptr, hidx, ext, out, threads, None, False),
           "hag": lambda: _native.hag_sum(hag, h, out, threads, None, False)}
    bwd = {"plain": lambda: _native.csc_sum_transpose(ptr, idx, grad, g_src, threads, None, False),
           "rewritten": lambda: _native.csc_sum_transpose(hptr, hidx, grad, g_ext, threads, None, False),
           "hag": lambda: _native.hag_sum_transpose(hag, grad, g_src, threads, None, False)}
    r = {f"{k}_fwd_s": v for k, v in timed(fwd, repeat).items()}
    r.update({f"{k}_bwd_s": v if backward else 0.0 for k, v in timed(bwd, repeat if backward else 0).items()})
    return {**r, "rows_plain": plain, "rows_hag": through, "hag_edges": hag.num_edges, "agg_nodes": hag.num_agg}


def calibration(whole: list[dict]) -> dict:
    """The cost model's constants from the whole graphs' timings, in units of the plain sum's mean row read t_row:
    per graph and direction s = (plain - rewritten) / (t_row * reads removed) and a = (hag - rewritten) / (t_row *
    aggregation nodes); the medians, since one of this VM's slow spells can throw a single timing by 3x."""
    s, a = [], []
    for r in whole:
        for d in ("fwd", "bwd"):
            t_row = r[f"plain_{d}_s"] / r["rows_plain"]
            if r["rows_plain"] > r["hag_edges"]:
                s.append((r[f"plain_{d}_s"] - r[f"rewritten_{d}_s"]) / (t_row * (r["rows_plain"] - r["hag_edges"])))
            if r["agg_nodes"]:
                a.append((r[f"hag_{d}_s"] - r[f"rewritten_{d}_s"]) / (t_row * r["agg_nodes"]))
    median = lambda v: float(np.median(v)) if v else 0.0  # noqa: E731
    return {"saved_row_cost": median(s), "node_cost": median(a), "saved_row_costs": s, "node_costs": a}


def sampled_blocks_study(data: Path, batches: int, repeat: int, hidden: int) -> list[dict]:
    ds = open_dataset(data)
    graph = open_graph(ds)
    rows = []
    for name, (fanouts, sampler) in SAMPLED.items():
        f = [int(x) for x in fanouts.split(",")]
        seeds = epoch_seeds(ds.split("train"), 1024, 0, 0)[:batches]
        acc = {"setting": name, "blocks": 0, "rows_plain": 0, "rows_hag": 0, "agg_nodes": 0, "search_s": 0.0,
               "plain_fwd_s": 0.0, "plain_bwd_s": 0.0, "hag_fwd_s": 0.0, "hag_bwd_s": 0.0, "step_s": 0.0}
        model = GNN("sage", ds.feature_dim, hidden, ds.num_classes, len(f), 0.5)
        for b, s in enumerate(seeds):
            batch = sample_batch(graph, s, key=sampler.key(0, b, len(seeds)), fanouts=f, seed=0, threads=2,
                                 sampler=sampler)
            blocks = sampled_blocks(batch)
            x = torch.randn(batch.nodes.size, ds.feature_dim)
            y = torch.from_numpy(np.asarray(ds.labels)[batch.seeds].astype(np.int64))

            def step():
                model.zero_grad()
                torch.nn.functional.cross_entropy(model(blocks, x), y).backward()

            acc["step_s"] += timed({"step": step}, repeat)["step"]
            for i, (block, width) in enumerate(zip(blocks, [ds.feature_dim] + [hidden] * (len(blocks) - 1))):
                start = time.perf_counter()
                found = search(block)
                acc["search_s"] += time.perf_counter() - start
                r = sums(block, found, width, repeat, backward=i > 0)  # the input rows need no gradient
                acc["blocks"] += 1
                for key in ("rows_plain", "rows_hag", "agg_nodes", "plain_fwd_s", "plain_bwd_s", "hag_fwd_s",
                            "hag_bwd_s"):
                    acc[key] += r[key]
        acc["batches"] = len(seeds)
        acc["aggregation_share"] = (acc["plain_fwd_s"] + acc["plain_bwd_s"]) / acc["step_s"]
        rows.append(acc)
        print(f"{name}: rows {acc['rows_hag'] / acc['rows_plain']:.3f}x, search {acc['search_s'] / len(seeds) * 1e3:.1f} "
              f"ms/batch, aggregation {acc['aggregation_share']:.0%} of the step", flush=True)
    return rows


def whole_graph(name: str, data: Path, repeat: int, width: int) -> dict:
    ds = open_dataset(data)
    block, _ = full_block(np.asarray(ds.indptr), np.asarray(ds.indices), np.arange(ds.num_nodes))
    start = time.perf_counter()
    found = search(block)
    hag = found[0]
    r = {"dataset": name, "nodes": ds.num_nodes, "edges": ds.num_edges, "search_s": time.perf_counter() - start,
         "levels": len(hag.level_bounds) - 1, "frozen": hag.frozen, **sums(block, found, width, repeat)}
    print(f"{name}: rows {r['rows_hag'] / r['rows_plain']:.3f}x, search {r['search_s']:.1f} s, backward "
          f"{r['hag_bwd_s'] / max(1e-9, r['plain_bwd_s']):.2f}x", flush=True)
    return r


def inference(name: str, data: Path, work: Path, hidden: int, repeat: int) -> dict:
    """Layer-wise full-neighbour inference of the test split (sage, 2 layers, random weights) without and with the
    dataset's stored whole-graph HAG, in the same chunks (the HAG's), and how far the two outputs are apart."""
    ds = open_dataset(data)
    start = time.perf_counter()
    found = graph_hag(ds, "on", fallback_dir=work, say=lambda line: None)
    stored_s = time.perf_counter() - start
    plain = GraphHag(found.path, ds, "off")  # the same chunks, every one plain
    torch.manual_seed(0)
    model = GNN("sage", ds.feature_dim, hidden, ds.num_classes, 2, 0.0).eval()
    nodes = ds.split("test")
    outs = {}

    def run(name, hag):
        outs[name] = full_neighbour_logits(model, ds, nodes, work / "inference", batch_size=1024, hag=hag)

    t = timed({"plain": lambda: run("plain", plain), "hag": lambda: run("hag", found)}, repeat)
    st = found.stats()
    r = {"dataset": name, "chunks": st["chunks"], "chunks_hag": st["used"], "rows_plain": st["rows_plain"],
         "rows_hag": st["rows_hag"], "search_s": st["search_s"], "open_s": stored_s, "plain_s": t["plain"],
         "hag_s": t["hag"], "max_abs_diff": float((outs["plain"] - outs["hag"]).abs().max()),
         "same_argmax": float((outs["plain"].argmax(1) == outs["hag"].argmax(1)).float().mean())}
    print(f"{name}: inference {r['plain_s']:.3f} -> {r['hag_s']:.3f} s through the stored HAG", flush=True)
    return r


def w1_graph(w1: Path, cap: str, timeout: float) -> dict:
    """W1's whole graph searched into its stored HAG by a fresh process under a cgroup memory cap (any stored
    one removed first): seconds, the group's peak memory, rows saved."""
    from .harness.memcap import run_capped

    for old in (w1 / "hag").glob("graph-c*"):
        old.unlink()
    code = ("import json, sys; from diskgnn.data.format import open_dataset; "
            "from diskgnn.loading.graph_hag import graph_hag; "
            "g = graph_hag(open_dataset(sys.argv[1]), 'on', fallback_dir=sys.argv[2], say=print); "
            "print(json.dumps(g.stats()))")
    res = run_capped([sys.executable, "-c", code, str(w1), str(w1.parent)], cap, cwd=REPO, timeout=timeout)
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1], "cap": cap,
                "timed_out": res.timed_out, "oom_killed": res.oom_killed}
    st = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"W1 whole graph: searched in {st['search_s']:.0f} s, peak {res.peak_bytes / 2**30:.2f} GiB", flush=True)
    return {**st, "cap": cap, "peak_bytes": res.peak_bytes, "wall_s": res.wall_s}


def train(name: str, data: Path, hag: str, fanouts: str, work: Path, batches: int | None, epochs: int,
          batch_size: int) -> dict:
    summary = work / f"{name}-{hag}.json"
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--model", "sage", f"--fanouts={fanouts}",
            "--batch-size", str(batch_size), "--epochs", str(epochs), "--hag", hag, "--seed", "0", "--no-progress",
            "--workdir", str(work / f"{name}-{hag}"), "--summary-json", str(summary), "--memory-budget", "12GiB",
            "--eval-max-batches", "20", "--checkpoint-every", "off", *(["--max-batches", str(batches)] if batches else [])]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        return {"dataset": name, "hag": hag, "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    s = json.loads(summary.read_text())
    train_stage = s["stage_times_s"]["train"]
    return {"dataset": name, "hag": hag, "fanouts": fanouts, "epoch_s": sum(s["epoch_times_s"]) / len(s["epoch_times_s"]),
            "step_ms": 1e3 * train_stage["busy_s"] / max(1, train_stage["items"]), "test_acc": s["test_acc"],
            "hag_stats": s["hag"]}


def table(result: dict) -> str:
    name = Path(result["w1"]).name
    out = [f"Blocks: {name}'s first {result['batches']} batches of 1024 seeds, sage, hidden {result['hidden']}; sums "
           f"timed with {result['threads']} threads. `{result['command']}`", "",
           "| sampling | rows summed with HAG | agg. nodes / block | search / batch | forward | backward | "
           "aggregation share of a step |", "|---|---|---|---|---|---|---|"]
    for r in result["sampled"]:
        out.append(f"| {r['setting']} | {r['rows_hag'] / r['rows_plain']:.3f}x | {r['agg_nodes'] / r['blocks']:.1f} | "
                   f"{r['search_s'] / r['batches'] * 1e3:.1f} ms | {r['hag_fwd_s'] / r['plain_fwd_s']:.2f}x | "
                   f"{r['hag_bwd_s'] / max(1e-9, r['plain_bwd_s']):.2f}x | {r['aggregation_share']:.0%} |")
    if result["whole"]:  # the real graphs (none with --datasets '')
        out += ["", f"Whole graphs (all nodes' full neighbourhoods as one block, width {result['hidden']}; native kernel "
                "times, median of runs in turns; \"rewritten\": the HAG's lists with its aggregation rows given):", "",
                "| graph | edges | rows summed with HAG | agg. nodes | levels | hubs kept | search | forward plain / "
                "rewritten / HAG | backward plain / rewritten / HAG |", "|---|---|---|---|---|---|---|---|---|"]
        for r in result["whole"]:
            ms = lambda d: " / ".join(f"{r[f'{k}_{d}_s'] * 1e3:.1f}" for k in ("plain", "rewritten", "hag"))  # noqa: E731
            out.append(f"| {r['dataset']} | {r['rows_plain']:,} | {r['rows_hag'] / r['rows_plain']:.3f}x | "
                       f"{r['agg_nodes']:,} | {r['levels']} | {r['frozen']:,} | {r['search_s']:.1f} s | {ms('fwd')} ms | "
                       f"{ms('bwd')} ms |")
        c = result["calibration"]
        out += ["", f"Cost model constants from these, in mean plain row reads (medians over graphs and directions, "
                f"range in brackets): a removed read cost s = {c['saved_row_cost']:.2f} "
                f"[{min(c['saved_row_costs']):.2f}, {max(c['saved_row_costs']):.2f}], an aggregation node "
                f"a = {c['node_cost']:.2f} [{min(c['node_costs']):.2f}, {max(c['node_costs']):.2f}].", "",
                f"Layer-wise inference of the test split (sage, hidden {result['hidden']}) through each graph's stored HAG "
                "(chunks of destinations as stored; the plain run uses the same chunks):", "",
                "| graph | chunks through a HAG | rows summed | search (once, stored) | inference plain -> HAG | "
                "max abs. diff | same prediction |", "|---|---|---|---|---|---|---|"]
        for r in result["inference"]:
            out.append(f"| {r['dataset']} | {r['chunks_hag']} of {r['chunks']} | {r['rows_hag'] / r['rows_plain']:.3f}x | "
                       f"{r['search_s']:.1f} s | {r['plain_s'] * 1e3:.0f} -> {r['hag_s'] * 1e3:.0f} ms | "
                       f"{r['max_abs_diff']:.1e} | {r['same_argmax']:.2%} |")
    g = result.get("w1_graph")
    if g:
        out += ["", (f"{name}'s whole graph, searched under a {g['cap']} cgroup cap: failed: {g['error']}" if "error" in g
                     else f"{name}'s whole graph ({g['chunks']} chunks), searched into its stored HAG under a {g['cap']} "
                          f"cgroup cap: {g['search_s']:.0f} s, peak {g['peak_bytes'] / 2**30:.2f} GiB (page cache "
                          f"included), rows summed {g['rows_hag'] / g['rows_plain']:.4f}x, {g['agg_nodes']:,} "
                          f"aggregation nodes in {g['used']} chunks.")]
    out += ["", "End to end (one process, --hag off against on, same seed):", "",
            "| graph | fanouts | --hag | epoch | train step | blocks run through a HAG | rows saved | search | test acc |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in result["train"]:
        if "error" in r:
            out.append(f"| {r['dataset']} | | {r['hag']} | failed: {r['error']} | | | | | |")
            continue
        h = r["hag_stats"]
        out.append(f"| {r['dataset']} | {r['fanouts']} | {r['hag']} | {r['epoch_s']:.2f} s | {r['step_ms']:.1f} ms | "
                   f"{h['used']:,} of {h['blocks']:,} | {h['saving']:.1%} | {h['search_s']:.1f} s | "
                   f"{r['test_acc']:.2%} |")
    return "\n".join(out)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.hag", description=__doc__.split("\n\n")[0])
    ap.add_argument("--w1", help="W1's directory (default: prepared under --workdir if missing)")
    ap.add_argument("--datasets", default="cora,citeseer,amazon_computers,coauthor_cs")
    ap.add_argument("--batches", type=int, default=10, help="W1 batches whose blocks are searched and timed")
    ap.add_argument("--train-batches", type=int, default=200, help="W1's end-to-end epochs cut to this")
    ap.add_argument("--repeat", type=int, default=10, help="timings averaged over this many runs")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--w1-graph", action="store_true", help="also search W1's whole graph (minutes)")
    ap.add_argument("--cap", default="2GiB", help="the memory cap of W1's whole-graph search")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    ap.add_argument("--shared", default=str(SHARED))
    add_output_args(ap, "hag", report=True)
    args = ap.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        args.batches, args.train_batches, args.repeat, args.hidden, args.datasets = 2, 3, 1, 16, "cora"
    w1 = dataset_or_w1(args.w1, work, args.smoke)
    info = machine_info(work)
    threads = torch.get_num_threads()
    print(f"machine: {info['summary']}; W1 {w1}; {threads} threads", flush=True)
    names = [n for n in args.datasets.split(",") if n]
    real = {n: prepared(n, Path(args.shared), work / "datasets") for n in names}
    sampled = sampled_blocks_study(w1, args.batches, args.repeat, args.hidden)
    whole = [whole_graph(n, d, args.repeat, args.hidden) for n, d in real.items()]
    infer = [inference(n, d, work, args.hidden, max(1, args.repeat // 2)) for n, d in real.items()]
    w1g = w1_graph(w1, args.cap, 3600) if args.w1_graph else None
    runs = []
    for hag in ("off", "on"):
        runs += [train(n, d, hag, "-1,-1", work, None, 1 if args.smoke else 5, 64) for n, d in real.items()]
        runs.append(train(w1.name, w1, hag, "10,5", work, args.train_batches, 1, 1024))
    runs.sort(key=lambda r: (r["dataset"], r["hag"] != "off"))
    result = {"benchmark": "hag", "machine": info, "threads": threads, "w1": str(w1), "batches": args.batches,
              "hidden": args.hidden, "command": command_line("bench.hag", argv), "sampled": sampled,
              "whole": whole, "calibration": calibration(whole), "inference": infer, "w1_graph": w1g, "train": runs}
    return finish(result, args.out, table=table(result), report=args.report, markers=MARKERS)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    main()
