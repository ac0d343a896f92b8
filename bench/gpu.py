"""The GPU path (issue 36): W1 out of core on a GPU, and how a batch's feature rows reach GPU memory.

    python -m bench gpu [--nodes 8000000] [--budget 2GiB] [--device-caches 0,256MiB,all] [--profile-batches 20]
        [--smoke] [--report [FILE]]

On W1's recipe at --nodes, in one run:

- the machine: the card, the host-to-device bandwidth (a 1 GiB pinned copy), the disk's sequential O_DIRECT
  read bandwidth on the feature file (page cache dropped: the floor an epoch's reads are held to), and the
  anonymous host memory the CUDA context takes (what the plan's CUDA_BASE_RSS estimates);
- per batch (fanouts 10,5, 1024 seeds; every row in host memory), three ways of bringing its rows into GPU
  memory: the CPU's native gather into a pinned buffer and one copy, the zero-copy kernel, and one
  index_select with every row on the device (the ceiling), each with the CPU time it took, checked equal; and
  the start-up calibration `--zero-copy auto` decides from;
- `python -m diskgnn.train --device cuda`, one whole epoch each in its own process, page cache dropped first:
  at a --budget host budget with each
  device cache of --device-caches (the host tiers by the CPU's gather), then at the second of them with
  `--zero-copy on` and `auto`, at `auto` with `--precision bf16` and with sq8 features (the variant written
  first by `python -m diskgnn.quantize`, timed), and with every row in GPU memory, its step eager
  (`--cuda-graphs off`) and captured (the default); per run the epoch, ms per batch, each stage's busy and wait
  time, the GPU's busy share, the step (replays of its CUDA graph, or eager), bytes read, the host's anonymous
  peak against the budget, and the epoch against the all-in-GPU one (captured) and against the disk floor (bytes
  read / the sequential bandwidth);
- torch.profiler over diskgnn's own training epoch (Run.train_epoch, every row in GPU memory, after an epoch of
  warm-up): the training thread's top host ops by self CPU time per batch, in OUT's stem + .profile.txt (the
  top 10 in the JSON and the report): where a batch's host time goes when the GPU waits for it.

Without a CUDA device it stops with one line saying so: `make gpu-check` runs it on a GPU machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.harness.common import REPO, GpuUtilisation, drop_caches, machine_info
from bench.harness.output import add_output_args, command_line, finish, write_json
from bench.harness.workload import synthetic_workload
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.offline.sample import sample_epoch
from diskgnn.units import format_size, parse_size

MARKERS = ("<!-- bench.gpu: begin -->", "<!-- bench.gpu: end -->")
FANOUTS, BATCH = [10, 5], 1024
BLOCK, CHUNK = 4096, 64 << 20  # O_DIRECT's alignment; the disk floor's largest read
QUANTIZED = "sq8"  # the quantized variant the bench trains from
ALL_IN_GPU = {"memory_budget": "16GiB", "device_cache": "all", "zero_copy": "off"}  # the ceiling's options


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


def disk_floor(path: Path, limit: int = 4 << 30) -> dict:
    """The disk's sequential read bandwidth on `path` (its first `limit` bytes in whole 4 KiB blocks, O_DIRECT
    reads of up to 64 MiB, the last one shorter, the page cache dropped first): what an epoch's bytes read cost
    at least. A small file (the smoke run's) is read whole; one under a block measures nothing (0 GB/s)."""
    from diskgnn.io.reader import FileReader

    cold = drop_caches()
    with FileReader(path) as reader:
        size = min(limit, reader.file_size) // BLOCK * BLOCK
        chunk = max(BLOCK, min(CHUNK, size))
        buf = np.empty(chunk, dtype=np.uint8)
        t = time.perf_counter()
        for offset in range(0, size, chunk):
            reader.read_ranges([[offset, min(chunk, size - offset), 0]], buf)
        seconds = time.perf_counter() - t
        backend, direct = reader.backend, reader.direct
    return {"bytes": size, "seconds": seconds, "gb_per_s": size / seconds / 1e9 if size and seconds > 0 else 0.0,
            "backend": backend, "direct": direct, "cold_cache": cold is None, **({"note": cold} if cold else {})}



def gathers(data: Path, batches: list[np.ndarray]) -> dict:
    """Per batch: seconds and CPU seconds of each way of bringing its rows into GPU memory, checked equal."""
    from diskgnn import _native
    from diskgnn.defaults import aggregate_threads
    from diskgnn.store.staging import Slab
    from diskgnn.store.uva import MappedRows, calibrate

    ds = open_dataset(data)
    # every row in anonymous host memory (read once): CUDA cannot page-lock the file's read-only mapping
    host = torch.from_numpy(np.array(ds.features))
    mapped = MappedRows(host)
    on_device = host.to("cuda")
    slab = Slab(max(b.size for b in batches), ds.row_bytes, pinned=True)

    def cpu(nodes):
        slab.reset(nodes.size)
        _, rows = slab.take(nodes.size)
        _native.assemble_rows(rows, [(host.numpy().view(np.uint8), nodes, None, 0)], aggregate_threads())
        return slab.view(0, nodes.size, host.dtype).to("cuda", non_blocking=True)

    def zero_copy(nodes):
        out = torch.empty((nodes.size, ds.feature_dim), dtype=host.dtype, device="cuda")
        ids = torch.from_numpy(nodes).to("cuda", non_blocking=True)
        mapped.gather(ids, torch.arange(nodes.size, device="cuda"), out)
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
    zero, cpu_gb = calibrate(ds.row_bytes)
    out["calibration"] = {"zero_copy_gb_per_s": zero, "cpu_gather_gb_per_s": cpu_gb}
    return out


def runs(budget: str, caches: list[str]) -> dict[str, dict]:
    """The epochs to run: name -> diskgnn.train options."""
    out = {f"{budget} host, device cache {c}": {"memory_budget": budget, "device_cache": c, "zero_copy": "off"}
           for c in caches}
    mid = caches[min(1, len(caches) - 1)]
    for z in ("on", "auto"):
        out[f"{budget} host, device cache {mid}, zero copy {z}"] = {"memory_budget": budget, "device_cache": mid,
                                                                    "zero_copy": z}
    auto = {"memory_budget": budget, "device_cache": mid, "zero_copy": "auto"}
    out[f"{budget} host, device cache {mid}, zero copy auto, bf16"] = {**auto, "precision": "bf16"}
    out[f"{budget} host, device cache {mid}, zero copy auto, {QUANTIZED} features"] = {**auto, "features": QUANTIZED}
    out["every row in GPU memory"] = ALL_IN_GPU
    out["every row in GPU memory, CUDA graphs off"] = {**ALL_IN_GPU, "cuda_graphs": "off"}  # after: the ceiling first
    return out


def quantize(data: Path, spec: str = QUANTIZED) -> dict:
    """Writes the `spec` variant of the dataset as a user would (`python -m diskgnn.quantize`), once: the
    seconds it took, or why it failed (its epoch then fails saying so too)."""
    if spec in open_dataset(data).manifest.get("quantized", {}):
        return {"spec": spec, "seconds": None, "note": "already written"}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "diskgnn.quantize", str(data), "--spec", spec], capture_output=True,
                          text=True, cwd=REPO)
    if proc.returncode != 0:
        return {"spec": spec, "error": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]}
    return {"spec": spec, "seconds": time.perf_counter() - t}


