"""The hetero study (issue 50): `diskgnn.train` on heterogeneous graphs out of core against PyG's in-memory
`to_hetero` GraphSAGE (bench.accuracy.hetero_reference), HGB ACM and IMDB, paired by seed; its table and its
section of docs/accuracy.md.

Both graphs are prepared from ../shared/datasets' HGB zips as `prepare --format hgb` does (label.dat's train
and val drawn 80/20 with seed 0, label.dat.test the test set). Both systems train two-layer RGraphSAGE (one
SAGE per relation, summed), hidden 64, dropout 0.5, Adam at lr 0.005, learned rows for the featureless types,
and keep the epoch with the best val metric (accuracy on ACM, micro-F1 on multi-label IMDB). The reference
takes every neighbour, the whole graph in memory, one full-batch step an epoch for 100 epochs; diskgnn samples
10 neighbours per relation at each hop, batches of 128 seeds, for 30 epochs, with no host tier
(`--host-cache 0`: every feature row of every batch read from the files with O_DIRECT), and evaluates with
every neighbour (`--eval full`). The bound (done-when): diskgnn's mean test metric within 1 point of the
reference's.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from diskgnn.train.loop import versions

from ..harness.output import finish, report_markers
from ..harness.seeds import paired_delta, pm, stats
from .runs import paired_runs, subprocess_run

DATASETS = {"acm": ("hgb_acm", "ACM.zip", "ACM"), "imdb": ("hgb_imdb", "IMDB.zip", "IMDB")}
SHARED = {"--hidden": "64", "--lr": "0.005", "--dropout": "0.5"}
DISKGNN = {"--epochs": "30", "--batch-size": "128", "--fanouts": "10,10", "--eval": "full", "--host-cache": "0",
           "--memory-budget": "2GiB", "--checkpoint-every": "off"}
REFERENCE = {"--epochs": "100"}
SYSTEMS = ("reference", "diskgnn")
BOUND = 1.0  # points, |diskgnn - reference| of the mean test metric
MARKERS = report_markers("bench.accuracy", "--study hetero")


def prepared(name: str, shared: Path, work: Path) -> Path:
    """The HGB dataset `name` unzipped and prepared under work/data (once)."""
    from diskgnn.data.hetero.prepare import prepare_hetero

    folder, archive, inner = DATASETS[name]
    out = work / "data" / f"hgb-{name}"
    if (out / "manifest.json").exists():
        return out
    zip_path = shared / folder / archive
    if not zip_path.exists():
        raise SystemExit(f"bench.accuracy: {zip_path} is absent (the real datasets live in ../shared/datasets)")
    raw = work / "data" / f"hgb-{name}-raw"
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(raw)
    return prepare_hetero(raw / inner, out, format="hgb", split_seed=0, overwrite=True)


def words(flags: dict[str, str]) -> list[str]:
    return [f"{flag}={value}" for flag, value in flags.items()]


def run(data: Path, system: str, seed: int, work: Path, smoke: bool) -> dict:
    tag = f"{data.name}-{system}-seed{seed}"
    workdir, out = work / "runs" / tag, work / "summaries" / f"{tag}.json"
    epochs = {"--epochs": "2"} if smoke else {}
    if system == "reference":
        argv = [sys.executable, "-m", "bench.accuracy.hetero_reference", "--data", str(data), "--seed", str(seed),
                *words({**SHARED, **REFERENCE, **epochs}), "--out", str(out)]
    else:
        argv = [sys.executable, "-m", "diskgnn.train", "--data", str(data), "--seed", str(seed),
                *words({**SHARED, **DISKGNN, **epochs}), "--no-progress", "--workdir", str(workdir),
                "--summary-json", str(out)]
    s, wall = subprocess_run(argv, tag, workdir, out)
    metric = "micro_f1" if "test_acc" not in s else "acc"
    return {"metric": metric, "test": s[f"test_{metric}"], "test_macro_f1": s["test_macro_f1"],
            "best_epoch": s["best_epoch"], "wall_s": wall}


def hetero_study(args, names: list[str], work: Path, out: Path, md: Path, info: dict, command: str) -> dict:
    seeds = list(range(args.seeds))
    result = paired_runs(
        names, seeds, SYSTEMS, "system", lambda name: prepared(name, Path(args.shared), work),
        lambda data, name, system, seed: run(data, system, seed, work, args.smoke),
        lambda r: f"{r['dataset']} {r['system']} seed {r['seed']}: test {r['metric']} {r['test']:.4f}, macro-F1 "
                  f"{r['test_macro_f1']:.4f}",
        lambda runs: {"benchmark": "accuracy-hetero", "machine": info, "versions": versions(), "command": command,
                      "seeds": seeds, "shared": SHARED, "diskgnn": DISKGNN, "reference": REFERENCE,
                      "bound_points": BOUND, "runs": runs, "aggregate": aggregate(runs)}, out)
    return finish(result, None, table=table(result["aggregate"]), report=md, markers=MARKERS,
                  section=lambda _: markdown(result))


def aggregate(runs: list[dict]) -> list[dict]:
    rows = []
    for name in dict.fromkeys(r["dataset"] for r in runs):
        mine = [r for r in runs if r["dataset"] == name]
        row = {"dataset": name, "metric": mine[0]["metric"]}
        for key in ("test", "test_macro_f1"):
            by = {s: {r["seed"]: r[key] for r in mine if r["system"] == s} for s in SYSTEMS}
            both = sorted(set(by["reference"]) & set(by["diskgnn"]))
            delta, se = paired_delta(by["diskgnn"], by["reference"])
            row[key] = {"seeds": len(both), **{s: stats([by[s][k] for k in both]) for s in SYSTEMS if both},
                        "delta": delta, "delta_se": se, "within": delta is not None and abs(delta) <= BOUND}
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| dataset | seeds | metric | PyG to_hetero, in memory | diskgnn, out of core | difference (SE) | "
             f"within {BOUND:g} point |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        for key, label in (("test", r["metric"].replace("_", "-")), ("test_macro_f1", "macro-f1")):
            c = r[key]
            if not c["seeds"]:
                continue
            delta = f"{c['delta']:+.2f} ({c['delta_se']:.2f})" if c["delta_se"] is not None else f"{c['delta']:+.2f}"
            lines.append(f"| {r['dataset']} | {c['seeds']} | {label} | {pm(c['reference'])} | {pm(c['diskgnn'])} | "
                         f"{delta} | {'yes' if c['within'] else 'no'} |")
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    return (f"Test metric (x 100, mean ± std over seeds {result['seeds'][0]}-{result['seeds'][-1]}) on HGB's "
            f"label.dat.test; both systems `{' '.join(words(result['shared']))}`, the reference "
            f"`{' '.join(words(result['reference']))}` (full batch, every neighbour), diskgnn "
            f"`{' '.join(words(result['diskgnn']))}`; difference: diskgnn minus the reference, paired by seed, in "
            f"points. `{result['command']}`\n\n" + table(result["aggregate"]))
