"""`train(cfg)`: the epochs of a run, its checkpoints and --resume, and the summary.

Each epoch's files are prepared one epoch ahead (the next one is sampled and
packed in the background while this one trains). last.pt is saved at every
epoch end and, every --checkpoint-every, inside the epoch; best.pt at every
epoch whose validation accuracy is the best so far. --resume loads last.pt and
goes on from the batch after it, or starts from the beginning (and says so)
when the workdir has none yet. Under torchrun rank 0 alone writes
checkpoints and the summary; on --resume it reads last.pt and sends it to
the other ranks, so no file system need be shared.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from ..build import __version__, native_info
from ..data.files import write_atomic
from ..distributed.group import Group, is_group_failure, join, lost
from ..data.format import read_manifest
from ..data.hetero.format import is_hetero
from ..errors import DiskgnnError, raise_if_interrupted
from ..memory import AnonPeak, limit_malloc_arenas, peak_rss_bytes, process_age_s
from ..units import format_size
from .checkpoints import Checkpoints, EpochState, check_same_run, training_state
from .config import TrainConfig
from .run import Run
from .validation import validate_graph_kind



def versions() -> dict:
    return {"diskgnn": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "native": native_info()}


def train(cfg: TrainConfig) -> dict:
    """Runs the whole job; returns the summary (also written to the workdir)."""
    limit_malloc_arenas()
    _check_graph_kind(cfg)
    group = join(cfg.distributed, cfg.device, cfg.dist_timeout_s)
    finished = False
    try:
        with AnonPeak() as memory:
            summary = _train(cfg, memory, group)
        finished = True
        group.close(True)
        return summary
    except Exception as e:
        if group.active and not isinstance(e, DiskgnnError) and is_group_failure(e):
            raise lost(group, e) from None
        raise
    finally:
        if not finished:
            group.close(False)


def _check_graph_kind(cfg: TrainConfig) -> None:
    """Refuses what --data's kind of graph does not take before the processes of a group meet (the Loader checks
    again, for its own users)."""
    validate_graph_kind(cfg, cfg.data is not None and is_hetero(read_manifest(cfg.data, None)))


def _last_state(cfg: TrainConfig, checkpoints: Checkpoints, group: Group):
    """last.pt, checked against this run, on every rank (rank 0 reads it); None where there is none."""
    state, error = None, None
    if group.leader:
        try:
            state = checkpoints.load("last")
            if state is None:
                print(f"plan: --resume: no checkpoint in {checkpoints.dir} (is --workdir the one meant?): training "
                      "starts from the beginning")
            else:
                check_same_run(checkpoints.path("last"), state["config"], cfg.to_dict())
                if state.get("world", 1) != group.world:
                    raise DiskgnnError(f"{checkpoints.path('last')}: written by {state.get('world', 1)} processes, "
                                       f"not {group.world}: resume with as many")
        except DiskgnnError as e:
            error = str(e)
    state, error = group.broadcast((state, error))
    if error is not None:
        raise DiskgnnError(error)
    return state


def _resume(cfg: TrainConfig, checkpoints: Checkpoints, model, optimizer, group: Group):
    """last.pt's (history, best, accounting, epoch state, embedding table's generation and steps), restored into
    the model and optimizer; None to start from the beginning."""
    state = _last_state(cfg, checkpoints, group)
    if state is None:
        return None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    position = EpochState(**state["position"])
    if group.leader:
        print(f"plan: --resume: from {checkpoints.path('last')}: training goes on at epoch {position.epoch}, batch "
              f"{position.next_batch}")
    return state["history"], state["best"], state["accounting"], position, state.get("embeddings", {})


def _train(cfg: TrainConfig, memory: AnonPeak, group: Group) -> dict:
    # time to accuracy counts the imports, the plan and the first epoch's offline phase too
    started = time.monotonic() - process_age_s()
    run = Run(cfg, group)
    data = run.loader
    model, optimizer = run.model_and_optimizer()
    checkpoints = Checkpoints(data.workdir / "checkpoints")
    history = {"epoch_times_s": [], "train_loss": [], "val_acc_per_epoch": [], "wall_s_at_val": [],
               "validations": []}
    best = {"val_acc": -1.0, "epoch": -1, "batch": None}
    position = EpochState(0)
    resumed = _resume(cfg, checkpoints, model, optimizer, group) if cfg.resume else None
    if resumed is not None:
        # tier hits and bytes, disk bytes, summed over finished epochs (an interrupted epoch's first part is not
        # in them)
        history, best, data.accounting, position, table_state = resumed
        history.setdefault("wall_s_at_val", [None] * len(history["epoch_times_s"]))  # a checkpoint from before it
        history.setdefault("validations", [])
    run.open_embeddings(table_state if resumed is not None else None)

    def save_last(state: EpochState) -> None:
        # The tables on disk as of this checkpoint first; their journals restart once the checkpoint is saved.
        tables = run.flush_tables()
        if group.leader:
            checkpoints.save("last", {**training_state(model, optimizer, state, history, best, cfg.to_dict(),
                                                       data.accounting), "world": group.world,
                                      "dataset": data.ds.manifest.get("manifest_checksum"),
                                      **({"embeddings": tables} if tables is not None else {})})
        group.broadcast(None)  # no rank's table journals start over before rank 0 has saved last.pt
        run.tables_committed()

    def validated(val: float, state: EpochState, end: bool) -> float:
        """A validation's record, and best.pt where it is the best so far; returns the seconds since the start it
        was done at. With an embedding table, only an epoch end's counts for best.pt: best.pt names the table's
        generation that the next last.pt commits (diskgnn.infer checks it), and a commit inside an epoch flushes
        the buffer and starts the journal over (under 1110 MiB, three made the 9M-node table's first epoch 94 s
        longer)."""
        nonlocal best
        at = time.monotonic() - started
        history["validations"].append({"epoch": state.epoch, "batch": None if end else state.next_batch, "val": val,
                                       "wall_s": at})
        # nan (eval off) counts as better: the last epoch is then the best
        if (run.has_tables and not end) or val <= best["val_acc"]:
            return at
        best = {"val_acc": val, "epoch": state.epoch, "batch": None if end else state.next_batch}
        if group.leader:
            checkpoints.save("best", {"model": model.state_dict(), "epoch": state.epoch, "batch": best["batch"],
                                      "dataset": data.ds.manifest.get("manifest_checksum"), **run.tables_at_best()})
        return at

    def validate(state: EpochState) -> None:
        val = run.evaluate(model, "val")
        at = validated(val, state, end=False)
        data.say(f"epoch {state.epoch}, batch {state.next_batch} of {data.num_batches}: val {run.task.metric} "
                 f"{val:.4f} at {at:.1f} s")

    try:
        for epoch in range(position.epoch, cfg.epochs):
            raise_if_interrupted()
            state = position if position.epoch == epoch else EpochState(epoch)
            run.train_epoch(model, optimizer, state, save_last, validate)
            loss_sum, seen = group.sum([state.loss_sum, state.seen])
            loss = loss_sum / max(1, seen)
            val = run.evaluate(model, "val")
            history["epoch_times_s"].append(state.elapsed_s)
            history["train_loss"].append(loss)
            history["val_acc_per_epoch"].append(val)
            history["wall_s_at_val"].append(validated(val, state, end=True))
            data.say(f"epoch {epoch}: {state.elapsed_s:.1f} s, loss {loss:.4f}, val {run.task.metric} {val:.4f}")
            save_last(EpochState(epoch + 1))
        # The tables are the last epoch's, so its model is the one to test with them.
        if best["epoch"] >= 0 and not run.has_tables:
            model.load_state_dict(group.broadcast(checkpoints.load("best")["model"] if group.leader else None))
        test = run.evaluate(model, "test")
    finally:
        run.close_tables()
        data.close()
    return _summary(cfg, run, memory, history, best, test, resumed is not None, time.monotonic() - started)


def _ranks(run: Run, memory: AnonPeak) -> dict:
    """The group's totals (summary.json's "distributed"): what every rank read, trained and sent."""
    t, g = run.loader.trained, run.group
    disk, rows, seeds, sent, batches = g.sum([run.loader.accounting["disk_bytes"], t["input_rows"], t["seeds"],
                                              run.exchange_bytes, t["batches"]])
    return {"mode": run.cfg.distributed, "world_size": g.world, "backend": g.backend,
            "disk_bytes_read": int(disk), "input_rows": int(rows), "seeds": int(seeds), "exchange_bytes": int(sent),
            "rank_batches": int(batches), "disk_bytes_per_seed": disk / max(1, seeds),
            "input_rows_per_seed": rows / max(1, seeds), "exchange_bytes_per_seed": sent / max(1, seeds),
            "peak_anon_bytes_per_rank": g.gather(memory.peak_bytes)}


def _summary(cfg: TrainConfig, run: Run, memory: AnonPeak, history: dict, best: dict, test: float,
             resumed: bool, wall_s: float) -> dict:
    data = run.loader
    summary = {
        "epoch_times_s": history["epoch_times_s"],
        **data.summary(),
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_anon_bytes": memory.peak_bytes,
        "precision": run.precision,
        "step": run.step_stats,  # the step captured as a CUDA graph or eager, why, and (graphed) how often each
        "resumed": resumed,
        "task": cfg.task,
        "train_loss": history["train_loss"],
        # The val metric (accuracy; --task link: MRR) after each epoch; the checkpoints' history names it val_acc.
        f"val_{run.task.metric}_per_epoch": history["val_acc_per_epoch"],
        # Seconds from the command's start (plan and offline phase included) to each epoch's validation, for
        # time to accuracy; after --resume, the earlier epochs' are the earlier command's.
        "wall_s_at_val": history["wall_s_at_val"],
        # Every validation, --val-every's inside epochs too: epoch, batch (None: the epoch's end), metric, wall_s.
        "validations": history["validations"],
        "wall_s": wall_s,
        f"val_{run.task.metric}": best["val_acc"],
        "best_epoch": best["epoch"],
        "best_batch": best.get("batch"),  # None: at the epoch's end
        f"test_{run.task.metric}": test,
        **run.task.summary(),
        **run.tables_summary(),
        "versions": versions(),
        "config": cfg.to_dict(),
    }
    if run.group.active:
        summary["distributed"] = _ranks(run, memory)
    if not run.group.leader:
        return summary
    text = (json.dumps(summary, indent=2, default=float) + "\n").encode()
    write_atomic(data.workdir / "summary.json", text)
    if cfg.summary_json:
        write_atomic(Path(cfg.summary_json), text)
    result = run.task.result_line(test, best)
    at = "" if best.get("batch") is None else f", batch {best['batch']}"
    print(f"train: done: {result} at epoch {best['epoch']}{at}; epoch times "
          + ", ".join(f"{t:.1f}" for t in history["epoch_times_s"])
          + f" s; sample {summary['sample_s']:.1f} s, pack {summary['pack_s']:.1f} s; bottleneck "
          f"{summary['bottleneck']}; peak memory {format_size(summary['peak_anon_bytes'])} anonymous (budget "
          f"{cfg.memory_budget}), {format_size(summary['peak_rss_bytes'])} with mapped files; summary in "
          f"{data.workdir / 'summary.json'}")
    return summary