def resolved(options: dict, features_bytes: int) -> dict:
    """diskgnn.train's options with device cache "all" as the features' bytes."""
    return {**options, **({"device_cache": str(features_bytes)} if options["device_cache"] == "all" else {})}


def epoch(data: Path, work: Path, name: str, options: dict, features_bytes: int, device: str = "cuda") -> dict:
    """One whole epoch of `python -m diskgnn.train --device DEVICE` in its own process, page cache dropped. Not
    under a cgroup cap: the host's anonymous peak is measured against the budget instead, so that a plan that
    misjudges the CUDA context shows by how much rather than being killed."""
    options = resolved(options, features_bytes)
    slug = "".join(c if c.isalnum() else "-" for c in name)
    summary = work / f"{slug}.json"
    argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--workdir", str(work / "runs" / slug),
            "--device", device, "--epochs", "1", "--eval", "none", "--no-progress", "--fanouts", "10,5",
            "--batch-size", str(BATCH), "--summary-json", str(summary),
            *[a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", v)]]
    cold = drop_caches()
    with GpuUtilisation() as gpu:
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]}
    s = json.loads(summary.read_text())
    batches = s["stage_times_s"]["train"]["items"]
    return {"epoch_s": s["epoch_times_s"][0], "ms_per_batch": 1000 * s["epoch_times_s"][0] / max(1, batches),
            "batches": batches, "stages_s": {k: {"busy_s": v["busy_s"], "wait_s": v["wait_s"]}
                                             for k, v in s["stage_times_s"].items()},
            "bottleneck": s["bottleneck"], "gpu_busy": gpu.result, "disk_bytes_read": s["disk_bytes_read"],
            "peak_anon_bytes": s["peak_anon_bytes"], "budget_bytes": parse_size(options["memory_budget"]),
            "host_gather": s["host_gather"], "step": s["step"], "tiers": s["tiers"], "plan": s["plan"],
            "cold_cache": cold is None}


