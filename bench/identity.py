"""The same small runs trained by an earlier revision and by this checkout, on this machine, weights compared bit
for bit: the check a refactoring step passes before it lands.

    python -m bench.identity --base REV [--runs node,gat-bf16,link,online,typed,acm,imdb] [--workdir DIR]
    python -m bench.identity --base-dir CHECKOUT ...   # an earlier checkout already built
    python -m bench.identity --smoke                   # tiny, for the test suite (this checkout against itself)

Bit-identity is a property of one machine: torch's CPU kernels round differently on another CPU (AVX-512 against
AVX2, another core count), so golden hashes taken on one machine fail on the next. Here both sides run on this
machine, one after the other, with the same environment and threads. The base is a git worktree of REV (under
--workdir, kept for the next call), whose native extension is copied from this checkout when native/ and
setup.py are the same at REV, else built in place. Its datasets are prepared by the base's own code, so the
check also shows that datasets written before the change open unchanged after it.

Each run is `python -m diskgnn.train` as a user types it, with the checkout's own package first on the path;
its weights are read from the checkpoint file (format: magic, length, torch.save payload, checksum) without
either side's code. A run lists its first differing tensor and the largest difference. JSON to
bench/results/identity.json; exit status 1 when any run differs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import torch

from .harness.common import REPO, machine_info
from .harness.output import add_output_args, command_line, write_json

# Datasets, each made by the base's `python -m diskgnn.prepare` (arguments after the source).
DATASETS = {
    "plain": ["synthetic", "--nodes", "1200", "--feat-dim", "16", "--avg-degree", "8", "--classes", "4",
              "--seed", "1"],
    "edges": ["synthetic", "--structure", "powerlaw", "--nodes", "400", "--feat-dim", "8", "--avg-degree", "6",
              "--classes", "2", "--seed", "0", "--undirected", "--edge-split", "0.7,0.15,0.15"],
    "typed": ["synthetic", "--schema", "mag", "--nodes", "3000", "--feat-dim", "16", "--classes", "4"],
    # HGB's real datasets in ../shared (IMDB's labels are multi-label), unzipped first: {raw} is their folder
    "acm": ["{raw}", "--format", "hgb"],
    "imdb": ["{raw}", "--format", "hgb"],
}
ARCHIVES = {"acm": ("hgb_acm/ACM.zip", "ACM"), "imdb": ("hgb_imdb/IMDB.zip", "IMDB")}
SHARED = REPO.parent / "shared" / "datasets"
SMALL = ["--fanouts", "4,3", "--batch-size", "47", "--hidden", "16", "--epochs", "2", "--lr", "0.02",
         "--memory-budget", "2GiB", "--host-cache", "8KiB"]
# name -> (dataset, options after SMALL)
RUNS = {
    "node": ("plain", []),
    "gat-bf16": ("plain", ["--model", "gat", "--precision", "bf16"]),
    "link": ("edges", ["--task", "link", "--batch-size", "64"]),
    "online": ("plain", ["--sampling", "online"]),
    "typed": ("typed", ["--batch-size", "100"]),
    "acm": ("acm", ["--batch-size", "128", "--fanouts", "10,10"]),
    "imdb": ("imdb", ["--batch-size", "128", "--fanouts", "10,10"]),
}
DEFAULT_RUNS = "node,gat-bf16,link,online"
_HEAD, _TAIL = struct.Struct("<8sQ"), struct.Struct("<Q")


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def base_checkout(rev: str, workdir: Path) -> Path:
    """A worktree of `rev` under `workdir`, its native extension in place."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    root = workdir / f"base-{sha[:12]}"
    if not (root / ".git").exists():
        shutil.rmtree(root, ignore_errors=True)
        git("worktree", "prune")
        git("worktree", "add", "--detach", "--force", str(root), sha)
    if not list((root / "diskgnn").glob("_native*.so")):
        same = subprocess.run(["git", "diff", "--quiet", sha, "--", "native", "setup.py"], cwd=REPO).returncode == 0
        built = list((REPO / "diskgnn").glob("_native*.so"))
        if same and built:
            shutil.copy2(built[0], root / "diskgnn" / built[0].name)
        else:
            print(f"identity: building {sha[:12]}'s native extension in {root}", flush=True)
            subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=root, check=True,
                           stdout=subprocess.DEVNULL)
    return root


def child_env(root: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(root))


def run_diskgnn(root: Path, args: list[str], log: Path) -> None:
    """`python -m diskgnn.CMD ARGS` with `root`'s package imported (cwd first on the path), output to `log`."""
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", *args], cwd=root, env=child_env(root), stdout=out,
                              stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"identity: {' '.join(args[:1])} in {root} failed (exit {done.returncode}); see {log}")


def imported_from(root: Path) -> Path:
    found = subprocess.run([sys.executable, "-c", "import diskgnn; print(diskgnn.__file__)"], cwd=root,
                           env=child_env(root), check=True, capture_output=True, text=True).stdout.strip()
    return Path(found).resolve().parent.parent


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The model's tensors in a diskgnn checkpoint file, read without diskgnn."""
    data = checkpoint.read_bytes()
    _, length = _HEAD.unpack_from(data)
    return torch.load(io.BytesIO(data[_HEAD.size:_HEAD.size + length]), map_location="cpu",
                      weights_only=True)["model"]


