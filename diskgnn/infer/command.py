"""`python -m diskgnn.infer --workdir RUN --out OUT.npy|OUT.zarr`: a trained run's outputs for every node (or a
split, or a list of ids), written out of core.

The model is the run's checkpoint (best.pt by default) rebuilt from the run's config.yaml, on its dataset
(or --data, checked against the checkpoint). Layer-wise, with every neighbour: each layer but the last
over every node, a chunk at a time, into a file under OUT.layers/; the last asked for over the selected
nodes only, written to OUT a batch at a time (data/resumable.py). Chunks are bounded by --memory-budget (nodes
and in-edges), so memory stays at a chunk's rows whatever the graph's size. With --fanouts each node's output
comes from a sample of its neighbourhood instead, a batch at a time (sampled.py). `--output`: logits or predictions
(node classification), embeddings (the last hidden layer; --task link: the model's output, what its decoder
scores), or table (an --embeddings run's learned values; the model of such a run reads them beside the
features: table.py). Interrupted and rerun, it goes on where it
stopped: finished layers are taken up (their checksum and model checked), and the output from its last
recorded batch.

A typed run's model (HeteroGNN) outputs its target type's rows: `--nodes` are target-type ids, each batch sampled
per relation (every neighbour by default, or --fanouts as the run's take them, per relation or not), the
featureless types' rows from the model (learned, hashed) or from the run's tables (--featureless table); a
multi-label run's predictions are a 0/1 row of classes per node.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from .. import defaults
from ..data.builtin import default_dataset
from ..data.features import feature_source, type_variants
from ..data.files import file_checksum
from ..data.format import open_dataset
from ..data.resumable import Output, kind_of, nodes_named, side
from ..data.schema import relation_fanouts
from ..errors import ArgumentParser, DiskgnnError, UsageError
from ..nn.inference import LayerWise
from ..nn.models import layer_dims
from ..train.checkpoints import Checkpoints
from ..train.config import TrainConfig, ints
from ..train.options import load_yaml
from ..train.plan import resolve_device
from ..train.model import new_model
from ..units import parse_size
from .sampled import sampled_outputs, typed_outputs
from .table import joined_source, type_tables, write_table

OUTPUTS = ("logits", "predictions", "embeddings", "table")
PROCESS_BYTES = 512 << 20  # the infer process before its data: 245 MB RSS measured, torch's pools beside


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m diskgnn.infer", description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="a trained run's workdir (its config.yaml and checkpoints/)")
    p.add_argument("--out", required=True, help="OUT.npy, or OUT.zarr (a zarr array; needs zarr installed)")
    p.add_argument("--output", choices=OUTPUTS, default=None,
                   help="what to write (default: predictions; --task link: embeddings)")
    p.add_argument("--nodes", default="all", help="all, train, val, test, or FILE.npy of node ids (default: all)")
    p.add_argument("--checkpoint", default=None,
                   help="best, last, or a checkpoint file (default: best; of an --embeddings run, last: its table's)")
    p.add_argument("--data", default=None, help="the dataset (default: the run's)")
    p.add_argument("--memory-budget", default="2GiB", help="what a chunk's rows and activations may take")
    p.add_argument("--batch-size", type=int, default=None,
                   help="output rows computed and written at a time (default: 65536; with --fanouts the run's)")
    p.add_argument("--fanouts", default=None,
                   help="sample each node's neighbours, e.g. 10,5 (one a layer, the seeds' hop first), as sampled "
                        "evaluation does (default: every neighbour, layer-wise and exact)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--overwrite", action="store_true", help="replace a finished OUT")
    p.add_argument("--progress", action=__import__("argparse").BooleanOptionalAction, default=True)
    return p


def fanout_list(text: str, cfg: TrainConfig, ds) -> list:
    """--fanouts for the run's model: one a layer, or a typed model's per layer and relation."""
    if ds.typed:
        layers = len(relation_fanouts(cfg.fanouts, ds.schema))
        fanouts = relation_fanouts(text, ds.schema)
        least = min(f for hop in fanouts for f in hop if f != 0)
    else:
        layers = len(cfg.fanout_list)
        fanouts = list(ints(text, "--fanouts"))
        least = min(fanouts)
    if len(fanouts) != layers or least < 1:
        raise UsageError(f"--fanouts {text}: the model has {layers} layers: name one fanout of at least 1 a layer")
    return fanouts


def run_config(workdir: Path) -> TrainConfig:
    path = workdir / "config.yaml"
    if not path.is_file():
        raise DiskgnnError(f"--workdir {workdir}: no config.yaml: not the workdir of a diskgnn.train run")
    return TrainConfig(**load_yaml(path))


def checkpoint_state(workdir: Path, which: str) -> tuple[Path, dict]:
    if which in ("best", "last"):
        checkpoints = Checkpoints(workdir / "checkpoints")
        path, state = checkpoints.path(which), checkpoints.load(which)
    else:
        path = Path(which)
        if not path.is_file():
            raise DiskgnnError(f"--checkpoint {which}: no such file")
        state = Checkpoints(path.parent).load(path.stem)
    if state is None:
        raise DiskgnnError(f"{path}: no checkpoint (did the run finish an epoch?)")
    return path, state


def select(spec: str, ds) -> np.ndarray:
    """The ids --nodes names: of every node, or (a typed dataset) of the target type's."""
    count = ds.schema.type(ds.schema.target).count if ds.typed else ds.num_nodes
    if spec == "all":
        return np.arange(count, dtype=np.int64)
    if spec in ("train", "val", "test"):
        return np.asarray(ds.split(spec), dtype=np.int64)
    path = Path(spec)
    try:
        ids = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DiskgnnError(f"--nodes {spec}: not all|train|val|test or a readable .npy of node ids ({e})") from None
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise DiskgnnError(f"--nodes {spec}: expected a 1-D array of integer node ids, got {ids.dtype} {ids.shape}")
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= count):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise DiskgnnError(f"--nodes {spec}: node id {bad} out of range [0, {count})")
    return ids


