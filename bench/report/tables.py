"""The report's tables: per-batch times and ratios per system and cap, the peers, the disk, the stages, scaling."""

from __future__ import annotations

from diskgnn.units import format_size

from ..epoch import CAPPED, GPU_CAPPED, GPU_UNCAPPED, UNCAPPED
from ..scaling import percentages

LABELS = {
    "diskgnn_all_cached": "diskgnn, uncapped, every row in RAM (its compute limit)",
    "pyg_memory": "PyG in memory, uncapped, page cache warm",
    "diskgnn": "diskgnn, capped, cold",
    "pyg_memmap_default": "PyG + memmap, capped, cold",
    "pyg_memmap_random": "PyG + memmap + MADV_RANDOM, capped, cold",
    "naive_default": "naive np.memmap loop, capped, cold",
    "naive_random": "naive np.memmap loop + MADV_RANDOM, capped, cold",
    "diskgnn_cuda_all_cached": "diskgnn on the GPU, uncapped, every row in host RAM",
    "diskgnn_cuda": "diskgnn on the GPU, capped, cold",
    "dgl_memory": "DGL GraphBolt, features in RAM, uncapped",
    "dgl_ondisk": "DGL GraphBolt on disk (`in_memory: false`), capped, cold",
    "marius": "MariusGNN (installed), capped, cold",
    "marius_at_target": "MariusGNN, the smallest buffer reaching diskgnn's val accuracy, capped, cold",
    "ginex": "Ginex (installed), capped, cold",
}
SHORT = {"diskgnn_all_cached": "diskgnn all in RAM", "pyg_memory": "PyG in memory", "diskgnn": "diskgnn capped",
         "pyg_memmap_default": "PyG+memmap", "pyg_memmap_random": "PyG+memmap+RANDOM",
         "naive_default": "naive memmap", "naive_random": "naive memmap+RANDOM",
         "diskgnn_cuda_all_cached": "diskgnn GPU all in RAM", "diskgnn_cuda": "diskgnn GPU capped",
         "dgl_memory": "DGL in memory", "dgl_ondisk": "DGL on disk", "marius": "MariusGNN",
         "marius_at_target": "MariusGNN at diskgnn's val", "ginex": "Ginex"}
REPORT_CAP = "2GiB"  # the cap the disk and stage tables show (the headline cap), else the first


def _ms(x: float) -> str:
    return f"{x * 1e3:,.1f}" if x < 10 else f"{x * 1e3:,.0f}"


def cell(r: dict | None) -> str:
    """A run's per-batch time, marked when extrapolated, a lower bound, or why it is missing."""
    if r is None:
        return "—"
    if "per_batch_s" in r:
        extra = f", {r['batches_done']} of {r['batches']} batches in the time limit" if r.get("extrapolated") else ""
        gpu = r.get("gpu_utilisation", {})
        extra += f", GPU busy {gpu['mean_percent']:.0f} % (peak {gpu['max_percent']:.0f})" if "mean_percent" in gpu \
            else ""
        extra += f"; loading the graph {r['load_s']:,.1f} s before" if r.get("load_s", 0) >= 0.05 else ""
        return f"{_ms(r['per_batch_s'])} ms ({r['epoch_s']:,.1f} s{extra})"
    if "per_batch_s_above" in r:
        return f"> {_ms(r['per_batch_s_above'])} ms (no batch finished in {r['per_batch_s_above']:.0f} s)"
    return "not run: " + r.get("error", "?").replace("|", "/")


def ratio_cell(a: dict, b: dict) -> str:
    """a / b per batch; a bound where one side is only a bound."""
    if "per_batch_s" in a and "per_batch_s" in b:
        return f"{a['per_batch_s'] / b['per_batch_s']:,.2f}"
    if "per_batch_s_above" in a and "per_batch_s" in b:
        return f"> {a['per_batch_s_above'] / b['per_batch_s']:,.0f}"
    return "n/a"


def cap_names(epoch: dict) -> list[str]:
    return list(epoch["caps"])


def uncapped_names(epoch: dict) -> list[str]:
    return [n for n in (*UNCAPPED, *GPU_UNCAPPED) if n in epoch["uncapped"]]


def capped_names(epoch: dict) -> list[str]:
    return [n for n in (*CAPPED, *GPU_CAPPED) if all(n in c["runs"] for c in epoch["caps"].values())]


