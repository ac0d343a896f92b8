"""The report's plots: time per batch, the peers, scaling, the disk against its limits, the pipeline's stages."""

from __future__ import annotations

from pathlib import Path

from ..epoch import CAPPED, GPU_CAPPED, GPU_UNCAPPED, UNCAPPED
from ..harness.plots import figure, legend, save
from .tables import SHORT, cap_names, capped_names, disk_rates, read_per_epoch, report_cap, uncapped_names, work

def plot_epoch(epoch: dict, text: str, path: Path) -> None:
    plt, fig, ax = figure(f"Time per batch, {work(epoch)} of W1 ({epoch['nodes']:,} nodes), log scale",
                           text, figsize=(10, 5))
    colours = dict(zip((*UNCAPPED, *CAPPED, *GPU_UNCAPPED, *GPU_CAPPED), plt.get_cmap("tab20").colors))
    capped = capped_names(epoch)
    groups = [("uncapped", uncapped_names(epoch), epoch["uncapped"])] + [
        (f"cap {c}", capped, epoch["caps"][c]["runs"]) for c in cap_names(epoch)]
    width, labelled = 0.8 / len(capped), set()
    for g, (_, names, runs) in enumerate(groups):
        for i, name in enumerate(names):
            r, x = runs[name], g + (i - (len(names) - 1) / 2) * width
            ms = r.get("per_batch_s", r.get("per_batch_s_above"))
            label = None if name in labelled else SHORT[name]
            labelled.add(name)
            if ms is None:  # not run: a marker at the axis, so the gap is not read as "fast"
                ax.annotate("not run", (x, 0), xycoords=("data", "axes fraction"), rotation=90, ha="center",
                            va="bottom", fontsize=7, color=colours[name])
                ax.bar([x], [0], width, color=colours[name], label=label)
                continue
            bar = ax.bar([x], [ms * 1e3], width, color=colours[name], label=label)[0]
            if "per_batch_s" not in r:  # a lower bound: no batch finished in the time limit
                bar.set_hatch("//")
                ax.annotate("more", (x, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), [label for label, _, _ in groups])
    ax.set_yscale("log")
    ax.set_ylabel("ms per batch (lower is better; hatched: lower bound)")
    legend(ax, ncol=2)
    save(plt, fig, path)


def plot_peers(epoch: dict, text: str, path: Path) -> None:
    """Epoch time and bytes read per epoch for each system and cap, the ratio to diskgnn at the same cap above
    each bar."""
    plt, fig, axes = figure("Peers on W1: epoch time and bytes read per epoch, per cap", text, figsize=(11, 5),
                             ncols=2)
    names = [n for n in capped_names(epoch) if not n.startswith("naive")]
    caps = cap_names(epoch)
    width = 0.8 / max(1, len(names))
    for ax, key, unit, scale in ((axes[0], "epoch_s", "seconds per epoch", 1.0),
                                 (axes[1], "disk_bytes_read", "GB read per epoch", 1e-9)):
        heights = []
        for i, name in enumerate(names):
            xs, ys, notes = [], [], []
            for g, c in enumerate(caps):
                r = epoch["caps"][c]["runs"][name]
                d = epoch["caps"][c]["runs"]["diskgnn"]
                if key not in r or key not in d:
                    continue
                per = (lambda x: read_per_epoch(x, epoch)) if key == "disk_bytes_read" else \
                    (lambda x: x[key])
                xs.append(g + (i - (len(names) - 1) / 2) * width)
                ys.append(per(r) * scale)
                notes.append(per(r) / per(d) if per(d) > 0 else None)
            if not xs:  # not run, or failed at every cap: no empty legend entry
                continue
            bars = ax.bar(xs, ys, width, label=SHORT[name])
            heights += ys
            for b, note in zip(bars, notes):
                if note is not None and name != "diskgnn":
                    ax.annotate(f"{note:,.0f}x" if note >= 10 else f"{note:.1f}x", (b.get_x() + b.get_width() / 2,
                                b.get_height()), ha="center", va="bottom", fontsize=6)
        ax.set_xticks(range(len(caps)), [f"cap {c}" for c in caps])
        if any(h > 0 for h in heights):  # a log axis needs one positive bar (none: every run failed)
            ax.set_yscale("log")
            unit += " (log)"
        ax.set_ylabel(unit)
    legend(axes[0])
    save(plt, fig, path)


def plot_scaling(scaling: dict, text: str, path: Path) -> None:
    import numpy as np

    limits = f"cap {scaling['cap']}" if scaling["cap"] else "no cap"
    plt, fig, ax = figure(f"diskgnn scaling on W1-like graphs\n(one whole epoch; host cache "
                           f"{scaling['host_cache_fraction']:.0%} of the features, {limits})", text, figsize=(7, 4.5))
    ok = [p for p in scaling["points"] if "error" not in p]
    n = np.array([p["nodes"] for p in ok]) / 1e6
    for key, label in (("epoch_s", "training epoch"), ("offline_s", "offline: sample + pack")):
        fit = scaling["fits"].get("epoch" if key == "epoch_s" else "offline")
        line = ax.plot(n, [p[key] for p in ok], "o-", label=label)[0]
        if fit:
            grid = np.array([0, n.max()])
            ax.plot(grid, grid * fit["seconds_per_million_nodes"], "--", color=line.get_color(), alpha=0.6,
                    label=f"{label}: linear fit ({fit['max_abs_deviation']:.0%} max deviation)")
    ax.set_xlabel("million nodes")
    ax.set_ylabel("seconds")
    legend(ax)
    save(plt, fig, path)


def plot_disk(epoch: dict, limits: dict, text: str, path: Path) -> None:
    plt, fig, ax = figure(f"Disk reads during training at cap {report_cap(epoch)} against the device's limits",
                           text, figsize=(8, 4.5))
    rows = [(SHORT[name], rate) for name, _, rate in disk_rates(epoch) if rate is not None]
    ax.barh([r[0] for r in rows], [r[1] for r in rows])
    for key, style, label in (("sequential_1m", "-", "fio sequential 1 MiB"), ("random_4k", ":", "fio random 4 KiB")):
        mbps = limits.get(key, {}).get("MBps")
        if mbps:
            ax.axvline(mbps, linestyle=style, color="k", label=f"{label}: {mbps:,.0f} MB/s")
    ax.set_xlabel("MB/s read from the disk")
    legend(ax)
    save(plt, fig, path)


def plot_stages(epoch: dict, text: str, path: Path) -> None:
    r = epoch["caps"][report_cap(epoch)]["runs"]["diskgnn"]
    plt, fig, ax = figure(f"diskgnn pipeline stages at cap {report_cap(epoch)}: busy and waiting time per stage",
                           text, figsize=(7, 4))
    stages = list(r.get("stage_times_s", {}))
    busy = [r["stage_times_s"][s]["busy_s"] for s in stages]
    wait = [r["stage_times_s"][s]["wait_s"] for s in stages]
    ax.barh(stages, busy, label="busy")
    ax.barh(stages, wait, left=busy, label="waiting (for input or for room downstream)")
    if "epoch_s" in r:
        ax.axvline(r["epoch_s"], color="k", linestyle="--", label=f"epoch {r['epoch_s']:.1f} s")
    ax.set_xlabel("seconds in the epoch")
    ax.invert_yaxis()
    legend(ax)
    save(plt, fig, path)