def profiled_epoch(data: Path, work: Path, options: dict, device: str = "cuda", batches: int = 20):
    """torch.profiler over one epoch of `batches` batches of diskgnn's own training loop (Run.train_epoch: the
    real step, whatever it is), in this process, after an epoch of the same length as warm-up (the allocator,
    the kernels' first launches, the pipeline's start). Returns the profiler's key_averages and the batches.
    Only the training thread's ops are recorded (the pipeline's threads started without the profiler)."""
    from torch.profiler import ProfilerActivity, profile

    from diskgnn.train.checkpoints import EpochState
    from diskgnn.train.options import from_options
    from diskgnn.train.run import Run

    cfg = from_options(data=str(data), workdir=str(work / "runs" / "profile"), device=device, epochs=2,
                       max_batches=batches, eval="none", progress=False, fanouts=FANOUTS, batch_size=BATCH, **options)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with open(work / "profile.log", "w") as log, contextlib.redirect_stdout(log):
        run = Run(cfg)
        try:
            model, optimizer = run.model_and_optimizer()  # as diskgnn.train's
            run.train_epoch(model, optimizer, EpochState(0))
            state = EpochState(1)
            with profile(activities=activities) as prof:
                run.train_epoch(model, optimizer, state)
                trained = state.next_batch
                if device == "cuda":
                    torch.cuda.synchronize()
        finally:
            run.loader.close()
    return prof.key_averages(), trained


def host_events(averages) -> list:
    """A profile's host ops (key_averages' events on the CPU: aten ops, CUDA runtime calls, Python regions such
    as the optimizer's step; device kernels left out), the most self CPU time first."""
    from torch.autograd import DeviceType

    host = [e for e in averages if e.device_type == DeviceType.CPU and not e.key.startswith("ProfilerStep")]
    return sorted(host, key=lambda e: -e.self_cpu_time_total)


def host_ops(averages, batches: int, top: int = 25) -> list[dict]:
    """The `top` host ops of a profile over `batches` batches: name, calls and self CPU us, per batch."""
    return [{"name": e.key, "calls_per_batch": e.count / max(1, batches),
             "self_cpu_us_per_batch": e.self_cpu_time_total / max(1, batches)} for e in host_events(averages)[:top]]


def profile_text(rows: list[dict], batches: int) -> str:
    lines = [f"top host ops by self CPU time, per batch over {batches} batches (the training thread)",
             f"{'self CPU us':>12} {'calls':>8}  op"]
    return "\n".join(lines + [f"{r['self_cpu_us_per_batch']:12.1f} {r['calls_per_batch']:8.2f}  {r['name']}"
                              for r in rows]) + "\n"