def report_cap(epoch: dict) -> str:
    return REPORT_CAP if REPORT_CAP in epoch["caps"] else cap_names(epoch)[0]


def epoch_table(epoch: dict) -> str:
    caps = cap_names(epoch)
    lines = ["| system | uncapped | " + " | ".join(f"cap {c}" for c in caps) + " |",
             "|---|---|" + "---|" * len(caps)]
    for name in uncapped_names(epoch):
        lines.append(f"| {LABELS[name]} | {cell(epoch['uncapped'][name])} | " + " | ".join("—" for _ in caps) + " |")
    for name in capped_names(epoch):
        lines.append(f"| {LABELS[name]} | — | " + " | ".join(cell(epoch["caps"][c]["runs"][name]) for c in caps)
                     + " |")
    return "\n".join(lines)


def ratio_table(epoch: dict) -> str:
    caps = cap_names(epoch)
    u = epoch["uncapped"]
    rows = [("diskgnn capped / diskgnn all in RAM", lambda runs: ratio_cell(runs["diskgnn"], u["diskgnn_all_cached"])),
            ("diskgnn capped / DGL in memory", lambda runs: ratio_cell(runs["diskgnn"], u["dgl_memory"])),
            ("**diskgnn capped / PyG in memory** (≤ 1.0: as fast out of core as PyG in RAM)",
             lambda runs: ratio_cell(runs["diskgnn"], u["pyg_memory"]))]
    rows += [(f"{SHORT[n]} / diskgnn capped", lambda runs, n=n: ratio_cell(runs[n], runs["diskgnn"]))
             for n in capped_names(epoch)[1:]]
    lines = ["| per-batch ratio | " + " | ".join(f"cap {c}" for c in caps) + " |", "|---|" + "---|" * len(caps)]
    for label, fn in rows:
        lines.append(f"| {label} | " + " | ".join(fn(epoch["caps"][c]["runs"]) for c in caps) + " |")
    return "\n".join(lines)


def val_target(epoch: dict) -> float | None:
    """The best val accuracy every evaluated system reached: the lowest of their bests."""
    bests = [max(r["val_acc_per_epoch"]) for r in all_runs(epoch) if r.get("val_acc_per_epoch")]
    return min(bests) if bests else None


def all_runs(epoch: dict) -> list[dict]:
    return [*epoch["uncapped"].values(), *(r for c in epoch["caps"].values() for r in c["runs"].values())]


def time_to(r: dict, target: float | None) -> str:
    """Until the first epoch whose val accuracy reached `target`: the wall time from the system's start, its
    conversions done before it added (each part named), and the training seconds within it."""
    vals, times = r.get("val_acc_per_epoch"), r.get("train_s_per_epoch")
    if target is None or not vals or not times:
        return "—"
    reached = next((i for i, v in enumerate(vals) if v >= target), None)
    if reached is None:
        return "not reached"
    training = f"training {sum(times[: reached + 1]):,.1f} s"
    walls = r.get("wall_s_at_val") or []
    if reached >= len(walls) or walls[reached] is None:
        return training
    before = {**(r.get("conversion_s") or {})}
    parts = [f"{_PARTS[k]} {v:,.1f} s" for k, v in before.items()]
    if "sample_s" in r:  # diskgnn's offline phase runs inside its process, partly beside training
        parts.append(f"sampling {r['sample_s']:,.1f} s + packing {r['pack_s']:,.1f} s (all epochs)")
    return f"**{sum(before.values()) + walls[reached]:,.1f} s** ({'; '.join([training, *parts])})"


_PARTS = {"export_s": "export", "preprocess_s": "GraphBolt preprocessing", "indices_int64_s": "int64 indices",
          "neigh_cache_s": "Ginex's neighbour cache"}


def _conversion(name: str, r: dict) -> str:
    if name.startswith("diskgnn") and "sample_s" in r:
        return f"sample {r['sample_s']:.1f} s + pack {r['pack_s']:.1f} s"
    c = r.get("conversion_s") or {}
    return " + ".join(f"{_PARTS[k]} {v:.1f} s" for k, v in c.items()) or "—"


