"""`python -m diskgnn.prepare SOURCE --out DIR`: any supported input -> dataset format v1.

Streams every phase (labels, splits, features, topology) in chunks sized from
--memory-budget, so graphs larger than RAM convert; see docs/format.md for the
output and the sources' modules for the inputs.

Examples::

    python -m diskgnn.prepare synthetic --nodes 8000000 --feat-dim 128 --avg-degree 10 \\
        --classes 16 --seed 0 --out data/w1
    python -m diskgnn.prepare synthetic --structure powerlaw --nodes 8000000 --feat-dim 128 \\
        --avg-degree 10 --classes 16 --seed 0 --out data/w2
    python -m diskgnn.prepare ../shared/datasets/planetoid_cora --out data/cora --undirected
    python -m diskgnn.prepare ACM/ --format hgb --out data/acm       (heterogeneous: data/hetero/)
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .. import defaults
from ..errors import ArgumentParser, DiskgnnError, UsageError
from ..memory import peak_rss_bytes
from ..units import format_size, parse_size
from .csc import CscBuilder
from .edge_split import EdgeSplitter, checked_shares, describe_edge_split
from .format import FEATURE_DTYPES, SPLITS, DatasetBuilder, index_dtype
from .graph_stats import describe, measure
from .hetero.prepare import add_hetero_arguments, is_hetero_input, prepare_hetero_args
from .quantize.spec import canonical_spec
from .quantize.variants import write_quantized
from .sources import FORMATS, HETERO_FORMATS, open_source
from .sources.synthetic import STRUCTURES, SyntheticSource
from .splits import BLOCK, check_given, per_class_split, ratio_split


def _parse_floats(text: str, n: int, flag: str):
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag}: expected {n} comma-separated numbers, got {text!r}") from None
    if len(values) != n:
        raise UsageError(f"{flag}: expected {n} comma-separated numbers, got {text!r}")
    return tuple(values)


def row_normalized(block: np.ndarray, first_row: int, name: str) -> np.ndarray:
    """`block`'s rows divided by their sums, in float64 (so that the stored dtype rounds once); all-zero rows
    are kept. For non-negative features only: a signed row's sum can be ~0 and blow its values up."""
    x = np.asarray(block, dtype=np.float64)
    negative = (x < 0).any(axis=1)
    if negative.any():
        raise DiskgnnError(f"{name}: --normalize-features: feature row {first_row + int(np.flatnonzero(negative)[0])} "
                           f"has negative values (rows are divided by their sums, for non-negative features only)")
    sums = x.sum(axis=1, keepdims=True)
    return x / np.where(sums == 0, 1.0, sums)


