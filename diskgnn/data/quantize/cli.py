"""`python -m diskgnn.quantize DATASET --spec SPEC ...`: adds quantized variants to a dataset.

Specs (canonical forms; docs/quantization.md has the byte layout):

    sq1 sq2 sq4 sq8 sq16     BiFeat's log-domain sign-magnitude scalar quantization,
                             one range for all columns from the sample's |x| percentiles
                             p and 100 - p (`sq4:p=1`; default p = 0.5; sq1 has none)
    lin4 lin8                per-column linear quantization between the sample's column
                             min and max, or percentiles p and 100 - p (`lin8:p=0.5`)
    vq:w=16,L=2048           product quantization: sub-vectors of w values (the last one
                             zero-padded), one k-means codebook of L centroids each

On a heterogeneous dataset each spec is fitted and stored per featured node type (`--types` names which;
default every featured type), each type's fit measured and refused on its own rows.

Examples::

    python -m diskgnn.quantize data/cora --spec sq4 --spec vq:w=16,L=2048
    python -m diskgnn.quantize data/mag --spec sq4 --types paper
    python -m diskgnn.prepare ../shared/datasets/planetoid_cora --out data/cora --quantize sq8
"""

from __future__ import annotations

import argparse
import fcntl
import os
import time
from pathlib import Path

from ... import defaults
from ...errors import ArgumentParser, DiskgnnError, UsageError
from ...memory import peak_rss_bytes
from ...units import parse_size
from ..files import remove_stale_temps, temp_path
from ..format import open_dataset, read_manifest, write_manifest
from . import fidelity
from .base import Quantizer
from .spec import canonical_spec
from .variants import file_kinds, file_name, variant_key, write_quantized


def _install(path: Path, key: str, features: tuple[str, str], files: dict, entry: dict, overwrite: bool) -> None:
    """Moves a variant's finished files into the dataset and records them in the manifest.

    Under an exclusive lock on the directory (concurrent `quantize` runs must not
    lose each other's manifest updates): a variant being replaced first leaves the
    manifest, then its files are replaced, then the manifest lists the new ones.
    Each step is an atomic rename, so a crash leaves the old variant, no variant,
    or the new one, never a manifest whose checksums do not match its files.
    `features`: the kind of the rows quantized and their checksum, as they were read.
    """
    dfd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        m = read_manifest(path, None)
        if m["files"][features[0]]["checksum"] != features[1]:
            raise DiskgnnError(f"{path}: features changed while quantizing; run again")
        old = m.get("quantized", {}).pop(key, None)
        if old is not None and not overwrite:
            raise DiskgnnError(f"{path}: already has quantized features {key} (pass --overwrite to replace them)")
        if old is not None:
            for kind in (old["codes"], old["params"]):
                m["files"].pop(kind, None)
            write_manifest(path, m)
        for kind, e in files.items():
            os.rename(temp_path(path / e["name"]), path / e["name"])
        m["files"].update(files)
        m.setdefault("quantized", {})[key] = entry
        write_manifest(path, m)
    finally:
        os.close(dfd)


