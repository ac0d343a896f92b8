"""The train step captured as a CUDA graph (diskgnn/target/graphed.py) on a GPU: whole runs with --cuda-graphs on
train to the eager runs' losses and weights (sage, gat, bf16; validations inside the epoch between replays), and
their summaries count the captures and replays. The padding itself is tested on the CPU (tests/target/)."""

import pytest
import torch

from diskgnn.store.uva import why_not

from conftest import train_config

WHY_NOT = why_not("cuda")
needs_gpu = pytest.mark.skipif(WHY_NOT is not None, reason=f"the captured step needs a GPU: {WHY_NOT}")


@needs_gpu
@pytest.mark.parametrize("model,precision", [("sage", "fp32"), ("gat", "fp32"), ("sage", "bf16")])
def test_replayed_steps_train_as_the_eager_ones(train_data, tmp_path, model, precision):
    from diskgnn.train.checkpoints import Checkpoints
    from diskgnn.train.loop import train

    runs, weights = {}, {}
    for graphs in ("on", "off"):
        cfg = train_config(train_data, tmp_path / graphs, device="cuda", cuda_graphs=graphs, model=model,
                           precision=precision, epochs=2, seed=5, val_every="3")
        runs[graphs] = train(cfg)
        weights[graphs] = Checkpoints(tmp_path / graphs / "checkpoints").load("last")["model"]
    on, off = runs["on"], runs["off"]
    assert on["step"]["line"].startswith("step: a CUDA graph (--cuda-graphs on)"), on["step"]
    assert off["step"] == {"line": "step: eager (--cuda-graphs off)"}
    assert on["step"]["captures"] >= 1 and "capture_failed" not in on["step"]
    assert on["step"]["replays"] >= 2 and on["step"]["eager"] >= on["step"]["captures"] >= 1, on["step"]
    assert on["step"]["replays"] + on["step"]["eager"] == on["stage_times_s"]["train"]["items"], on["step"]
    assert on["rows_per_batch"] == pytest.approx(off["rows_per_batch"])  # counted from the records
    assert len(on["validations"]) > 2  # inside the epochs too: evaluation between replays
    rtol = 2e-2 if precision == "bf16" else 1e-4
    assert on["train_loss"] == pytest.approx(off["train_loss"], rel=rtol)
    for name, w in weights["off"].items():
        torch.testing.assert_close(weights["on"][name], w, rtol=rtol, atol=rtol / 10, msg=name)
