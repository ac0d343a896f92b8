"""The link study (issue 39): `diskgnn.train --task link` against the in-memory PyG reference
(bench.accuracy.link_reference) on the four real graphs, paired by seed; its table and its section of
docs/accuracy.md.

Each graph is prepared undirected without self-loops and with an edge split of 0.85 / 0.05 / 0.10 (seed 0).
Both systems train GraphSAGE (2 layers, hidden 256) with a dot decoder and BCE on the same link batches
(1,024 train edges, 10 chunks of 100 uniform negatives), Adam at lr 0.001, no dropout, for the dataset's
epochs; diskgnn samples fanouts 10,5 out of core (offline sampling, the default plan under 2 GiB), the
reference runs its encoder on the whole graph in memory at every step. The two larger graphs differ where
SETTINGS says (the reference's whole-graph step costs 0.4 s on Amazon Computers and 2.9 s on Coauthor CS's
6,805-wide rows at hidden 256 on the 2-core VM, so they take batches of 4,096 edges, and Coauthor CS hidden
64; diskgnn's batches of those rows need more than 2 GiB in flight). Amazon Computers (mean degree 36) trains 12
epochs, as both systems still gain at 5, and diskgnn samples whole neighbourhoods there, as the reference's
whole-graph encoder sees them: at 10,5 its epoch-0 model wins on val (docs/accuracy.md). Both rank the held-out
edges against the same 1,000 negatives per eval batch; the best val MRR picks the epoch. The bound (done-when): the mean
test MRR and AUC within 1 point of the reference's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from diskgnn.train.loop import versions

from ..harness.output import finish, report_markers
from ..harness.seeds import paired_delta, pm, stats
from .runs import paired_runs, prepared_or_exit, subprocess_run

DATASETS = ("cora", "citeseer", "amazon_computers", "coauthor_cs")
EDGE_SPLIT = (0.85, 0.05, 0.1)
EPOCHS = {"cora": 20, "citeseer": 20, "amazon_computers": 12, "coauthor_cs": 5}
# per dataset, what replaces SHARED's settings for both systems, and DISKGNN's for diskgnn
SETTINGS = {"amazon_computers": ({"--batch-size": "4096"}, {"--fanouts": "-1,-1", "--eval-fanouts": "-1,-1",
                                                           "--memory-budget": "4GiB"}),
            "coauthor_cs": ({"--batch-size": "4096", "--hidden": "64"}, {"--memory-budget": "8GiB"})}
SHARED = {"--batch-size": "1024", "--chunks": "10", "--negatives": "100", "--hidden": "256", "--lr": "0.001",
          "--dropout": "0", "--eval-negatives": "1000"}
DISKGNN = {"--fanouts": "10,5", "--memory-budget": "2GiB", "--checkpoint-every": "off"}
SYSTEMS = ("reference", "diskgnn")
METRICS = ("mrr", "auc")
BOUND = 1.0  # points, |diskgnn - reference| of the mean test MRR and AUC
MARKERS = report_markers("bench.accuracy", "--study link")


def settings(name: str, flags: dict[str, str], which: int) -> list[str]:
    """`flags` (SHARED or DISKGNN) with the dataset's SETTINGS[name][which] in place."""
    return words({**flags, **SETTINGS.get(name, ({}, {}))[which]})


def words(flags: dict[str, str]) -> list[str]:
    """Each flag and its value as one `flag=value` word: argparse takes `--fanouts -1,-1` for two flags."""
    return [f"{flag}={value}" for flag, value in flags.items()]


def run(data: Path, name: str, system: str, seed: int, epochs: int, work: Path) -> dict:
    """One run's test metrics."""
    tag = f"{data.name}-{system}-seed{seed}"
    workdir, out = work / "runs" / tag, work / "summaries" / f"{tag}.json"
    common = ["--data", str(data), "--seed", str(seed), "--epochs", str(epochs), *settings(name, SHARED, 0)]
    if system == "reference":
        argv = [sys.executable, "-m", "bench.accuracy.link_reference", *common, "--out", str(out)]
    else:
        argv = [sys.executable, "-m", "diskgnn.train", "--task", "link", *common, *settings(name, DISKGNN, 1),
                "--no-progress", "--workdir", str(workdir), "--summary-json", str(out)]
    s, wall = subprocess_run(argv, tag, workdir, out)
    test = s["test"] if system == "reference" else s["test_metrics"]
    return {"epochs": epochs, **{m: test[m] for m in ("mrr", "hits@1", "hits@10", "auc")},
            "best_epoch": s["best_epoch"], "wall_s": wall}


