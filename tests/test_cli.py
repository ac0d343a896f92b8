"""Every command's surface: a bad flag, config key, value or file gets one line naming it, exit status 2 for
usage errors and 1 for data errors, no traceback and nothing half-written."""

import contextlib
import io
import os
import subprocess
import sys

import pytest

from diskgnn.data.files import remove_stale_temps, temp_path
from diskgnn.errors import run_cli

from conftest import REPO, random_graph, write_npy_dir

USAGE, DATA = 2, 1


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    from diskgnn.data.prepare import prepare

    tmp = tmp_path_factory.mktemp("cli")
    return prepare(write_npy_dir(tmp / "src", random_graph()), tmp / "ds", progress=False)


COMMANDS = {"diskgnn.prepare": "diskgnn.data.prepare", "diskgnn.verify": "diskgnn.data.verify",
            "diskgnn.quantize": "diskgnn.data.quantize.cli", "diskgnn.train": "diskgnn.train.__main__"}


def run(command, *args, env=None):
    """The command's exit status and stderr: in this process (run_cli, as the entry point runs it), or in a
    child where the environment matters."""
    argv = [str(a) for a in args]
    if env is None:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = run_cli(command.split(".")[-1], COMMANDS[command], argv)
        return code, err.getvalue()
    proc = subprocess.run([sys.executable, "-m", command, *argv], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **env})
    return proc.returncode, proc.stderr


def one_line(code, err, status, *fragments):
    lines = err.strip().splitlines()
    assert code == status, (code, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    for f in fragments:
        assert f in lines[0], lines[0]


TRAIN_USAGE = [
    (["--backend", "foo"], "--backend foo: expected one of auto, io_uring, pread, mmap, kvikio"),
    (["--model", "sagee"], "--model sagee: expected one of sage, gcn, gat, rgcn (did you mean 'sage'?)"),
    (["--epochs", "x"], "--epochs: epochs: cannot read 'x' as int"),
    (["--epochs", "0"], "--epochs 0: must be at least 1"),
    (["--fanouts", "10,x"], "--fanouts 10,x: expected comma-separated integers"),
    (["--memory-budget", "lots"], "--memory-budget lots: cannot read as a size"),
    (["--host-cache", "-1"], "--host-cache -1: cannot read as a size"),
    (["--checkpoint-every", "sometimes"], "--checkpoint-every sometimes: expected a time such as 90s"),
    (["--val-every", "often"], "--val-every often: expected a time such as 90s"),
    (["--val-every", "5", "--eval", "none"], "--val-every 5: nothing to validate with --eval none"),
    (["--val-every", "2min", "--distributed", "independent"], "--val-every 2min: under --distributed, a number of "
     "batches"),
    (["--summary-json", "/nonexistent/dir/s.json"], "--summary-json /nonexistent/dir/s.json: its directory"),
    (["--dropout", "1"], "--dropout 1.0: must be in [0, 1)"),
    (["--cuda-graphs", "on", "--device", "cpu"], "--cuda-graphs on: no CUDA device (a step is captured on a GPU"),
    (["--cuda-graphs", "sometimes"], "--cuda-graphs sometimes: expected one of auto, on, off"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--sampling"], "argument --sampling: expected one argument"),
]


@pytest.mark.parametrize("args,message", TRAIN_USAGE, ids=[a[0] for a, _ in TRAIN_USAGE])
def test_train_usage_errors(ds, tmp_path, args, message):
    one_line(*run("diskgnn.train", "--data", ds, "--workdir", tmp_path / "w", *args), USAGE, message)
    assert not (tmp_path / "w").exists(), "a refused run wrote its workdir"


@pytest.mark.parametrize("text,message", [
    ("modle: gcn\n", "unknown option 'modle' (did you mean 'model'?)"),
    ("batch_sise: 3\n", "unknown option 'batch_sise' (did you mean 'batch-size'?)"),
    ("epochs: [1, 2]\n", "epochs: epochs: cannot read [1, 2] as int"),
    ("fanouts: {a: 1}\n", "fanouts: expected a value, got a mapping"),
    ("model: gcnn\n", "--model gcnn: expected one of sage, gcn, gat, rgcn (did you mean 'gcn'?)"),
    ("- a\n- b\n", "expected a mapping of option: value"),
    ("model: [\n", "not valid YAML"),
])
def test_train_config_file_errors(ds, tmp_path, text, message):
    (tmp_path / "c.yaml").write_text(text)
    one_line(*run("diskgnn.train", "--data", ds, "--config", tmp_path / "c.yaml"), USAGE, message)


def test_train_data_errors(ds, tmp_path):
    one_line(*run("diskgnn.train", "--data", tmp_path / "none"), DATA, "not a dataset directory")
    one_line(*run("diskgnn.train", "--config", tmp_path / "none.yaml"), DATA, "none.yaml: cannot read")
    one_line(*run("diskgnn.train", "--data", ds, "--workdir", "/proc/self/x"), DATA,
             "--workdir /proc/self/x: cannot create")
    (tmp_path / "file").write_text("")
    one_line(*run("diskgnn.train", "--data", ds, "--workdir", tmp_path / "file" / "w"), DATA, "cannot create")


def test_a_corrupted_checkpoint_is_refused_on_resume(ds, tmp_path):
    work = tmp_path / "w"
    args = ["diskgnn.train", "--data", ds, "--workdir", work, "--epochs", "1", "--fanouts", "3,2", "--batch-size",
            "64", "--hidden", "8", "--no-progress"]
    assert run(*args)[0] == 0
    last = work / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:100])
    one_line(*run(*args, "--resume"), DATA, "last.pt: truncated")


