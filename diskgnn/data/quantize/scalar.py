"""Scalar quantizers: BiFeat's log-domain sign-magnitude `sq1`..`sq16`, and per-column linear `lin4`/`lin8`."""

from __future__ import annotations

import warnings

import numpy as np

from .base import LEGACY_SHAPE, Quantizer
from .spec import canonical_spec


class LogQuantizer(Quantizer):
    """BiFeat's b-bit log-domain sign-magnitude scalar quantizer; one range for every column,
    shaped by the data (base.DataShape): signed data spends one bit on the sign, non-negative data
    none; sparse data gives exact zeros a code of their own (decoded to 0) and fits the range on
    the non-zero magnitudes only.

    M magnitude buckets per sign: 2**bits split between the signs and the zero code.
    M = 1: every magnitude decodes to m, the mean magnitude fitted on (dense signed sq1 adds 0.1
    when m < 0.1, as BiFeat's code does). M > 1: fmin/fmax the |x| percentiles p and 100-p (at
    least 1e-5 and 2e-5), emin = log2 fmin, emax = log2 fmax + 1e-5, δ = (emax-emin)/M: e =
    number of thresholds T_k = 2**(emin + k δ), k = 1..M-1, that are <= |x| (0..M-1), decoded to
    the bucket's log-domain midpoint 2**(emin + (e + 0.5) δ), kept within [fmin, fmax] (so a
    single magnitude, as in 0/1 data, decodes exactly). Symbols, negatives first: signed dense
    M - 1 - e / M + e (BiFeat's); signed sparse M - 1 - e / zero M / M + 1 + e; non-negative
    dense e; non-negative sparse zero 0 / 1 + e (negatives met after a non-negative fit encode
    as the smallest magnitude, or zero). The bucket is defined by comparisons with the stored
    thresholds (not floor(log2 ...)), so encoding is exact and the same on every machine.
    """

    def __init__(self, dim: int, bits: int, p: float):
        super().__init__(dim, canonical_spec(f"sq{bits}" + (f":p={p:g}" if bits > 1 else "")))
        self.bits, self.p = bits, p
        self.symbols, self.width = dim, 1
        self.range = None       # float64 [m] (M = 1) or [fmin, fmax, emin, emax]
        self.thresholds = None  # float64 [M - 1]
        self._edges = None      # float64 [M + 1]: -inf, thresholds, inf

    @property
    def magnitudes(self) -> int:
        """M, the magnitude buckets of each sign."""
        return ((1 << self.bits) - self.shape.zero) // (2 if self.shape.signed else 1)

    @property
    def levels(self) -> int:
        return self.magnitudes * (2 if self.shape.signed else 1) + self.shape.zero

    def _choose_shape(self, found):
        # One bit holds a sign or a zero, not both: a signed sparse sq1 keeps the sign.
        return found._replace(zero=False) if self.bits == 1 and found.signed else found

    def _fit(self, sample, seed):
        a = np.abs(sample)
        if self.shape.zero:
            a = a[a != 0]
        if a.size == 0:  # every value fitted on is zero
            a = np.zeros(1, dtype=np.float32)
        m = self.magnitudes
        if m == 1:
            mean = float(a.mean(dtype=np.float64))
            rng = np.array([mean + 0.1 if mean < 0.1 and self.shape == LEGACY_SHAPE else mean])
            thresholds = np.zeros(0)
        else:
            lo, hi = np.percentile(a, [self.p, 100 - self.p])
            fmin, fmax = max(float(lo), 1e-5), max(float(hi), 2e-5)
            emin, emax = np.log2(fmin), np.log2(fmax) + 1e-5
            delta = (emax - emin) / m
            rng = np.array([fmin, fmax, emin, emax])
            thresholds = np.exp2(emin + delta * np.arange(1, m))
        self._load({"range": rng, "thresholds": thresholds, "lookup": self._levels(rng).astype(np.float32)})

    def _levels(self, rng):
        """The decoded value of every symbol, in symbol order."""
        m = self.magnitudes
        if m == 1:
            mags = rng[:1]
        else:
            fmin, fmax, emin, emax = rng
            mags = np.clip(np.exp2(emin + (np.arange(m) + 0.5) * (emax - emin) / m), fmin, fmax)
        zero = np.zeros(int(self.shape.zero))
        return np.concatenate([-mags[::-1], zero, mags] if self.shape.signed else [zero, mags])

    def _symbols(self, rows):
        m, zero = self.magnitudes, self.shape.zero
        a = np.abs(rows) if self.shape.signed else np.maximum(rows, 0)
        e = np.zeros(rows.shape, dtype=np.int32)
        if m > 1:
            # A guess from float32 log2 (fast; off by at most a bucket near an edge), then
            # the exact rule: move each value until edges[e] <= |x| < edges[e + 1].
            _, _, emin, emax = self.range
            with np.errstate(divide="ignore"):  # log2(0) = -inf lands in bucket 0
                guess = (np.log2(a) - np.float32(emin)) * np.float32(m / (emax - emin))
            e = np.clip(guess, 0, m - 1).astype(np.int32)
            while True:
                down, up = a < self._edges[e], a >= self._edges[e + 1]
                if not (down.any() or up.any()):
                    break
                e += up
                e -= down
        if self.shape.signed:
            sym = np.where(rows > 0, m + zero + e, m - 1 - e)
            if zero:
                sym[rows == 0] = m
        else:
            sym = e + zero
            if zero:
                sym[a == 0] = 0
        return sym.astype(np.uint16 if self.bits == 16 else np.uint8)

    def clipped(self, rows):
        if self.magnitudes == 1:
            return None
        a = np.abs(rows)
        out = (a < self.range[0]) | (a > self.range[1])
        if self.shape.zero:
            out &= a != 0
        if not self.shape.signed:
            out |= rows < 0
        return out

    def _state_layout(self):
        m = self.magnitudes
        return {"range": ("float64", (1 if m == 1 else 4,)), "thresholds": ("float64", (m - 1,)),
                "lookup": ("float32", (self.levels,))}

    def _state(self):
        return {"range": self.range, "thresholds": self.thresholds, "lookup": self._lookup[:, 0]}

    def _load(self, arrays):
        self.range, self.thresholds = arrays["range"], arrays["thresholds"]
        self._edges = np.concatenate([[-np.inf], self.thresholds, [np.inf]])  # bucket e is [edges[e], edges[e+1])
        self._lookup = np.ascontiguousarray(arrays["lookup"], dtype=np.float32).reshape(-1, 1)
        self._offsets = np.zeros(self.dim, dtype=np.int64)


