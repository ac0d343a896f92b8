"""Quantized features under a memory cap: disk bytes, epoch time and hit rates per feature variant.

    python -m bench.quantized [--data W1_DIR] [--features fp32,sq8,sq1,vq:w=16,L=2048] [--batches 200] [--cap 2GiB]
    python -m bench.quantized --smoke                 # tiny, for the test suite

Each variant trains with `python -m diskgnn.train --features VARIANT` (sage,
fanouts 10,5, batch 1024, hidden 256, one epoch of --batches batches) in its
own process under a cgroup memory cap (page cache included, dropped first),
--memory-budget = the cap, twice:

  auto   the host cache the plan picks: its byte budget holds 4-32x more
         code rows than fp32 rows, so the hit rate rises as well;
  none   --host-cache 0: every row comes from the packs, so the bytes read
         show what the smaller rows alone save.

Variants missing from the dataset are added first (python -m diskgnn.quantize,
minutes on W1; not timed). Ratios are against fp32 in the same run: disk bytes
per epoch fp32 / variant beside the compression ratio, epoch time variant / fp32
(with --repeat N, the median of N runs, repeats interleaved so that load from
other processes falls on every variant alike). Each run records the CPU other
processes took meanwhile; on 2 cores that slows torch's training threads a lot,
so medians of the quiet runs (others took < 5 s) are reported apart, and
--idle-wait S waits up to S seconds for an idle machine before each run.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from statistics import median

from diskgnn.data.features import RAW_FEATURES
from diskgnn.data.format import open_dataset
from diskgnn.data.quantize.cli import quantize_dataset
from diskgnn.data.quantize.spec import canonical_spec
from diskgnn.units import format_size, parse_size

from .harness.common import cpu_seconds, machine_info, wait_for_idle
from .harness.output import add_output_args, finish
from .harness.runs import trainer
from .harness.workload import add_data_arg, add_training_args, apply_smoke, dataset_or_w1

CACHES = {"auto": "auto", "none": "0"}  # run name -> --host-cache and, on a GPU, --device-cache
QUIET_CPU_S = 5.0  # a run is quiet when other processes took less CPU than this meanwhile


def parse_features(text: str) -> list[str]:
    """Comma-separated variants; a vq spec's own commas (vq:w=16,L=2048) stay inside it."""
    names = re.split(r",(?=[A-Za-z]+\d*(?:[:,]|$))", text)
    return [n if n == RAW_FEATURES else canonical_spec(n) for n in names]


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.quantized", description=__doc__.split("\n\n")[0])
    add_data_arg(ap)
    ap.add_argument("--features", help="variants to compare, fp32 first (default: fp32,sq8,sq1,vq:w=16,L=2048)")
    add_training_args(ap)
    ap.add_argument("--repeat", type=int, default=1, help="runs of every variant, interleaved; medians reported")
    ap.add_argument("--idle-wait", type=float, default=0.0,
                    help="before each run, wait up to this many seconds for the machine to be idle")
    ap.add_argument("--cap", default="2GiB", help="cgroup memory cap, page cache included")
    ap.add_argument("--no-cap", action="store_true", help="run uncapped (no cgroup here)")
    add_output_args(ap, "quantized")
    args = ap.parse_args(argv)
    apply_smoke(args)
    variants = parse_features(args.features or ("fp32,sq8,sq1,vq:w=16,L=" + ("256" if args.smoke else "2048")))
    if variants[0] != RAW_FEATURES:
        variants.insert(0, RAW_FEATURES)  # the baseline every ratio is taken against
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = dataset_or_w1(args.data, work, args.smoke)
    missing = [v for v in variants[1:] if v not in open_dataset(data).quantized_specs]
    quantize_s = {}
    for spec in missing:
        print(f"adding {spec} to {data} (python -m diskgnn.quantize {data} --spec {spec})", flush=True)
        t0 = time.perf_counter()
        quantize_dataset(data, [spec], force=True)  # a speed benchmark: a refused fit is measured too
        quantize_s[spec] = time.perf_counter() - t0
    ds = open_dataset(data)
    cap = None if args.no_cap else parse_size(args.cap)
    info = machine_info(work)
    print(f"machine: {info['summary']}; data {data}: {ds.num_nodes:,} nodes, features "
          f"{format_size(ds.num_nodes * ds.row_bytes)}; cap {args.cap if cap else 'none'}; {args.batches} batches")

    runs = {}  # "variant/cache" -> one result per repeat
    for rep in range(args.repeat):  # repeats interleaved: background load drifts over every variant alike
        for cache, host_cache in CACHES.items():
            for v in variants:
                name, run_dir = f"{v}/{cache}", f"{v.replace(':', '-').replace(',', '-')}-{cache}"
                waited = wait_for_idle(args.idle_wait) if args.idle_wait > 0 else 0.0
                busy0, own0 = cpu_seconds()
                r = trainer(run_dir, data, work, args, memory_budget=args.cap, host_cache=host_cache, cap=cap,
                            features=v, options=("--device-cache", host_cache))
                busy1, own1 = cpu_seconds()
                # CPU that other processes took meanwhile: on 2 cores torch's compute threads slow down
                # badly beside any other busy process, so this says which epoch times are comparable.
                r["other_cpu_s"], r["idle_wait_s"] = (busy1 - busy0) - (own1 - own0), waited
                runs.setdefault(name, []).append(r)
                done = f"epoch {r['epoch_s']:.1f} s, disk read {format_size(r['disk_bytes_read'])}, other " \
                       f"processes' CPU {r['other_cpu_s']:.0f} s" if "error" not in r else f"FAILED: {r['error']}"
                print(f"{name} #{rep}: {done}", flush=True)
    summary = {}
    for name, results in runs.items():
        ok = [r for r in results if "error" not in r]
        quiet = [r["epoch_s"] for r in ok if r["other_cpu_s"] < QUIET_CPU_S]
        if ok:
            summary[name] = {"epoch_s": median(r["epoch_s"] for r in ok), "all": [r["epoch_s"] for r in ok],
                             "quiet": median(quiet) if quiet else None,
                             "other_cpu_s": [r["other_cpu_s"] for r in ok], "last": ok[-1]}
    rows = []
    for name, m in summary.items():
        v, cache = name.rsplit("/", 1)
        r, base = m["last"], summary.get(f"{RAW_FEATURES}/{cache}")
        row = {"features": v, "cache": cache, "row_bytes": r["feature_row_bytes"],
               "compression": ds.row_bytes / r["feature_row_bytes"], "disk_bytes_read": r["disk_bytes_read"],
               "disk_saving": _ratio(base and base["last"]["disk_bytes_read"], r["disk_bytes_read"]),
               "epoch_s": m["epoch_s"], "epoch_s_all": m["all"], "other_cpu_s_all": m["other_cpu_s"],
               "epoch_s_quiet": m["quiet"], "epoch_vs_fp32": _ratio(m["epoch_s"], base and base["epoch_s"]),
               "quiet_epoch_vs_fp32": _ratio(m["quiet"], base and base["quiet"]),
               "hit_rates": {t: s["hit_rate"] for t, s in r["tiers"].items()},
               "host_cache_rows": r["plan"]["tier_rows"].get("host"), "cgroup_peak_bytes": r["cgroup_peak_bytes"],
               "bottleneck": r["bottleneck"]}
        rows.append(row)
        saving = f"{row['disk_saving']:.2f}x less than fp32" if row["disk_saving"] else "n/a vs fp32"
        slower = f"{row['epoch_vs_fp32']:.2f} x fp32" if row["epoch_vs_fp32"] else "n/a vs fp32"
        quiet = f"{m['quiet']:.1f} s" if m["quiet"] else "none"
        quiet_ratio = f" ({row['quiet_epoch_vs_fp32']:.2f} x fp32)" if row["quiet_epoch_vs_fp32"] else ""
        print(f"{name}: {row['row_bytes']} B rows ({row['compression']:.1f}x), disk read "
              f"{format_size(int(row['disk_bytes_read']))} ({saving}), epoch {m['epoch_s']:.1f} s median of "
              f"{len(row['epoch_s_all'])} ({slower}), quiet runs {quiet}{quiet_ratio}, hit rates "
              + " ".join(f"{t} {h:.1%}" for t, h in row["hit_rates"].items()))
    result = {"benchmark": "quantized", "machine": info, "dataset": str(data), "nodes": ds.num_nodes,
              "feature_bytes": ds.num_nodes * ds.row_bytes, "batches": args.batches, "fanouts": args.fanouts,
              "batch_size": args.batch_size, "hidden": args.hidden, "cap": args.cap if cap else None,
              "repeat": args.repeat, "variants": variants, "quantize_s": quantize_s, "rows": rows, "runs": runs}
    return finish(result, args.out)


if __name__ == "__main__":
    main()
