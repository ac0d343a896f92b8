"""The PyG seam measured: accuracy through the adapters against plain PyG in memory, and speed out of core.

    python -m bench.pyg venv                  # a venv holding torch + torch_geometric only; prints its python
    PY=$(python -m bench.pyg venv) && $PY -m bench.pyg accuracy [--datasets cora,...] [--seeds 0-9] [--resume]
    python -m bench.pyg speed [--data W1] [--cap 2GiB] [--batches 100]

accuracy: PyG's GraphSAGE (torch_geometric.nn.models) trained by examples/pyg_graphsage.py through
NodeLoader + DiskgnnFeatureStore/GraphStore/Sampler (sampled training at fanouts 25,10; evaluation through
the same adapters with every neighbour, --eval-fanouts, which gives the whole graph's outputs),
against the same model trained full-batch on the whole graph in RAM by plain PyG; bench.accuracy's
datasets, splits, epochs (Amazon Computers 300, see EPOCHS) and hyper-parameters; selection by validation
accuracy either way. It refuses to run where pyg-lib, torch-sparse or torch-scatter can be imported
(--allow-extras to override, recorded): the point is that torch_geometric alone suffices. The JSON is rewritten after every run;
--resume keeps the runs it holds that were made with the same settings and runs only the seeds missing.

speed: the example on W1 under a cgroup memory cap (bench.harness.memcap; page cache dropped before each run),
with NodeLoader and with DiskgnnLoader, beside PyG's own NeighborLoader over memory maps
(bench.peers.pyg, memmap + MADV_RANDOM, where PyG's sampler is installed), the same fanouts, batch size
and model; time per batch over the first --batches of an epoch, data loading included.

Both write JSON under bench/results/ and their section of docs/accuracy.md or docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bench.accuracy.datasets import DATASETS, SHARED, dataset_spec, prepared
from bench.accuracy.runs import BATCH_SIZE, FANOUTS, HPARAMS
from bench.harness.common import REPO, drop_caches, machine_info
from bench.harness.output import RESULTS, finish, write_json
from diskgnn import defaults
from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError

EXTRAS = ("pyg_lib", "torch_sparse", "torch_scatter")
BOUND = 1.0  # points of test accuracy: |adapters - in memory|, mean over seeds
ACC_MARKERS = ("<!-- bench.pyg accuracy: begin -->", "<!-- bench.pyg accuracy: end -->")
SPEED_MARKERS = ("<!-- bench.pyg speed: begin -->", "<!-- bench.pyg speed: end -->")
W1 = RESULTS / "workloads" / "synthetic-8000000"
EXAMPLE = REPO / "examples" / "pyg_graphsage.py"
# Amazon Computers at bench.accuracy's 150 epochs (one step each) had not converged for sampled training: PyG's own
# NeighborLoader ended between 50.1 and 79.6 % over 10 seeds, the adapters between 69.0 and 80.7 %. At 300 the
# adapters' three seeds end within 4 points of each other (docs/accuracy.md).
EPOCHS = {"amazon_computers": 300}


def example():
    """examples/pyg_graphsage.py as a module: the accuracy study trains through the example itself."""
    spec = importlib.util.spec_from_file_location("pyg_graphsage", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def extras_present() -> list[str]:
    return [m for m in EXTRAS if importlib.util.find_spec(m) is not None]


# -- the venv ---------------------------------------------------------------------------------------
def make_venv() -> Path:
    """$DISKGNN_HOME/peers/pyg-only: this torch, torch_geometric and diskgnn's own dependencies (pinned by
    constraints.txt), diskgnn itself from this tree (a .pth: its native extension is already built here)."""
    venv = defaults.home() / "peers" / "pyg-only"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = [line for line in (REPO / "constraints.txt").read_text().splitlines()
            if line.split("==")[0] in ("numpy", "tqdm", "PyYAML", "xxhash", "torch_geometric")]
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    f"torch=={torch.__version__.split('+')[0]}", *pins], check=True, stdout=sys.stderr)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "diskgnn-tree.pth").write_text(f"{REPO}\n")
    found = subprocess.run([str(python), "-c", f"import importlib.util as u; print([m for m in {EXTRAS!r} "
                            "if u.find_spec(m)])"], check=True, capture_output=True, text=True).stdout.strip()
    if found != "[]":
        raise DiskgnnError(f"{venv}: holds {found}; remove them or the venv")
    return python


# -- accuracy ---------------------------------------------------------------------------------------
REFERENCES = {"loader": "PyG's NeighborLoader in RAM", "full": "full batch in RAM"}


def in_memory(data_dir: Path, *, loader: str, epochs: int, seed: int, hidden: int, lr: float,
              weight_decay: float, dropout: float) -> dict:
    """Plain PyG with the whole graph in RAM, the best validation epoch's test accuracy. loader "full": one
    full-batch step per epoch; "loader": PyG's NeighborLoader at the adapters' fanouts and batch size (it needs
    pyg-lib or torch-sparse). Evaluation on the whole graph either way."""
    from torch_geometric.data import Data
    from torch_geometric.nn.models import GraphSAGE

    ds = open_dataset(data_dir)
    ip = np.asarray(ds.indptr)
    edge_index = torch.from_numpy(np.stack([np.asarray(ds.indices, dtype=np.int64),
                                            np.repeat(np.arange(ds.num_nodes), np.diff(ip))]))
    x = torch.from_numpy(np.array(ds.features, dtype=np.float32))
    y = torch.from_numpy(np.asarray(ds.labels, dtype=np.int64))
    split = {s: torch.from_numpy(np.array(ds.split(s), dtype=np.int64)) for s in ("train", "val", "test")}
    torch.manual_seed(seed)
    model = GraphSAGE(ds.feature_dim, hidden, num_layers=2, out_channels=ds.num_classes, dropout=dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    if loader == "loader":
        from torch_geometric.loader import NeighborLoader

        batches = NeighborLoader(Data(x=x, y=y, edge_index=edge_index), num_neighbors=[int(f) for f in
                                 FANOUTS.split(",")], batch_size=BATCH_SIZE, input_nodes=split["train"],
                                 shuffle=True)
    else:
        batches = [None]

    def acc(s: str) -> float:
        model.eval()
        with torch.no_grad():
            return float((model(x, edge_index)[split[s]].argmax(1) == y[split[s]]).float().mean())

    best, state = -1.0, None
    for _ in range(epochs):
        model.train()
        for batch in batches:
            optimizer.zero_grad()
            if batch is None:
                out, target = model(x, edge_index)[split["train"]], y[split["train"]]
            else:
                out, target = model(batch.x, batch.edge_index)[: batch.batch_size], batch.y[: batch.batch_size]
            F.cross_entropy(out, target).backward()
            optimizer.step()
        val = acc("val")
        if val > best:
            best, state = val, copy.deepcopy(model.state_dict())
    model.load_state_dict(state)
    return {"val_acc": best, "test_acc": acc("test")}


def reference_run(python: str, data: Path, loader: str, epochs: int, seed: int, hp: dict) -> dict:
    """in_memory() in `python` (NeighborLoader's sampler lives outside the torch + torch_geometric venv)."""
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-m", "bench.pyg", "reference", "--data", str(data), "--loader", loader,
                           "--epochs", str(epochs), "--seed", str(seed), "--hparams", json.dumps(hp)],
                          capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise DiskgnnError(f"the {REFERENCES[loader]} reference failed in {python}: "
                           f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "python": python,
            "seconds": time.perf_counter() - t0}


