"""`python -m diskgnn.verify DIR` on a heterogeneous dataset: every checksum and invariant, streaming.

Per relation: indptr over its destination type (starts at 0, never decreases, ends at the relation's edge
count), indices within its source type, ascending and unique within each destination. Labels in range (0/1 or
a row of -1 where multi-label); splits in the target type's range, unique, disjoint and labeled; features of
each type finite unless prepared with --allow-nonfinite.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ... import defaults
from ..format import SPLITS, Dataset, checksum_problems
from ..quantize.variants import check_quantized
from .format import read_hetero_manifest
from .prepare import labeled


def verify_hetero(path) -> list[str]:
    path = Path(path).absolute()
    m = read_hetero_manifest(path)
    problems = checksum_problems(path, m)
    ds = Dataset(path, m)
    schema = ds.schema
    count = {t.name: t.count for t in schema.types}
    chunk = max(1024, defaults.VERIFY_CHUNK_BYTES // 8)
    for i, r in enumerate(schema.relations):
        indptr, indices = ds.csc(i)
        where = f"{ds.file_path(f'rel/{i}/indptr')} (relation {r.name})"
        if indptr.shape != (count[r.dst] + 1,):
            problems.append(f"{where}: shape {list(indptr.shape)}, expected [{count[r.dst] + 1}]")
            continue
        if indptr[0] != 0 or indptr[-1] != r.num_edges or indices.shape[0] != r.num_edges:
            problems.append(f"{where}: spans edges {int(indptr[0])}..{int(indptr[-1])}, the manifest says "
                            f"{r.num_edges}")
            continue
        for lo in range(0, count[r.dst], chunk):
            ptr = np.asarray(indptr[lo:min(count[r.dst], lo + chunk) + 1])
            if (np.diff(ptr) < 0).any():
                problems.append(f"{where}: decreases near {r.dst} node {lo}")
                break
            ids = np.asarray(indices[ptr[0]:ptr[-1]]).astype(np.int64)
            if ids.size and (ids.min() < 0 or ids.max() >= count[r.src]):
                problems.append(f"{ds.file_path(f'rel/{i}/indices')} (relation {r.name}): a source id out of "
                                f"{r.src}'s range [0, {count[r.src]}) near {r.dst} node {lo}")
                break
            starts = np.zeros(ids.size, dtype=bool)
            starts[ptr[:-1][ptr[:-1] < ptr[-1]] - ptr[0]] = True
            if ids.size > 1 and (np.diff(ids)[~starts[1:]] <= 0).any():
                problems.append(f"{ds.file_path(f'rel/{i}/indices')} (relation {r.name}): sources not ascending "
                                f"and unique within a destination near {r.dst} node {lo}")
                break
    labels = ds.labels
    c = schema.num_classes
    lab = np.asarray(labels)
    if schema.multilabel:
        rows_ok = np.isin(lab, (0, 1)).all(axis=1) | (lab == -1).all(axis=1)
        if not rows_ok.all():
            problems.append(f"{ds.file_path('labels')}: row {int(np.flatnonzero(~rows_ok)[0])} is neither 0/1 nor "
                            "all -1")
    elif lab.size and (lab.min() < -1 or lab.max() >= c):
        problems.append(f"{ds.file_path('labels')}: a label out of range [-1, {c})")
    is_labeled = labeled(lab) == 0
    all_ids = []
    for s in SPLITS:
        ids = np.asarray(ds.split(s))
        n = count[schema.target]
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            problems.append(f"{ds.file_path(f'{s}_idx')}: a {schema.target} id out of range [0, {n})")
        elif np.unique(ids).size != ids.size:
            problems.append(f"{ds.file_path(f'{s}_idx')}: lists a node more than once")
        elif ids.size and not is_labeled[ids].all():
            problems.append(f"{ds.file_path(f'{s}_idx')}: holds unlabeled nodes")
        all_ids.append(ids)
    if np.unique(np.concatenate(all_ids)).size != sum(a.size for a in all_ids):
        problems.append(f"{path}: train, val and test splits overlap")
    if not m["producer"]["options"].get("allow_nonfinite"):
        for t in schema.types:
            x = ds.type_features(t.name)
            if x is None or not np.issubdtype(x.dtype, np.floating):
                continue
            rows = max(1, defaults.VERIFY_CHUNK_BYTES // max(1, t.row_bytes))
            for lo in range(0, t.count, rows):
                if not np.isfinite(x[lo:lo + rows]).all():
                    problems.append(f"{ds.file_path(f'features/{t.name}')}: NaN or inf near row {lo}")
                    break
    # each featured type's quantized variants (a corrupted file is named by the checksums above already)
    return problems + [p for p in check_quantized(path, m) if p not in problems]
