"""The train step against its matrix-product floor, in fp32 and bf16, and where the rest of it goes.

    python -m bench.step [--data W1_DIR] [--batches 5] [--models sage,gcn,gat] [--report]
    python -m bench.step --smoke                 # tiny, for the test suite

For each model and precision: W1's first --batches batches of 1024 seeds (fanouts 10,5, sampled as
training samples them, features from the file), one train step each as diskgnn.train runs it (the model,
bf16 autocast where asked, the loss in fp32, backward, Adam), timed over --repeat passes; beside it the
floor: the same step's linear maps alone (forward, and backward for the weights and, above the input
layer, the inputs), on random rows of the same shapes under the same autocast; each the median of the
--repeat timed passes over the batches. Step ÷ floor is the
overhead around the matrix work. A torch-profiler table of each setting's step (self CPU time per op)
says where the overhead goes. JSON to bench/results/step.json; with --report, a section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from diskgnn.data.format import open_dataset
from diskgnn.loading.blocks import sampled_blocks
from diskgnn.nn.models import GNN, layer_dims
from diskgnn.offline.sample import epoch_seeds, open_graph, sample_batch

from .harness.common import machine_info
from .harness.output import add_output_args, command_line, finish, report_markers
from .harness.workload import LR, dataset_or_w1

MARKERS = report_markers("bench.step")
FANOUTS = [10, 5]


def autocast(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)


def linear_shapes(kind: str, blocks, dims: list[int]) -> list[tuple[int, int, int, bool]]:
    """(rows, in, out, input needs a gradient) of every linear map a step runs, input layer first."""
    shapes = []
    for i, (block, d_in, d_out) in enumerate(zip(blocks, dims, dims[1:])):
        if kind == "sage":
            shapes += [(block.num_dst, d_in, d_out, i > 0)] * 2  # self and neighbour maps
        elif kind == "gcn":
            shapes.append((block.num_dst, d_in, d_out, i > 0))
        else:  # GAT projects every source row (its heads concatenated: d_out wide)
            shapes.append((block.num_src, d_in, d_out, i > 0))
    return shapes


def floor_s(shapes, bf16: bool, repeat: int) -> float:
    """Seconds of the linear maps alone, forward and backward, GAT excepted from bf16 as the model does."""
    tensors = [(torch.randn(r, i, requires_grad=g), torch.randn(o, i, requires_grad=True), torch.randn(r, o))
               for r, i, o, g in shapes]

    def run():
        for x, w, grad in tensors:
            with autocast(bf16):
                y = F.linear(x, w)
            y.backward(grad.to(y.dtype))

    run()
    run()
    return median_s(run, repeat)


def median_s(fn, repeat: int) -> float:
    """The median of `repeat` timed calls of fn: a busy moment of the machine moves one call, not the result."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def profile_table(step, rows: int = 12) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    total = sum(e.self_cpu_time_total for e in prof.key_averages()) or 1
    return [{"op": e.key, "self_ms": e.self_cpu_time_total / 1e3, "share": e.self_cpu_time_total / total,
             "calls": e.count} for e in events]


def measure(data: Path, models: list[str], batches: int, repeat: int, hidden: int) -> list[dict]:
    ds = open_dataset(data)
    graph = open_graph(ds)
    feats, labels = np.asarray(ds.features), np.asarray(ds.labels)
    work = []
    for b, seeds in enumerate(epoch_seeds(ds.split("train"), 1024, 0, 0)[:batches]):
        batch = sample_batch(graph, seeds, key=b, fanouts=FANOUTS, seed=0, threads=2)
        work.append((sampled_blocks(batch), torch.from_numpy(np.asarray(feats[batch.nodes], dtype=np.float32)),
                     torch.from_numpy(labels[batch.seeds].astype(np.int64))))
    rows = []
    for kind in models:
        for precision in ("fp32", "bf16"):
            bf16 = precision == "bf16"
            torch.manual_seed(0)
            model = GNN(kind, ds.feature_dim, hidden, ds.num_classes, len(FANOUTS), 0.5)
            optimizer = torch.optim.Adam(model.parameters(), lr=LR)
            model.train()

            def step(blocks, x, y):
                optimizer.zero_grad(set_to_none=True)
                with autocast(bf16):
                    logits = model(blocks, x)
                F.cross_entropy(logits.float(), y).backward()
                optimizer.step()

            def one_pass():
                for w in work:
                    step(*w)

            one_pass()  # warm: oneDNN's kernels for these shapes, the allocator's pools
            step_s = median_s(one_pass, repeat) / len(work)
            dims = layer_dims(ds.feature_dim, hidden, ds.num_classes, len(FANOUTS))
            floor = sum(floor_s(linear_shapes(kind, blocks, dims), bf16 and kind != "gat", repeat)
                        for blocks, _, _ in work) / len(work)
            row = {"model": kind, "precision": precision, "step_ms": 1e3 * step_s, "floor_ms": 1e3 * floor,
                   "step_over_floor": step_s / floor, "profile": profile_table(lambda: step(*work[0]))}
            rows.append(row)
            print(f"{kind} {precision}: step {row['step_ms']:.1f} ms, linear maps {row['floor_ms']:.1f} ms, "
                  f"{row['step_over_floor']:.2f}x", flush=True)
    return rows


def table(result: dict) -> str:
    out = [f"W1's first {result['batches']} batches of 1024 seeds, fanouts 10,5, hidden {result['hidden']}, "
           f"{result['threads']} threads; `{result['command']}`", "",
           "| model | precision | train step | linear maps alone (floor) | step ÷ floor |", "|---|---|---|---|---|"]
    for r in result["rows"]:
        out.append(f"| {r['model']} | {r['precision']} | {r['step_ms']:.1f} ms | {r['floor_ms']:.1f} ms | "
                   f"{r['step_over_floor']:.2f}x |")
    for r in result["rows"]:
        if r["model"] != "sage":
            continue
        out += ["", f"Where a sage step goes in {r['precision']} (self CPU time, top ops):", "",
                "| op | self ms | share | calls |", "|---|---|---|---|"]
        out += [f"| `{p['op']}` | {p['self_ms']:.1f} | {p['share']:.0%} | {p['calls']} |" for p in r["profile"]]
    return "\n".join(out)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.step", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="W1's directory (default: prepared under --workdir if missing)")
    ap.add_argument("--models", default="sage,gcn,gat")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    add_output_args(ap, "step", report=True)
    args = ap.parse_args(argv)
    if args.smoke:
        args.batches, args.repeat, args.hidden, args.models = 1, 1, 16, "sage,gat"
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = dataset_or_w1(args.data, work, args.smoke)
    info = machine_info(work)
    print(f"machine: {info['summary']}; data {data}; {torch.get_num_threads()} threads", flush=True)
    rows = measure(data, args.models.split(","), args.batches, args.repeat, args.hidden)
    result = {"benchmark": "step", "machine": info, "threads": torch.get_num_threads(), "dataset": str(data),
              "batches": args.batches, "hidden": args.hidden, "command": command_line("bench.step", argv),
              "rows": rows}
    return finish(result, args.out, table=table(result), report=args.report, markers=MARKERS)


if __name__ == "__main__":
    main()
