"""A dataset's quantized variants on disk: fitting and encoding one streaming, loading and checking it.

A variant is two files beside features.bin (docs/quantization.md): the code
rows (`features.<slug>.bin`, uint8 [num_nodes, code_bytes]) and the fitted
parameters (`features.<slug>.params.bin`, named arrays at 64-byte offsets),
both listed with their checksums in the manifest's `files`, and an entry in
its `quantized` object. A typed dataset's variants are per featured node type:
`features-<type>.<slug>.bin` and its params, under the key `<type>/<spec>`,
the entry naming its `node_type`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import xxhash

from ... import defaults
from ...errors import DiskgnnError
from ...units import format_size
from ..files import CHECKSUM_ALGO, ArrayFileWriter, temp_path
from ..format import MANIFEST, Dataset
from . import fidelity
from .base import DataShape, Quantizer
from .quantizers import from_state, make_quantizer
from .spec import canonical_spec, spec_slug

PARAMS_ALIGN = 64


class QuantizedFeatures(NamedTuple):
    """One stored variant: the fitted quantizer, its code rows memory-mapped, the code file."""

    quantizer: Quantizer
    codes: np.ndarray  # uint8 [num_nodes, code_bytes], read-only
    path: Path


def file_kinds(spec: str, node_type: str | None = None) -> tuple[str, str]:
    """Manifest kinds of a variant's code and params files (a typed dataset's: of a node type's)."""
    slug, base = spec_slug(spec), "features" if node_type is None else f"features/{node_type}"
    return f"{base}.{slug}", f"{base}.{slug}.params"


def file_name(kind: str) -> str:
    """The file of a manifest kind, as prepare names them ("/" a "-")."""
    return kind.replace("/", "-") + ".bin"


def variant_key(spec: str, node_type: str | None = None) -> str:
    """The manifest's `quantized` key of a variant: its spec, or a typed dataset's `<type>/<spec>`."""
    return spec if node_type is None else f"{node_type}/{spec}"


def _read_params(path: Path, entry: dict, layout: dict) -> dict[str, np.ndarray]:
    """Reads and checksums the params file (it is read whole anyway), then slices the arrays."""
    raw = path.read_bytes()
    algo, _, expected = entry["checksum"].partition(":")
    if len(raw) != entry["file_bytes"] or algo != CHECKSUM_ALGO or xxhash.xxh3_128_hexdigest(raw) != expected:
        raise DiskgnnError(f"{path}: checksum mismatch (file is corrupted)")
    arrays = {}
    for name, a in layout.items():
        dtype = np.dtype(a["dtype"]).newbyteorder("<")
        count = int(np.prod(a["shape"], dtype=np.int64))
        arrays[name] = np.frombuffer(raw, dtype=dtype, count=count, offset=a["offset"]).reshape(a["shape"])
    return arrays


def load_quantized(ds: Dataset, spec: str, node_type: str | None = None) -> QuantizedFeatures:
    """The stored variant `spec` of a dataset (any spelling of the spec), of a typed dataset's `node_type`."""
    spec = canonical_spec(spec)
    stored, key = ds.manifest.get("quantized", {}), variant_key(spec, node_type)
    if key not in stored:
        have = ", ".join(stored) or "none"
        raise DiskgnnError(f"{ds.path}: no quantized features {key} (stored: {have}); add them with python -m "
                           f"diskgnn.quantize {ds.path} --spec {spec}" + (f" --types {node_type}" if node_type else ""))
    entry = stored[key]
    params_entry = ds.manifest["files"][entry["params"]]
    arrays = _read_params(ds.path / params_entry["name"], params_entry, entry["arrays"])
    q = from_state(spec, ds.schema.type(node_type).feature_dim if node_type else ds.feature_dim, arrays)
    if q.code_bytes != entry["code_bytes"]:
        raise DiskgnnError(f"{ds.path}: {spec} rows are {entry['code_bytes']} bytes, expected {q.code_bytes}")
    return QuantizedFeatures(q, ds.array(entry["codes"]), ds.file_path(entry["codes"]))


