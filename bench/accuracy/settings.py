"""Studies of one setting of the trainer against another, paired by seed: the sampler study (issue 22,
neighbour sampling against LABOR and dependent minibatches) and the precision study (issue 25, bf16 against
fp32); their tables and their sections of docs/accuracy.md."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from diskgnn.data.format import open_dataset
from diskgnn.train.loop import versions

from ..harness.output import finish, write_json
from ..harness.seeds import paired_delta, pm, stats
from .datasets import DATASETS, SYNTHETIC, dataset_spec, schedule
from .runs import BATCH_SIZE, MODEL, delta_text, hyperparameters, offline_runs, pool, prepared_or_exit

# The sampler study (issue 22): neighbour sampling against LABOR, with layer dependency and batch dependency κ,
# GraphSAGE offline, the same seeds; a setting is the TrainConfig fields it sets.
SAMPLER_SETTINGS = {
    "neighbor": {},
    "labor": dict(sampler="labor"),
    "labor + layer dep.": dict(sampler="labor", layer_dependency=True),
    "labor + layer dep., κ=4": dict(sampler="labor", layer_dependency=True, batch_dependency=4),
    "labor + layer dep., κ=64": dict(sampler="labor", layer_dependency=True, batch_dependency=64),
    "labor + layer dep., κ=256": dict(sampler="labor", layer_dependency=True, batch_dependency=256),
}
SAMPLER_DATASETS = (*DATASETS, SYNTHETIC)
SAMPLER_MARKERS = ("<!-- bench.accuracy --study sampler: begin -->", "<!-- bench.accuracy --study sampler: end -->")
# The precision study (issue 25): bf16 autocast against fp32, the same datasets, seeds and runs otherwise.
PRECISION_SETTINGS = {"fp32": {}, "bf16": dict(precision="bf16")}
PRECISION_MARKERS = ("<!-- bench.accuracy --study precision: begin -->",
                     "<!-- bench.accuracy --study precision: end -->")


def settings_study(args, names: list[str], settings: list[str], work: Path, out: Path, md: Path, info: dict,
                   command: str) -> dict:
    """Every dataset x setting x seed of args.study's settings trained offline (GraphSAGE, the quantized study's
    hyper-parameters); each setting's test accuracy against the baseline's (the first setting), paired by seed."""
    table, markers, markdown = SETTINGS_STUDIES[args.study]
    seeds = list(range(args.seeds))
    start = time.perf_counter()
    runs: list[dict] = []
    datasets: dict[str, dict] = {}
    result: dict = {}
    with pool(args.jobs) as runner:
        for name in names:
            data = prepared_or_exit(name, args, work)
            ds = open_dataset(data)
            epochs, limits = schedule(name, args.epochs)
            datasets[name] = {"nodes": ds.num_nodes, "edges": ds.num_edges, "epochs": epochs, "limits": limits,
                              "split": dataset_spec(name).split_note,
                              "train_batches": -(-int(ds.split("train").size) // BATCH_SIZE)}
            for setting, seed, summary in offline_runs(
                    name, data, epochs=epochs, limits=limits, settings={s: table[s] for s in settings}, seeds=seeds,
                    args=args, work=work, runner=runner, slug=setting_slug):
                runs.append({"dataset": name, "setting": setting, "seed": seed, **summary})
            rows = settings_aggregate(runs, settings[0])
            result = {"benchmark": f"accuracy-{args.study}", "machine": info, "versions": versions(),
                      "command": command, "torch_threads": torch.get_num_threads(), "device": runs[-1]["device"], "seeds": seeds,
                      "model": MODEL, "settings": {k: table[k] for k in settings}, "baseline": settings[0],
                      "hyperparameters": hyperparameters(args, memory_budget=False),
                      "datasets": datasets, "runs": runs, "aggregate": rows, "smoke": args.smoke,
                      "wall_s": time.perf_counter() - start}
            write_json(out, result)  # after every dataset: a long run that stops keeps what it measured
    finish(result, None, table=settings_table(result["aggregate"], settings[0]), report=md, markers=markers,
           section=lambda _: markdown(result))
    print(f"wrote {md}")
    return result


def setting_slug(setting: str) -> str:
    return "".join(c for c in setting.replace("κ=", "k") if c.isalnum()) or "setting"


def settings_aggregate(runs: list[dict], baseline: str) -> list[dict]:
    """Per dataset and setting: test accuracy, and its change against the baseline setting in points (paired by
    seed: the same initial weights; the runs differ by the setting alone)."""
    rows = []
    for dataset in dict.fromkeys(r["dataset"] for r in runs):
        base = {r["seed"]: r["test_acc"] for r in runs if r["dataset"] == dataset and r["setting"] == baseline}
        for setting in dict.fromkeys(r["setting"] for r in runs if r["dataset"] == dataset):
            acc = {r["seed"]: r["test_acc"] for r in runs if r["dataset"] == dataset and r["setting"] == setting}
            row = {"dataset": dataset, "setting": setting, "test": stats(list(acc.values())), "delta": None,
                   "delta_se": None, "baseline": setting == baseline}
            row["delta"], row["delta_se"] = paired_delta(acc, base)
            rows.append(row)
    return rows


def settings_table(rows: list[dict], baseline: str) -> str:
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    cell = {(r["dataset"], r["setting"]): r for r in rows}
    lines = ["| setting | " + " | ".join(datasets) + " | largest loss |", "|---" * (len(datasets) + 2) + "|"]
    for setting in settings:
        cells, losses = [], []
        for d in datasets:
            r = cell.get((d, setting))
            if r is None:
                cells.append("—")
                continue
            text = pm(r["test"])
            if setting != baseline and r["delta"] is not None:
                text += f" ({delta_text(r)})"
                losses.append(-r["delta"])
            cells.append(text)
        worst = f"{max(losses):.2f}" if losses else "—"
        lines.append(f"| {setting} | " + " | ".join(cells) + f" | {worst} |")
    return "\n".join(lines)


def dataset_lines(result: dict) -> str:
    """The datasets a study trained on, one line each: nodes, epochs and batches, and its split."""
    return "\n".join(
        f"- {name}: {d['nodes']:,} nodes, {d['epochs']} epochs of {d['train_batches']} batch(es)"
        + (f" (cut to {d['limits']['max_batches']} batches, evaluated on {d['limits']['eval_max_batches']})"
           if d["limits"] else "") + f"; {d['split']}" for name, d in result["datasets"].items())


def sampler_markdown(result: dict) -> str:
    hp = result["hyperparameters"]
    kappa64 = [r for r in result["aggregate"] if r["delta"] is not None and r["setting"] != "neighbor"
               and SAMPLER_SETTINGS.get(r["setting"], {}).get("batch_dependency", 1) <= 64]
    worst = min(kappa64, key=lambda r: r["delta"]) if kappa64 else None
    verdict = (f"Largest loss of any setting with κ ≤ 64: {-worst['delta']:.2f} points ({worst['setting']} on "
               f"{worst['dataset']})." if worst else "No setting with κ ≤ 64 was run.")
    return f"""## Samplers: neighbour sampling against LABOR, layer and batch dependency (issue 22)

