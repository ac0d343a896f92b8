"""Dependent minibatching: LABOR with layer and batch dependency (κ) against neighbour sampling.

    python -m bench.dependent [--data W1_DIR] [--kappas 1,4,16,64,256] [--batches 0] [--cap 2GiB]
    python -m bench.dependent --data W2_DIR --kappas 64 --layer-dependency yes --epochs 3 --eval-batches 100 --seeds 3
    python -m bench.dependent --smoke                 # tiny, for the test suite

Each setting trains --epochs whole epochs (or of --batches), once per seed (--seeds), with `python -m diskgnn.train` (sage, fanouts 10,5,
batch 1024, hidden 256) in its own process under a cgroup memory cap (page cache included, dropped
first), --memory-budget = the cap, the host cache the plan picks: neighbour sampling, then LABOR with
each κ, without and with --layer-dependency. With κ > 1 the recent-rows tier keeps the last batch's rows
(--recent-batches auto), so its packs hold only what the batch before did not read. Per setting: distinct
input rows and first-layer destinations per batch, bytes packed and read per epoch, the share of rows
each tier served, train-step time (the train stage's busy time per batch) and epoch time, means over the
seeds; with --eval-batches, test accuracy over the seeds and its change paired by seed; ratios are against
neighbour sampling in the same run. The JSON goes to bench/results/dependent.json; the table
and plot, with --report, into docs/benchmarks.md's section of their own and docs/bench/dependent.png.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from diskgnn.data.format import open_dataset
from diskgnn.units import format_size, parse_size

from .harness.common import machine_info
from .harness.output import add_output_args, command_line, finish, report_markers
from .harness.plots import legend, overlaid_bars, save, with_figure
from .harness.runs import trainer
from .harness.seeds import paired_delta, pm, stats
from .harness.workload import add_data_arg, add_training_args, apply_smoke, dataset_or_w1


def markers(dataset: str) -> tuple[str, str]:
    """The report section of one dataset's table (one per dataset directory name)."""
    return report_markers("bench.dependent", dataset)


def settings(kappas: list[int], layer: str) -> dict[str, tuple[str, ...]]:
    """Setting name -> its diskgnn.train options, neighbour sampling first."""
    out = {"neighbor": ()}
    for dep in {"no": [False], "yes": [True], "both": [False, True]}[layer]:
        for k in kappas:
            name = "labor" + (" + layer dep." if dep else "") + f", κ={k}"
            out[name] = ("--sampler", "labor", "--batch-dependency", str(k), *(("--layer-dependency",) if dep else ()))
    return out