def link_study(args, names: list[str], work: Path, out: Path, md: Path, info: dict, command: str) -> dict:
    seeds = list(range(args.seeds))
    kept = []
    if args.keep_others and out.exists():
        earlier = json.loads(out.read_text())
        kept = [r for r in earlier["runs"] if r["dataset"] not in names]
        command = f"{earlier['command']}; then {command}" if kept else command
    result = paired_runs(
        names, seeds, SYSTEMS, "system", lambda name: prepared_or_exit(name, args, work, EDGE_SPLIT),
        lambda data, name, system, seed: run(data, name, system, seed, args.epochs or EPOCHS[name], work),
        lambda r: f"{r['dataset']} {r['system']} seed {r['seed']}: test MRR {r['mrr']:.4f}, AUC {r['auc']:.4f}",
        lambda runs: {"benchmark": "accuracy-link", "machine": info, "versions": versions(), "command": command,
                      "seeds": seeds, "edge_split": list(EDGE_SPLIT), "shared": SHARED, "diskgnn": DISKGNN,
                      "bound_points": BOUND, "runs": kept + runs, "aggregate": aggregate(kept + runs)}, out)
    return finish(result, None, table=table(result["aggregate"]), report=md, markers=MARKERS,
                  section=lambda _: markdown(result))


def aggregate(runs: list[dict]) -> list[dict]:
    rows = []
    for name in dict.fromkeys(r["dataset"] for r in runs):
        row = {"dataset": name, "epochs": next(r["epochs"] for r in runs if r["dataset"] == name)}
        for m in METRICS:
            by = {s: {r["seed"]: r[m] for r in runs if r["dataset"] == name and r["system"] == s} for s in SYSTEMS}
            both = sorted(set(by["reference"]) & set(by["diskgnn"]))
            delta, se = paired_delta(by["diskgnn"], by["reference"])
            row[m] = {"seeds": len(both), **{s: stats([by[s][k] for k in both]) for s in SYSTEMS},
                      "delta": delta, "delta_se": se,
                      "within": delta is not None and abs(delta) <= BOUND}
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| dataset | epochs | seeds | metric | PyG in memory | diskgnn out of core | difference (SE) | within "
             f"{BOUND:g} point |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for m in METRICS:
            c = r[m]
            delta = f"{c['delta']:+.2f} ({c['delta_se']:.2f})" if c["delta_se"] is not None else \
                (f"{c['delta']:+.2f}" if c["delta"] is not None else "-")
            lines.append(f"| {r['dataset']} | {r['epochs']} | {c['seeds']} | {m.upper()} | {pm(c['reference'])} | "
                         f"{pm(c['diskgnn'])} | {delta} | {'yes' if c['within'] else 'no'} |")
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    def text(flags: dict[str, str]) -> str:
        return " ".join(words(flags))

    shown = {r["dataset"] for r in result["aggregate"]}
    own = "".join(f"; {name}: both `{text(both)}`" + (f", diskgnn `{text(ours)}`" if ours else "")
                  for name, (both, ours) in SETTINGS.items() if name in shown)
    return (f"Test MRR and AUC (x 100, mean ± std over seeds {result['seeds'][0]}-{result['seeds'][-1]}) against "
            f"1,000 sampled negatives per batch of 1,000 held-out edges; edge split {result['edge_split']}; both "
            f"systems `{text(SHARED)}`, diskgnn `{text(DISKGNN)}`{own}; difference: diskgnn minus the reference, "
            f"paired by seed, in points. `{result['command']}`\n\n" + table(result["aggregate"]))
