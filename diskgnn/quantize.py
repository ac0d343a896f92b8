"""Quantized features (BiFeat): scalar and product quantizers, and `python -m diskgnn.quantize`.

A quantizer is fitted once on a bounded, seeded sample of rows, then encodes
rows independently, so a feature matrix larger than RAM is encoded streaming
in chunks sized from a memory budget. Every quantizer turns a float32 row of
`dim` values into `code_bytes` bytes, and decodes a code row without looking
at any other row: each of its `symbols` integers of `bits` bits, plus the
symbol's offset, indexes one lookup table (scalar quantizers: values; product
quantization: sub-vectors). Decoding gathers from a table built from that one
per unit of the row (a byte, or a 16-bit symbol), so it needs no bit
unpacking, and `decode_torch` (on any device) gives bit for bit what
`decode_numpy` gives.

Specs (canonical forms; docs/quantization.md has the byte layout):

    sq1 sq2 sq4 sq8 sq16     BiFeat's log-domain sign-magnitude scalar quantization,
                             one range for all columns from the sample's |x| percentiles
                             p and 100 - p (`sq4:p=1`; default p = 0.5; sq1 has none)
    lin4 lin8                per-column linear quantization between the sample's column
                             min and max, or percentiles p and 100 - p (`lin8:p=0.5`)
    vq:w=16,L=2048           product quantization: sub-vectors of w values (the last one
                             zero-padded), one k-means codebook of L centroids each

Examples::

    python -m diskgnn.quantize data/cora --spec sq4 --spec vq:w=16,L=2048
    python -m diskgnn.prepare ../shared/datasets/planetoid_cora --out data/cora --quantize sq8
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import xxhash

from .errors import DiskgnnError, run_cli
from .format import (CHECKSUM_ALGO, MANIFEST, ArrayFileWriter, Dataset, open_dataset, read_manifest,
                     write_manifest)
from .memory import peak_rss_bytes
from .units import format_size, parse_size

SQ_BITS = (1, 2, 4, 8, 16)
LIN_BITS = (4, 8)
SQ_DEFAULT_P = 0.5  # BiFeat's clip: |x| percentiles 0.5 and 99.5
VQ_DEFAULTS = {"w": 16, "L": 2048}  # BiFeat's recommended (w, L) for large graphs
MAX_VQ_L = 1 << 16  # codes are at most uint16
KMEANS_ITERS = 10
# Rows per distance block in VQ assignment. Every block is padded to exactly this
# many rows, so each matmul has the same shape and a row's code cannot depend on
# which rows share its block (or on the chunk size the memory budget picked).
VQ_BLOCK_ROWS = 256
VQ_DIST_BYTES = 32 << 20  # the distance buffer of one block of rows against a group of codebooks
PARAMS_ALIGN = 64
# Interpreter, numpy and open files before any chunk (as in prepare).
BASE_RSS = 96 << 20
MIN_BUDGET = 160 << 20

_SPEC_HELP = "expected sq1, sq2, sq4, sq8, sq16, lin4, lin8 or vq:w=W,L=L, with options after ':' (e.g. sq4:p=1)"


# ---------------------------------------------------------------- specs

def parse_spec(text: str) -> tuple[str, int, dict]:
    """Parses a spec into (kind, bits, options): kind is 'sq', 'lin' or 'vq' (bits 0 for vq)."""
    s = str(text).strip()
    m = re.fullmatch(r"(sq|lin)(\d+)|(vq)", s.partition(":")[0])
    if not m:
        raise DiskgnnError(f"quantize spec {text!r}: {_SPEC_HELP}")
    kind = m.group(1) or "vq"
    bits = int(m.group(2)) if m.group(2) else 0
    if kind == "sq" and bits not in SQ_BITS:
        raise DiskgnnError(f"quantize spec {text!r}: sq bits must be one of {', '.join(map(str, SQ_BITS))}")
    if kind == "lin" and bits not in LIN_BITS:
        raise DiskgnnError(f"quantize spec {text!r}: lin bits must be one of {', '.join(map(str, LIN_BITS))}")
    allowed = {"sq": ("p",) if bits > 1 else (), "lin": ("p",), "vq": ("w", "L")}[kind]
    opts = {}
    rest = s.partition(":")[2]
    for item in rest.split(",") if rest else ():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise DiskgnnError(f"quantize spec {text!r}: {item!r} is not an option of {s.partition(':')[0]}"
                               f" (options: {', '.join(allowed) or 'none'})")
        if key in opts:
            raise DiskgnnError(f"quantize spec {text!r}: {key} given twice")
        try:
            opts[key] = float(value) if key == "p" else int(value)
        except ValueError:
            raise DiskgnnError(f"quantize spec {text!r}: {key}={value!r} is not a "
                               f"{'number' if key == 'p' else 'whole number'}") from None
    if "p" in opts and not 0 <= opts["p"] < 50:
        raise DiskgnnError(f"quantize spec {text!r}: p={opts['p']:g} must be in [0, 50)")
    if kind == "sq" and bits > 1:
        opts.setdefault("p", SQ_DEFAULT_P)
    if kind == "lin":
        opts.setdefault("p", 0.0)
    if kind == "vq":
        opts = {**VQ_DEFAULTS, **opts}
        if opts["w"] < 1:
            raise DiskgnnError(f"quantize spec {text!r}: w={opts['w']} must be at least 1")
        if not 2 <= opts["L"] <= MAX_VQ_L:
            raise DiskgnnError(f"quantize spec {text!r}: L={opts['L']} must be in [2, {MAX_VQ_L}]")
    return kind, bits, opts


def canonical_spec(text: str) -> str:
    """The one spelling of a spec: defaults dropped for sq/lin, always spelled out for vq."""
    kind, bits, opts = parse_spec(text)
    if kind == "vq":
        return f"vq:w={opts['w']},L={opts['L']}"
    default = SQ_DEFAULT_P if kind == "sq" else 0.0
    return f"{kind}{bits}" + (f":p={opts['p']:g}" if bits > 1 and opts["p"] != default else "")


def spec_slug(spec: str) -> str:
    """File-name form of a spec: vq:w=16,L=2048 -> vq-w16-L2048."""
    return canonical_spec(spec).replace(":", "-").replace(",", "-").replace("=", "")


def make_quantizer(spec: str, dim: int) -> "Quantizer":
    """An unfitted quantizer for rows of `dim` values."""
    kind, bits, opts = parse_spec(spec)
    if dim < 1:
        raise DiskgnnError(f"quantize: rows of {dim} values cannot be quantized")
    if kind == "sq":
        return LogQuantizer(dim, bits, opts.get("p", SQ_DEFAULT_P))
    if kind == "lin":
        return LinearQuantizer(dim, bits, opts["p"])
    return ProductQuantizer(dim, opts["w"], opts["L"])


# ---------------------------------------------------------------- bit packing

def packed_bytes(symbols: int, bits: int) -> int:
    return -(-symbols * bits // 8)


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """[n, S] integers < 2**bits -> uint8 [n, packed_bytes(S, bits)].

    Symbol j of a row occupies bits [j*bits, (j+1)*bits) of the row read as one
    little-endian integer: for bits < 8, byte j*bits // 8, starting at bit
    (j*bits) % 8 counted from the least significant bit; 16-bit symbols are
    little-endian uint16. Unused high bits of a row's last byte are zero.
    """
    n, s = values.shape
    if bits == 8:
        return np.ascontiguousarray(values, dtype=np.uint8)
    if bits == 16:
        return np.ascontiguousarray(values, dtype="<u2").view(np.uint8).reshape(n, 2 * s)
    per = 8 // bits
    padded = np.zeros((n, packed_bytes(s, bits) * per), dtype=np.uint8)
    padded[:, :s] = values
    out = padded[:, 0::per].copy()
    for k in range(1, per):  # strided slices: much faster than a reduce over a short last axis
        out |= padded[:, k::per] << np.uint8(k * bits)
    return out


def unpack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of pack_bits, padding symbols included: [n, B] uint8 -> [n, B * 8 // bits]."""
    n = codes.shape[0]
    if bits == 8:
        return codes
    if bits == 16:
        return np.ascontiguousarray(codes).view("<u2").reshape(n, -1)
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return ((codes[:, :, None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(n, -1)


def _units_numpy(codes: np.ndarray, bits: int) -> np.ndarray:
    """The decode units of code rows as int32: little-endian uint16 symbols (bits 16), else bytes."""
    codes = np.ascontiguousarray(codes)
    return (codes.view("<u2") if bits == 16 else codes).astype(np.int32)


def _units_torch(codes, bits: int):
    """_units_numpy in torch ops, on the codes' device. int32, not int64: widening to int64 took
    longer than the gather itself on a CPU."""
    if bits == 16:
        pairs = codes.reshape(codes.shape[0], -1, 2).int()
        return pairs[:, :, 0] | (pairs[:, :, 1] << 8)
    return codes.int()


# ---------------------------------------------------------------- quantizers

class Quantizer:
    """Rows of `dim` float32 values <-> rows of `code_bytes` uint8.

    Subclasses define fitting (`_fit`), the symbols of rows (`_symbols`) and
    the state (`_state_layout`, `_state`, `_load`; loading builds the lookup
    table and the offsets); decoding is shared:
    x̂[j*width:(j+1)*width] = lookup[offsets[j] + symbol[j]], then cut to `dim`,
    computed one unit of the row at a time (`_build_decoder`).
    """

    default_sample_rows = 100_000
    bits: int      # bits per symbol
    symbols: int   # symbols per row
    levels: int    # valid symbols are < levels
    width: int     # values decoded per symbol

    def __init__(self, dim: int, spec: str):
        self.dim = dim
        self.spec = spec
        self._lookup = None    # float32 [T, width]
        self._offsets = None   # int64 [symbols]
        self._table = None     # float32 [T', values per unit] (1-D for one value): what decoding gathers from
        self._unit_offsets = None  # int32 [units], or None when every unit reads the same table rows
        self._torch = {}       # device -> (table, unit offsets) already on that device

    @property
    def code_bytes(self) -> int:
        return packed_bytes(self.symbols, self.bits)

    @property
    def compression_ratio(self) -> float:
        """float32 row bytes over code row bytes."""
        return 4 * self.dim / self.code_bytes

    @property
    def fitted(self) -> bool:
        return self._lookup is not None

    def fit(self, sample: np.ndarray, *, seed: int = 0) -> "Quantizer":
        """Fits on a sample of rows (float32 [k, dim], finite); returns self."""
        sample = self._check_rows(sample)
        if sample.shape[0] == 0:
            raise DiskgnnError(f"quantize {self.spec}: no rows to fit on")
        self._fit(sample, seed)
        self._build_decoder()
        return self

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """float32 [n, dim] (finite) -> uint8 [n, code_bytes]; each row on its own."""
        self._need_fit()
        return pack_bits(self._symbols(self._check_rows(rows)), self.bits)

    def decode_numpy(self, codes: np.ndarray) -> np.ndarray:
        """uint8 [n, code_bytes] -> float32 [n, dim]."""
        self._need_fit()
        codes = np.asarray(codes)
        self._check_codes_shape(codes.shape, codes.dtype == np.uint8)
        units = _units_numpy(codes, self.bits)
        if self._unit_offsets is not None:
            units += self._unit_offsets
        out = np.take(self._table, units.ravel(), axis=0).reshape(codes.shape[0], -1)
        return np.ascontiguousarray(out[:, :self.dim]) if out.shape[1] != self.dim else out

    def decode_torch(self, codes):
        """torch.uint8 [n, code_bytes] on any device -> float32 [n, dim] on that device.

        The table goes to a device once and is kept; the ops are vectorised
        gathers, so on a GPU this runs in the current stream.
        """
        self._need_fit()
        import torch

        self._check_codes_shape(tuple(codes.shape), codes.dtype == torch.uint8)
        key = str(codes.device)
        if key not in self._torch:
            self._torch[key] = (torch.from_numpy(self._table).to(codes.device),
                                None if self._unit_offsets is None else
                                torch.from_numpy(self._unit_offsets).to(codes.device))
        table, offsets = self._torch[key]
        units = _units_torch(codes, self.bits)
        if offsets is not None:
            units += offsets
        out = table.index_select(0, units.view(-1)).view(codes.shape[0], -1)
        return out[:, :self.dim].contiguous() if out.shape[1] != self.dim else out

    def decode_bytes(self, rows: int) -> int:
        """Temporary memory of a decode of `rows` rows beside its output: the int32 units (and, for
        16-bit symbols, their int32 bytes) and the gather before it is cut to `dim` values."""
        self._need_fit()
        units = self.code_bytes // (2 if self.bits == 16 else 1)
        return rows * (8 * self.code_bytes + 4 * self._table.size // self._table.shape[0] * units)

    def _build_decoder(self) -> None:
        """The table decoding gathers from, once the lookup and offsets are set.

        A unit of a code row is one byte when bits <= 8 (holding 8 // bits
        symbols) and one symbol when bits = 16. Row `unit_offsets[u] + value`
        of the table holds the decoded values of every symbol in unit u when
        the unit holds `value`, so a row decodes with one gather per unit and
        no bit unpacking. Padding symbols decode to values past `dim`, which
        are cut off; invalid symbols (vq with L < 2**bits) to any table row.
        When every symbol has offset 0 (sq), every unit reads the same rows
        and there is no offset to add.
        """
        if self.bits == 16:
            table, offsets = self._lookup, self._offsets
        else:
            per, units = 8 // self.bits, self.code_bytes
            value_symbols = (np.arange(256)[:, None] >> (np.arange(per) * self.bits)) & ((1 << self.bits) - 1)
            symbol = np.minimum(np.arange(units * per), self.symbols - 1).reshape(units, per)
            rows = np.minimum(self._offsets[symbol][:, None, :] + value_symbols, self._lookup.shape[0] - 1)
            table = self._lookup[rows].reshape(units * 256, per * self.width)  # [units, 256, per, width]
            offsets = np.arange(units, dtype=np.int64) * 256
        shared = not self._offsets.any()
        table = table[:256 if self.bits < 16 else None] if shared else table
        # Gathering single values runs 2x faster from a 1-D table than from rows of one value.
        self._table = np.ascontiguousarray(table.reshape(-1) if table.shape[1] == 1 else table)
        self._unit_offsets = None if shared else offsets.astype(np.int32)
        self._torch = {}

    def invalid_row(self, codes: np.ndarray) -> int | None:
        """First row (of a block of code rows) with a symbol out of range or nonzero padding bits."""
        sym = unpack_bits(np.asarray(codes, dtype=np.uint8), self.bits)
        bad = (sym[:, :self.symbols] >= self.levels).any(axis=1) | (sym[:, self.symbols:] != 0).any(axis=1)
        return int(np.flatnonzero(bad)[0]) if bad.any() else None

    def state(self) -> dict[str, np.ndarray]:
        """The fitted parameters as named arrays (what the params file stores)."""
        self._need_fit()
        return self._state()

    @classmethod
    def from_state(cls, spec: str, dim: int, arrays: dict[str, np.ndarray]) -> "Quantizer":
        """A fitted quantizer from `state()`'s arrays; checks their names, dtypes and shapes."""
        q = make_quantizer(spec, dim)
        expected = q._state_layout()
        if set(arrays) != set(expected):
            raise DiskgnnError(f"quantize {q.spec}: params hold {sorted(arrays)}, expected {sorted(expected)}")
        for name, (dtype, shape) in expected.items():
            a = arrays[name]
            if a.dtype != np.dtype(dtype) or a.shape != shape:
                raise DiskgnnError(f"quantize {q.spec}: params array {name!r} is {a.dtype}{list(a.shape)}, "
                                   f"expected {np.dtype(dtype)}{list(shape)}")
            if not np.isfinite(a).all():
                raise DiskgnnError(f"quantize {q.spec}: params array {name!r} has NaN or inf")
        q._load({name: np.array(arrays[name]) for name in expected})  # own, writable copies (torch wants them)
        q._build_decoder()
        return q

    def work_bytes(self, rows: int) -> int:
        """Memory `encode` needs for a chunk of `rows` rows (chunk sizes come from a budget)."""
        # Input row, float64/int64 temporaries of the symbol computation, the code row.
        return rows * (48 * self.dim + self.code_bytes)

    def fit_bytes(self, rows: int) -> int:
        """Memory `fit` needs for a sample of `rows` rows."""
        # The sample, its |x| copy and the percentile's working copy (float64 at worst).
        return rows * 16 * self.dim

    def _check_rows(self, rows) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise ValueError(f"quantize {self.spec}: rows of shape {rows.shape}, expected [n, {self.dim}]")
        return rows

    def _check_codes_shape(self, shape, is_uint8: bool) -> None:
        if len(shape) != 2 or shape[1] != self.code_bytes or not is_uint8:
            raise ValueError(f"quantize {self.spec}: codes must be uint8 [n, {self.code_bytes}], got {shape}")

    def _need_fit(self) -> None:
        if not self.fitted:
            raise RuntimeError(f"quantize {self.spec}: fit() the quantizer or load it with from_state() first")


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


class ProductQuantizer(Quantizer):
    """Product quantization: P = ceil(dim / w) sub-vectors (the last zero-padded to w), each
    replaced by the index of its nearest centroid (Euclidean) in its own codebook of L.

    The codebooks are fitted by k-means on the sample: each part's centroids start
    at the sub-vectors of L different sample rows drawn with the seed, then up to
    KMEANS_ITERS rounds of assign and average (stopping early when no assignment
    changes); an empty cluster takes the sample sub-vector worst served so far.
    Euclidean assignment (BiFeat assigns by cosine) minimises the reconstruction error.
    """

    default_sample_rows = 50_000  # BiFeat fits its codebooks on at most 50k rows

    def __init__(self, dim: int, w: int, L: int):
        super().__init__(dim, f"vq:w={w},L={L}")
        self.w, self.L = w, L
        self.parts = -(-dim // w)
        self.bits = 8 if L <= 256 else 16
        self.symbols, self.levels, self.width = self.parts, L, w
        self.codebook = None  # float32 [parts, L, w]

    @property
    def _group(self) -> int:
        """Codebooks per distance matmul, so that one block's distances stay within VQ_DIST_BYTES."""
        return max(1, VQ_DIST_BYTES // (VQ_BLOCK_ROWS * self.L * 4))

    def _fixed_bytes(self) -> int:
        # Distance buffer, the padded block, the codebooks and their transposed copy.
        codebook = self.parts * self.L * self.w * 4
        return min(self._group, self.parts) * VQ_BLOCK_ROWS * self.L * 4 + VQ_BLOCK_ROWS * self.parts * self.w * 4 \
            + 2 * codebook

    def work_bytes(self, rows: int) -> int:
        # Input, its padded copy, int64 assignments.
        return rows * (12 * self.parts * self.w + 16 * self.parts) + self._fixed_bytes()

    def fit_bytes(self, rows: int) -> int:
        # Sample and padded copy, assignments and errors, bincount weights; float64 centroid sums.
        return rows * (8 * self.parts * self.w + 40 * self.parts) + self._fixed_bytes() \
            + 2 * self.parts * self.L * self.w * 8

    def _split(self, rows):
        """[n, dim] -> [n, parts, w], zero-padded."""
        x = np.zeros((rows.shape[0], self.parts * self.w), dtype=np.float32)
        x[:, :self.dim] = rows
        return x.reshape(-1, self.parts, self.w)

    def _assign(self, x, with_error=False):
        """Nearest centroid of every sub-vector: argmin |c|²/2 - x·c, in padded blocks of rows."""
        n, P, L = x.shape[0], self.parts, self.L
        codes = np.empty((n, P), dtype=np.int64)
        err = np.empty((n, P), dtype=np.float32) if with_error else None
        group = self._group
        cb_t = np.ascontiguousarray(self.codebook.transpose(0, 2, 1))
        half_norm = 0.5 * np.einsum("plw,plw->pl", self.codebook, self.codebook)
        block = np.zeros((P, VQ_BLOCK_ROWS, self.w), dtype=np.float32)
        dist = np.empty((min(group, P), VQ_BLOCK_ROWS, L), dtype=np.float32)
        for start in range(0, n, VQ_BLOCK_ROWS):
            m = min(VQ_BLOCK_ROWS, n - start)
            block[:, :m] = x[start:start + m].transpose(1, 0, 2)
            block[:, m:] = 0
            for g in range(0, P, group):
                d = dist[:min(group, P - g)]
                np.matmul(block[g:g + group], cb_t[g:g + group], out=d)
                np.subtract(half_norm[g:g + group, None, :], d, out=d)
                best = d.argmin(axis=2)
                codes[start:start + m, g:g + group] = best[:, :m].T
                if with_error:
                    low = np.take_along_axis(d, best[:, :, None], axis=2)[:, :m, 0].T
                    err[start:start + m, g:g + group] = 2 * low
        if with_error:
            err += np.einsum("npw,npw->np", x, x)
        return codes, err

    def _fit(self, sample, seed):
        x = self._split(sample)
        n, P, L = x.shape[0], self.parts, self.L
        rng = np.random.default_rng(seed)
        # Each part starts from its own L sample rows; with fewer rows than L, a
        # permutation of max(n, L) taken mod n still uses every row at least once.
        start = np.argsort(rng.random((P, max(n, L))), axis=1)[:, :L] % n
        self.codebook = np.ascontiguousarray(x[start, np.arange(P)[:, None]])
        flat_base = (np.arange(P) * L)[None, :]
        prev = None
        for _ in range(KMEANS_ITERS):
            codes, err = self._assign(x, with_error=True)
            if prev is not None and np.array_equal(codes, prev):
                break
            prev = codes
            flat = (codes + flat_base).ravel()
            counts = np.bincount(flat, minlength=P * L)
            sums = np.stack([np.bincount(flat, weights=x[:, :, j].ravel(), minlength=P * L)
                             for j in range(self.w)], axis=1)
            cb = self.codebook.reshape(P * L, self.w)
            full = counts > 0
            cb[full] = (sums[full] / counts[full, None]).astype(np.float32)
            for p in np.flatnonzero((counts.reshape(P, L) == 0).any(axis=1)):
                empty = np.flatnonzero(counts[p * L:(p + 1) * L] == 0)
                worst = np.argsort(-err[:, p], kind="stable")[:empty.size]
                self.codebook[p, empty[:worst.size]] = x[worst, p]
        self._set_codebook(self.codebook)

    def _symbols(self, rows):
        codes, _ = self._assign(self._split(rows))
        return codes.astype(np.uint8 if self.bits == 8 else np.uint16)

    def _state_layout(self):
        return {"codebook": ("float32", (self.parts, self.L, self.w))}

    def _state(self):
        return {"codebook": self.codebook}

    def _load(self, arrays):
        self._set_codebook(arrays["codebook"])

    def _set_codebook(self, codebook):
        self.codebook = np.ascontiguousarray(codebook, dtype=np.float32)
        self._lookup = self.codebook.reshape(self.parts * self.L, self.w)
        self._offsets = np.arange(self.parts, dtype=np.int64) * self.L


# ---------------------------------------------------------------- files

class QuantizedFeatures(NamedTuple):
    """One stored variant: the fitted quantizer, its code rows memory-mapped, the code file."""

    quantizer: Quantizer
    codes: np.ndarray  # uint8 [num_nodes, code_bytes], read-only
    path: Path


def file_kinds(spec: str) -> tuple[str, str]:
    """Manifest kinds (file names without .bin) of a variant's code and params files."""
    slug = spec_slug(spec)
    return f"features.{slug}", f"features.{slug}.params"


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


def load_quantized(ds: Dataset, spec: str) -> QuantizedFeatures:
    """The stored variant `spec` of a dataset (any spelling of the spec)."""
    spec = canonical_spec(spec)
    stored = ds.manifest.get("quantized", {})
    if spec not in stored:
        have = ", ".join(stored) or "none"
        raise DiskgnnError(f"{ds.path}: no quantized features {spec} (stored: {have}); "
                           f"add them with python -m diskgnn.quantize {ds.path} --spec {spec}")
    entry = stored[spec]
    params_entry = ds.manifest["files"][entry["params"]]
    arrays = _read_params(ds.path / params_entry["name"], params_entry, entry["arrays"])
    q = Quantizer.from_state(spec, ds.feature_dim, arrays)
    if q.code_bytes != entry["code_bytes"]:
        raise DiskgnnError(f"{ds.path}: {spec} rows are {entry['code_bytes']} bytes, expected {q.code_bytes}")
    return QuantizedFeatures(q, ds.array(entry["codes"]), ds.file_path(entry["codes"]))


def _read_sample(path: Path, dtype: np.dtype, num_rows: int, dim: int, count: int, seed: int) -> np.ndarray:
    """`count` distinct rows drawn with `seed`, in ascending order, read with one pread per run
    of consecutive rows (not a memory map: the budget must not be spent on mapped pages)."""
    ids = np.sort(np.random.default_rng(seed).choice(num_rows, count, replace=False))
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
                    work_bytes: int, sample_rows: int | None = None, seed: int = 0,
                    suffix: str = "") -> tuple[Quantizer, dict, dict]:
    """Fits `spec` on a seeded sample of a raw feature file's rows and encodes the file streaming.

    Writes the code and params files in `out_dir` (their names plus `suffix`),
    holding about `work_bytes` of memory. Returns the quantizer, the manifest
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
    count = _rows_within(q.fit_bytes, work_bytes, min(sample_rows or q.default_sample_rows, num_rows))
    sample = _read_sample(features, dtype, num_rows, dim, count, seed)
    q.fit(sample, seed=seed)
    # Error on the sample, for the report; in chunks, like the encoding.
    chunk = _rows_within(q.work_bytes, work_bytes, count)
    sq_err = sq_x = 0.0
    for i in range(0, count, chunk):
        x = sample[i:i + chunk]
        sq_err += float(np.square(q.decode_numpy(q.encode(x)) - x, dtype=np.float64).sum())
        sq_x += float(np.square(x, dtype=np.float64).sum())
    del sample

    codes_kind, params_kind = file_kinds(q.spec)
    codes_w = ArrayFileWriter(out_dir / f"{codes_kind}.bin{suffix}", np.uint8, (q.code_bytes,))
    try:
        encode_file(q, features, dtype, num_rows, codes_w, work_bytes)
    except BaseException:
        codes_w.abort()
        raise
    codes_entry = codes_w.close()
    params_entry, layout = _write_params(out_dir / f"{params_kind}.bin{suffix}", q.state())
    codes_entry["name"], params_entry["name"] = f"{codes_kind}.bin", f"{params_kind}.bin"
    entry = {
        "codes": codes_kind, "params": params_kind, "code_bytes": q.code_bytes, "arrays": layout,
        "fit": {"sample_rows": count, "seed": seed,
                "sample_rmse": (sq_err / (count * dim)) ** 0.5, "sample_rms": (sq_x / (count * dim)) ** 0.5},
    }
    return q, {codes_kind: codes_entry, params_kind: params_entry}, entry


def check_quantized(path: Path, manifest: dict, chunk_bytes: int = 64 << 20) -> list[str]:
    """verify's checks of the quantized variants: params load, shapes agree, every code row valid."""
    problems = []
    for spec, entry in manifest.get("quantized", {}).items():
        missing = [k for k in (entry.get("codes"), entry.get("params")) if k not in manifest["files"]]
        if missing:
            problems.append(f"{path / MANIFEST}: quantized {spec} names files {missing} it does not list")
            continue
        try:
            q, codes, cpath = load_quantized(Dataset(path, manifest), spec)
        except DiskgnnError as e:
            problems.append(str(e))
            continue
        if codes.shape != (manifest["num_nodes"], q.code_bytes):
            problems.append(f"{cpath}: shape {list(codes.shape)}, expected [{manifest['num_nodes']}, {q.code_bytes}]")
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


def _install(path: Path, spec: str, features_checksum: str, files: dict, entry: dict, suffix: str,
             overwrite: bool) -> None:
    """Moves a variant's finished files into the dataset and records them in the manifest.

    Under an exclusive lock on the directory (concurrent `quantize` runs must not
    lose each other's manifest updates): a variant being replaced first leaves the
    manifest, then its files are replaced, then the manifest lists the new ones.
    Each step is an atomic rename, so a crash leaves the old variant, no variant,
    or the new one, never a manifest whose checksums do not match its files.
    """
    dfd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        m = read_manifest(path)
        if m["files"]["features"]["checksum"] != features_checksum:
            raise DiskgnnError(f"{path}: features changed while quantizing; run again")
        old = m.get("quantized", {}).pop(spec, None)
        if old is not None and not overwrite:
            raise DiskgnnError(f"{path}: already has quantized features {spec} (pass --overwrite to replace them)")
        if old is not None:
            for kind in (old["codes"], old["params"]):
                m["files"].pop(kind, None)
            write_manifest(path, m)
        for kind, e in files.items():
            os.rename(path / (e["name"] + suffix), path / e["name"])
        m["files"].update(files)
        m.setdefault("quantized", {})[spec] = entry
        write_manifest(path, m)
    finally:
        os.close(dfd)


def quantize_dataset(path, specs, *, memory_budget="2GiB", sample_rows: int | None = None, seed: int = 0,
                     overwrite: bool = False, report: bool = False) -> list[Quantizer]:
    """Adds quantized variants of an existing dataset's features (the float features stay)."""
    budget = parse_size(memory_budget)
    if budget < MIN_BUDGET:
        raise DiskgnnError(f"--memory-budget {format_size(budget)} is too small: at least {format_size(MIN_BUDGET)}")
    if sample_rows is not None and sample_rows < 1:
        raise DiskgnnError(f"--sample-rows {sample_rows}: must be at least 1")
    specs = list(dict.fromkeys(canonical_spec(s) for s in specs))
    ds = open_dataset(path)
    present = [s for s in specs if s in ds.manifest.get("quantized", {})]
    if present and not overwrite:
        raise DiskgnnError(f"{ds.path}: already has quantized features {', '.join(present)} "
                           f"(pass --overwrite to replace them)")
    features = ds.manifest["files"]["features"]
    suffix = f".tmp-{os.getpid()}"
    done = []
    for spec in specs:
        t0 = time.perf_counter()
        kinds = file_kinds(spec)
        try:
            q, files, entry = write_quantized(ds.features_path, ds.feature_dtype, ds.num_nodes, ds.feature_dim,
                                              spec, ds.path, work_bytes=budget - BASE_RSS,
                                              sample_rows=sample_rows, seed=seed, suffix=suffix)
            _install(ds.path, spec, features["checksum"], files, entry, suffix, overwrite)
        finally:
            for kind in kinds:
                (ds.path / f"{kind}.bin{suffix}").unlink(missing_ok=True)
        done.append(q)
        if report:
            fit = entry["fit"]
            print(f"quantize: {spec}: wrote {kinds[0]}.bin ({q.code_bytes} B/row, {q.compression_ratio:.1f}x "
                  f"smaller than float32) in {time.perf_counter() - t0:.1f} s; fitted on {fit['sample_rows']} rows, "
                  f"RMS error {fit['sample_rmse']:.4g} (features' RMS {fit['sample_rms']:.4g}); "
                  f"peak RSS {peak_rss_bytes()} bytes (budget {budget})")
    return done


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m diskgnn.quantize", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", help="dataset directory written by diskgnn.prepare")
    ap.add_argument("--spec", action="append", required=True, help="quantizer, e.g. sq8, lin4, vq:w=16,L=2048 "
                    "(repeat for several)")
    ap.add_argument("--memory-budget", default="2GiB", help="memory the whole run may use (default 2GiB)")
    ap.add_argument("--sample-rows", type=int, help="rows to fit on (default 100000; vq 50000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the row sample and of k-means")
    ap.add_argument("--overwrite", action="store_true", help="replace variants that already exist")
    args = ap.parse_args(argv)
    quantize_dataset(args.dataset, args.spec, memory_budget=args.memory_budget, sample_rows=args.sample_rows,
                     seed=args.seed, overwrite=args.overwrite, report=True)


if __name__ == "__main__":
    raise SystemExit(run_cli("quantize", main))
