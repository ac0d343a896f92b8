"""The configuration: YAML < flags, and every bad setting refused in one line."""

import pytest
import torch

from diskgnn.errors import DiskgnnError
from diskgnn.train.options import resolve

from conftest import run_module


def test_config_file_and_flags(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("model: gcn\nbatch-size: 77\nfanouts: [5, 5]\n")
    cfg = resolve(["--config", str(cfg_file), "--batch-size", "99"])
    assert (cfg.model, cfg.batch_size, cfg.fanout_list) == ("gcn", 99, (5, 5))
    cfg_file.write_text("modle: gcn\n")
    with pytest.raises(DiskgnnError, match="unknown option 'modle'"):
        resolve(["--config", str(cfg_file)])


@pytest.mark.parametrize("args,message", [
    (["--fanouts", "10,0"], "--fanouts 10,0: each must be positive or -1"),
    (["--memory-budget", "100MiB"], "--memory-budget 100MiB is too small"),
    (["--host-cache", "3GiB"], "--host-cache 3GiB plus the working set"),
    (["--device", "cuda"], "--device cuda: CUDA is not available"),
    (["--batch-size", "x"], "batch-size: cannot read 'x'"),
    (["--features", "sq3"], "--features sq3: expected fp32 or a quantized variant: quantize spec 'sq3': sq bits"),
    (["--features", "vq:L=256,w=16"], "--features vq:L=256,w=16: {data}: no quantized features vq:w=16,L=256 "
                                     "(stored: none); add them with python -m diskgnn.quantize {data} --spec "
                                     "vq:w=16,L=256"),
])
def test_cli_refuses_bad_settings_in_one_line(train_data, tmp_path, args, message):
    if args[0] == "--device" and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    proc = run_module("diskgnn.train", "--data", train_data, "--workdir", tmp_path / "w", "--no-progress", *args)
    assert proc.returncode == 2
    message = message.format(data=train_data)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