def compare(base: dict[str, torch.Tensor], head: dict[str, torch.Tensor]) -> dict:
    """Identical (every tensor's bytes), or the first difference: a missing key, a shape, the largest change."""
    if sorted(base) != sorted(head):
        return {"identical": False, "why": f"different tensors: {sorted(set(base) ^ set(head))}"}
    for key in sorted(base):
        a, b = base[key], head[key]
        if a.dtype != b.dtype or a.shape != b.shape:
            return {"identical": False, "why": f"{key}: {a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"}
        if a.numpy().tobytes() != b.numpy().tobytes():
            diff = float((a.double() - b.double()).abs().max())
            return {"identical": False, "why": f"{key}: differs, largest change {diff:.3g}"}
    return {"identical": True, "tensors": len(base)}


def summary_numbers(workdir: Path) -> dict:
    summary = json.loads((workdir / "summary.json").read_text())
    return {k: v for k, v in summary.items() if k.startswith(("val_", "test_")) and not isinstance(v, dict)}


def unzipped(dataset: str, where: Path) -> Path | None:
    """A real dataset's folder, unzipped from ../shared/datasets under `where` (None for the generated ones)."""
    if dataset not in ARCHIVES:
        return None
    archive, inner = ARCHIVES[dataset]
    if not (SHARED / archive).exists():
        raise SystemExit(f"identity: {SHARED / archive} is absent (the real datasets live in ../shared/datasets)")
    if not (where / dataset / inner).is_dir():
        with zipfile.ZipFile(SHARED / archive) as z:
            z.extractall(where / dataset)
    return where / dataset / inner


def train_side(root: Path, side: str, names: list[str], work: Path) -> dict:
    """Prepares the datasets the runs need with `root`'s code and trains each run; its weights and numbers."""
    work.mkdir(parents=True, exist_ok=True)
    got = {}
    for name in names:
        dataset, options = RUNS[name]
        data = work / "data" / dataset
        if not (data / ".identity-done").exists():
            shutil.rmtree(data, ignore_errors=True)
            data.parent.mkdir(parents=True, exist_ok=True)
            raw = unzipped(dataset, work / "raw")
            run_diskgnn(root, ["diskgnn.prepare", *(a.format(raw=raw) for a in DATASETS[dataset]), "--out", str(data),
                               "--no-progress"], work / f"prepare-{dataset}.log")
            (data / ".identity-done").touch()
        run_dir = work / "runs" / name
        shutil.rmtree(run_dir, ignore_errors=True)
        started = time.perf_counter()
        run_diskgnn(root, ["diskgnn.train", "--data", str(data), "--workdir", str(run_dir), *SMALL, *options,
                           "--device", "cpu", "--no-progress"], work / f"train-{name}.log")
        got[name] = {"weights": weights(run_dir / "checkpoints" / "last.pt"), "numbers": summary_numbers(run_dir),
                     "seconds": round(time.perf_counter() - started, 2)}
        print(f"identity: {side} {name}: {got[name]['seconds']} s", flush=True)
    return got


def identity(base_root: Path, head_root: Path, names: list[str], workdir: Path) -> dict:
    for root in (base_root, head_root):
        if imported_from(root) != root.resolve():
            raise SystemExit(f"identity: {root} does not import its own diskgnn (found {imported_from(root)})")
    base = train_side(base_root, "base", names, workdir / "base-side")
    head = train_side(head_root, "head", names, workdir / "head-side")
    return {name: {**compare(base[name]["weights"], head[name]["weights"]),
                   "base": base[name]["numbers"], "head": head[name]["numbers"],
                   "seconds": [base[name]["seconds"], head[name]["seconds"]]} for name in names}


def numbers(found: dict) -> str:
    return ", ".join(f"{k} {[round(x, 4) for x in v] if isinstance(v, list) else round(v, 4)}"
                     for k, v in found.items())


def describe(root: Path) -> str:
    try:
        return git("rev-parse", "--short=12", "HEAD", cwd=root) + (" + uncommitted changes" if git(
            "status", "--porcelain", "--untracked-files=no", cwd=root) else "")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return str(root)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.identity", description=__doc__.split("\n\n")[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--base", metavar="REV", help="the revision to compare against (a worktree of it is made)")
    which.add_argument("--base-dir", metavar="CHECKOUT", help="an earlier checkout, its native extension built")
    which.add_argument("--smoke", action="store_true", help="this checkout against itself, the node run only")
    ap.add_argument("--runs", default=DEFAULT_RUNS, help=f"comma-separated, of {','.join(RUNS)}")
    add_output_args(ap, "identity")
    args = ap.parse_args(argv)
    names = ["node"] if args.smoke else [n for n in args.runs.split(",") if n]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        raise SystemExit(f"identity: --runs: unknown {unknown}; choose from {list(RUNS)}")
    workdir = Path(args.workdir)
    if args.smoke:
        base_root = REPO
    elif args.base_dir:
        base_root = Path(args.base_dir).resolve()
    else:
        base_root = base_checkout(args.base, workdir)
    runs = identity(base_root, REPO, names, workdir)
    result = {"command": command_line("bench.identity", argv), "machine": machine_info(workdir),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
              "base": describe(base_root), "head": describe(REPO), "runs": runs}
    print(f"base {result['base']}, head {result['head']}; {result['machine']['summary']}; "
          f"torch CPU kernels {result['cpu_capability']}")
    for name, r in runs.items():
        print(f"  {name:9s} {'identical' if r['identical'] else 'DIFFERS: ' + r['why']}; "
              f"base {numbers(r['base'])}; head {numbers(r['head'])}")
    write_json(args.out, result)
    return 0 if all(r["identical"] for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