def test_dataset_files_found_damaged(ds, tmp_path):
    import shutil

    copy = tmp_path / "ds"
    shutil.copytree(ds, copy)
    labels = copy / "labels.bin"
    data = bytearray(labels.read_bytes())
    data[7] ^= 1
    labels.write_bytes(bytes(data))
    for command in ("diskgnn.verify", "diskgnn.train"):
        one_line(*run(command, *((copy,) if command == "diskgnn.verify" else ("--data", copy))), DATA,
                 "labels.bin: checksum mismatch")
    features = copy / "features.bin"
    features.write_bytes(features.read_bytes()[:4096])
    one_line(*run("diskgnn.verify", copy), DATA, "features.bin: 4096 bytes, the manifest says")


@pytest.mark.parametrize("args,status,message", [
    (["--memory-budget", "lots"], USAGE, "--memory-budget lots: cannot read as a size"),
    (["--quantize", "sq3"], USAGE, "--quantize sq3: sq bits must be one of 1, 2, 4, 8, 16"),
    (["--format", "npz"], USAGE, "argument --format: invalid choice: 'npz'"),
    (["--split-ratios", "a,b,c"], USAGE, "--split-ratios: expected 3 comma-separated numbers"),
    (["--nodes", "x"], USAGE, "argument --nodes: invalid int value: 'x'"),
    (["--feature-dtype", "int64"], USAGE, "argument --feature-dtype: invalid choice"),
])
def test_prepare_usage_errors(tmp_path, args, status, message):
    one_line(*run("diskgnn.prepare", "synthetic", "--nodes", "100", "--out", tmp_path / "o", *args), status, message)
    assert not list(tmp_path.iterdir()), "a refused prepare left something behind"


def test_prepare_without_out_and_verify_without_dataset(tmp_path):
    one_line(*run("diskgnn.prepare", "synthetic"), USAGE, "the following arguments are required: --out")
    one_line(*run("diskgnn.verify"), USAGE, "the following arguments are required: dataset")
    one_line(*run("diskgnn.verify", tmp_path), DATA, "manifest.json: missing")


@pytest.mark.parametrize("args,status,message", [
    (["--spec", "sq3"], USAGE, "--spec sq3: sq bits must be one of 1, 2, 4, 8, 16"),
    (["--spec", "sq8", "--sample-rows", "0"], USAGE, "--sample-rows 0: must be at least 1"),
    (["--spec", "sq8", "--sample-rows", "x"], USAGE, "argument --sample-rows: invalid int value: 'x'"),
    (["--spec", "sq8", "--memory-budget", "x"], USAGE, "--memory-budget x: cannot read as a size"),
    ([], USAGE, "the following arguments are required: --spec"),
])
def test_quantize_usage_errors(ds, args, status, message):
    one_line(*run("diskgnn.quantize", ds, *args), status, message)


def test_quantize_on_a_missing_dataset(tmp_path):
    one_line(*run("diskgnn.quantize", tmp_path / "none", "--spec", "sq8"), DATA, "not a dataset directory")


def test_a_bad_environment_setting_is_one_usage_line(tmp_path):
    one_line(*run("diskgnn.prepare", "synthetic", "--out", tmp_path / "o", env={"DISKGNN_SAMPLE_GROUP": "-3"}),
             USAGE, "DISKGNN_SAMPLE_GROUP='-3': expected a whole number >= 0")


def test_help_states_each_default_once():
    proc = subprocess.run([sys.executable, "-m", "diskgnn.train", "--help"], capture_output=True, text=True, cwd=REPO)
    out = proc.stdout
    assert proc.returncode == 0 and "(default: None)" not in out
    assert out.count("(default: 3)") == 1  # --epochs


def test_temporary_siblings_of_a_killed_run_are_removed_by_the_next_one(tmp_path):
    """What a kill -9 leaves (`.NAME.tmp-PID` of a process that is gone) goes with the next run of the same
    target; a live process's and another target's stay."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".ds.tmp-{dead}"
    (stale / "sub").mkdir(parents=True)
    live = tmp_path / f".ds.tmp-{os.getppid()}"
    live.mkdir()
    other = tmp_path / f".other.tmp-{dead}"
    other.mkdir()
    assert remove_stale_temps(tmp_path, "ds") == [stale]
    assert live.exists() and other.exists() and not stale.exists()
    code, err = run("diskgnn.prepare", "synthetic", "--nodes", "50", "--out", tmp_path / "other", env={})
    assert code == 0, err
    assert not other.exists() and (tmp_path / "other" / "manifest.json").exists()
    one_line(*run("diskgnn.verify", live), DATA, "temporary directory of a prepare that did not finish")
    assert temp_path(tmp_path / "x").name == f".x.tmp-{os.getpid()}"


def test_a_ctrl_c_in_a_finalizer_is_recorded_and_raised_by_the_loop(monkeypatch):
    """The CI's Ctrl-C once landed on the first line of a __del__: raised there, it is printed as
    "Exception ignored" with a traceback and lost. The handler records it; the loop's step raises it."""
    import signal
    import sys

    from diskgnn import errors

    class Finalized:
        def __del__(self):
            errors._on_sigint(signal.SIGINT, sys._getframe())

    def step():
        errors.raise_if_interrupted()
        Finalized()  # dropped at once: its finalizer takes the "signal"
        errors.raise_if_interrupted()

    def main(argv):
        step()
        raise AssertionError("the recorded interrupt was not raised")

    dropped = []  # what Python prints as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)
    assert errors.run_cli("train", main, []) == 130
    assert dropped == []
    assert not errors._interrupted  # the record ends with the command
    with pytest.raises(KeyboardInterrupt):  # outside a finalizer it raises at once
        errors._on_sigint(signal.SIGINT, sys._getframe())
    errors._interrupted = False