def profile_run(data: Path, work: Path, features_bytes: int, out: Path, batches: int, device: str = "cuda") -> dict:
    """The profiled epoch with every row in GPU memory: its top 25 host ops in OUT's stem + .profile.txt, the
    top 10 returned (for the JSON and the report), or why it failed."""
    try:
        averages, trained = profiled_epoch(data, work, resolved(ALL_IN_GPU, features_bytes), device, batches)
    except (DiskgnnError, RuntimeError) as e:  # the plan's refusals; CUDA's and the profiler's (CUPTI) failures
        return {"error": str(e).strip().splitlines()[:1] or [type(e).__name__]}
    rows = host_ops(averages, trained)
    path = out.with_name(out.stem + ".profile.txt")
    path.write_text(profile_text(rows, trained))
    host_us = sum(e.self_cpu_time_total for e in host_events(averages))
    return {"batches": trained, "file": str(path), "top": rows[:10],
            "host_ms_per_batch": host_us / 1000 / max(1, trained)}


def cell(value: float | None, fmt: str) -> str:
    """`value` formatted, or "-" where it is missing or zero (a floor or ceiling that was not measured)."""
    return format(value, fmt) if value else "-"


def table(r: dict) -> str:
    g, floor = r["gathers"], r["disk_floor"]
    lines = [f"`{r['command']}` on {r['gpu']} ({r['machine']['summary']}); {r['dataset']}; host-to-device "
             f"{cell(r['h2d_gb_per_s'], '.1f')} GB/s (1 GiB pinned copy); the disk's sequential O_DIRECT reads "
             f"{cell(floor['gb_per_s'], '.2f')} GB/s ({floor['backend']}); the CUDA context took "
             f"{format_size(r['cuda_context_bytes'])} of anonymous host memory.", "",
             "| rows into GPU memory | ms/batch | CPU ms/batch | rows/batch | GB/s | of H2D bandwidth |",
             "|---|---|---|---|---|---|"]
    for name, v in g.items():
        if name != "calibration":
            share = v["gb_per_s"] / r["h2d_gb_per_s"] if r["h2d_gb_per_s"] else None
            lines.append(f"| {name} | {v['ms_per_batch']:.2f} | {v['cpu_ms_per_batch']:.2f} | "
                         f"{v['rows_per_batch']:,.0f} | {v['gb_per_s']:.1f} | {cell(share, '.0%')} |")
    c = g["calibration"]
    lines += ["", f"The start-up calibration (`--zero-copy auto`): zero copy {c['zero_copy_gb_per_s']:.1f} GB/s, the "
              f"CPU's gather and copy {c['cpu_gather_gb_per_s']:.1f} GB/s.{quantize_line(r.get('quantize'))}", "",
              "| diskgnn.train --device cuda, one epoch | epoch s | ms/batch | x all-in-GPU | x disk floor | "
              "read GB | host peak / budget | GPU busy | step | stages busy/wait (s) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    ceiling = r["epochs"].get("every row in GPU memory", {}).get("epoch_s")
    for name, v in r["epochs"].items():
        if "error" in v:
            lines.append(f"| {name} | failed: {v['error'][0]} | | | | | | | | |")
            continue
        floor_s = v["disk_bytes_read"] / 1e9 / floor["gb_per_s"] if floor["gb_per_s"] else None
        busy = v["gpu_busy"].get("mean_percent")
        cells = [name, f"{v['epoch_s']:.1f}", f"{v['ms_per_batch']:.1f}",
                 cell(ceiling and v["epoch_s"] / ceiling, ".2f"), cell(floor_s and v["epoch_s"] / floor_s, ".2f"),
                 f"{v['disk_bytes_read'] / 1e9:.2f}",
                 f"{format_size(v['peak_anon_bytes'])} / {format_size(v['budget_bytes'])}",
                 f"{busy:.0f} %" if busy is not None else "-", step_cell(v["step"]),
                 ", ".join(f"{k} {t['busy_s']:.1f}/{t['wait_s']:.1f}" for k, t in v["stages_s"].items())]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + profile_lines(r.get("profile"))) + "\n"


def step_cell(step: dict) -> str:
    """A run's step: replays of its captured graph (and its eager warm-up batches), or eager and why."""
    if "replays" not in step:
        return step["line"].removeprefix("step: ")
    failed = f"; capture failed: {step['capture_failed']}" if "capture_failed" in step else ""
    return f"graph: {step['replays']} replays, {step['eager']} eager, {step['captures']} captures{failed}"


