"""`python -m diskgnn.prepare DIR --format hgb|npy-hetero`: a heterogeneous input -> hetero dataset format v1.

Streams as the homogeneous prepare does, in chunks sized from --memory-budget: each type's features, each
relation's CSC (an external sort per relation, one relation at a time, its reverse beside it with
--add-reverse), the target type's labels and splits. Written in a temporary sibling and renamed into place.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ... import defaults
from ...errors import DiskgnnError, UsageError
from ...memory import peak_rss_bytes
from ...units import parse_size
from ..csc import CscBuilder
from ..format import FEATURE_DTYPES, SPLITS
from ..splits import check_given, ratio_split
from .format import HeteroBuilder
from ..schema import NodeType, Relation, Schema
from .sources import is_hgb, is_npy_hetero, open_hetero_source


def is_hetero_input(source: str) -> bool:
    return is_hgb(Path(source)) or is_npy_hetero(Path(source))


def add_hetero_arguments(p) -> None:
    h = p.add_argument_group("heterogeneous (--format hgb or npy-hetero, or detected)")
    h.add_argument("--add-reverse", action="store_true",
                   help="add each relation's reverse (rev_NAME), so that messages flow both ways")
    h.add_argument("--val-share", type=float, default=0.2,
                   help="HGB: the share of label.dat drawn (seeded by --split-seed) for val (default 0.2)")
    m = p.add_argument_group("synthetic --schema mag (a MAG240M-shaped heterogeneous graph, data/hetero/mag.py; "
                             "--nodes papers, --feat-dim and --avg-degree of their features and citations)")
    m.add_argument("--schema", choices=("homogeneous", "mag"), default="homogeneous")
    m.add_argument("--authors-per-paper", type=float, default=1.0, help="authors per paper (default 1.0)")
    m.add_argument("--writers", type=float, default=3.2, help="mean authors of a paper (default 3.2)")
    m.add_argument("--affiliated", type=float, default=0.37, help="share of authors with an institution (0.37)")
    m.add_argument("--papers-per-institution", type=int, default=4700, help="(default 4700)")


def mag_source(args):
    from .mag import MagSource

    powerlaw = {k: getattr(args, k) for k in ("feature_signal", "communities", "label_noise", "degree_exponent")
                if getattr(args, k) is not None}
    return MagSource(args.nodes, args.feat_dim, args.avg_degree, args.classes, args.seed,
                     feature_dtype=args.feature_dtype or "float16", authors_per_paper=args.authors_per_paper,
                     writers=args.writers, papers_per_institution=args.papers_per_institution,
                     affiliated=args.affiliated, homophily=0.8 if args.homophily is None else args.homophily,
                     **powerlaw)


def prepare_hetero_args(args, split_ratios) -> Path:
    """`python -m diskgnn.prepare` on a heterogeneous input: its parsed flags."""
    mag = args.schema == "mag"
    return prepare_hetero(mag_source(args) if mag else args.source, args.out, format=args.format,
                          add_reverse=args.add_reverse or mag,
                          feature_dtype=args.feature_dtype, split_ratios=split_ratios, split_seed=args.split_seed,
                          val_share=args.val_share, memory_budget=args.memory_budget, overwrite=args.overwrite,
                          allow_nonfinite=args.allow_nonfinite, report=True)


def prepare_hetero(source, out, *, format: str = "auto", add_reverse: bool = False, feature_dtype: str | None = None,
                   split_ratios=(0.1, 0.1, 0.8), split_seed: int = 0, val_share: float = 0.2,
                   memory_budget=defaults.MEMORY_BUDGET, overwrite: bool = False, allow_nonfinite: bool = False,
                   report: bool = False) -> Path:
    """Converts a heterogeneous SOURCE (HGB text layout or npy hetero directory, or a source object such as
    mag.py's) into a hetero dataset OUT.

    `val_share`: HGB ships train and val as one file; this share of it is drawn (seeded) for val.
    `split_ratios`: for an npy directory without a split, train/val/test shares of the labeled target nodes.
    """
    budget = parse_size(memory_budget, "--memory-budget", at_least=defaults.MIN_PREPARE_BUDGET)
    if feature_dtype is not None and feature_dtype not in FEATURE_DTYPES:
        raise UsageError(f"--feature-dtype {feature_dtype}: choose from {', '.join(FEATURE_DTYPES)}")
    start = time.perf_counter()
    work = budget - defaults.PREPARE_BASE_RSS
    src = source if hasattr(source, "relations") else open_hetero_source(source, format, val_share, split_seed)
    types = [NodeType(t.name, t.count, t.feature_dim, feature_dtype or t.feature_dtype) for t in src.types]
    relations = list(src.relations)
    if add_reverse:
        taken = {r.name for r in relations}
        for r in src.relations:
            name = f"rev_{r.name}"
            if name in taken:
                raise DiskgnnError(f"{src.name}: --add-reverse would name relation {r.name}'s reverse {name}, which "
                                   "the graph already has")
            relations.append(Relation(r.dst, name, r.src))
    with HeteroBuilder(out, overwrite=overwrite) as b:
        _features(b, src, types, work, allow_nonfinite)
        counts = _topology(b, src, types, relations, work, add_reverse)
        relations = [Relation(r.src, r.name, r.dst, n) for r, n in zip(relations, counts)]
        _labels(b, src, work)
        _splits(b, src, split_ratios, split_seed)
        schema = Schema(tuple(types), tuple(relations), src.target, src.num_classes, src.multilabel)
        meta = {
            **({"synthetic": src.parameters()} if hasattr(src, "parameters") else {}),
            "hetero": schema.to_dict(),
            "splits": {s: b.files[f"{s}_idx"]["shape"][0] for s in SPLITS},
            "producer": {"source": src.name, "options": {
                "add_reverse": add_reverse, "allow_nonfinite": allow_nonfinite,
                "split": "source" if src.splits() is not None else
                "ratios " + ",".join(f"{r:g}" for r in split_ratios) + f" (seed {split_seed})"}},
        }
        path = b.finish(meta)
    if report:
        print(f"prepare: wrote {path} (heterogeneous: {len(types)} node types "
              + ", ".join(f"{t.name} {t.count}" + (f" {t.feature_dim}-d" if t.feature_dim else "") for t in types)
              + f"; {len(relations)} relations, {sum(r.num_edges for r in relations)} edges; target {src.target}, "
              f"{src.num_classes} classes{' multi-label' if src.multilabel else ''}) in "
              f"{time.perf_counter() - start:.1f} s; peak RSS {peak_rss_bytes()} bytes (budget {budget})")
    return path


def _features(b: HeteroBuilder, src, types: list[NodeType], work: int, allow_nonfinite: bool) -> None:
    writers = {}
    widest = max([t.feature_dim for t in types] + [1])
    for name, block in src.feature_blocks(max(1, work // (16 * widest))):
        t = next(t for t in types if t.name == name)
        w = writers.get(name)
        if w is None:
            w = writers[name] = b.writer(f"features/{name}", np.dtype(t.feature_dtype), (t.feature_dim,))
        if block.ndim != 2 or block.shape[1] != t.feature_dim:
            raise DiskgnnError(f"{src.name}: type {name}: feature rows of width {block.shape[1:]}, expected "
                               f"{t.feature_dim}")
        with np.errstate(over="ignore", invalid="ignore"):
            out = block.astype(t.feature_dtype, copy=False)
        if np.issubdtype(out.dtype, np.floating) and not allow_nonfinite and not np.isfinite(out).all():
            row = w.rows + int(np.flatnonzero(~np.isfinite(out).all(axis=1))[0])
            raise DiskgnnError(f"{src.name}: type {name}: feature row {row} has NaN or inf (pass --allow-nonfinite "
                               "to keep such rows)")
        w.write(out)
    for t in types:
        if t.feature_dim and (t.name not in writers or writers[t.name].rows != t.count):
            rows = writers[t.name].rows if t.name in writers else 0
            raise DiskgnnError(f"{src.name}: type {t.name}: {rows} feature rows for {t.count} nodes")
        if t.name in writers:
            b.add(f"features/{t.name}", writers[t.name].close())


def _topology(b: HeteroBuilder, src, types: list[NodeType], relations: list[Relation], work: int,
              add_reverse: bool) -> list[int]:
    """Each relation's CSC, one source relation at a time (its reverse beside it); returns the edge counts."""
    count = {t.name: t.count for t in types}
    nsrc = len(src.relations)
    edges = [0] * len(relations)

    def builder(i: int) -> CscBuilder:
        r = relations[i]
        return CscBuilder(count[r.src], b, work // 2, num_dst=count[r.dst], kinds=(f"rel/{i}/indptr",
                          f"rel/{i}/indices"), source_name=f"{src.name}: relation {r.name}",
                          edge_count_hint=src.edge_count(i % nsrc))

    for i in range(nsrc):
        fwd = builder(i)
        rev = builder(nsrc + i) if add_reverse else None
        for _, s, d in src.edge_blocks(max(1024, work // 128), relation=i):
            fwd.add(s, d)
            if rev is not None:
                rev.add(d, s)
        edges[i] = fwd.finish()
        if rev is not None:
            edges[nsrc + i] = rev.finish()
    return edges


def _labels(b: HeteroBuilder, src, work: int) -> None:
    w = None
    for _, block in src.label_blocks(max(1, work // 64)):
        if w is None:
            w = b.writer("labels", block.dtype, block.shape[1:])
        if block.size and block.max() >= src.num_classes:
            raise DiskgnnError(f"{src.name}: label {int(block.max())} out of range for {src.num_classes} classes")
        w.write(block)
    n = src.type_of(src.target).count
    if w is None or w.rows != n:
        raise DiskgnnError(f"{src.name}: {0 if w is None else w.rows} labels for {n} {src.target} nodes")
    b.add("labels", w.close())


def labeled(labels: np.ndarray) -> np.ndarray:
    """-1 where a target node has no label, 0 where it has one (single- or multi-label rows)."""
    return np.where((labels if labels.ndim == 1 else labels[:, 0]) < 0, -1, 0).astype(np.int32)


def _splits(b: HeteroBuilder, src, ratios, seed: int) -> None:
    labels = np.memmap(b.tmp / b.files["labels"]["name"], dtype=np.dtype(b.files["labels"]["dtype"]), mode="r",
                       shape=tuple(b.files["labels"]["shape"]))
    writers = {s: b.writer(f"{s}_idx", np.int64) for s in SPLITS}
    given = src.splits()
    if given is not None:
        check_given(given, labels.shape[0], lambda ids: labeled(np.asarray(labels[np.sort(ids)])), src.name)
        for s in SPLITS:
            writers[s].write(given[s])
    else:
        block = 1 << 16

        def label_blocks():
            for first in range(0, labels.shape[0], block):
                yield first, labeled(np.asarray(labels[first:first + block]))

        ratio_split(label_blocks, ratios, seed, writers)
    for s in SPLITS:
        b.add(f"{s}_idx", writers[s].close())
    if b.files["train_idx"]["shape"][0] == 0:
        raise DiskgnnError(f"{src.name}: no train nodes")
