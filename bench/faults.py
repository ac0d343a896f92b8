"""Fault injection on real processes and devices: kill -9 at random instants, reads failing with EIO, a full disk.

    python -m bench faults [--trials 12] [--nodes 200000] [--out bench/results/faults.json]
    python -m bench.faults --smoke          # one trial of each kind, tiny (the test suite runs this)

Each trial is one real failure and its recovery, judged by what a user would
see:
  kill-prepare / kill-quantize: SIGKILL at a random instant of the command;
      its rerun (same --out / the same variants) completes, verify passes, no
      temporary sibling is left;
  kill-train: SIGKILL at a random instant (sampling, packing, training, a
      checkpoint write); `--resume` completes and ends with the weights of the
      run that was never stopped, bit for bit;
  eio-packs / eio-features: the workdir, or the dataset, served through a FUSE
      mirror whose reads past a random offset of the pack (or feature) file
      fail with EIO mid-epoch (bench.harness.faultfs): the run ends within a
      bound with exit status 1 and one line naming the file and the offset,
      and the last checkpoint still loads;
  full-offline / full-checkpoint: the workdir on a small tmpfs that another
      process fills from the moment the run starts (so that ENOSPC meets the
      offline phase: sample files, the packer's reservation, or the plan's
      disk check refuses first), or once the first checkpoint is written (so
      that a later checkpoint write meets it): one line, exit 1, no
      temporary file left, the previous checkpoint loads, and `--resume` on
      the freed disk completes.
  kill-embeddings / full-embeddings: kill-train and full-checkpoint with
      learnable embeddings (--embeddings) whose rows nearly all live on disk,
      so that the kill or the full disk meets their write-back (the undo
      journal, the rows written in place): `--resume` ends with the
      uninterrupted run's embedding table and weights, bit for bit.
Every trial is written to the JSON; the counts say how many survived.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from diskgnn.data.files import is_temp
from diskgnn.train.checkpoints import Checkpoints

from .harness.common import REPO, machine_info
from .harness.faultfs import available as fuse_available
from .harness.faultfs import mounted
from .harness.output import add_output_args, finish

KINDS = ("kill-prepare", "kill-quantize", "kill-train", "eio-packs", "eio-features", "full-offline",
         "full-checkpoint", "kill-embeddings", "full-embeddings")
TRAIN = ["--fanouts", "5,3", "--batch-size", "64", "--hidden", "32", "--epochs", "2", "--no-progress",
         "--host-cache", "256KiB", "--checkpoint-every", "4", "--eval-max-batches", "2"]
EMBEDDINGS = ["--embeddings", "16", "--embedding-cache", "4KiB"]  # a few hot rows: the rest written back
FULL = ["--eval", "none", "--epochs", "1", "--checkpoint-every", "2"]
BOUND_S = 120  # a failure must end the run within this (no hang)


def _cmd(*args) -> list[str]:
    return [sys.executable, "-m", *map(str, args)]


def _run(args, timeout=BOUND_S, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _kill_at(args, delay_s: float) -> tuple[bool, float]:
    """Starts `args`, SIGKILLs it after `delay_s`; whether it was still running then, and when it stopped."""
    start = time.monotonic()
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=delay_s)
        return False, time.monotonic() - start
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True, time.monotonic() - start


def _one_line(proc: subprocess.CompletedProcess, *fragments: str) -> tuple[bool, str]:
    """Exit 1 with one line holding every fragment (a tuple of fragments: any one of them)."""
    lines = proc.stderr.strip().splitlines()
    ok = proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr and all(
        any(x.lower() in lines[0].lower() for x in (f if isinstance(f, tuple) else (f,))) for f in fragments)
    return ok, lines[-1] if lines else ""


def _fill(directory: Path) -> None:
    """Writes zeros into `directory` until its file system is full (it may be already: then not even the filler's
    name fits)."""
    try:
        with open(directory / "filler", "wb") as f:
            while True:
                f.write(bytes(1 << 16))
    except OSError:
        pass


def _temps(directory: Path) -> list[str]:
    return [str(p) for p in directory.rglob(".*") if is_temp(p)]


def _verify(ds: Path) -> bool:
    return _run(_cmd("diskgnn.verify", ds)).returncode == 0


def _last(workdir: Path):
    return Checkpoints(workdir / "checkpoints").load("last")


def _table(workdir: Path) -> bytes | None:
    path = workdir / "embeddings" / "table.bin"
    return path.read_bytes() if path.exists() else None


class Trials:
    """The shared inputs of a session's trials (a synthetic dataset, the uninterrupted run) and the trials."""

    def __init__(self, work: Path, nodes: int, seed: int):
        self.work, self.nodes, self.rng = Path(work), nodes, random.Random(seed)
        self.work.mkdir(parents=True, exist_ok=True)
        self.source = self.work / "data" / "ds"
        self.source.parent.mkdir(exist_ok=True)
        start = time.monotonic()
        done = _run(_cmd("diskgnn.prepare", "synthetic", "--nodes", nodes, "--out", self.source, "--overwrite",
                         "--no-progress"), timeout=None)
        if done.returncode:
            raise SystemExit(f"bench.faults: preparing the trial dataset failed: {done.stderr.strip()}")
        self.prepare_s = time.monotonic() - start
        self._references: dict[tuple, dict] = {}

    def reference(self, extra=()) -> dict:
        """The run with TRAIN + `extra` that was never stopped: its last checkpoint, its embedding table (if it
        has one) and how long it took; made on first use."""
        key = tuple(extra)
        if key not in self._references:
            start = time.monotonic()
            workdir = self.work / f"whole-{len(self._references)}"
            whole = _run(_cmd("diskgnn.train", "--data", self.source, "--workdir", workdir, *TRAIN, *extra),
                         timeout=None)
            if whole.returncode:
                raise SystemExit(f"bench.faults: the uninterrupted run failed: {whole.stderr.strip()}")
            self._references[key] = {"last": _last(workdir), "table": _table(workdir),
                                     "seconds": time.monotonic() - start}
        return self._references[key]

    def _same(self, workdir: Path, extra) -> dict:
        """Whether a resumed run in `workdir` ended with the reference's weights and embedding table."""
        reference, got = self.reference(extra), _last(workdir)
        weights = got is not None and all(got["model"][k].equal(v) for k, v in reference["last"]["model"].items())
        return {"same_weights": weights, "same_table": _table(workdir) == reference["table"]}

    def _fresh(self, name: str) -> Path:
        path = self.work / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def kill_prepare(self, i: int) -> dict:
        out = self._fresh(f"t{i}") / "ds"
        args = _cmd("diskgnn.prepare", "synthetic", "--nodes", self.nodes, "--seed", 1, "--out", out,
                    "--overwrite", "--no-progress", "--quantize", "sq8")
        killed, at = _kill_at(args, self.rng.uniform(0.2, self.prepare_s * 1.5))
        rerun = _run(args, timeout=None)
        left = _temps(out.parent)
        ok = rerun.returncode == 0 and _verify(out) and not left
        return {"killed": killed, "at_s": at, "survived": ok, "rerun": rerun.stderr.strip()[-200:], "temps_left": left}

    def kill_quantize(self, i: int) -> dict:
        ds = self._fresh(f"t{i}") / "ds"
        shutil.copytree(self.source, ds)
        args = _cmd("diskgnn.quantize", ds, "--spec", "sq4", "--spec", "vq:w=8,L=64", "--overwrite",
                    "--force")  # kills land in vq's k-means too; its fit is refused on Gaussian rows
        killed, at = _kill_at(args, self.rng.uniform(0.2, self.prepare_s))
        rerun = _run(args, timeout=None)
        left = _temps(ds)
        ok = rerun.returncode == 0 and _verify(ds) and not left
        return {"killed": killed, "at_s": at, "survived": ok, "rerun": rerun.stderr.strip()[-200:], "temps_left": left}

    def kill_train(self, i: int, extra=()) -> dict:
        workdir = self._fresh(f"t{i}")
        args = _cmd("diskgnn.train", "--data", self.source, "--workdir", workdir, *TRAIN, *extra)
        killed, at = _kill_at(args, self.rng.uniform(0.5, self.reference(extra)["seconds"]))
        resumed = _run([*args, "--resume"], timeout=None)
        same = self._same(workdir, extra) if resumed.returncode == 0 else {"same_weights": False}
        return {"killed": killed, "at_s": at, "survived": resumed.returncode == 0 and all(same.values()), **same,
                "resume": resumed.stderr.strip()[-200:]}

    def eio(self, i: int, target: str) -> dict:
        """Reads of the pack file (workdir on the mirror) or the feature file (dataset on the mirror, online
        sampling) fail past a random offset; a first, clean run through the mirror writes the files."""
        ok, why = fuse_available()
        if not ok:
            return {"skipped": why}
        root = self._fresh(f"t{i}")
        (root / "w").mkdir()
        shutil.copytree(self.source, root / "ds")
        name = "epoch-00000.packs" if target == "packs" else "features.bin"
        with mounted(root, self.work / f"mnt{i}", {}) as mnt:  # clean: writes the packs
            args = _cmd("diskgnn.train", "--data", mnt / "ds", "--workdir", mnt / "w", *TRAIN, "--epochs", "1")
            if target == "features":
                args += ["--sampling", "online"]
            _run(args, timeout=None)
        size = next(root.rglob(name)).stat().st_size
        offset = self.rng.randrange(size // 4, size)
        env = {"DISKGNN_VERIFY_ON_OPEN_BYTES": "0"}  # checked whole on open, the file would fail before training
        with mounted(root, self.work / f"mnt{i}", {name: offset}):  # the same mount point: the same arguments
            start = time.monotonic()
            try:
                proc = _run(args, env=env)
            except subprocess.TimeoutExpired:
                return {"offset": offset, "survived": False, "hung": True}
            took = time.monotonic() - start
        line_ok, line = _one_line(proc, name, "offset", "Input/output error")
        try:
            intact = _last(root / "w") is not None
        except Exception:  # noqa: BLE001 - a damaged checkpoint is exactly what this trial looks for
            intact = False
        return {"offset": offset, "file_bytes": size, "seconds": took, "line": line, "one_line": line_ok,
                "checkpoint_intact": intact, "survived": line_ok and intact}

    def full(self, i: int, when: str, extra=()) -> dict:
        if os.geteuid() != 0:
            return {"skipped": "mounting a tmpfs needs root"}
        mnt = self._fresh(f"t{i}") / "tiny"
        mnt.mkdir()
        # room for the run's samples, packs and checkpoints (packs take a few times the features here)
        size = 8 * (self.source / "features.bin").stat().st_size + (8 << 20)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)]).returncode:
            return {"skipped": "cannot mount a tmpfs here"}
        try:
            args = _cmd("diskgnn.train", "--data", self.source, "--workdir", mnt / "w", *TRAIN, *FULL, *extra)
            proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + BOUND_S
            while when == "checkpoint" and proc.poll() is None and time.monotonic() < deadline:
                if (mnt / "w" / "checkpoints" / "last.pt").exists():
                    break
                time.sleep(0.005)
            _fill(mnt)
            try:
                err = proc.communicate(timeout=BOUND_S)[1]
            except subprocess.TimeoutExpired:
                proc.kill()
                return {"tmpfs_bytes": size, "survived": False, "hung": True}
            done = subprocess.CompletedProcess(args, proc.returncode, "", err)
            line_ok, line = _one_line(done, ("no space left on device", "of disk for samples and packs"))
            left = _temps(mnt)
            kept = when == "offline" or _last(mnt / "w") is not None
            (mnt / "filler").unlink()
            resumed = _run([*args, "--resume"], timeout=None)
            same = self._same(mnt / "w", [*FULL, *extra]) if extra and resumed.returncode == 0 else {}
            return {"tmpfs_bytes": size, "line": line, "finished_before_full": proc.returncode == 0,
                    "temps_left": left, "checkpoint_loads": kept, "resumed": resumed.returncode == 0, **same,
                    "survived": (line_ok or proc.returncode == 0) and not left and kept and resumed.returncode == 0
                    and all(same.values())}
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)

    def run(self, kind: str, i: int) -> dict:
        fn = {"kill-prepare": self.kill_prepare, "kill-quantize": self.kill_quantize, "kill-train": self.kill_train,
              "eio-packs": lambda j: self.eio(j, "packs"), "eio-features": lambda j: self.eio(j, "features"),
              "full-offline": lambda j: self.full(j, "offline"),
              "full-checkpoint": lambda j: self.full(j, "checkpoint"),
              "kill-embeddings": lambda j: self.kill_train(j, EMBEDDINGS),
              "full-embeddings": lambda j: self.full(j, "checkpoint", EMBEDDINGS)}[kind]
        start = time.monotonic()
        result = fn(i)
        shutil.rmtree(self.work / f"t{i}", ignore_errors=True)
        return {"kind": kind, "trial": i, "wall_s": time.monotonic() - start, **result}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=12, help="trials of each kind")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--nodes", type=int, default=200_000, help="the trial dataset's nodes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="one trial of each kind on a tiny dataset")
    add_output_args(ap, "faults")
    args = ap.parse_args(argv)
    if args.smoke:
        args.trials, args.nodes = 1, 5_000
    kinds = args.kinds.split(",")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit(f"bench.faults: unknown kinds {unknown}; choose from {', '.join(KINDS)}")
    trials = Trials(Path(args.workdir), args.nodes, args.seed)
    info = machine_info(Path(args.workdir))
    print(f"machine: {info['summary']}; trial dataset {args.nodes:,} nodes (prepare {trials.prepare_s:.1f} s)",
          flush=True)
    results = []
    for n in range(args.trials):
        for kind in kinds:
            r = trials.run(kind, len(results))
            results.append(r)
            state = "skipped: " + r["skipped"] if "skipped" in r else ("survived" if r["survived"] else "LOST")
            print(f"{kind} #{n}: {state} ({r['wall_s']:.1f} s)", flush=True)
    counts = {k: {"trials": sum(r["kind"] == k and "skipped" not in r for r in results),
                  "survived": sum(r["kind"] == k and r.get("survived", False) for r in results),
                  "skipped": sum(r["kind"] == k and "skipped" in r for r in results)} for k in kinds}
    for k, c in counts.items():
        print(f"{k}: {c['survived']} of {c['trials']} survived" + (f", {c['skipped']} skipped" if c["skipped"] else ""))
    result = {"machine": info, "nodes": args.nodes, "counts": counts, "trials": results}
    finish(result, args.out)
    shutil.rmtree(args.workdir, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