def _phases_text(phases: list[dict]) -> str:
    """Where a Ginex epoch's seconds went (its whole epochs' mean: bench/peers/ginex.py `phases`), so a reader
    sees which part a GPU would take: the change set's passes run on the training device."""
    done = [p for p in phases if p["training_s"] > 0]
    if not done:
        return ""
    mean = {k: sum(p[k] for p in done) / len(done) for k in done[0]}
    return (f"; an epoch's superbatch steps {mean['sampling_s']:.1f} s (the change set's passes 1-2 "
            f"{mean['pass_1_2_s']:.1f} s, then sampling with its pass 3, {mean['pass_3_s']:.1f} s, beside it), "
            f"the cache switch {mean['switch_s']:.1f} s, training {mean['training_s']:.1f} s, evaluation "
            f"{mean['eval_s']:.1f} s")


def read_per_epoch(r: dict, epoch: dict) -> float | None:
    """Bytes a run read from the disk per epoch: its total (diskgnn's over the epochs it trained, a stopped
    loop's extrapolated to every batch of the run) over the epochs that total covers."""
    if "disk_bytes_read" not in r or not r.get("batches"):
        return None
    return r["disk_bytes_read"] * epoch["batches_per_epoch"] / r["batches"]


def peer_table(epoch: dict, ran_only: bool = False) -> str:
    """Per system and cap: epoch time, test accuracy after the epochs, time to the common val target, bytes
    read, peak memory and preprocessing (`ran_only`: the systems --systems chose, not the rest)."""
    target = val_target(epoch)
    lines = [f"Val target (the best val accuracy every evaluated system reached): "
             f"{'n/a' if target is None else f'{target:.4f}'}.", "",
             "| system | cap | epoch | epochs done | test acc (best val epoch) | time to val target | "
             "read from disk / epoch | peak memory (cgroup) | preprocessing |", "|---|---|---|---|---|---|---|---|---|"]
    rows = [(n, "none", epoch["uncapped"][n]) for n in uncapped_names(epoch)]
    rows += [(n, c, epoch["caps"][c]["runs"][n]) for c in cap_names(epoch) for n in capped_names(epoch)]
    for name, cap, r in rows:
        if ran_only and r.get("not_selected"):
            continue
        if "epoch_s" not in r:
            lines.append(f"| {SHORT[name]} | {cap} | {cell(r)} | | | | | | |")
            continue
        whole = "" if not r.get("extrapolated") else f" (rate from {r['batches_done']:,} of {r['batches']:,} batches)"
        whole += f"; then {r['died']}" if r.get("died") else ""
        if "neighbour_share" in r:
            whole += (f"; {r['buffer'][0]} of {r['buffer'][1]} partitions buffered" if "buffer" in r else "") + \
                f"; sampled among the buffered partitions: about {r['neighbour_share']:.0%} of the neighbours"
        whole += _phases_text(r.get("phases_per_epoch") or [])
        acc = f"{100 * r['test_acc']:.2f} %" if r.get("test_acc") is not None else "—"
        per_epoch = read_per_epoch(r, epoch)
        disk = format_size(int(per_epoch)) if per_epoch is not None else "—"
        peak = format_size(r["cgroup_peak_bytes"]) if r.get("cgroup_peak_bytes") else "—"
        lines.append(f"| {SHORT[name]} | {cap} | {r['epoch_s']:,.1f} s{whole} | {r.get('epochs_done', 0)} | {acc} | "
                     f"{time_to(r, target)} | {disk} | {peak} | {_conversion(name, r)} |")
    return "\n".join(lines)


def disk_rates(epoch: dict) -> list[tuple[str, dict, float | None]]:
    """(system, run, MB/s it read from the disk during training) at the report cap, plus the uncapped runs."""
    runs = {**epoch["uncapped"], **epoch["caps"][report_cap(epoch)]["runs"]}
    out = []
    for name in (*uncapped_names(epoch), *capped_names(epoch)):
        r = runs[name]
        per_epoch = read_per_epoch(r, epoch)
        rate = per_epoch / r["epoch_s"] / 1e6 if per_epoch is not None and r.get("epoch_s") else None
        out.append((name, r, rate))
    return out


