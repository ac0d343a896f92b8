"""Whether a fitted quantizer keeps the features usable: a report on rows the fit did not see, the
thresholds past which a fit is refused, and the spec to name instead.

A quantizer that turns a dataset into noise trains to chance without a word (sparse bag-of-words
features under BiFeat's dense recipe did), so every fit is measured before its rows are encoded.
"""

from __future__ import annotations

import numpy as np

# docs/quantization.md states these thresholds; a fit past either is refused unless forced.
# BiFeat's dense signed sq1 keeps sqrt(2/pi) = 0.80 of a Gaussian row's direction, less with heavier tails,
# and trains within a point of fp32 (docs/accuracy.md); the sparse collapse this guards against leaves about
# none. Sparse rows carry their signal in the magnitudes of few non-zeros: sq1 there keeps which values are
# non-zero but flattens their sizes, a mean cosine of 0.85 that lost 2.8 points on Coauthor CS rows summing to 1
# (docs/accuracy.md), so sparse data is held to more (which also refuses sq1 on Coauthor CS's raw counts, where
# it did no harm: a refusal costs a --force, a silent loss costs the model).
REFUSE_MEAN_COSINE = 0.7         # rows' mean cosine similarity with their decoded rows, dense data
REFUSE_MEAN_COSINE_SPARSE = 0.9  # the same, data whose fit sample is sparse (DataShape.of(...).zero)
REFUSE_NONZEROS_LOST = 0.5  # share of non-zero values decoded to 0
HOLDOUT_ROWS = 10_000       # at most this many rows (a tenth of the dataset at most) are held back for the report
# The specs a refusal may name, tried cheapest first on a sample of at most SUGGEST_FIT_ROWS rows.
SUGGEST_SPECS = ("sq2", "sq4", "lin4", "sq8", "lin8", "sq16")
SUGGEST_FIT_ROWS = 20_000


def holdout_rows(num_rows: int) -> int:
    """Rows held back from the fit for its report (none for a dataset of one row)."""
    return min(HOLDOUT_ROWS, num_rows // 10) if num_rows >= 10 else (1 if num_rows >= 2 else 0)


def describe_data(sample: np.ndarray) -> dict:
    """What the fit saw: shares of zeros and negatives, and whether the non-zeros are one value (0/1 data)."""
    nonzero = sample[sample != 0]
    return {"zero_share": 1 - nonzero.size / max(1, sample.size),
            "negative_share": float(np.count_nonzero(nonzero < 0)) / max(1, sample.size),
            "binary": bool(nonzero.size) and bool((nonzero == nonzero[0]).all())}


def report(q, rows: np.ndarray, chunk_rows: int, on: str = "held-back") -> dict:
    """Reconstruction of `rows` (float32, finite) through q.encode and q.decode, in chunks."""
    sq_err = sq_x = 0.0
    clipped = lost = gained = nonzeros = 0
    ranged = False  # the quantizer has a range to clip to
    cosines = []
    for i in range(0, rows.shape[0], max(1, chunk_rows)):
        x = rows[i:i + chunk_rows]
        y = q.decode_numpy(q.encode(x))
        sq_err += float(np.square(y - x, dtype=np.float64).sum())
        sq_x += float(np.square(x, dtype=np.float64).sum())
        c = q.clipped(x)
        if c is not None:
            ranged, clipped = True, clipped + int(np.count_nonzero(c))
        nz = x != 0
        nonzeros += int(np.count_nonzero(nz))
        lost += int(np.count_nonzero(nz & (y == 0)))
        gained += int(np.count_nonzero(~nz & (y != 0)))
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        nx, ny = np.linalg.norm(x64, axis=1), np.linalg.norm(y64, axis=1)
        dot = np.einsum("ij,ij->i", x64, y64)
        both = (nx > 0) & (ny > 0)
        # two zero rows agree; a zero row against a non-zero one does not
        cos = np.where(both, dot / np.where(both, nx * ny, 1), np.where((nx == 0) & (ny == 0), 1.0, 0.0))
        cosines.append(cos)
    cos = np.concatenate(cosines) if cosines else np.ones(0)
    values, zeros = rows.size, rows.size - nonzeros
    return {
        "rows": int(rows.shape[0]), "on": on,
        "relative_error": (sq_err / sq_x) ** 0.5 if sq_x > 0 else (0.0 if sq_err == 0 else float("inf")),
        "clipped_share": clipped / max(1, values) if ranged else None,
        "nonzeros_lost_share": lost / nonzeros if nonzeros else 0.0,
        "zeros_gained_share": gained / zeros if zeros else 0.0,
        "mean_cosine": float(cos.mean()) if cos.size else 1.0,
        "min_cosine": float(cos.min()) if cos.size else 1.0,
    }


def problems(r: dict, sparse: bool) -> list[str]:
    """Why a report refuses its fit (empty: it passes); `sparse`: the fit sample is sparse (DataShape.sparse)."""
    out = []
    least = REFUSE_MEAN_COSINE_SPARSE if sparse else REFUSE_MEAN_COSINE
    if r["mean_cosine"] < least:
        out.append(f"rows' mean cosine similarity {r['mean_cosine']:.3f} < {least}"
                   + (" (sparse data)" if sparse else ""))
    if r["nonzeros_lost_share"] > REFUSE_NONZEROS_LOST:
        out.append(f"{100 * r['nonzeros_lost_share']:.0f}% of non-zero values decoded to 0 "
                   f"(> {100 * REFUSE_NONZEROS_LOST:.0f}%)")
    return out


def refusal(r: dict) -> str:
    """Why a stored or just-fitted report was refused, and what to use instead."""
    return f"{' and '.join(r['refused'])} on {r['rows']:,} {r['on']} rows; {r['instead']}"


def summary(r: dict) -> str:
    """The report on one line."""
    clipped = "" if r["clipped_share"] is None else f", {100 * r['clipped_share']:.2f}% clipped"
    return (f"on {r['rows']:,} {r['on']} rows: relative error {r['relative_error']:.3f}, mean cosine "
            f"{r['mean_cosine']:.3f} (min {r['min_cosine']:.3f}){clipped}, non-zeros lost "
            f"{100 * r['nonzeros_lost_share']:.2f}%, zeros gained {100 * r['zeros_gained_share']:.2f}%")


def better_spec(make_quantizer, spec: str, sample: np.ndarray, held: np.ndarray,
                chunk_rows: int, seed: int, sparse: bool) -> tuple[str, dict] | None:
    """The cheapest spec of SUGGEST_SPECS (other than `spec`) whose fit passes, with its report."""
    dim = sample.shape[1]
    candidates = sorted((make_quantizer(s, dim) for s in SUGGEST_SPECS), key=lambda c: c.code_bytes)
    for c in candidates:
        if c.spec == spec:
            continue
        # every k-th row: the sample is in row order, so its first rows would be the dataset's first ones
        c.fit(sample[::-(-sample.shape[0] // SUGGEST_FIT_ROWS)], seed=seed)
        r = report(c, held, chunk_rows)
        if not problems(r, sparse):
            return c.spec, r
    return None
