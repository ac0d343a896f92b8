"""How the accuracy studies train and compare: the shared hyper-parameters, one diskgnn.train run in this
process, runs of several settings x seeds (in a pool of processes), and test accuracies side by side."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from diskgnn.data.features import RAW_FEATURES, feature_source
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.train.config import TrainConfig
from diskgnn.train.loop import train

from ..harness.common import REPO
from ..harness.output import write_json
from .datasets import prepared

# One set of hyper-parameters for every dataset, model and mode (Kipf & Welling's, 2 layers). A batch of
# 1024 seeds holds every train split here (at most 300 nodes), so diskgnn.train takes exactly one Adam step
# per epoch on all train nodes, as the full-batch reference does; fanouts 25,10 are generous (mean degree
# 4 to 36), so sampling drops few neighbours.
HPARAMS = dict(hidden=64, lr=0.01, weight_decay=5e-4, dropout=0.5)
FANOUTS = "25,10"
BATCH_SIZE = 1024
# The host tier may hold every feature row by default. Placement still leaves the rows epoch 0 did not
# sample cold, so later epochs pack a few (7 % of the rows read on Cora); a partial tier would pack most of
# every 2-hop neighbourhood (up to 27 KB a row on Coauthor CS) to disk and read it back, every epoch of
# every run, on a disk shared with timing benchmarks. Where a row comes from does not change its bytes
# (tests/store/test_store.py checks the store against a gather); --host-cache-fraction below 1 exercises more
# of the packs (the smoke test does).
HOST_CACHE_FRACTION = 1.0
# Page-cache reads for the same reason: online epochs read every sampled row from the feature file.
BACKEND = "mmap"
MEMORY_BUDGET = "16GiB"  # a planning bound only; the host tier is sized by --host-cache-fraction
# The model of the studies that compare settings of one trainer (quantized features, samplers, precisions).
MODEL = "sage"


def wait_while(flag: Path | None) -> None:
    """Waits while `flag` exists (another job on this machine asks for quiet while it times)."""
    if flag is None or not flag.exists():
        return
    print(f"waiting while {flag} exists ...", flush=True)
    while flag.exists():
        time.sleep(10)


def diskgnn_run(data: Path, model: str, seed: int, epochs: int, mode: str, host_fraction: float, workdir: Path,
                log: Path, features: str = "fp32", **options) -> dict:
    """One diskgnn.train run in this process; its output goes to `log`, its workdir is removed after.
    `options`: more TrainConfig fields (max_batches / eval_max_batches, the sampler's)."""
    ds = open_dataset(data)
    # The tier's share is of the rows the run moves: code rows for a quantized variant.
    row_bytes = feature_source(ds, features).row_bytes
    cfg = TrainConfig(data=str(data), model=model, fanouts=FANOUTS, batch_size=BATCH_SIZE, epochs=epochs,
                      seed=seed, sampling=mode, workdir=str(workdir), progress=False, backend=BACKEND,
                      memory_budget=MEMORY_BUDGET, features=features, force_features=True,
                      host_cache=str(int(host_fraction * ds.num_nodes * row_bytes)), **HPARAMS, **options)
    cfg.validate()
    start = time.perf_counter()
    with open(log, "w") as f, contextlib.redirect_stdout(f):
        summary = train(cfg)
    wall = time.perf_counter() - start
    shutil.rmtree(workdir)
    hits = {name: t["hit_rate"] for name, t in summary["tiers"].items()}
    return {"test_acc": summary["test_acc"], "val_acc": summary["val_acc"], "best_epoch": summary["best_epoch"],
            "wall_s": wall, "tier_hit_rates": hits, "device": summary["device"]}


def paused_run(task: dict) -> dict:
    """diskgnn_run(**task) once task["pause"] (a flag file, or None) is gone; a pool's unit of work."""
    task = dict(task)
    wait_while(task.pop("pause"))
    return diskgnn_run(**task)


@contextlib.contextmanager
def pool(jobs: int) -> Iterator[ProcessPoolExecutor | None]:
    """Processes to train in, where `jobs` > 1 (else None: in this one).

    Runs are independent (each seeded, in its own workdir), so the jobs only change the wall time. Spawned,
    not forked: a fork would copy this process's torch and pipeline threads' state.
    """
    with contextlib.ExitStack() as stack:
        yield stack.enter_context(ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"))) if jobs > 1 \
            else None


def prepared_or_exit(name: str, args, work: Path, edge_split: tuple | None = None) -> Path:
    """The dataset `name` (with `edge_split`: its link variant) prepared under work/data, or the study stopped
    with the reason."""
    try:
        return prepared(name, Path(args.shared), work / "data", edge_split)
    except DiskgnnError as e:
        raise SystemExit(f"bench.accuracy: {e}") from None


def subprocess_run(argv: list[str], tag: str, workdir: Path, summary: Path) -> tuple[dict, float]:
    """A study's training run in its own process (in the repository): the JSON it wrote to `summary` and its wall
    seconds; its workdir removed after (packs of wide rows fill a disk over many runs); the study stopped in one
    line if the run failed."""
    summary.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    shutil.rmtree(workdir, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench.accuracy: {tag} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(summary.read_text()), time.perf_counter() - start


def paired_runs(names: list[str], seeds: list[int], modes: tuple[str, ...], key: str, data: Callable[[str], object],
                run: Callable[[object, str, str, int], dict], line: Callable[[dict], str],
                result: Callable[[list[dict]], dict], out: Path) -> dict:
    """Every dataset x seed x mode (modes innermost, so that a seed's modes run side by side): `run(data(name),
    name, mode, seed)` tagged with the dataset, the mode (under `key`) and the seed, `line` of it printed; after
    each seed `result(runs)` is written to `out` (a long study that stops keeps what it measured). Returns the
    last result."""
    runs: list[dict] = []
    last: dict = {}
    for name in names:
        prepared_data = data(name)
        for seed in seeds:
            for mode in modes:
                runs.append({"dataset": name, key: mode, "seed": seed, **run(prepared_data, name, mode, seed)})
                print(line(runs[-1]), flush=True)
            last = result(runs)
            write_json(out, last)
    return last


def offline_runs(name: str, data: Path, *, epochs: int, limits: dict, settings: dict[str, dict],
                 seeds: list[int], args, work: Path, runner: ProcessPoolExecutor | None,
                 slug: Callable[[str], str]) -> Iterator[tuple[str, int, dict]]:
    """MODEL trained offline on dataset `name` for `epochs` (cut by `limits`, TrainConfig fields) under each
    setting (name -> TrainConfig fields) with each seed; yields (setting, seed, summary) in that order as they
    finish, and prints a setting's accuracies after its last seed. `slug` names a setting's run directory."""
    pause = Path(args.pause_while) if args.pause_while else None
    keys = [(setting, seed) for setting in settings for seed in seeds]
    tasks = []
    for setting, seed in keys:
        tag = f"{name}-{MODEL}-{slug(setting)}-seed{seed}"
        tasks.append(dict(pause=pause, data=data, model=MODEL, seed=seed, epochs=epochs, mode="offline",
                          host_fraction=args.host_cache_fraction, workdir=work / "runs" / tag,
                          log=work / "logs" / f"{tag}.log", **limits, **settings[setting]))
    done = runner.map(paused_run, tasks) if runner else map(paused_run, tasks)
    mine = []
    for (setting, seed), summary in zip(keys, done):
        mine.append(summary)
        yield setting, seed, summary
        if seed == seeds[-1]:
            print(f"{name} {setting}: test acc " + " ".join(f"{100 * r['test_acc']:.1f}" for r in mine)
                  + f" ({sum(r['wall_s'] for r in mine):.0f} s)", flush=True)
            mine = []


def hyperparameters(args, *, memory_budget: bool = True) -> dict:
    """What every run of a study trained with, for its record."""
    hp = {**HPARAMS, "layers": 2, "fanouts": FANOUTS, "batch_size": BATCH_SIZE,
          "host_cache_fraction": args.host_cache_fraction, "backend": BACKEND}
    return {**hp, "memory_budget": MEMORY_BUDGET} if memory_budget else hp


def delta_text(r: dict) -> str:
    if r.get("features") == RAW_FEATURES or r.get("baseline"):
        return "(baseline)"
    se = f" ({r['delta_se']:.2f})" if r["delta_se"] is not None else ""
    return f"{r['delta']:+.2f}{se}"