class LinearQuantizer(Quantizer):
    """Per-column linear quantizer: K = 2**bits levels evenly spaced over [lo_c, hi_c].

    lo/hi are the sample's column min/max (p = 0) or its percentiles p and 100-p (on sparse data,
    of each column's non-zero values, widened to take in 0). symbol = round((clip(x, lo, hi) - lo)
    / step), step = (hi - lo) / (K - 1), in float64; decoded to lo + symbol * step (rounded to
    float32). A constant column (hi = lo) decodes exactly. On sparse data (base.DataShape) the
    level nearest 0 in each column decodes to exactly 0, exact zeros encode to it, and a non-zero
    value never does: it takes the next level on its side where there is one.
    """

    def __init__(self, dim: int, bits: int, p: float):
        super().__init__(dim, canonical_spec(f"lin{bits}:p={p:g}"))
        self.bits, self.p = bits, p
        self.symbols, self.levels, self.width = dim, 1 << bits, 1
        self.lo = self.hi = None  # float32 [dim]
        self._step = None         # float64 [dim]
        self._zero_level = None   # int64 [dim]: the level decoding to 0 (sparse data), -1 where 0 is out of range

    def fit_bytes(self, rows: int) -> int:
        # The sample, and the percentile's float64 copy with the NaNs that hide zeros.
        return rows * 32 * self.dim

    def _fit(self, sample, seed):
        if self.p == 0:
            lo, hi = sample.min(axis=0), sample.max(axis=0)
        elif self.shape.zero:
            nonzero = np.where(sample != 0, sample.astype(np.float64), np.nan)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-zero columns: NaN, made 0 below
                lo, hi = np.nan_to_num(np.nanpercentile(nonzero, [self.p, 100 - self.p], axis=0))
            lo, hi = np.minimum(lo, 0), np.maximum(hi, 0)
        else:
            lo, hi = np.percentile(sample, [self.p, 100 - self.p], axis=0)
        self._load({"lo": lo.astype(np.float32), "hi": hi.astype(np.float32)})

    def _symbols(self, rows):
        x = np.clip(rows.astype(np.float64), self.lo, self.hi)
        x -= self.lo
        np.divide(x, self._step, out=x, where=self._step > 0)
        x[:, self._step == 0] = 0
        sym = np.clip(np.rint(x), 0, self.levels - 1).astype(np.int64)
        if self.shape.zero:
            z = np.broadcast_to(self._zero_level, sym.shape)
            has = z >= 0
            sym = np.where(has & (rows == 0), z, sym)
            moved = has & (rows != 0) & (sym == z)
            sym = np.where(moved, np.clip(z + np.sign(rows).astype(np.int64), 0, self.levels - 1), sym)
        return sym.astype(np.uint8)

    def clipped(self, rows):
        return (rows < self.lo) | (rows > self.hi)

    def _state_layout(self):
        return {"lo": ("float32", (self.dim,)), "hi": ("float32", (self.dim,))}

    def _state(self):
        return {"lo": self.lo, "hi": self.hi}

    def _load(self, arrays):
        self.lo, self.hi = arrays["lo"], arrays["hi"]
        lo = self.lo.astype(np.float64)
        self._step = (self.hi.astype(np.float64) - lo) / (self.levels - 1)
        levels = lo[:, None] + np.arange(self.levels) * self._step[:, None]
        self._zero_level = np.full(self.dim, -1, dtype=np.int64)
        if self.shape.zero:
            inside = (lo <= 0) & (self.hi >= 0)
            z = np.rint(np.divide(-lo, self._step, out=np.zeros(self.dim), where=self._step > 0)).astype(np.int64)
            self._zero_level[inside] = np.clip(z, 0, self.levels - 1)[inside]
            levels[np.flatnonzero(inside), self._zero_level[inside]] = 0
        self._lookup = levels.astype(np.float32).reshape(-1, 1)
        self._offsets = np.arange(self.dim, dtype=np.int64) * self.levels