def prepare(source, out, *, format: str = "auto", undirected: bool = False, self_loops: bool = False,
            drop_self_loops: bool = False, feature_dtype: str | None = None,
            split_ratios=(0.1, 0.1, 0.8), split_per_class=None, split_seed: int = 0,
            train_fraction: float | None = None, memory_budget=defaults.MEMORY_BUDGET, overwrite: bool = False,
            allow_nonfinite: bool = False, ogb_split: str | None = None, synthetic: dict | None = None,
            progress: bool | None = None, report: bool = False, quantize=(), normalize_features: bool = False,
            edge_split=None) -> Path:
    """Converts SOURCE (a path, "synthetic", or a PyTorch Geometric Data object) into a dataset directory OUT
    and returns its path.

    Parameters mirror the command-line flags (see ``python -m diskgnn.prepare -h``).
    `memory_budget` bounds the whole process's memory; sizes accept suffixes.
    `progress` shows bars (None: when on a terminal); `report` prints a summary line.
    `quantize` lists quantizer specs (docs/quantization.md) whose variants are stored too.
    `normalize_features` divides each (non-negative) feature row by its sum; all-zero rows stay.
    `train_fraction` F: train takes F of the labeled nodes, val and test `split_ratios`' second and third.
    A synthetic source's graph is measured (graph_stats) into the manifest's `synthetic` key.
    `edge_split` (TRAIN,VAL,TEST shares, seeded by `split_seed`) holds VAL and TEST of the edges out of the
    graph, as val_edges and test_edges (diskgnn.data.edge_split).
    """
    budget = parse_size(memory_budget, "--memory-budget", at_least=defaults.MIN_PREPARE_BUDGET)
    split_ratios = _with_train_fraction(train_fraction, split_ratios, split_per_class)
    if split_per_class is None and (min(split_ratios) < 0 or sum(split_ratios) > 1 + 1e-9):
        raise UsageError(f"--split-ratios {split_ratios}: must be non-negative and sum to at most 1")
    specs = list(dict.fromkeys(canonical_spec(s, "--quantize") for s in quantize))  # bad specs fail before any work
    edge_shares = checked_shares(edge_split) if edge_split is not None else None
    src = open_source(source if not isinstance(source, Path) else str(source), format, ogb_split=ogb_split,
                      synthetic=synthetic)
    out_dtype = np.dtype(feature_dtype) if feature_dtype else (
        src.feature_dtype if src.feature_dtype.name in FEATURE_DTYPES else np.dtype(np.float32))
    if out_dtype.name not in FEATURE_DTYPES:
        raise UsageError(f"--feature-dtype {feature_dtype}: choose from {', '.join(FEATURE_DTYPES)}")
    check_disk(out, src, out_dtype, undirected, len(specs), edge_shares)
    job = _Job(src, out_dtype, budget - defaults.PREPARE_BASE_RSS,
               dict(disable=None if progress is None else not progress, unit_scale=True, leave=False))
    given = src.splits()
    if given is not None:
        if train_fraction is not None:
            raise UsageError(f"--train-fraction: {src.name} comes with its own train/val/test split")
        how = "source"
    elif split_per_class is not None:
        how = f"per-class {split_per_class[0]},{split_per_class[1]} (seed {split_seed})"
    else:
        how = "ratios " + ",".join(f"{r:g}" for r in split_ratios) + f" (seed {split_seed})"
    given_edges = src.edge_splits()
    if given_edges is not None and edge_shares is not None:
        raise UsageError(f"--edge-split: {src.name} comes with its own val and test edges")
    with DatasetBuilder(out, overwrite=overwrite) as b:
        num_classes = job.labels(b)  # first: the class count and the drawn splits depend on them
        short = job.splits(b, num_classes, given, split_per_class, split_ratios, split_seed)
        job.features(b, normalize_features, allow_nonfinite)
        quantized = {spec: job.quantized(b, spec) for spec in specs}
        splitter = None if edge_shares is None and given_edges is None else EdgeSplitter(
            src.num_nodes, undirected, b, job.work, src.edge_count_hint, src.name, ratios=edge_shares,
            seed=split_seed, given=given_edges)
        num_edges, input_edges = job.topology(b, undirected, self_loops, drop_self_loops, splitter)
        meta = {
            "num_nodes": src.num_nodes,
            "num_edges": num_edges,
            "feature_dim": src.feature_dim,
            "feature_dtype": out_dtype.name,
            "num_classes": int(num_classes),
            "splits": {s: b.files[f"{s}_idx"]["shape"][0] for s in SPLITS},
            **({"quantized": quantized} if quantized else {}),
            **({"edge_split": splitter.finish()} if splitter else {}),
            "producer": {
                "source": src.name,
                "options": {
                    "undirected": undirected, "self_loops": self_loops, "drop_self_loops": drop_self_loops,
                    "split": how, "allow_nonfinite": allow_nonfinite,
                    "normalize_features": normalize_features,
                    "input_edges": input_edges,
                },
            },
        }
        if isinstance(src, SyntheticSource):
            meta["synthetic"] = measure(b.staged(meta), src.parameters(), chunk_bytes=job.work // 2)
            job.phase("statistics")
        path = b.finish(meta)
    if short:
        print(f"prepare: warning: classes {short} have fewer nodes than --split-per-class asks for")
    if report:
        print(f"prepare: wrote {path} ({src.num_nodes} nodes, {num_edges} edges, {src.feature_dim}-d {out_dtype.name} "
              f"features, {num_classes} classes) in {time.perf_counter() - job.start:.1f} s ("
              + ", ".join(f"{k} {v:.1f} s" for k, v in job.phases.items())
              + f"); peak RSS {peak_rss_bytes()} bytes (budget {budget})")
        if "synthetic" in meta:
            print(f"prepare: {describe(meta['synthetic'])}")
        if splitter:
            print(f"prepare: {describe_edge_split(meta['edge_split'])}")
    return path


def disk_needed(src, out_dtype: np.dtype, undirected: bool, variants: int, edge_shares=None) -> dict:
    """The bytes prepare writes at its peak, by part: the features (and at most as much per quantized variant),
    labels and splits, the topology, and the spill files of its external sort, which coexist with the topology
    while it is written; with an edge split, the held-out pairs (spilled, then stored). Edges: the source's
    count hint, doubled where made undirected."""
    n = src.num_nodes
    edges = src.edge_count_hint * (2 if undirected else 1)
    index = np.dtype(index_dtype(n)).itemsize
    features = n * src.feature_dim * out_dtype.itemsize
    need = {"features": features * (1 + variants), "labels and splits": n * (4 + 8),
            "topology": 8 * (n + 1) + index * edges, "sort spill": 2 * index * edges}
    if edge_shares is not None:
        need["held-out edges"] = int(src.edge_count_hint * (1 - edge_shares[0])) * (2 * index + 16)
    return need


def check_disk(out, src, out_dtype: np.dtype, undirected: bool, variants: int, edge_shares=None) -> None:
    """Refuses, in one line and before any work, a dataset the file system under `out` cannot hold."""
    need = disk_needed(src, out_dtype, undirected, variants, edge_shares)
    parent = Path(out).absolute().parent
    while not parent.exists():
        parent = parent.parent
    free = shutil.disk_usage(parent).free
    total = int(sum(need.values()) * defaults.DISK_HEADROOM)
    if total > free:
        raise DiskgnnError(f"--out {out}: needs ~{format_size(total)} of disk ("
                           + ", ".join(f"{k} {format_size(v)}" for k, v in need.items())
                           + f"), {format_size(free)} free there")


class _Job:
    """One prepare's phases, each streaming the source in chunks sized from `work` bytes, each timed."""

    def __init__(self, src, out_dtype: np.dtype, work: int, bar: dict):
        self.src, self.out_dtype, self.work, self.bar = src, out_dtype, work, bar
        self.start = time.perf_counter()
        self.phases: dict[str, float] = {}

    def phase(self, name: str) -> None:
        self.phases[name] = time.perf_counter() - self.start - sum(self.phases.values())

    def labels(self, b: DatasetBuilder) -> int:
        """labels.bin; returns the class count."""
        src, n = self.src, self.src.num_nodes
        writer = b.writer("labels", np.int32)
        lo, hi = 0, -1
        for block in tqdm(src.labels(max(1, self.work // 32)), desc="labels", **self.bar):
            block = np.asarray(block)
            if block.size:
                lo, hi = min(lo, int(block.min())), max(hi, int(block.max()))
            writer.write(block)
        if writer.rows != n:
            raise DiskgnnError(f"{src.name}: {writer.rows} labels for {n} nodes")
        if lo < -1:
            raise DiskgnnError(f"{src.name}: negative label {lo} (use -1 for unlabeled nodes)")
        num_classes = src.num_classes if src.num_classes is not None else hi + 1
        if hi >= num_classes:
            raise DiskgnnError(f"{src.name}: label {hi} out of range for {num_classes} classes")
        b.add("labels", writer.close())
        return num_classes

    def splits(self, b: DatasetBuilder, num_classes: int, given, per_class, ratios, seed: int) -> list:
        """{train,val,test}_idx.bin: the source's, per class or by ratio; returns the classes short of per_class."""
        src, n = self.src, self.src.num_nodes
        labels_path = b.tmp / b.files["labels"]["name"]

        def label_blocks():
            with open(labels_path, "rb") as f:
                for first in range(0, n, BLOCK):
                    yield first, np.fromfile(f, dtype="<i4", count=min(BLOCK, n - first))

        writers = {s: b.writer(f"{s}_idx", np.int64) for s in SPLITS}
        short = []
        if given is not None:
            labels_map = np.memmap(labels_path, dtype="<i4", mode="r", shape=(n,))
            check_given(given, n, lambda ids: labels_map[np.sort(ids)], src.name)
            del labels_map
            for s in SPLITS:
                writers[s].write(given[s])
        elif per_class is not None:
            short = per_class_split(label_blocks, num_classes, per_class, seed, writers)
        else:
            ratio_split(label_blocks, ratios, seed, writers)
        for s in SPLITS:
            b.add(f"{s}_idx", writers[s].close())
        self.phase("labels+splits")
        if b.files["train_idx"]["shape"][0] == 0:
            raise DiskgnnError(f"{src.name}: no train nodes (no labeled node was drawn for training)")
        return short

    def features(self, b: DatasetBuilder, normalize: bool, allow_nonfinite: bool) -> None:
        """features.bin in the stored dtype, rows checked finite (unless allowed) and normalised where asked."""
        src, dtype = self.src, self.out_dtype
        writer = b.writer("features", dtype, (src.feature_dim,))
        check_finite = np.issubdtype(dtype, np.floating) and not allow_nonfinite
        row_bytes = src.feature_dim * max(src.feature_dtype.itemsize, dtype.itemsize, 4)
        for block in tqdm(src.features(max(1, self.work // (4 * max(1, row_bytes)))), desc="features", total=None,
                          **self.bar):
            if block.ndim != 2 or block.shape[1] != src.feature_dim:
                raise DiskgnnError(f"{src.name}: feature rows of shape {block.shape[1:]}, expected "
                                   f"({src.feature_dim},)")
            if normalize:
                block = row_normalized(block, writer.rows, src.feature_name)
            with np.errstate(over="ignore", invalid="ignore"):  # reported below as non-finite
                out_block = block.astype(dtype, copy=False)
            if check_finite and not np.isfinite(out_block).all():
                row = writer.rows + int(np.flatnonzero(~np.isfinite(out_block).all(axis=1))[0])
                raise DiskgnnError(f"{src.feature_name}: feature row {row} has NaN or inf"
                                   f"{' after conversion to ' + dtype.name if dtype != block.dtype else ''}"
                                   f" (pass --allow-nonfinite to keep such rows)")
            writer.write(out_block)
        if writer.rows != src.num_nodes:
            raise DiskgnnError(f"{src.name}: {writer.rows} feature rows for {src.num_nodes} nodes")
        b.add("features", writer.close())
        self.phase("features")

    def quantized(self, b: DatasetBuilder, spec: str) -> dict:
        """A quantized variant's files from features.bin; returns its fidelity report."""
        _, files, report = write_quantized(b.tmp / b.files["features"]["name"], self.out_dtype, self.src.num_nodes,
                                           self.src.feature_dim, spec, b.tmp, work_bytes=self.work)
        for kind, entry in files.items():
            b.add(kind, entry)
        self.phase(f"quantize {spec}")
        return report

    def topology(self, b: DatasetBuilder, undirected: bool, self_loops: bool, drop_self_loops: bool,
                 splitter: EdgeSplitter | None) -> tuple[int, int]:
        """indptr.bin and indices.bin (CSC) of the train edges where `splitter` holds some out, else of all;
        returns the edge count and the input's."""
        src = self.src
        csc = CscBuilder(src.num_nodes, b, self.work, undirected=undirected, self_loops=self_loops,
                         drop_self_loops=drop_self_loops, edge_count_hint=src.edge_count_hint, source_name=src.name)
        input_edges = 0
        for s, d in tqdm(src.edges(max(1024, self.work // 128)), desc="edges", **self.bar):
            input_edges += len(s)
            csc.add(*(splitter.route(s, d) if splitter else (s, d)))
        self.phase("edges")
        num_edges = csc.finish()
        self.phase("csc sort")
        return num_edges, input_edges


def _with_train_fraction(train_fraction, split_ratios, split_per_class):
    """--split-ratios with its train share replaced by --train-fraction, checked."""
    if train_fraction is None:
        return tuple(split_ratios)
    if split_per_class is not None:
        raise UsageError("--train-fraction and --split-per-class both choose the train nodes: pass one of them")
    if not 0 < train_fraction <= 1:
        raise UsageError(f"--train-fraction {train_fraction}: must be in (0, 1]")
    _, val, test = split_ratios
    if train_fraction + val + test > 1 + 1e-9:
        rest = (1 - train_fraction) / (val + test)
        raise UsageError(f"--train-fraction {train_fraction:g} with val {val:g} and test {test:g} from --split-ratios "
                         f"would take {train_fraction + val + test:g} of the labeled nodes (at most 1): lower val and "
                         f"test with --split-ratios (its train share is replaced), e.g. --split-ratios "
                         f"0,{val * rest:.3g},{test * rest:.3g}")
    return train_fraction, val, test


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m diskgnn.prepare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="input directory or file, or 'synthetic'")
    p.add_argument("--out", required=True, help="dataset directory to create")
    p.add_argument("--format", default="auto", choices=FORMATS)
    p.add_argument("--undirected", action="store_true", help="add the reverse of every edge")
    p.add_argument("--self-loops", action="store_true", help="add a self-loop to every node")
    p.add_argument("--drop-self-loops", action="store_true", help="remove the input's self-loops")
    p.add_argument("--feature-dtype", choices=FEATURE_DTYPES, help="stored feature dtype (default: the input's)")
    p.add_argument("--split-ratios", default="0.1,0.1,0.8",
                   help="train,val,test fractions of the labeled nodes when the source has no split")
    p.add_argument("--split-per-class", metavar="TRAIN,VAL",
                   help="instead: TRAIN and VAL nodes per class, the rest test (e.g. 20,30)")
    p.add_argument("--train-fraction", type=float, metavar="F",
                   help="train on fraction F of the labeled nodes (papers100M: 0.011), val and test as --split-ratios "
                        "says")
    p.add_argument("--split-seed", type=int, default=0, help="seeds the drawn node split and the edge split")
    p.add_argument("--edge-split", metavar="TRAIN,VAL,TEST",
                   help="link prediction: hold VAL and TEST of the edges out of the graph (e.g. 0.85,0.05,0.1), "
                        "stored as val_edges and test_edges; the graph keeps the train edges")
    p.add_argument("--memory-budget", default=defaults.MEMORY_BUDGET,
                   help=f"memory the whole run may use (default {defaults.MEMORY_BUDGET})")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--allow-nonfinite", action="store_true", help="keep NaN/inf features instead of refusing")
    p.add_argument("--normalize-features", action="store_true",
                   help="divide each feature row by its sum (non-negative features, e.g. bag-of-words counts; "
                        "all-zero rows stay)")
    p.add_argument("--ogb-split", help="OGB split name when the dataset has several")
    p.add_argument("--quantize", action="append", default=[], metavar="SPEC",
                   help="also store quantized features: sq1|sq2|sq4|sq8|sq16|lin4|lin8|vq:w=16,L=2048 "
                        "(repeat for several; see docs/quantization.md)")
    p.add_argument("--no-progress", action="store_true")
    add_hetero_arguments(p)
    g = p.add_argument_group("synthetic (SOURCE = synthetic)")
    g.add_argument("--nodes", type=int, default=100_000)
    g.add_argument("--feat-dim", type=int, default=128)
    g.add_argument("--avg-degree", type=float, default=10)
    g.add_argument("--classes", type=int, default=16)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--structure", choices=STRUCTURES, default="uniform",
                   help="uniform: W1, features nearly give the class; powerlaw: a degree-corrected stochastic block "
                        "model with power-law degrees, planted communities and weak features (default: uniform)")
    g.add_argument("--homophily", type=float,
                   help="share of edges inside their class (uniform) or community (powerlaw) (default 0.8)")
    g.add_argument("--feature-signal", type=float,
                   help="class means' scale against unit noise (default: 0.25 uniform, 0.1 powerlaw)")
    g.add_argument("--communities", type=int, help="powerlaw: planted communities, each of one class (default: "
                                                   "4 x --classes)")
    g.add_argument("--label-noise", type=float, help="powerlaw: chance that a node's label is not its community's "
                                                     "class (default 0.1)")
    g.add_argument("--degree-exponent", type=float, help="powerlaw: degrees' density falls as d^-X (default 2.5)")
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    per_class = None
    if args.split_per_class:
        per_class = tuple(int(x) for x in _parse_floats(args.split_per_class, 2, "--split-per-class"))
    is_synthetic = args.source == "synthetic" or args.format == "synthetic"
    if args.format in HETERO_FORMATS or (args.format == "auto" and not is_synthetic and is_hetero_input(args.source)) \
            or (is_synthetic and args.schema == "mag"):
        return prepare_hetero_args(args, _parse_floats(args.split_ratios, 3, "--split-ratios"))
    prepare(
        args.source, args.out, format=args.format,
        undirected=args.undirected or is_synthetic, self_loops=args.self_loops,
        drop_self_loops=args.drop_self_loops, feature_dtype=args.feature_dtype,
        split_ratios=_parse_floats(args.split_ratios, 3, "--split-ratios"), split_per_class=per_class,
        split_seed=args.split_seed, train_fraction=args.train_fraction, memory_budget=args.memory_budget,
        overwrite=args.overwrite, allow_nonfinite=args.allow_nonfinite, ogb_split=args.ogb_split,
        synthetic=dict(structure=args.structure, nodes=args.nodes, feat_dim=args.feat_dim,
                       avg_degree=args.avg_degree, classes=args.classes, seed=args.seed, homophily=args.homophily,
                       feature_signal=args.feature_signal, communities=args.communities,
                       label_noise=args.label_noise, degree_exponent=args.degree_exponent)
        if is_synthetic else None,
        progress=False if args.no_progress else None, report=True, quantize=args.quantize,
        normalize_features=args.normalize_features, edge_split=args.edge_split,
    )

