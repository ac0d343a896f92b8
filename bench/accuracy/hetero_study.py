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

import json
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
SEAM = {"--epochs": "20", "--batch-size": "128", "--fanouts": "10,10"}
SYSTEMS = ("reference", "diskgnn", "seam")
BOUNDS = {"diskgnn": 1.0, "seam": 1.5}  # points, |system - reference| of the mean test metric (done-when)
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
    epochs = {"--epochs": "1"} if smoke else {}
    if system == "seam":
        argv = [sys.executable, "-m", "bench.accuracy.hetero_seam", "--data", str(data), "--seed", str(seed),
                *words({**SHARED, **SEAM, **epochs}), "--out", str(out)]
    elif system == "reference":
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


def hetero_study(args, names: list[str], systems: list[str], work: Path, out: Path, md: Path, info: dict,
                 command: str) -> dict:
    """The runs of `systems`; with --keep-others the other systems' and datasets' runs saved in `out` stay."""
    seeds = list(range(args.seeds))
    kept = []
    if args.keep_others and out.exists():
        earlier = json.loads(out.read_text())
        kept = [r for r in earlier["runs"] if r["system"] not in systems or r["dataset"] not in names]
        command = f"{earlier['command']}; then {command}" if kept else command
    result = paired_runs(
        names, seeds, tuple(systems), "system", lambda name: prepared(name, Path(args.shared), work),
        lambda data, name, system, seed: run(data, system, seed, work, args.smoke),
        lambda r: f"{r['dataset']} {r['system']} seed {r['seed']}: test {r['metric']} {r['test']:.4f}, macro-F1 "
                  f"{r['test_macro_f1']:.4f}",
        lambda runs: {"benchmark": "accuracy-hetero", "machine": info, "versions": versions(), "command": command,
                      "seeds": sorted({r["seed"] for r in kept + runs}), "shared": SHARED, "diskgnn": DISKGNN,
                      "reference": REFERENCE, "seam": SEAM, "bound_points": BOUNDS, "runs": kept + runs,
                      "aggregate": aggregate(kept + runs)}, out)
    return finish(result, None, table=table(result["aggregate"]), report=md, markers=MARKERS,
                  section=lambda _: markdown(result))


def render_hetero(out: Path, md: Path) -> dict:
    """No training: the runs saved in `out` aggregated again and their section of `md` written (after runs
    were added to `out` by hand from another file, as the JSON's command then says)."""
    result = json.loads(out.read_text())
    result["aggregate"] = aggregate(result["runs"])
    result.setdefault("seam", SEAM)
    return finish(result, out, table=table(result["aggregate"]), report=md, markers=MARKERS,
                  section=lambda _: markdown(result))


def aggregate(runs: list[dict]) -> list[dict]:
    """Per dataset, metric and compared system: both systems' stats over the seeds both ran, and the paired
    difference from the reference."""
    rows = []
    for name in dict.fromkeys(r["dataset"] for r in runs):
        mine = [r for r in runs if r["dataset"] == name]
        for system in [s for s in BOUNDS if any(r["system"] == s for r in mine)]:
            for key in ("test", "test_macro_f1"):
                by = {s: {r["seed"]: r[key] for r in mine if r["system"] == s} for s in ("reference", system)}
                both = sorted(set(by["reference"]) & set(by[system]))
                if not both:
                    continue
                delta, se = paired_delta(by[system], by["reference"])
                rows.append({"dataset": name, "system": system, "metric": mine[0]["metric"] if key == "test"
                             else "macro_f1", "seeds": len(both),
                             "reference": stats([by["reference"][k] for k in both]),
                             "value": stats([by[system][k] for k in both]), "delta": delta, "delta_se": se,
                             "bound": BOUNDS[system], "within": abs(delta) <= BOUNDS[system]})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| dataset | system | seeds | metric | PyG to_hetero, in memory | system | difference (SE) | within |",
             "|---|---|---|---|---|---|---|---|"]
    names = {"diskgnn": "diskgnn.train, out of core", "seam": "PyG's loop through diskgnn.pyg"}
    for r in rows:
        delta = f"{r['delta']:+.2f} ({r['delta_se']:.2f})" if r["delta_se"] is not None else f"{r['delta']:+.2f}"
        lines.append(f"| {r['dataset']} | {names[r['system']]} | {r['seeds']} | {r['metric'].replace('_', '-')} | "
                     f"{pm(r['reference'])} | {pm(r['value'])} | {delta} | "
                     f"{'yes' if r['within'] else 'no'} ({r['bound']:g}) |")
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    return (f"Test metric (x 100, mean ± std over the seeds each pair ran) on HGB's label.dat.test; all systems "
            f"`{' '.join(words(result['shared']))}`; the reference `{' '.join(words(result['reference']))}` (full "
            f"batch, every neighbour), diskgnn `{' '.join(words(result['diskgnn']))}`, the seam (PyG's loop over "
            f"NodeLoader and diskgnn.pyg's hetero stores and sampler, no host tier) "
            f"`{' '.join(words(result['seam']))}`; difference: the system minus the reference, paired by seed, in "
            f"points; within: the issue's bound. `{result['command']}`\n\n" + table(result["aggregate"]))
