"""The GPU path (issue 27): how a batch's feature rows reach GPU memory, and epochs out of core on a GPU.

    python -m bench gpu [--nodes 8000000] [--batches 50] [--train-batches 100] [--smoke] [--report [FILE]]

On W1's recipe at --nodes (the largest that fits the GPU machine's disk and minutes), batches sampled
offline with diskgnn's sampler (fanouts 10,5, 1024 seeds). Per batch, with every feature row held in host
memory (the host tier):

- cpu:  the CPU gathers the batch's rows into a pinned buffer and copies it to the GPU (what the store does
  without zero copy);
- zero-copy: the GPU gathers them itself from mapped pinned memory (store/uva.py's kernel);
- device: every row already in GPU memory, one index_select (the ceiling);

each timed with the GPU synchronised, with the CPU time the process spent per batch, and the effective GB/s
of the rows moved against the host-to-device bandwidth measured here (a 1 GiB pinned copy). Then
`diskgnn.train --device cuda` for --train-batches batches with the host tier gathered by the GPU, by the
CPU, and with every row in the device tier, with the GPU's busy share (nvidia-smi). Without a CUDA device
it stops with one line saying so: `make gpu-check` runs it on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import GpuUtilisation, machine_info, synthetic_workload, write_json, write_section
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.offline.sample import sample_epoch

REPO = Path(__file__).resolve().parents[1]
MARKERS = ("<!-- bench.gpu: begin -->", "<!-- bench.gpu: end -->")
FANOUTS, BATCH = [10, 5], 1024


def h2d_bandwidth(nbytes: int = 1 << 30) -> float:
    """GB/s of one pinned host-to-device copy (the best of three)."""
    host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return nbytes / best / 1e9


def gathers(data: Path, batches: list[np.ndarray]) -> dict:
    """Per batch: seconds and CPU seconds of each way of bringing its rows into GPU memory, checked equal."""
    from diskgnn.store.uva import MappedRows

    ds = open_dataset(data)
    # every row in anonymous host memory (read once): CUDA cannot page-lock the file's read-only mapping
    host = torch.from_numpy(np.array(ds.features))
    mapped = MappedRows(host)
    on_device = host.to("cuda")
    staging = torch.empty((max(b.size for b in batches), ds.feature_dim), dtype=host.dtype).pin_memory()

    def cpu(nodes):
        buf = staging[: nodes.size]
        np.take(host.numpy(), nodes, axis=0, out=buf.numpy())
        return buf.to("cuda", non_blocking=True)

    def zero_copy(nodes):
        out = torch.empty((nodes.size, ds.feature_dim), dtype=host.dtype, device="cuda")
        mapped.gather(nodes, np.arange(nodes.size), out)
        return out

    def device(nodes):
        return on_device.index_select(0, torch.from_numpy(nodes).to("cuda", non_blocking=True))

    ways = {"cpu": cpu, "zero-copy": zero_copy, "device": device}
    for fn in ways.values():  # warm-up: the kernel's first launch, the allocator
        fn(batches[0])
    torch.cuda.synchronize()
    out = {}
    for name, fn in ways.items():
        seconds, cpu_seconds = [], []
        for nodes in batches:
            torch.cuda.synchronize()
            t, c = time.perf_counter(), time.process_time()
            x = fn(nodes)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - t)
            cpu_seconds.append(time.process_time() - c)
            if nodes is batches[0]:
                assert torch.equal(x.cpu(), host[torch.from_numpy(nodes)]), f"{name} gathered other rows"
        rows = float(np.mean([b.size for b in batches]))
        out[name] = {"ms_per_batch": 1000 * float(np.mean(seconds)),
                     "cpu_ms_per_batch": 1000 * float(np.mean(cpu_seconds)),
                     "rows_per_batch": rows, "gb_per_s": rows * ds.row_bytes / float(np.mean(seconds)) / 1e9}
    mapped.close()
    return out


def epochs(data: Path, work: Path, train_batches: int) -> dict:
    """diskgnn.train on the GPU, --train-batches batches: host tier gathered by the GPU, by the CPU, every row on
    the device."""
    from diskgnn.train.config import from_options
    from diskgnn.train.loop import train

    ds = open_dataset(data)
    features = ds.num_nodes * ds.row_bytes
    runs = {"zero-copy host tier": dict(zero_copy="on", device_cache="0"),
            "cpu-gather host tier": dict(zero_copy="off", device_cache="0"),
            "all rows on the GPU": dict(device_cache=str(features))}
    out = {}
    for name, options in runs.items():
        cfg = from_options(data=str(data), workdir=str(work / name.split()[0]), device="cuda", epochs=1,
                           max_batches=train_batches, eval="none", progress=False, memory_budget="16GiB",
                           host_cache=str(features), **options)
        with GpuUtilisation() as gpu:
            summary = train(cfg)
        out[name] = {"epoch_s": summary["epoch_times_s"][0], "ms_per_batch": 1000 * summary["epoch_times_s"][0]
                     / train_batches, "gpu_busy": gpu.result, "host_gather": summary["host_gather"],
                     "tiers": summary["tiers"], "bottleneck": summary["bottleneck"]}
    return out


def table(r: dict) -> str:
    g = r["gathers"]
    lines = [f"`{r['command']}` on {r['gpu']} ({r['machine']['summary']}); {r['dataset']}, {r['batches']} batches of "
             f"{BATCH} seeds at fanouts {','.join(map(str, FANOUTS))}; host-to-device bandwidth "
             f"{r['h2d_gb_per_s']:.1f} GB/s (1 GiB pinned copy).", "",
             "| rows into GPU memory | ms/batch | CPU ms/batch | rows/batch | GB/s | of H2D bandwidth |",
             "|---|---|---|---|---|---|"]
    for name, v in g.items():
        lines.append(f"| {name} | {v['ms_per_batch']:.2f} | {v['cpu_ms_per_batch']:.2f} | {v['rows_per_batch']:,.0f} | "
                     f"{v['gb_per_s']:.1f} | {v['gb_per_s'] / r['h2d_gb_per_s']:.0%} |")
    lines += ["", "| diskgnn.train --device cuda | ms/batch | GPU busy (mean) | bottleneck |", "|---|---|---|---|"]
    for name, v in r["epochs"].items():
        busy = v["gpu_busy"].get("mean_percent")
        lines.append(f"| {name} | {v['ms_per_batch']:.1f} | {f'{busy:.0f} %' if busy is not None else '-'} | "
                     f"{v['bottleneck']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8_000_000)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--train-batches", type=int, default=100)
    ap.add_argument("--smoke", action="store_true", help="20,000 nodes, 3 batches")
    ap.add_argument("--workdir", default=str(REPO / "bench" / "results" / "gpu-work"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "gpu.json"))
    ap.add_argument("--report", nargs="?", const=str(REPO / "docs" / "benchmarks.md"))
    args = ap.parse_args(argv)
    from diskgnn.store.uva import why_not

    reason = why_not("cuda")
    if reason is not None:
        raise DiskgnnError(f"bench.gpu needs a CUDA device and CuPy: {reason} (run `make gpu-check` on a GPU machine)")
    if args.smoke:
        args.nodes, args.batches, args.train_batches = 20_000, 3, 3
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = synthetic_workload(work, args.nodes)
    samples = sample_epoch(open_dataset(data), work / "batches.samples", fanouts=FANOUTS, batch_size=BATCH, seed=0,
                           epoch=0, max_batches=args.batches)
    batches = [np.asarray(b.nodes, dtype=np.int64) for b in samples]
    info = machine_info(work)
    gpu = torch.cuda.get_device_name()
    print(f"machine: {info['summary']}; {gpu}; data {data}", flush=True)
    result = {"benchmark": "gpu", "machine": info, "gpu": gpu, "dataset": str(data), "batches": len(batches),
              "h2d_gb_per_s": h2d_bandwidth(), "gathers": gathers(data, batches),
              "epochs": epochs(data, work, args.train_batches),
              "command": ("python -m bench.gpu " + " ".join(argv if argv is not None else sys.argv[1:])).strip()}
    write_json(args.out, result)
    print(table(result))
    print(json.dumps({k: result[k] for k in ("h2d_gb_per_s", "gathers")}, indent=1))
    if args.report:
        write_section(Path(args.report), table(result), MARKERS)
    return result


if __name__ == "__main__":
    from diskgnn.errors import run_cli

    sys.exit(run_cli("bench.gpu", main))