def accuracy(args) -> dict:
    extras = extras_present()
    if extras and not args.allow_extras:
        raise DiskgnnError(f"{', '.join(extras)} importable here: run in the venv of `python -m bench.pyg venv` "
                           "(torch + torch_geometric only), or pass --allow-extras")
    import torch_geometric

    ex = example()
    hp = dict(hidden=HPARAMS["hidden"], lr=HPARAMS["lr"], weight_decay=HPARAMS["weight_decay"],
              dropout=HPARAMS["dropout"])
    names = args.datasets.split(",") if not args.data else [Path(args.data).name]
    settings = {"machine": machine_info(REPO), "extras_present": extras, "python": sys.executable,
                "versions": {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__},
                "fanouts": FANOUTS, "eval_fanouts": args.eval_fanouts, "batch_size": BATCH_SIZE, "hparams": hp,
                "bound_points": BOUND, "command": " ".join(["python -m bench.pyg accuracy", *sys.argv[2:]])}
    runs = kept_runs(Path(args.out), settings) if args.resume else []
    for name in names:
        data = Path(args.data) if args.data else prepared(name, SHARED, RESULTS / "accuracy-work" / "data")
        epochs = args.epochs or EPOCHS.get(name) or dataset_spec(name).epochs
        for seed in args.seeds:
            run = next((r for r in runs if (r["dataset"], r["seed"], r["epochs"]) == (name, seed, epochs)), None)
            if run is None:
                t0 = time.perf_counter()
                adapters = ex.main([str(data), "--epochs", str(epochs), "--fanouts", FANOUTS, "--batch-size",
                                    str(BATCH_SIZE), "--hidden", str(hp["hidden"]), "--lr", str(hp["lr"]),
                                    "--weight-decay", str(hp["weight_decay"]), "--dropout", str(hp["dropout"]),
                                    f"--eval-fanouts={args.eval_fanouts}", "--seed", str(seed), "--device", "cpu"])
                run = {"dataset": name, "seed": seed, "epochs": epochs,
                       "adapters": {"val_acc": adapters["val_acc"], "test_acc": adapters["test_acc"],
                                    "seconds": time.perf_counter() - t0}}
                runs.append(run)
            missing = [ref for ref in args.references if ref not in run]
            for ref in missing:
                run[ref] = reference_run(args.reference_python, data, ref, epochs, seed, hp)
            print(json.dumps(run), flush=True)
            write_json(Path(args.out), {**settings, "runs": runs, "rows": []})  # a stopped study keeps its runs
    result = {**settings, "runs": runs, "rows": accuracy_rows(runs, names, args.seeds)}
    return finish(result, args.out, report=args.doc, markers=ACC_MARKERS, section=lambda _: accuracy_markdown(result))