def disk_table(epoch: dict, limits: dict) -> str:
    seq = limits.get("sequential_1m", {}).get("MBps")
    rnd = limits.get("random_4k", {})
    lines = ["| source | read from disk per epoch | MB/s during training | share of fio sequential |",
             "|---|---|---|---|"]
    if seq:
        lines.append(f"| fio sequential 1 MiB reads, QD16, O_DIRECT | | **{seq:,.0f}** | 1 |")
    if rnd.get("MBps"):
        lines.append(f"| fio random 4 KiB reads, QD64, O_DIRECT ({rnd['iops']:,.0f} IOPS) | | **{rnd['MBps']:,.0f}** | "
                     f"{rnd['MBps'] / seq:.2f} |" if seq else "")
    if "error" in limits:
        lines.append(f"| fio | not run: {limits['error']} | | |")
    for name, r, rate in disk_rates(epoch):
        if rate is None:
            lines.append(f"| {LABELS[name]} | not measured: {cell(r)} | | |")
            continue
        share = f"{rate / seq:.2f}" if seq else "n/a"
        lines.append(f"| {LABELS[name]} | {format_size(int(read_per_epoch(r, epoch)))} | {rate:,.0f} | {share} |")
    return "\n".join(x for x in lines if x)


def stage_table(epoch: dict) -> str:
    r = epoch["caps"][report_cap(epoch)]["runs"]["diskgnn"]
    if "stage_times_s" not in r:
        return f"(not run: {r.get('error', '?')})"
    lines = [f"Epoch {r['epoch_s']:.1f} s for {r['batches']} batches; offline before it: sample {r['sample_s']:.1f} s, "
             f"pack {r['pack_s']:.1f} s; bottleneck: {r['bottleneck']}; host tier hit rate "
             f"{r['tiers'].get('host', {}).get('hit_rate', 0):.1%}; cgroup peak "
             f"{format_size(r['cgroup_peak_bytes'] or 0)}, anonymous peak {format_size(r['peak_anon_bytes'])}.", "",
             "| stage | busy | waiting | items | busy / epoch |", "|---|---|---|---|---|"]
    for stage, t in r["stage_times_s"].items():
        lines.append(f"| {stage} | {t['busy_s']:.2f} s | {t['wait_s']:.2f} s | {t['items']} | "
                     f"{t['busy_s'] / r['epoch_s']:.0%} |")
    return "\n".join(lines)


def placement_times(scaling: dict) -> str:
    ok = [p for p in scaling["points"] if "error" not in p and "placement_s" in p]
    return ", ".join(f"{p['placement_s']:.1f} s" for p in ok) + " at the scales above" if ok else "not measured"


def scaling_table(scaling: dict) -> str:
    lines = ["| scale | nodes | features | batches | epoch | ms / batch | sample | pack | offline | epoch vs linear | "
             "offline vs linear |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    fits, i = scaling["fits"], 0
    for p in scaling["points"]:
        if "error" in p:
            lines.append(f"| {p['scale']:g} | {p['nodes']:,} | {format_size(p['feature_bytes'])} | not run: "
                         f"{p['error']} | | | | | | | |")
            continue
        dev = [f"{fits[k]['deviation'][i]:+.1%}" if fits else "n/a" for k in ("epoch", "offline")]
        i += 1
        lines.append(f"| {p['scale']:g} | {p['nodes']:,} | {format_size(p['feature_bytes'])} | {p['batches']} | "
                     f"{p['epoch_s']:.1f} s | {_ms(p['per_batch_s'])} | {p['sample_s']:.1f} s | {p['pack_s']:.1f} s | "
                     f"{p['offline_s']:.1f} s | {dev[0]} | {dev[1]} |")
    if fits:
        lines.append("")
        lines.append("; ".join(f"{k}: {f['seconds_per_million_nodes']:.2f} s per million nodes, largest deviation "
                               f"{f['max_abs_deviation']:.1%} ({'within' if f['linear'] else 'NOT within'} "
                               f"{scaling['linear_tolerance']:.0%} of linear)" for k, f in fits.items()) + ".")
        for k, f in fits.items():
            if "per_repeat_deviation" in f:
                lines.append(f"{k} deviations in each repeat: " + "; ".join(map(percentages, f["per_repeat_deviation"]))
                             + "; a least-squares line through the per-scale medians instead: "
                             + percentages(f["least_squares"]["deviation"]) + ".")
    return "\n".join(lines)


def work(epoch: dict) -> str:
    n = epoch.get("epochs", 1)
    if not epoch["batches"]:
        return f"{n} whole epoch(s) of {epoch['batches_per_epoch']:,} batches"
    return f"{n} epoch(s) of {epoch['batches']} batches"