`{result['command']}`; {len(result['runs'])} runs in {result['wall_s'] / 60:.1f} min; GraphSAGE offline, hidden
{hp['hidden']}, fanouts {hp['fanouts']}, batch {hp['batch_size']}, lr {hp['lr']}, dropout {hp['dropout']}, seeds
{", ".join(map(str, result['seeds']))}; the host tier holds {hp['host_cache_fraction']:.0%} of the rows. Test
accuracy (%) mean ± std over the seeds; in brackets the change against neighbour sampling in points, mean ± its
standard error, paired by seed (same initial weights and dropout; the batches differ by the sampler). With κ > 1
every epoch walks the same permutation of the train nodes in windows of κ batches (the variates drift from batch
to batch and across epochs); where an epoch is cut to its first batches (synthetic) it trains the same seeds
every epoch.

{settings_table(result['aggregate'], "neighbor")}

{verdict}

Datasets:

{dataset_lines(result)}
"""


def precision_markdown(result: dict) -> str:
    hp = result["hyperparameters"]
    losses = [-r["delta"] for r in result["aggregate"] if r["delta"] is not None and not r["baseline"]]
    verdict = f"Largest loss of bf16 on any dataset: {max(losses):.2f} points." if losses else "bf16 was not run."
    return f"""## Precision: bf16 autocast against fp32 (issue 25)

`{result['command']}`; {len(result['runs'])} runs in {result['wall_s'] / 60:.1f} min; GraphSAGE offline, hidden
{hp['hidden']}, fanouts {hp['fanouts']}, batch {hp['batch_size']}, lr {hp['lr']}, dropout {hp['dropout']}, seeds
{", ".join(map(str, result['seeds']))}. bf16: `--precision bf16`, the layers under autocast in bfloat16, weights,
optimizer state and loss in fp32, neighbour sums accumulated in fp32. Test accuracy (%) mean ± std over the seeds; in brackets the
change against fp32 in points, mean ± its standard error, paired by seed (same initial weights, batches and
dropout masks).

{settings_table(result['aggregate'], "fp32")}

{verdict}

Datasets:

{dataset_lines(result)}
"""


# Studies of settings against a baseline (the first setting), paired by seed: their settings, report section and
# its renderer.
SETTINGS_STUDIES = {"sampler": (SAMPLER_SETTINGS, SAMPLER_MARKERS, sampler_markdown),
                    "precision": (PRECISION_SETTINGS, PRECISION_MARKERS, precision_markdown)}