def kept_runs(out: Path, settings: dict) -> list[dict]:
    """The runs in an earlier --out made with these settings (the machine and command aside); a run's full-batch
    reference is under "full" (older files: "in_memory")."""
    if not out.exists():
        return []
    old = json.loads(out.read_text())
    if not all(old.get(k) == settings[k] for k in settings if k not in ("machine", "command")):
        return []
    for run in old["runs"]:
        if "in_memory" in run:
            run["full"] = run.pop("in_memory")
    return old["runs"]


def accuracy_rows(runs: list[dict], names: list[str], seeds: list[int]) -> list[dict]:
    """Per dataset and reference, over the `seeds` that have it: each side's mean and std, and the per-seed
    differences (adapters - reference), their mean and its standard error."""
    rows = []
    for name in names:
        mine = sorted((r for r in runs if r["dataset"] == name and r["seed"] in seeds), key=lambda r: r["seed"])
        row = {"dataset": name, "epochs": mine[0]["epochs"] if mine else None}
        for ref in REFERENCES:
            paired = [r for r in mine if ref in r]
            if not paired:
                continue
            a = np.array([r["adapters"]["test_acc"] for r in paired]) * 100
            m = np.array([r[ref]["test_acc"] for r in paired]) * 100
            d = a - m
            row[ref] = {"seeds": [r["seed"] for r in paired], "adapters_mean": a.mean(), "adapters_std": a.std(),
                        "mean": m.mean(), "std": m.std(), "delta": d.mean(),
                        "delta_se": d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else None, "deltas": d.tolist(),
                        "within": bool(abs(d.mean()) <= BOUND)}
        rows.append(row)
    return rows