def _read_rows(path: Path, dtype: np.dtype, dim: int, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` (ascending, distinct), read with one pread per run of consecutive rows (not a
    memory map: the budget must not be spent on mapped pages)."""
    count = ids.size
    row_bytes = dim * dtype.itemsize
    out = np.empty((count, dim), dtype=dtype)
    view = memoryview(out.reshape(-1).view(np.uint8))
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    fd = os.open(path, os.O_RDONLY)
    try:
        for first, last in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [count]])):
            done, want, offset = 0, (last - first) * row_bytes, int(ids[first]) * row_bytes
            while done < want:  # one read returns at most about 2 GiB
                got = os.preadv(fd, [view[first * row_bytes + done:last * row_bytes]], offset + done)
                if got == 0:
                    raise DiskgnnError(f"{path}: ends before row {ids[first] + done // row_bytes}")
                done += got
    finally:
        os.close(fd)
    return _finite_float32(out, path, ids)


def _finite_float32(block: np.ndarray, path: Path, row_ids) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = block.astype(np.float32, copy=False)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise DiskgnnError(f"{path}: feature row {int(row_ids[np.flatnonzero(bad)[0]])} has NaN or inf "
                           f"(as float32); quantized features need finite values")
    return x


def _write_params(path: Path, arrays: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """The arrays back to back in name order, each at a multiple of PARAMS_ALIGN bytes."""
    w = ArrayFileWriter(path, np.uint8)
    layout, offset = {}, 0
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name], dtype=arrays[name].dtype.newbyteorder("<"))
        gap = -offset % PARAMS_ALIGN
        w.write(np.zeros(gap, dtype=np.uint8))
        offset += gap
        layout[name] = {"dtype": a.dtype.name, "shape": list(a.shape), "offset": offset}
        w.write(a.reshape(-1).view(np.uint8))
        offset += a.nbytes
    return w.close(), layout


def _rows_within(cost, budget: int, most: int) -> int:
    """Most rows r <= most with cost(r) <= budget, at least 1 (every cost here is linear in r)."""
    fixed, per_row = cost(0), cost(1) - cost(0)
    return int(min(most, max(1, (budget - fixed) // max(1, per_row))))


def encode_file(q: Quantizer, features: Path, dtype, num_rows: int, writer: ArrayFileWriter, work_bytes: int) -> None:
    """Encodes a raw feature file into `writer` in chunks of rows sized so that encoding holds
    about `work_bytes`. Rows are encoded independently, so the bytes do not depend on the budget."""
    dtype = np.dtype(dtype).newbyteorder("<")
    chunk = _rows_within(q.work_bytes, work_bytes, max(1, num_rows))
    with open(features, "rb") as f:
        for start in range(0, num_rows, chunk):
            n = min(chunk, num_rows - start)
            block = np.fromfile(f, dtype=dtype, count=n * q.dim)
            if block.size != n * q.dim:
                raise DiskgnnError(f"{features}: ends before row {start + block.size // q.dim}")
            writer.write(q.encode(_finite_float32(block.reshape(n, q.dim), features, np.arange(start, start + n))))


def write_quantized(features: Path, dtype, num_rows: int, dim: int, spec: str, out_dir: Path, *,
                    work_bytes: int, sample_rows: int | None = None, seed: int = 0, force: bool = False,
                    temp: bool = False, node_type: str | None = None) -> tuple[Quantizer, dict, dict]:
    """Fits `spec` on a seeded sample of a raw feature file's rows and encodes the file streaming.

    The fit is measured on held-back rows first (fidelity.report); one that crosses the thresholds
    is refused, naming a spec that passes, unless `force`.

    Writes the code and params files in `out_dir` (under their temporary names with `temp`: temp_path),
    holding about `work_bytes` of memory (a typed dataset's `node_type`: its files and entry). Returns the
    quantizer, the manifest
    file entries by kind (with their final names) and the variant's entry for
    the manifest's `quantized` object.
    """
    features, dtype = Path(features), np.dtype(dtype).newbyteorder("<")
    q = make_quantizer(spec, dim)
    if num_rows == 0:
        raise DiskgnnError(f"{features}: no feature rows to quantize")
    need = max(q.fit_bytes(1), q.work_bytes(1))
    if need > work_bytes:
        raise DiskgnnError(f"quantize {q.spec}: needs {format_size(need)} for {dim}-value rows, more than the "
                           f"{format_size(work_bytes)} the memory budget leaves")
    hold = fidelity.holdout_rows(num_rows)
    fit_budget = work_bytes - hold * dim * 4
    count = _rows_within(q.fit_bytes, fit_budget, min(sample_rows or q.default_sample_rows, num_rows - hold))
    # One seeded draw: the first `count` rows fit, the others are held back for the report.
    ids = np.random.default_rng(seed).choice(num_rows, count + hold, replace=False)
    sample = _read_rows(features, dtype, dim, np.sort(ids[:count]))
    held = _read_rows(features, dtype, dim, np.sort(ids[count:])) if hold else sample
    q.fit(sample, seed=seed)
    chunk = _rows_within(q.work_bytes, work_bytes, max(count, hold))
    report = fidelity.report(q, held, chunk, "held-back" if hold else "fitted")
    # the data's sparsity, not the fit's encoding: a signed sparse sq1 spends its bit on the sign
    sparse = DataShape.of(sample).zero
    refused = fidelity.problems(report, sparse)
    if refused:
        better = fidelity.better_spec(make_quantizer, q.spec, sample, held, chunk, seed, sparse)
        report["refused"] = refused
        report["instead"] = (f"use {better[0]} instead (mean cosine {better[1]['mean_cosine']:.3f})" if better
                             else "use fp32 (no quantizer passes)")
        if not force:
            raise DiskgnnError(f"quantize {variant_key(q.spec, node_type)}: refused: {fidelity.refusal(report)}, or "
                               "keep it with python -m diskgnn.quantize --force")
    data = fidelity.describe_data(sample)
    del sample, held

    codes_kind, params_kind = file_kinds(q.spec, node_type)
    where = temp_path if temp else Path
    codes_w = ArrayFileWriter(where(out_dir / file_name(codes_kind)), np.uint8, (q.code_bytes,))
    try:
        encode_file(q, features, dtype, num_rows, codes_w, work_bytes)
    except BaseException:
        codes_w.abort()
        raise
    codes_entry = codes_w.close()
    params_entry, layout = _write_params(where(out_dir / file_name(params_kind)), q.state())
    codes_entry["name"], params_entry["name"] = file_name(codes_kind), file_name(params_kind)
    entry = {
        "codes": codes_kind, "params": params_kind, "code_bytes": q.code_bytes, "arrays": layout,
        **({"node_type": node_type, "spec": q.spec} if node_type else {}),
        "fit": {"sample_rows": count, "seed": seed, "data": data, "shape": q.shape._asdict(),
                "report": report},
    }
    return q, {codes_kind: codes_entry, params_kind: params_entry}, entry


def check_quantized(path: Path, manifest: dict, chunk_bytes: int = defaults.VERIFY_CHUNK_BYTES) -> list[str]:
    """verify's checks of the quantized variants: params load, shapes agree, every code row valid."""
    problems = []
    ds = Dataset(path, manifest)
    for key, entry in manifest.get("quantized", {}).items():
        missing = [k for k in (entry.get("codes"), entry.get("params")) if k not in manifest["files"]]
        if missing:
            problems.append(f"{path / MANIFEST}: quantized {key} names files {missing} it does not list")
            continue
        node_type = entry.get("node_type")
        try:
            q, codes, cpath = load_quantized(ds, entry.get("spec", key), node_type)
        except DiskgnnError as e:
            problems.append(str(e))
            continue
        count = ds.schema.type(node_type).count if node_type else manifest["num_nodes"]
        if codes.shape != (count, q.code_bytes):
            problems.append(f"{cpath}: shape {list(codes.shape)}, expected [{count}, {q.code_bytes}]")
            continue
        rows = max(1, chunk_bytes // q.code_bytes)
        with open(cpath, "rb") as f:
            for start in range(0, codes.shape[0], rows):
                n = min(rows, codes.shape[0] - start)
                bad = q.invalid_row(np.fromfile(f, dtype=np.uint8, count=n * q.code_bytes).reshape(n, -1))
                if bad is not None:
                    problems.append(f"{cpath}: row {start + bad} has a code out of range or nonzero padding bits")
                    break
    return problems
