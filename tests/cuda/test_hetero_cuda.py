"""A heterogeneous run on the GPU against the same run on the CPU: the typed rows, packs and tables are the host's,
the blocks and the step the device's (the hetero path has no CUDA code of its own: this checks the device seam)."""

import json

import numpy as np
import pytest

from conftest import run_module, small_hetero

torch = pytest.importorskip("torch")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")


@needs_gpu
@pytest.mark.parametrize("featureless", ["learned", "table"])
def test_hetero_run_on_the_gpu_equals_the_cpu(tmp_path, featureless):
    data = small_hetero(tmp_path, learnable=True)
    runs = {}
    for device in ("cpu", "cuda"):
        proc = run_module("diskgnn.train", "--data", data, "--workdir", tmp_path / device, "--no-progress", "--epochs",
                          "3", "--hidden", "16", "--batch-size", "23", "--fanouts", "4,4", "--dropout", "0",
                          "--precision", "fp32", "--featureless", featureless, "--device", device, "--lr", "0.005")
        assert proc.returncode == 0, proc.stderr
        runs[device] = json.loads((tmp_path / device / "summary.json").read_text())
    np.testing.assert_allclose(runs["cuda"]["train_loss"], runs["cpu"]["train_loss"], rtol=2e-2)
    assert abs(runs["cuda"]["test_acc"] - runs["cpu"]["test_acc"]) <= 0.05 and runs["cuda"]["test_acc"] > 0.6