def accuracy_markdown(r: dict) -> str:
    lines = [f"Measured with `{r['command']}` ({r['python']}: torch {r['versions']['torch']}, torch_geometric "
             f"{r['versions']['torch_geometric']}; " + ("none of pyg-lib, torch-sparse, torch-scatter installed"
                                                        if not r["extras_present"] else
                                                        f"{', '.join(r['extras_present'])} present") + f"), on "
             f"{r['machine']['summary']}; evaluation through the adapters at fanouts {r['eval_fanouts']}"
             + (" (every neighbour: the whole graph's outputs, as in RAM)" if r["eval_fanouts"] == "-1,-1" else "")
             + ". Test accuracy in %, mean ± std over the seeds; a difference is the mean of the per-seed "
             "differences (through diskgnn.pyg minus the reference) ± its standard error; the bound is 1 point on "
             "that mean. Each reference's seeds are counted beside it.",
             "",
             "| dataset | epochs | reference | seeds | PyG GraphSAGE through diskgnn.pyg (NodeLoader) | the reference "
             "| difference | within 1 point |", "|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        for ref, label in REFERENCES.items():
            if ref not in row:
                continue
            v = row[ref]
            se = f" ± {v['delta_se']:.2f}" if v.get("delta_se") is not None else ""
            lines.append(f"| {row['dataset']} | {row['epochs']} | {label} | {len(v['seeds'])} | "
                         f"{v['adapters_mean']:.2f} ± {v['adapters_std']:.2f} | {v['mean']:.2f} ± {v['std']:.2f} | "
                         f"{v['delta']:+.2f}{se} | {'yes' if v['within'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def reference(args) -> None:
    """One in_memory() run as a JSON line (the accuracy study calls it in the reference python)."""
    print(json.dumps(in_memory(Path(args.data), loader=args.loader, epochs=args.epochs, seed=args.seed,
                               **json.loads(args.hparams))))


# -- speed ------------------------------------------------------------------------------------------
def _capped(argv: list[str], cap: str | None, json_out: Path, timeout: float) -> dict:
    """One run, cold page cache, under the cap: its last JSON (the example's --json file or the peer's last
    line) with the cgroup's peak and OOM count."""
    from bench.harness.memcap import run_capped

    dropped = drop_caches()
    if cap:
        res = run_capped(argv, cap, cwd=REPO, timeout=timeout)
        out, extra = res.stdout, {"cap_bytes": res.cap_bytes, "peak_bytes": res.peak_bytes,
                                  "oom_killed": res.oom_killed, "timed_out": res.timed_out,
                                  "returncode": res.returncode}
    else:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        out, extra = proc.stdout, {"returncode": proc.returncode}
    if json_out.exists():
        result = json.loads(json_out.read_text())
    else:
        last = [line for line in (out or "").splitlines() if line.startswith("{")]
        result = json.loads(last[-1]) if last else {}
    return {**result, **extra, "cache_dropped": dropped is None, "tail": (out or "")[-600:]}


def speed(args) -> dict:
    from bench.peers import pyg as peer

    data = Path(args.data)
    ds = open_dataset(data)
    work = RESULTS / "pyg-speed"
    work.mkdir(parents=True, exist_ok=True)
    common = ["--epochs", "1", "--max-batches", str(args.batches), "--eval-batches", "1", "--fanouts", args.fanouts,
              "--batch-size", str(args.batch_size), "--hidden", str(args.hidden)]
    runs = {}
    for loader in ("node", "diskgnn"):
        out = work / f"{loader}.json"
        out.unlink(missing_ok=True)
        argv = [sys.executable, str(EXAMPLE), str(data), "--loader", loader, "--cache", args.cache,
                "--memory-budget", args.memory_budget, "--json", str(out), *common]
        runs[f"diskgnn.pyg {loader}"] = _capped(argv, args.cap, out, args.timeout)
        print(json.dumps({k: v for k, v in runs[f"diskgnn.pyg {loader}"].items() if k != "tail"}), flush=True)
    ok, why = peer.available()
    if ok:
        argv = peer.command(data, mode="memmap", madvise="random", batches=args.batches, fanouts=args.fanouts,
                            batch_size=args.batch_size, hidden=args.hidden)
        r = _capped(argv, args.cap, work / "absent.json", args.timeout)
        if r.get("batches"):
            r["ms_per_batch"] = 1000 * r["epoch_s"] / r["batches"]
        runs["PyG NeighborLoader (memmap, MADV_RANDOM)"] = r
        print(json.dumps({k: v for k, v in r.items() if k != "tail"}), flush=True)
    else:
        runs["PyG NeighborLoader (memmap, MADV_RANDOM)"] = {"skipped": why}
    feature_bytes = ds.num_nodes * ds.row_bytes
    result = {"machine": machine_info(data), "dataset": str(data), "nodes": ds.num_nodes, "edges": ds.num_edges,
              "feature_bytes": feature_bytes, "cap": args.cap, "batches": args.batches, "fanouts": args.fanouts,
              "batch_size": args.batch_size, "hidden": args.hidden, "cache": args.cache, "runs": runs,
              "command": " ".join(["python -m bench.pyg speed", *sys.argv[2:]])}
    return finish(result, args.out, report=args.doc, markers=SPEED_MARKERS, section=lambda _: speed_markdown(result))


def speed_markdown(r: dict) -> str:
    base = r["runs"].get("diskgnn.pyg node", {}).get("ms_per_batch")
    lines = [f"Measured with `{r['command']}` on {r['machine']['summary']}: {r['dataset']} ({r['nodes']:,} nodes, "
             f"{r['feature_bytes'] / 2**30:.1f} GiB of features), cap {r['cap'] or 'none'}, page cache dropped "
             f"before each run; PyG's GraphSAGE (hidden {r['hidden']}), fanouts {r['fanouts']}, batches of "
             f"{r['batch_size']}, the first {r['batches']} batches of an epoch; ms per batch from the first, data "
             "loading included.", "",
             "| data side | ms/batch | ms/batch after the first | x NodeLoader + diskgnn.pyg | setup s | peak memory "
             "(cgroup) | result |", "|---|---|---|---|---|---|---|"]
    for name, run in r["runs"].items():
        if "skipped" in run:
            lines.append(f"| {name} | - | - | - | - | - | not run: {run['skipped']} |")
            continue
        ms, after, peak = run.get("ms_per_batch"), run.get("ms_per_batch_after_first"), run.get("peak_bytes")
        status = ("OOM-killed" if run.get("oom_killed") else "timed out" if run.get("timed_out")
                  else f"exit {run['returncode']}" if run.get("returncode") else f"{run.get('batches', 0)} batches"
                  + (f", backend {run['backend']}" if run.get("backend") else ""))
        cells = [f"{ms:,.1f}" if ms else "-", f"{after:,.1f}" if after else "-",
                 f"{ms / base:.2f}x" if ms and base else "-",
                 f"{run['setup_s']:.1f}" if run.get("setup_s") is not None else f"{run.get('load_s', 0):.1f}",
                 f"{peak / 2**30:.2f} GiB" if peak else "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {status} |")
    return "\n".join(lines) + "\n"


def seed_list(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.pyg", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("venv", help="make the torch + torch_geometric venv; print its python")
    a = sub.add_parser("accuracy")
    a.add_argument("--datasets", default=",".join(DATASETS))
    a.add_argument("--data", default=None, help="one prepared dataset directory instead (the smoke test's)")
    a.add_argument("--seeds", type=seed_list, default=[0, 1, 2], help="e.g. 0,1,2 or 0-9")
    a.add_argument("--resume", action="store_true", help="keep --out's runs made with the same settings")
    a.add_argument("--epochs", type=int, default=None, help="default: bench.accuracy's per dataset (Amazon: 300)")
    a.add_argument("--eval-fanouts", default="-1,-1", help="the adapters' evaluation (default: every neighbour, "
                   "as the in-memory model's; 25,10 samples it as training does)")
    a.add_argument("--references", type=lambda v: v.split(","), default=["loader", "full"],
                   help="plain PyG in RAM to compare with: loader (NeighborLoader at the same fanouts and batch "
                   "size), full (full batch), or both (default)")
    a.add_argument("--reference-python", default=str(REPO / ".venv" / "bin" / "python"),
                   help="the python the references run in: NeighborLoader needs pyg-lib or torch-sparse "
                   "(default: the repo's .venv)")
    a.add_argument("--allow-extras", action="store_true")
    a.add_argument("--out", default=str(RESULTS / "pyg-accuracy.json"))
    a.add_argument("--doc", default=str(REPO / "docs" / "accuracy.md"))
    r = sub.add_parser("reference", help="one in-memory reference run (the accuracy study's)")
    r.add_argument("--data", required=True)
    r.add_argument("--loader", choices=tuple(REFERENCES), required=True)
    r.add_argument("--epochs", type=int, required=True)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--hparams", required=True, help="JSON: hidden, lr, weight_decay, dropout")
    s = sub.add_parser("speed")
    s.add_argument("--data", default=str(W1))
    s.add_argument("--cap", default="2GiB", help="cgroup memory cap; none: uncapped")
    s.add_argument("--batches", type=int, default=100)
    s.add_argument("--fanouts", default="10,5")
    s.add_argument("--batch-size", type=int, default=1024)
    s.add_argument("--hidden", type=int, default=256)
    s.add_argument("--cache", default="1GiB", help="NodeLoader's feature store memory tier")
    s.add_argument("--memory-budget", default="2GiB", help="DiskgnnLoader's")
    s.add_argument("--timeout", type=float, default=1800)
    s.add_argument("--out", default=str(RESULTS / "pyg-speed.json"))
    s.add_argument("--doc", default=str(REPO / "docs" / "benchmarks.md"))
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):  # `python -m bench pyg`: the speed table
        argv = ["speed", *argv]
    args = p.parse_args(argv)
    if args.what == "venv":
        print(make_venv())
        return None
    if args.what == "speed" and args.cap == "none":
        args.cap = None
    if getattr(args, "doc", None) == "":
        args.doc = None
    if args.what == "reference":
        return reference(args)
    if args.what == "accuracy" and not set(args.references) <= set(REFERENCES):
        raise DiskgnnError(f"--references {','.join(args.references)}: expected loader, full or both")
    return accuracy(args) if args.what == "accuracy" else speed(args)


if __name__ == "__main__":
    from diskgnn.errors import run_cli

    sys.exit(run_cli("bench.pyg", main))