def quantize_dataset(path, specs, *, memory_budget=defaults.MEMORY_BUDGET, sample_rows: int | None = None,
                     seed: int = 0, overwrite: bool = False, force: bool = False, report: bool = False,
                     types: list[str] | None = None) -> list[Quantizer]:
    """Adds quantized variants of an existing dataset's features (the float features stay); a typed dataset's
    per featured node type (`types`: which; default all)."""
    budget = parse_size(memory_budget, "--memory-budget", at_least=defaults.MIN_PREPARE_BUDGET)
    if sample_rows is not None and sample_rows < 1:
        raise UsageError(f"--sample-rows {sample_rows}: must be at least 1")
    specs = list(dict.fromkeys(canonical_spec(s, "--spec") for s in specs))
    ds = open_dataset(path, typed=True)
    remove_stale_temps(ds.path)  # variants and manifests a killed quantize left half-written
    featured = [t.name for t in ds.schema.types if t.feature_dim]
    if not ds.typed and types:
        raise UsageError(f"--types {','.join(types)}: needs a heterogeneous dataset (its node types)")
    unknown = [t for t in types or [] if t not in featured]
    if unknown:
        raise UsageError(f"--types {','.join(types)}: {unknown[0]!r} is not a featured node type of {ds.path} "
                         f"(those: {', '.join(featured)})")
    node_types = (types or featured) if ds.typed else [None]
    jobs = [(spec, t) for spec in specs for t in node_types]
    present = [variant_key(s, t) for s, t in jobs if variant_key(s, t) in ds.manifest.get("quantized", {})]
    if present and not overwrite:
        raise DiskgnnError(f"{ds.path}: already has quantized features {', '.join(present)} "
                           f"(pass --overwrite to replace them)")
    done = []
    for spec, node_type in jobs:
        t0 = time.perf_counter()
        kinds, kind, key = file_kinds(spec, node_type), ds.feature_kind(node_type), variant_key(spec, node_type)
        src = ds.schema.type(node_type) if ds.typed else ds.schema.types[0]
        try:
            q, files, entry = write_quantized(ds.file_path(kind), src.feature_dtype, src.count, src.feature_dim, spec,
                                              ds.path, work_bytes=budget - defaults.PREPARE_BASE_RSS,
                                              sample_rows=sample_rows, seed=seed, force=force, temp=True,
                                              node_type=node_type)
            _install(ds.path, key, (kind, ds.manifest["files"][kind]["checksum"]), files, entry, overwrite)
        finally:
            for k in kinds:
                temp_path(ds.path / file_name(k)).unlink(missing_ok=True)
        done.append(q)
        if report:
            fit = entry["fit"]
            data = fit["data"]
            print(f"quantize: {key}: wrote {file_name(kinds[0])} ({q.code_bytes} B/row, {q.compression_ratio:.1f}x "
                  f"smaller than float32) in {time.perf_counter() - t0:.1f} s; fitted on {fit['sample_rows']:,} rows "
                  f"({100 * data['zero_share']:.1f}% zeros, {100 * data['negative_share']:.1f}% negative"
                  f"{', one non-zero value' if data['binary'] else ''}: encoded as {q.shape.describe()}); "
                  f"peak RSS {peak_rss_bytes()} bytes (budget {budget})")
            print(f"quantize: {key}: fidelity {fidelity.summary(fit['report'])}")
            if fit["report"].get("refused"):
                print(f"quantize: {key}: kept with --force although refused: {fidelity.refusal(fit['report'])}")
    return done


def main(argv=None) -> None:
    ap = ArgumentParser(prog="python -m diskgnn.quantize", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", help="dataset directory written by diskgnn.prepare")
    ap.add_argument("--spec", action="append", required=True, help="quantizer, e.g. sq8, lin4, vq:w=16,L=2048 "
                    "(repeat for several)")
    ap.add_argument("--memory-budget", default=defaults.MEMORY_BUDGET,
                    help=f"memory the whole run may use (default {defaults.MEMORY_BUDGET})")
    ap.add_argument("--sample-rows", type=int, help="rows to fit on (default 100000; vq 50000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the row sample and of k-means")
    ap.add_argument("--overwrite", action="store_true", help="replace variants that already exist")
    ap.add_argument("--force", action="store_true", help="keep a variant whose fit the fidelity report refuses "
                    "(docs/quantization.md has the thresholds)")
    ap.add_argument("--types", help="a heterogeneous dataset's featured node types to quantize, comma-separated "
                    "(default: every one)")
    args = ap.parse_args(argv)
    quantize_dataset(args.dataset, args.spec, memory_budget=args.memory_budget, sample_rows=args.sample_rows,
                     seed=args.seed, overwrite=args.overwrite, force=args.force, report=True,
                     types=args.types.split(",") if args.types else None)

