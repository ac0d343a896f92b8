"""The cooperative study (issue 38): `--distributed cooperative` with P ranks of B / P seeds against one process
training batches of B, the same seeds, paired by seed; its table and its section of docs/accuracy.md.

Each run is `python -m diskgnn.train` (one process) or `torchrun --nproc-per-node P -m diskgnn.train
--distributed cooperative` on this machine, over gloo, with the hyper-parameters of the held-out run that
found the gap (GraphSAGE, fanouts 10,5, hidden 64, lr 0.01, dropout 0.5, 60 epochs, sampled evaluation).
Dropout masks keyed by node and evaluation sharded by batch make the two the same training and the same
evaluation (tests/distributed/ checks the weights and accuracies), so the study measures what is left of
the difference at scale: float summation order.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from diskgnn.train.loop import versions

from ..harness.output import finish, report_markers
from ..harness.seeds import paired_delta, pm, stats
from .runs import paired_runs, prepared_or_exit, subprocess_run

DATASETS = ("amazon_computers", "coauthor_cs")
SEEDS, EPOCHS, BATCH, RANKS = 10, 60, 128, 2
HPARAMS = ["--fanouts", "10,5", "--hidden", "64", "--lr", "0.01", "--dropout", "0.5", "--weight-decay", "5e-4",
           "--memory-budget", "3GiB", "--no-progress"]
MARKERS = report_markers("bench.accuracy", "--study cooperative")
MODES = ("one process", "cooperative")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(data: Path, mode: str, seed: int, epochs: int, work: Path) -> dict:
    """One run's summary."""
    tag = f"{data.name}-{mode.replace(' ', '-')}-seed{seed}"
    workdir, summary = work / "runs" / tag, work / "summaries" / f"{tag}.json"
    train = ["-m", "diskgnn.train", "--data", str(data), "--workdir", str(workdir), "--seed", str(seed),
             "--epochs", str(epochs), "--summary-json", str(summary), *HPARAMS]
    if mode == "one process":
        argv = [sys.executable, *train, "--batch-size", str(BATCH)]
    else:
        argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={RANKS}", "--nnodes=1",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_port()}", *train,
                "--batch-size", str(BATCH // RANKS), "--distributed", "cooperative"]
    s, wall = subprocess_run(argv, tag, workdir, summary)
    return {"test_acc": s["test_acc"], "val_acc": s["val_acc"], "best_epoch": s["best_epoch"],
            "train_loss": s["train_loss"], "wall_s": wall}


def cooperative_study(args, names: list[str], work: Path, out: Path, md: Path, info: dict, command: str) -> dict:
    seeds = list(range(args.seeds))
    epochs = args.epochs or EPOCHS
    result = paired_runs(
        names, seeds, MODES, "mode", lambda name: prepared_or_exit(name, args, work),
        lambda data, name, mode, seed: run(data, mode, seed, epochs, work),
        lambda r: f"{r['dataset']} {r['mode']} seed {r['seed']}: test acc {100 * r['test_acc']:.2f}",
        lambda runs: {"benchmark": "accuracy-cooperative", "machine": info, "versions": versions(),
                      "command": command, "seeds": seeds, "epochs": epochs, "ranks": RANKS, "batch_size": BATCH,
                      "hyperparameters": HPARAMS, "runs": runs, "aggregate": aggregate(runs)}, out)
    return finish(result, None, table=table(result["aggregate"]), report=md, markers=MARKERS,
                  section=lambda _: markdown(result))


def aggregate(runs: list[dict]) -> list[dict]:
    rows = []
    for name in dict.fromkeys(r["dataset"] for r in runs):
        acc = {m: {r["seed"]: r["test_acc"] for r in runs if r["dataset"] == name and r["mode"] == m} for m in MODES}
        both = sorted(set(acc[MODES[0]]) & set(acc[MODES[1]]))
        delta, se = paired_delta(acc[MODES[1]], acc[MODES[0]])
        rows.append({"dataset": name, "seeds": len(both), **{m: stats([acc[m][s] for s in both]) for m in MODES},
                     "delta": delta, "delta_se": se, "max_abs_delta": max(
                         (100 * abs(acc[MODES[1]][s] - acc[MODES[0]][s]) for s in both), default=None),
                     "same_accuracy": sum(acc[MODES[0]][s] == acc[MODES[1]][s] for s in both)})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| dataset | seeds | one process (batch 128) | cooperative (2 x 64) | difference (SE) | largest per seed | "
             "same accuracy |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        se = f" ({r['delta_se']:.2f})" if r["delta_se"] is not None else ""
        delta = f"{r['delta']:+.2f}{se}" if r["delta"] is not None else "-"
        largest = f"{r['max_abs_delta']:.2f}" if r["max_abs_delta"] is not None else "-"
        lines.append(f"| {r['dataset']} | {r['seeds']} | {pm(r[MODES[0]])} | {pm(r[MODES[1]])} | {delta} | "
                     f"{largest} | {r['same_accuracy']} of {r['seeds']} |")
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    return (f"Test accuracy (%, mean ± std over seeds {result['seeds'][0]}-{result['seeds'][-1]}), GraphSAGE, "
            f"{result['epochs']} epochs, `{' '.join(HPARAMS)}`; difference: cooperative minus one process, paired by "
            f"seed, in points. `{result['command']}`\n\n" + table(result["aggregate"]))