def quantize_line(q: dict | None) -> str:
    if not q:
        return ""
    if "error" in q:
        return f" Writing the {q['spec']} variant failed: {q['error'][0]}"
    took = f"{q['seconds']:.1f} s to write" if q["seconds"] is not None else f"nothing ({q['note']})"
    return f" The {q['spec']} variant (`python -m diskgnn.quantize`) took {took}."


def profile_lines(p: dict | None) -> list[str]:
    if not p:
        return []
    if "error" in p:
        return ["", f"The profiled epoch failed: {p['error'][0]}"]
    return ["", f"torch.profiler, every row in GPU memory, {p['batches']} batches: the training thread's host ops "
            f"took {p['host_ms_per_batch']:.2f} ms of self CPU time a batch; the top 10 ({p['file']} has 25):", "",
            "| host op | calls/batch | self CPU us/batch |", "|---|---|---|",
            *(f"| `{o['name']}` | {o['calls_per_batch']:.2f} | {o['self_cpu_us_per_batch']:.1f} |" for o in p["top"])]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8_000_000)
    ap.add_argument("--budget", default="2GiB", help="host memory budget of the out-of-core epochs")
    ap.add_argument("--device-caches", default="0,256MiB,all")
    ap.add_argument("--batches", type=int, default=50, help="batches of the per-batch gathers")
    ap.add_argument("--profile-batches", type=int, default=20, help="batches of the profiled epoch (and of its "
                    "warm-up epoch before it)")
    ap.add_argument("--smoke", action="store_true", help="20,000 nodes, 3 batches, device caches 0, 1MiB and all")
    add_output_args(ap, "gpu", report=True)
    args = ap.parse_args(argv)
    from diskgnn.store.uva import why_not
    from diskgnn.target.cuda import measure_cuda_context

    reason = why_not("cuda")
    if reason is not None:
        raise DiskgnnError(f"bench.gpu needs a CUDA device and CuPy: {reason} (run `make gpu-check` on a GPU machine)")
    if args.smoke:
        args.nodes, args.batches, args.device_caches, args.budget = 20_000, 3, "0,1MiB,all", "3GiB"
        args.profile_batches = 5
    context = measure_cuda_context()  # first: what the plan's start-up measurement sees
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = synthetic_workload(work, args.nodes)
    ds = open_dataset(data)
    samples = sample_epoch(ds, work / "batches.samples", fanouts=FANOUTS, batch_size=BATCH, seed=0, epoch=0,
                           max_batches=args.batches)
    batches = [np.asarray(b.nodes, dtype=np.int64) for b in samples]
    info = machine_info(work)
    gpu = torch.cuda.get_device_name()
    print(f"machine: {info['summary']}; {gpu}; data {data}", flush=True)
    result = {"benchmark": "gpu", "machine": info, "gpu": gpu, "dataset": str(data), "cuda_context_bytes": context,
              "h2d_gb_per_s": h2d_bandwidth(), "disk_floor": disk_floor(data / "features.bin"),
              "gathers": gathers(data, batches), "quantize": quantize(data), "epochs": {},
              "command": command_line("bench.gpu", argv)}
    write_json(args.out, result)
    for name, options in runs(args.budget, args.device_caches.split(",")).items():
        print(f"bench.gpu: {name}", flush=True)
        result["epochs"][name] = epoch(data, work, name, options, ds.num_nodes * ds.row_bytes)
        # after each run: a call cut short by its time limit keeps what ran
        finish(result, args.out, report=args.report, markers=MARKERS, section=lambda _: table(result))
    print("bench.gpu: profiled epoch", flush=True)
    result["profile"] = profile_run(data, work, ds.num_nodes * ds.row_bytes, Path(args.out), args.profile_batches)
    finish(result, args.out, report=args.report, markers=MARKERS, section=lambda _: table(result))
    print(table(result))
    return result


if __name__ == "__main__":
    from diskgnn.errors import run_cli

    sys.exit(run_cli("bench.gpu", main))