def build_model(cfg: TrainConfig, ds, path: Path, state: dict):
    model = new_model(cfg, ds)
    saved = state.get("dataset")
    if saved is not None and saved != ds.manifest.get("manifest_checksum"):
        raise DiskgnnError(f"{path}: trained on another dataset than {ds.path} (its manifest checksum differs)")
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
        raise DiskgnnError(f"{path}: not a checkpoint of a {cfg.model} model with hidden {cfg.hidden} on "
                           f"{ds.path} ({first})") from None
    return model.eval()


def chunk_edges(budget: int, widest: int) -> int:
    """In-edges a chunk may have: its source rows (at most one an edge) at the widest layer input, float32 and a
    copy, and the block's indices, in a quarter of the budget."""
    return max(1, budget // 4 // (8 * widest + 16))


def tiled_memory(budget: int, nodes: int) -> int:
    """What a tiled pass may hold (nn/tiled_sum.py): the budget but the process's own (interpreter, torch, the
    model: PROCESS_BYTES) and its arrays of a value a node (the selected ids, every id, in-degrees: 16 bytes), at
    least half of it."""
    return max(budget // 2, budget - PROCESS_BYTES - 16 * nodes)


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    workdir, out = Path(args.workdir), Path(args.out)
    kind_of(out)
    budget = parse_size(args.memory_budget, "--memory-budget")
    cfg = run_config(workdir)
    data = args.data or cfg.data or default_dataset(False)  # the run's: the built-in one where it named none
    ds = open_dataset(data, typed=True)
    args.fanouts = fanout_list(args.fanouts, cfg, ds) if args.fanouts is not None else None
    # a typed model's batches sample every neighbour by default: a train batch's size, as its evaluation's
    args.batch_size = args.batch_size or (cfg.batch_size if args.fanouts or ds.typed else 65536)
    if args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size}: must be at least 1")
    task = cfg.task_spec
    output = args.output or ("embeddings" if task.name == "link" else "predictions")
    if task.name == "link" and output in ("logits", "predictions"):
        raise UsageError(f"--output {output}: a --task link model outputs embeddings (what its decoder scores)")
    if output == "table" and (not cfg.embeddings or ds.typed):
        raise UsageError("--output table: the run learned no --embeddings table" + (
            " of a plain graph (a typed run's are per type: WORKDIR/embeddings/<type>/)" if ds.typed else ""))
    if output == "table" and args.fanouts:
        raise UsageError("--fanouts: --output table reads the learned table, no model runs")
    if out.exists() and not args.overwrite:
        raise DiskgnnError(f"--out {out}: exists (pass --overwrite to replace it)")
    nodes = select(args.nodes, ds)
    started = time.perf_counter()
    if output == "table":
        manifest = write_table(ds, workdir, nodes, out, args.nodes, args.batch_size)
    else:
        manifest = write_model_outputs(cfg, ds, workdir, nodes, out, output, budget, args)
    seconds = time.perf_counter() - started
    print(f"infer: wrote {output} of {nodes.size:,} nodes to {out} ({manifest['dtype']} {manifest['shape']}) in "
          f"{seconds:.1f} s ({nodes.size / max(seconds, 1e-9):,.0f} rows/s); manifest {side(out, '.manifest.json')}")


def write_model_outputs(cfg, ds, workdir: Path, nodes: np.ndarray, out: Path, output: str, budget: int, args) -> dict:
    # a run's tables are its last epoch's: its last checkpoint is the model that goes with them
    tables = cfg.embeddings or ds.typed and cfg.featureless == "table" and any(not t.feature_dim
                                                                             for t in ds.schema.types)
    path, state = checkpoint_state(workdir, args.checkpoint or ("last" if tables else "best"))
    model = build_model(cfg, ds, path, state)
    device = resolve_device(args.device)
    model.to(device)
    layers = len(model.layers)
    if output == "embeddings" and cfg.task_spec.name != "link" and layers < 2:
        raise UsageError("--output embeddings: a 1-layer model has no hidden layer")
    k = layers if output != "embeddings" or cfg.task_spec.name == "link" else layers - 1
    if ds.typed:
        features, multilabel = cfg.features, ds.schema.multilabel
        cols = cfg.hidden if k < layers else ds.schema.num_classes
        neighbours = ("all (sampled per relation" if args.fanouts is None else
                      f"sampled: fanouts {'/'.join(','.join(map(str, hop)) for hop in args.fanouts)} per relation"
                      ) + f", seed {cfg.seed}, batches of {args.batch_size})"
    else:
        source = feature_source(ds, cfg.features)
        if cfg.embeddings:  # the model reads its learned values beside the features
            source = joined_source(source, workdir, ds, state, path)
        features, multilabel = source.name, False
        dims = layer_dims(source.dim, cfg.hidden, cfg.task_spec.output_dim(ds), layers)
        cols = dims[k]
        neighbours = "all (layer-wise, exact)" if args.fanouts is None else (
            f"sampled: fanouts {','.join(map(str, args.fanouts))}, seed {cfg.seed}, batches of {args.batch_size}")
    shape, dtype = ((nodes.size, cols) if output != "predictions" or multilabel else (nodes.size,)), \
        np.int32 if output == "predictions" else np.float32
    identity = {"checkpoint": file_checksum(path), "output": output, "layer": k, "neighbours": neighbours,
                "nodes": nodes_named(args.nodes, nodes)}
    result = Output(out, shape, dtype, identity, args.batch_size)
    say = print if args.progress else None
    start = result.rows_done - result.rows_done % args.batch_size  # batches start where the first run's did
    bar = tqdm(total=nodes.size, initial=start, unit="row", desc="infer", disable=not args.progress,
               dynamic_ncols=True)
    layer_wise = args.fanouts is None and not ds.typed
    if ds.typed:
        every = [[-1] * len(ds.schema.relations)] * layers
        batches = typed_outputs(model, ds, nodes, k, args.fanouts or every, args.batch_size, start, device=device,
                                seed=cfg.seed, sampler=cfg.sampler_spec, backend=cfg.backend,
                                read_depth=defaults.READ_DEPTH, variants=type_variants(cfg.features, ds.schema),
                                tables=type_tables(workdir, ds, cfg, state, path))
    elif layer_wise:
        lw = LayerWise(model, ds, side(out, ".layers"), device=device, features=source,
                       chunk_nodes=args.batch_size, chunk_edges=chunk_edges(budget, max(dims)),
                       memory=tiled_memory(budget, ds.num_nodes))
        batches = lw.outputs(nodes, k, args.batch_size, start=start, say=say)
    else:
        batches = sampled_outputs(model, ds, nodes, k, args.fanouts, args.batch_size, start, source=source,
                                  device=device, seed=cfg.seed, sampler=cfg.sampler_spec, backend=cfg.backend,
                                  read_depth=defaults.READ_DEPTH)
    with torch.no_grad():
        for start, rows in batches:
            if output == "predictions":
                rows = (rows > 0 if multilabel else rows.argmax(1)).to(torch.int32)
            result.write(start, rows.numpy())
            bar.update(len(rows))
    bar.close()
    manifest = result.commit({"checkpoint_path": str(path), "epoch": state.get("epoch"), "workdir": str(workdir),
                              "dataset": str(ds.path), "dataset_checksum": ds.manifest.get("manifest_checksum"),
                              "model": {"kind": cfg.model, "layers": layers, "hidden": cfg.hidden,
                                        "heads": cfg.heads, "task": cfg.task_spec.name, "features": features}})
    if layer_wise:
        lw.remove()
        shutil.rmtree(side(out, ".layers"), ignore_errors=True)
    return manifest
