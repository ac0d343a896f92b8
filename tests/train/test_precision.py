"""--precision bf16: the layers under autocast; weights, optimizer and loss in float32, neighbour sums accumulated in it; checked
against the same step in float32 and against training in float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import train_config
from diskgnn.data.format import open_dataset
from diskgnn.loading.blocks import TensorBlock, sampled_blocks
from diskgnn.nn.models import GNN, Dropout
from diskgnn.offline.sample import open_graph, sample_batch
from diskgnn.train.config import TrainConfig
from diskgnn.train.loop import train
from diskgnn.train.plan import resolve_precision


def test_auto_takes_bf16_only_where_the_cpu_computes_it(monkeypatch):
    cfg = TrainConfig(precision="auto")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert resolve_precision(cfg, "cpu") == "fp32"
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert resolve_precision(cfg, "cpu") == "bf16"
    assert resolve_precision(TrainConfig(precision="fp32"), "cpu") == "fp32"


def test_bf16_asked_for_on_a_cpu_without_it_says_what_it_costs(monkeypatch):
    from types import SimpleNamespace

    from diskgnn.target.cpu import CpuTarget
    from diskgnn.train.modes import Precision
    from diskgnn.train.run import Run

    run = SimpleNamespace(cfg=TrainConfig(precision="bf16"), precision=Precision.BF16, target=CpuTarget())
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    (line,) = Run.precision_lines(run)
    assert line.startswith("plan: --precision bf16: bf16 (") and "emulated" in line and "auto takes fp32" in line
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert "emulated" not in Run.precision_lines(run)[0]


def test_bf16_rows_are_summed_in_float32_and_rounded_once():
    """2^-8 + 2^-8 + ... summed in bf16 would stay at 1 (each add rounds back); in float32 they add up."""
    block = TensorBlock.from_csc(np.array([0, 65]), np.arange(65), 1, 65)
    h = torch.full((65, 3), 2.0 ** -8, dtype=torch.bfloat16)
    h[0] = 1.0
    want = torch.tensor([[1.25] * 3], dtype=torch.bfloat16)
    out = block.sum_neighbours(h)  # the native kernel
    assert out.dtype == torch.bfloat16 and torch.equal(out, want)
    rows = h.unsqueeze(1)  # not 2-d: torch's path, which CUDA takes too, also sums in float32
    out = block.sum_neighbours(rows)
    assert out.dtype == torch.bfloat16 and torch.equal(out.squeeze(1), want)


def test_dropout_keeps_the_activations_dtype():
    d = Dropout(0.5)
    d.train()
    assert d(torch.ones(8, 4, dtype=torch.bfloat16)).dtype == torch.bfloat16


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_a_bf16_step_follows_the_float32_step(train_data, kind):
    """Under autocast the loss and every gradient stay within bf16's precision of the float32 step's, and the
    weights and their gradients stay float32 (the optimizer updates float32 master weights)."""
    ds = open_dataset(train_data)
    batch = sample_batch(open_graph(ds), ds.split("train")[:47], key=3, fanouts=[4, 3], seed=0, threads=1)
    x = torch.from_numpy(np.asarray(ds.features)[batch.nodes])
    y = torch.from_numpy(np.asarray(ds.labels)[batch.seeds].astype(np.int64))
    results = {}
    for bf16 in (False, True):
        torch.manual_seed(0)
        model = GNN(kind, ds.feature_dim, 16, ds.num_classes, 2, dropout=0.0, heads=2)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(sampled_blocks(batch), x)
        # the last linear map runs in bf16 under autocast; GAT's layers stay float32
        assert logits.dtype == (torch.bfloat16 if bf16 and kind != "gat" else torch.float32)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
        results[bf16] = (loss.item(), [p.grad.clone() for p in model.parameters()])
    assert results[True][0] == pytest.approx(results[False][0], rel=2e-2)
    for g16, g32 in zip(results[True][1], results[False][1]):
        if kind == "gat":  # its layers stay float32 under autocast
            torch.testing.assert_close(g16, g32)
        else:
            assert (g16 - g32).norm() <= 0.05 * g32.norm() + 1e-4


def test_training_in_bf16_reaches_float32_accuracy(train_data, tmp_path, capsys):
    runs = {p: train(train_config(train_data, tmp_path / p, precision=p, checkpoint_every="off"))
            for p in ("fp32", "bf16")}
    assert runs["bf16"]["precision"] == "bf16" and runs["fp32"]["precision"] == "fp32"
    assert runs["bf16"]["test_acc"] > 0.5  # chance is 0.25
    assert runs["bf16"]["test_acc"] == pytest.approx(runs["fp32"]["test_acc"], abs=0.05)
    assert "plan: --precision bf16: bf16 (the layers under autocast" in capsys.readouterr().out
