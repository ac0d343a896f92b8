"""diskgnn as a standard Python package: the sdist carries what a build needs and nothing else; a wheel
installs into a fresh venv whose console scripts prepare and train."""

import json
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import venv
import zipfile
from email.parser import Parser

import pytest

from conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCRIPTS = ("diskgnn-prepare", "diskgnn-verify", "diskgnn-quantize", "diskgnn-train", "diskgnn-infer")


def needs_compiler():
    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler on this machine: the native extension cannot be built")


def run(*argv, cwd, check=True):
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from the tree as `pip wheel .` builds it (the build requirements of this venv)."""
    needs_compiler()
    out = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, REPO, cwd=out)
    (path,) = out.glob("diskgnn-*.whl")
    return path


def test_the_metadata_names_every_command_and_extra():
    project = PYPROJECT["project"]
    assert set(project["scripts"]) == set(SCRIPTS)
    assert {"zarr", "pyg", "kvikio", "bench", "test"} <= set(project["optional-dependencies"])
    assert any(d.startswith("torch_geometric") for d in project["optional-dependencies"]["pyg"])
    assert {"setuptools", "pybind11"} <= {r.split(">")[0].split("=")[0] for r in PYPROJECT["build-system"]["requires"]}
    # constraints.txt only pins: every pin is a dependency of diskgnn, its build or an extra
    named = " ".join(project["dependencies"] + PYPROJECT["build-system"]["requires"]
                     + sum(project["optional-dependencies"].values(), [])).lower()
    pins = [line.split("==")[0].lower() for line in (REPO / "constraints.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins and [p for p in pins if p not in named] == []


def test_the_sdist_holds_the_sources_and_headers_and_nothing_built(tmp_path):
    code = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    name = run(sys.executable, "-c", code, tmp_path, cwd=REPO).stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / name) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    native = {p.relative_to(REPO).as_posix() for p in (REPO / "native").glob("*") if p.suffix in (".cc", ".h")}
    package = {p.relative_to(REPO).as_posix() for p in (REPO / "diskgnn").rglob("*.py")}
    assert native | package | {"pyproject.toml", "setup.py", "README.md"} <= members
    stray = [m for m in members if m.endswith((".so", ".o", ".pyc", ".npy", ".bin"))
             or m.startswith(("tests/", "bench/", "docs/", "native/tests/", "build/"))]
    assert stray == []


def test_a_wheel_carries_the_extension_and_its_requirements(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(z.read(meta).decode())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = z.read(entry_points).decode()
    assert any(n.startswith("diskgnn/_native") and n.endswith(".so") for n in names)
    assert not [n for n in names if n.startswith("native/") or n.endswith((".cc", ".h"))]
    required = {r.split(";")[0].split(">")[0].split("<")[0].strip() for r in metadata.get_all("Requires-Dist")}
    assert {"torch", "numpy", "tqdm", "PyYAML", "xxhash"} <= required
    assert {"pyg", "zarr", "kvikio", "bench", "test"} <= set(metadata.get_all("Provides-Extra"))
    assert all(s in scripts for s in SCRIPTS)


def test_the_wheel_installs_into_a_fresh_venv_and_its_scripts_train(wheel, tmp_path):
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    # torch and the rest come from this venv, reached by a path entry (no second download); its .pth
    # files are not run, so the repository's editable diskgnn stays out of sight.
    (site,) = env.glob("lib/python*/site-packages")
    (site / "reuse-test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(env / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    where = run(env / "bin" / "python", "-c", "import diskgnn; print(diskgnn.__file__, diskgnn.native_info())",
                cwd=tmp_path).stdout
    assert where.startswith(str(site)), where

    bin_ = env / "bin"
    helped = run(bin_ / "diskgnn-train", "--help", cwd=tmp_path).stdout
    assert helped.startswith("usage: diskgnn-train") and "--memory-budget" in helped
    run(bin_ / "diskgnn-prepare", "synthetic", "--nodes", 199, "--feat-dim", 7, "--avg-degree", 4, "--classes", 3,
        "--seed", 0, "--out", tmp_path / "ds", cwd=tmp_path)
    run(bin_ / "diskgnn-verify", tmp_path / "ds", cwd=tmp_path)
    summary = tmp_path / "summary.json"
    run(bin_ / "diskgnn-train", "--data", tmp_path / "ds", "--workdir", tmp_path / "work", "--epochs", 1,
        "--batch-size", 64, "--hidden", 8, "--fanouts", "3,2", "--no-progress", "--summary-json", summary,
        cwd=tmp_path)
    s = json.loads(summary.read_text())
    assert len(s["epoch_times_s"]) == 1 and s["stage_times_s"]["train"]["items"] > 0
    bad = run(bin_ / "diskgnn-train", "--backend", "foo", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
