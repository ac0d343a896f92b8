"""Scalar quantizers: BiFeat's log-domain sign-magnitude `sq1`..`sq16`, and per-column linear `lin4`/`lin8`."""

from __future__ import annotations

import numpy as np

from .base import Quantizer
from .spec import canonical_spec


class LogQuantizer(Quantizer):
    """BiFeat's b-bit log-domain sign-magnitude scalar quantizer; one range for every column.

    bits = 1: symbol = (x > 0), decoded to ±m with m = mean |x| over the sample
    (plus 0.1 when below 0.1, as BiFeat's code does, so sparse features keep a usable scale).
    bits > 1: with D = 2**(bits-1), fmin/fmax the sample's |x| percentiles p and 100-p
    (at least 1e-5 and 2e-5), emin = log2 fmin, emax = log2 fmax + 1e-5, δ = (emax-emin)/D:
    e = number of thresholds T_k = 2**(emin + k δ), k = 1..D-1, that are <= |x| (0..D-1);
    symbol = D + e for x > 0, D - 1 - e otherwise; decoded to the bucket's log-domain
    midpoint ±2**(emin + (e + 0.5) δ). The bucket is defined by comparisons with the
    stored thresholds (not floor(log2 ...)), so encoding is exact and the same on every machine.
    """

    def __init__(self, dim: int, bits: int, p: float):
        super().__init__(dim, canonical_spec(f"sq{bits}" + (f":p={p:g}" if bits > 1 else "")))
        self.bits, self.p = bits, p
        self.symbols, self.levels, self.width = dim, 1 << bits, 1
        self.range = None       # float64 [m] (bits 1) or [fmin, fmax, emin, emax]
        self.thresholds = None  # float64 [D - 1]
        self._edges = None      # float64 [D + 1]: -inf, thresholds, inf

    def _fit(self, sample, seed):
        a = np.abs(sample)
        if self.bits == 1:
            m = float(a.mean(dtype=np.float64))
            rng = np.array([m + 0.1 if m < 0.1 else m])
            lookup = np.array([-rng[0], rng[0]])
            thresholds = np.zeros(0)
        else:
            lo, hi = np.percentile(a, [self.p, 100 - self.p])
            fmin, fmax = max(float(lo), 1e-5), max(float(hi), 2e-5)
            emin, emax = np.log2(fmin), np.log2(fmax) + 1e-5
            half = 1 << (self.bits - 1)
            delta = (emax - emin) / half
            rng = np.array([fmin, fmax, emin, emax])
            thresholds = np.exp2(emin + delta * np.arange(1, half))
            t = np.arange(self.levels) - half + 0.5
            lookup = np.sign(t) * np.exp2(np.abs(t) * delta + emin)
        self._load({"range": rng, "thresholds": thresholds, "lookup": lookup.astype(np.float32)})

    def _symbols(self, rows):
        if self.bits == 1:
            return (rows > 0).astype(np.uint8)
        half = 1 << (self.bits - 1)
        a = np.abs(rows)
        # A guess from float32 log2 (fast; off by at most a bucket near an edge), then
        # the exact rule: move each value until edges[e] <= |x| < edges[e + 1].
        _, _, emin, emax = self.range
        with np.errstate(divide="ignore"):  # log2(0) = -inf lands in bucket 0
            guess = (np.log2(a) - np.float32(emin)) * np.float32(half / (emax - emin))
        e = np.clip(guess, 0, half - 1).astype(np.int32)
        while True:
            down, up = a < self._edges[e], a >= self._edges[e + 1]
            if not (down.any() or up.any()):
                break
            e += up
            e -= down
        return np.where(rows > 0, half + e, half - 1 - e).astype(np.uint16 if self.bits == 16 else np.uint8)

    def _state_layout(self):
        half = 1 << (self.bits - 1)
        return {"range": ("float64", (1 if self.bits == 1 else 4,)),
                "thresholds": ("float64", (0 if self.bits == 1 else half - 1,)),
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

    lo/hi are the sample's column min/max (p = 0) or its percentiles p and 100-p.
    symbol = round((clip(x, lo, hi) - lo) / step), step = (hi - lo) / (K - 1), in
    float64; decoded to lo + symbol * step (rounded to float32). A constant column
    (hi = lo) decodes exactly.
    """

    def __init__(self, dim: int, bits: int, p: float):
        super().__init__(dim, canonical_spec(f"lin{bits}:p={p:g}"))
        self.bits, self.p = bits, p
        self.symbols, self.levels, self.width = dim, 1 << bits, 1
        self.lo = self.hi = None  # float32 [dim]
        self._step = None         # float64 [dim]

    def _fit(self, sample, seed):
        if self.p == 0:
            lo, hi = sample.min(axis=0), sample.max(axis=0)
        else:
            lo, hi = np.percentile(sample, [self.p, 100 - self.p], axis=0)
        self._load({"lo": lo.astype(np.float32), "hi": hi.astype(np.float32)})

    def _symbols(self, rows):
        x = np.clip(rows.astype(np.float64), self.lo, self.hi)
        x -= self.lo
        np.divide(x, self._step, out=x, where=self._step > 0)
        x[:, self._step == 0] = 0
        return np.clip(np.rint(x), 0, self.levels - 1).astype(np.uint8)

    def _state_layout(self):
        return {"lo": ("float32", (self.dim,)), "hi": ("float32", (self.dim,))}

    def _state(self):
        return {"lo": self.lo, "hi": self.hi}

    def _load(self, arrays):
        self.lo, self.hi = arrays["lo"], arrays["hi"]
        lo = self.lo.astype(np.float64)
        self._step = (self.hi.astype(np.float64) - lo) / (self.levels - 1)
        levels = lo[:, None] + np.arange(self.levels) * self._step[:, None]
        self._lookup = levels.astype(np.float32).reshape(-1, 1)
        self._offsets = np.arange(self.dim, dtype=np.int64) * self.levels
