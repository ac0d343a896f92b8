"""The package's shape: no import cycles, the data side never imports the model side, short modules,
every knob documented, and the commands users type still run; the benchmarks' shape likewise (bench/)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diskgnn import defaults

from conftest import REPO, run_module

PACKAGE = REPO / "diskgnn"
# The stages that move data; none of them may reach the models or the trainer.
DATA_SIDE = ("diskgnn.data", "diskgnn.offline", "diskgnn.io", "diskgnn.store", "diskgnn.loading")
MODEL_SIDE = ("diskgnn.nn", "diskgnn.train")
MAX_LINES = 400
MAX_COLUMNS = 120
BENCH = REPO / "bench"
BENCH_MAX_LINES = 450  # the studies' report renderers are long strings of prose


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p): p for p in root.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module among `known` that `name` imports, at any depth of its code (lazy imports count)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from X import y` imports the module X.y where there is one, else X
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods) | {"diskgnn._native"}  # the extension: a module too, with no imports of ours
    g = {name: imports(name, path, known) for name, path in mods.items()}
    return {name: targets - {"diskgnn._native"} for name, targets in g.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_the_walker_sees_a_cycle_and_lazy_imports(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    g = graph()
    assert "diskgnn.data.prepare" in g["diskgnn.data.builtin"]
    assert "diskgnn.offline.sample" in g["diskgnn.train.tasks.link"]  # imported inside a method


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_cycles_between_packages_either():
    stage = lambda m: ".".join(m.split(".")[:2])  # noqa: E731 - diskgnn.data.quantize.spec -> diskgnn.data
    g = {}
    for a, targets in graph().items():
        g.setdefault(stage(a), set()).update(stage(b) for b in targets if stage(b) != stage(a))
    for v in list(g.values()):
        for w in v:
            g.setdefault(w, set())
    assert cycles(g) == []


def test_the_data_side_never_imports_the_model_side():
    g = graph()
    for start in g:
        if not start.startswith(DATA_SIDE):
            continue
        seen, todo = set(), [start]
        while todo:
            for w in g[todo.pop()] - seen:
                seen.add(w)
                todo.append(w)
        assert not [m for m in seen if m.startswith(MODEL_SIDE)], f"{start} reaches {sorted(seen)}"


def test_no_module_is_long():
    long = {name: n for name, path in modules().items() if (n := path.read_text().count("\n")) > MAX_LINES}
    assert long == {}


def test_no_line_is_wide():
    """Modules are kept short by splitting responsibilities, not by packing lines."""
    wide = [f"{name}:{i}" for name, path in modules().items()
            for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > MAX_COLUMNS]
    assert wide == []


def test_every_subpackage_says_what_it_does():
    for init in [*PACKAGE.rglob("__init__.py"), *BENCH.rglob("__init__.py")]:
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 80, f"{init} has no docstring of its job"


def test_the_walker_sees_the_benchmarks_lazy_imports():
    g = graph(BENCH)
    assert "bench.peers.pyg" in g["bench.epoch"]  # imported inside the function that runs the peer
    assert "bench.harness.memcap" in g["bench.peers.common"]
    assert "bench.accuracy.cli" in g["bench.accuracy.__main__"]


def test_no_import_cycles_in_the_benchmarks():
    assert cycles(graph(BENCH)) == []


def test_the_harness_imports_no_study():
    g = graph(BENCH)
    for name, targets in g.items():
        if name.startswith("bench.harness."):
            assert {t for t in targets if not t.startswith("bench.harness.")} == set(), name


def test_no_benchmark_module_is_long():
    long = {name: n for name, path in modules(BENCH).items() if (n := path.read_text().count("\n")) > BENCH_MAX_LINES}
    assert long == {}


def test_every_knob_is_on_the_defaults_page():
    page = (REPO / "docs" / "defaults.md").read_text()
    documented = set(re.findall(r"`DISKGNN_([A-Z_0-9]+)`", page))
    assert documented == set(defaults.KNOBS) | {"HOME"}


def test_an_environment_override_takes_effect_and_a_bad_one_is_one_line(tmp_path):
    code = "from diskgnn import defaults; print(defaults.READ_DEPTH, defaults.MAX_REQUEST_BYTES)"
    env = {"DISKGNN_READ_DEPTH": "2", "DISKGNN_MAX_REQUEST_BYTES": "256KiB", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.stdout.split() == ["2", str(256 << 10)], out.stderr
    proc = subprocess.run([sys.executable, "-m", "diskgnn.train", "--help"], capture_output=True, text=True,
                          env={"DISKGNN_READ_DEPTH": "two", "PATH": "/usr/bin:/bin"}, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "train: error: DISKGNN_READ_DEPTH='two': expected a whole number >= 0"]


@pytest.mark.parametrize("command", ["prepare", "verify", "quantize", "train"])
def test_the_commands_still_run_as_modules(command):
    proc = run_module(f"diskgnn.{command}", "--help")
    assert proc.returncode == 0 and f"python -m diskgnn.{command}" in proc.stdout, proc.stderr


def test_documented_imports_work():
    import diskgnn

    assert callable(diskgnn.open_features) and callable(diskgnn.open_dataset)
    assert callable(diskgnn.prepare) and callable(diskgnn.verify)
    assert set(diskgnn.native_info()) == {"io_uring_compiled", "io_uring_usable", "io_uring_reason"}
