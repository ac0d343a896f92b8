"""`train_hetero(cfg)`: the epochs of a heterogeneous run, its checkpoints and --resume, and the summary, as
train/loop.py does for homogeneous graphs (the same checkpoint files, the same refusal to resume a different
run, last.pt inside an epoch every --checkpoint-every)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ...data.files import write_atomic
from ...errors import raise_if_interrupted
from ...memory import AnonPeak, peak_rss_bytes, process_age_s
from ...units import Every, format_size
from ..checkpoints import Checkpoints, EpochState, check_same_run, training_state
from .run import HeteroRun


def train_hetero(cfg) -> dict:
    started = time.monotonic() - process_age_s()
    with AnonPeak() as memory:
        run = HeteroRun(cfg)
        try:
            model = run.model()
            run.open(model)
            return _train(cfg, run, model, memory, started)
        finally:
            run.close()


def _train(cfg, run: HeteroRun, model, memory: AnonPeak, started: float) -> dict:
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    checkpoints = Checkpoints(run.workdir / "checkpoints")
    metric = run.metric
    history = {"epoch_times_s": [], "train_loss": [], "val_acc_per_epoch": [], "wall_s_at_val": []}
    best = {"val_acc": -1.0, "epoch": -1}
    position = EpochState(0)
    accounting: dict = {}
    state = checkpoints.load("last") if cfg.resume else None
    if cfg.resume and state is None:
        run.say(f"plan: --resume: no checkpoint in {checkpoints.dir}: training starts from the beginning")
    if state is not None:
        check_same_run(checkpoints.path("last"), state["config"], cfg.to_dict())
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        history, best, position = state["history"], state["best"], EpochState(**state["position"])
        run.say(f"plan: --resume: from {checkpoints.path('last')}: training goes on at epoch {position.epoch}, "
                f"batch {position.next_batch}")
    run.open_tables(None if state is None else state.get("embeddings", {}))

    def save_last(s: EpochState) -> None:
        # the tables on disk as of this checkpoint first; their journals restart once it is saved
        tables = run.tables.flush()
        checkpoints.save("last", {**training_state(model, optimizer, s, history, best, cfg.to_dict(), accounting),
                                  "embeddings": tables})
        run.tables.committed()

    for epoch in range(position.epoch, cfg.epochs):
        raise_if_interrupted()
        s = position if position.epoch == epoch else EpochState(epoch)
        files = run.epoch_file(epoch)
        run.prepare_next(epoch + 1)
        model.train()
        model.reseed(np.random.SeedSequence([cfg.seed, 17, epoch]))
        if s.dropout_rng is not None:
            model.dropout_state = s.dropout_rng
        start, saves = time.perf_counter() - s.elapsed_s, Every(cfg.checkpoint_interval)
        bar = tqdm(total=len(files.samples), initial=s.next_batch, desc=f"epoch {epoch}", unit="batch",
                   disable=not cfg.progress, dynamic_ncols=True)
        for i, mb in enumerate(run.passes(files, s.next_batch), start=s.next_batch):
            optimizer.zero_grad(set_to_none=True)
            loss = run.train_step(model, mb)
            optimizer.step()
            s.loss_sum += float(loss.detach()) * mb.num_seeds
            s.seen += mb.num_seeds
            s.next_batch = i + 1
            bar.update(1)
            if s.next_batch < len(files.samples) and saves.due(s.next_batch):
                s.elapsed_s, s.dropout_rng = time.perf_counter() - start, model.dropout_state
                save_last(s)
                saves.done()
        bar.close()
        s.elapsed_s = time.perf_counter() - start
        val = run.evaluate(model, "val")
        loss = s.loss_sum / max(1, s.seen)
        history["epoch_times_s"].append(s.elapsed_s)
        history["train_loss"].append(loss)
        history["val_acc_per_epoch"].append(val.get(metric, float("nan")))
        history["wall_s_at_val"].append(time.monotonic() - started)
        run.say(f"epoch {epoch}: {s.elapsed_s:.1f} s, loss {loss:.4f}, val {metric} "
                f"{val.get(metric, float('nan')):.4f}" + (f", macro-F1 {val['macro_f1']:.4f}" if val else ""))
        if not history["val_acc_per_epoch"][-1] <= best["val_acc"]:  # also the first epoch, and eval off (nan)
            best = {"val_acc": history["val_acc_per_epoch"][-1], "epoch": epoch}
            checkpoints.save("best", {"model": model.state_dict(), "epoch": epoch})
        save_last(EpochState(epoch + 1))
        run.finished(epoch)
    if best["epoch"] >= 0 and not run.tables:  # the tables are the last epoch's: so is the model to test with them
        model.load_state_dict(checkpoints.load("best")["model"])
    test = run.evaluate(model, "test")
    return _summary(cfg, run, memory, history, best, test, state is not None, time.monotonic() - started)


def _summary(cfg, run: HeteroRun, memory: AnonPeak, history: dict, best: dict, test: dict, resumed: bool,
             wall_s: float) -> dict:
    metric = run.metric
    stats = run.features.summary()
    summary = {
        "heterogeneous": True,
        "epoch_times_s": history["epoch_times_s"],
        "train_loss": history["train_loss"],
        f"val_{metric}_per_epoch": history["val_acc_per_epoch"],
        "wall_s_at_val": history["wall_s_at_val"],
        f"val_{metric}": best["val_acc"],
        "best_epoch": best["epoch"],
        **{f"test_{k}": v for k, v in test.items() if k != "seeds"},
        "precision": "bf16" if run.bf16 else "fp32",
        "plan": run.plan,
        "features": stats,
        **({"embeddings": run.tables.stats()} if run.tables else {}),
        "disk_bytes": int(sum(st["bytes_read"] for st in stats.values())),
        "offline": run.offline,
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_anon_bytes": memory.peak_bytes,
        "resumed": resumed,
        "wall_s": wall_s,
        "config": cfg.to_dict(),
    }
    text = (json.dumps(summary, indent=2, default=float) + "\n").encode()
    write_atomic(run.workdir / "summary.json", text)
    if cfg.summary_json:
        write_atomic(Path(cfg.summary_json), text)
    result = (f"test {metric} {test.get(metric, float('nan')):.4f}, macro-F1 {test.get('macro_f1', float('nan')):.4f}"
              f", best val {metric} {best['val_acc']:.4f}")
    print(f"train: done: {result} at epoch {best['epoch']}; epoch times "
          + ", ".join(f"{t:.1f}" for t in history["epoch_times_s"])
          + f" s; read {format_size(summary['disk_bytes'])}; peak memory {format_size(memory.peak_bytes)} anonymous "
          f"(budget {cfg.memory_budget}); summary in {run.workdir / 'summary.json'}")
    return summary