def row(name: str, runs: list[dict], base: dict | None) -> dict:
    """One setting's runs (one per seed): their per-epoch means, their test accuracies by seed, and the ratios
    and the paired accuracy change against neighbour sampling's row."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return {"setting": name, "error": failed[0]["error"]}

    def mean(value) -> float:
        return float(np.mean([value(r) for r in runs]))

    out = {"setting": name, "seeds": len(runs),
           "input_rows": mean(lambda r: r["rows_per_batch"]["input"]),
           "first_layer_dst": mean(lambda r: r["rows_per_batch"]["destinations"][0]),
           "packed_bytes": mean(lambda r: r["offline"]["pack_bytes_written"] / r["epochs_done"]),
           "read_bytes": mean(lambda r: r["disk_bytes_read"] / r["epochs_done"]),
           "step_ms": mean(lambda r: 1e3 * r["stage_times_s"]["train"]["busy_s"] / r["stage_times_s"]["train"]["items"]),
           "epoch_s": mean(lambda r: r["epoch_s"]), "sample_s": mean(lambda r: r["sample_s"] / r["epochs_done"]),
           "pack_s": mean(lambda r: r["pack_s"] / r["epochs_done"]),
           "hit_rates": {t: mean(lambda r: r["tiers"][t]["hit_rate"]) for t in runs[0]["tiers"]},
           "cgroup_peak_bytes": max((r["cgroup_peak_bytes"] or 0) for r in runs) or None}
    if "test_acc" in runs[0]:
        out["test_acc"] = {seed: r["test_acc"] for seed, r in enumerate(runs)}
        out["test"] = stats(list(out["test_acc"].values()))
        out["val_acc_per_epoch"] = [r["val_acc_per_epoch"] for r in runs]
    if base is not None:
        for key in ("input_rows", "first_layer_dst", "packed_bytes", "read_bytes", "step_ms", "epoch_s"):
            out[f"{key}_vs_neighbor"] = out[key] / base[key] if base.get(key) else None
        if "test_acc" in out and "test_acc" in base:
            out["test_delta"], out["test_delta_se"] = paired_delta(out["test_acc"], base["test_acc"])
    return out


def accuracy_text(r: dict) -> str:
    """Test accuracy over the seeds, and the paired change against neighbour sampling."""
    if "test" not in r:
        return "not evaluated"
    text = pm(r["test"])
    if r.get("test_delta") is not None:
        se = f" ± {r['test_delta_se']:.2f}" if r.get("test_delta_se") is not None else ""
        text += f" (Δ {r['test_delta']:+.2f}{se})"
    return text


def table(result: dict) -> str:
    epoch = f"epochs of {result['batches']} batches" if result["batches"] else "whole epochs"
    seeds = result["seeds"]
    lines = [f"{Path(result['dataset']).name} ({result['nodes']:,} nodes), fanouts {result['fanouts']}, batch {result['batch_size']}, "
             f"cap {result['cap'] or 'none'}, {result['epochs']} {epoch} per run, {seeds} seed{'s' if seeds > 1 else ''} "
             f"per setting (bytes and times: means per epoch); `{result['command']}`. Ratios: against neighbour sampling "
             "in the same run; test accuracy in % (mean ± std over seeds; Δ: the paired change in points ± its "
             "standard error).", "",
             "| setting | input rows / batch | 1st-layer dst / batch | packed / epoch | read / epoch | recent tier "
             "| step | epoch | test acc |", "|---|---|---|---|---|---|---|---|---|"]

    def ratio(r, key):
        v = r.get(f"{key}_vs_neighbor")
        return f" ({v:.2f}x)" if v is not None and r["setting"] != "neighbor" else ""

    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['setting']} | failed: {r['error']} | | | | | | | |")
            continue
        lines.append(
            f"| {r['setting']} | {r['input_rows']:,.0f}{ratio(r, 'input_rows')} | {r['first_layer_dst']:,.0f}"
            f"{ratio(r, 'first_layer_dst')} | {format_size(int(r['packed_bytes']))}{ratio(r, 'packed_bytes')} | "
            f"{format_size(int(r['read_bytes']))}{ratio(r, 'read_bytes')} | {r['hit_rates'].get('recent', 0):.1%} | "
            f"{r['step_ms']:.1f} ms{ratio(r, 'step_ms')} | {r['epoch_s']:.1f} s{ratio(r, 'epoch_s')} | "
            f"{accuracy_text(r)} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    ok = [r for r in result["rows"] if "error" not in r]
    names = [r["setting"] for r in ok]
    plt, fig, ax = overlaid_bars(f"Dependent minibatching on {Path(result['dataset']).name}: bytes read per epoch "
                                 "and epoch time", result["machine"]["summary"], names,
                                 ("read per epoch (GiB)", [r["read_bytes"] / 2**30 for r in ok]),
                                 ("packed per epoch (GiB)", [r["packed_bytes"] / 2**30 for r in ok]), "GiB")
    twin = ax.twiny()
    twin.plot([r["epoch_s"] for r in ok], names, "ko-", label="epoch (s)")
    twin.set_xlabel("epoch time (s)")
    legend(ax)
    save(plt, fig, path)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.dependent", description=__doc__.split("\n\n")[0])
    add_data_arg(ap)
    add_training_args(ap, batches=0)
    ap.add_argument("--kappas", default="1,4,16,64,256", help="comma-separated batch dependencies κ of LABOR")
    ap.add_argument("--layer-dependency", choices=("no", "yes", "both"), default="both")
    ap.add_argument("--cap", default="2GiB", help="cgroup memory cap, page cache included")
    ap.add_argument("--host-cache", default="auto", help="diskgnn.train --host-cache (auto: the plan's)")
    ap.add_argument("--no-cap", action="store_true", help="run uncapped (no cgroup here)")
    ap.add_argument("--seeds", type=int, default=1,
                    help="runs of every setting, seeds 0 .. N-1 (with --eval-batches, their test accuracies paired "
                         "by seed against neighbour sampling's)")
    add_output_args(ap, "dependent", report=True,
                    report_help="write the table into this markdown file's own section (default docs/benchmarks.md) "
                                "and the plot beside it in bench/dependent.png")
    args = ap.parse_args(argv)
    apply_smoke(args)
    if args.smoke:  # no host tier, so that a tiny graph still packs and reads
        args.kappas, args.layer_dependency, args.host_cache = "1,4", "yes", "0"
    kappas = [int(k) for k in args.kappas.split(",")]
    if any(k < 1 for k in kappas):
        raise SystemExit(f"bench.dependent: --kappas {args.kappas}: each must be at least 1")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = dataset_or_w1(args.data, work, args.smoke)
    ds = open_dataset(data)
    cap = None if args.no_cap else parse_size(args.cap)
    info = machine_info(work)
    print(f"machine: {info['summary']}; data {data}: {ds.num_nodes:,} nodes; cap {args.cap if cap else 'none'}",
          flush=True)
    rows, base = [], None
    for name, options in settings(kappas, args.layer_dependency).items():
        run_dir = name.replace(" ", "").replace(",", "-").replace("+", "").replace(".", "").replace("κ=", "k")
        runs = [trainer(run_dir, data, work, args, memory_budget=args.cap if cap else "2GiB",
                        host_cache=args.host_cache, cap=cap, options=options, seed=seed) for seed in range(args.seeds)]
        rows.append(row(name, runs, base))
        if name == "neighbor" and "error" not in rows[-1]:
            base = rows[-1]
        r = rows[-1]
        print(f"{name}: " + (f"FAILED: {r['error']}" if "error" in r else
                             f"{r['input_rows']:,.0f} input rows/batch, read {format_size(int(r['read_bytes']))} "
                             f"an epoch, epoch {r['epoch_s']:.1f} s, test acc {accuracy_text(r)}"), flush=True)
    result = {"benchmark": "dependent", "machine": info, "dataset": str(data), "nodes": ds.num_nodes,
              "batches": args.batches, "epochs": args.epochs, "seeds": args.seeds, "fanouts": args.fanouts, "batch_size": args.batch_size, "hidden": args.hidden,
              "cap": args.cap if cap else None, "host_cache": args.host_cache, "kappas": kappas,
              "command": command_line("bench.dependent", argv), "rows": rows}
    return finish(result, args.out, table=table(result), report=args.report, markers=markers(data.name),
                  section=lambda md: with_figure(md, f"dependent-{data.name}", f"dependent minibatching on {data.name}",
                                                 lambda png: plot(result, png), table(result)))


if __name__ == "__main__":
    main()
