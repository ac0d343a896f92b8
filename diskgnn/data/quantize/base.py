"""The quantizer interface and the decoding every quantizer shares (one table gather per code unit).

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
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...errors import DiskgnnError
from .bits import pack_bits, packed_bytes, units_numpy, units_torch, unpack_bits

# A sample with at least this share of exact zeros is sparse: zero gets a code of its own, and the
# ranges are fitted on the non-zero values.
SPARSE_ZERO_SHARE = 0.25


class DataShape(NamedTuple):
    """What a fit found the features to be, chosen from the sample and stored with the parameters."""

    signed: bool  # some values are negative: the codes carry a sign
    zero: bool    # sparse: exact zeros encode to a code that decodes to exactly 0

    @classmethod
    def of(cls, sample: np.ndarray) -> "DataShape":
        zeros = float(np.count_nonzero(sample == 0)) / max(1, sample.size)
        return cls(bool((sample < 0).any()), cls.sparse(zeros))

    @staticmethod
    def sparse(zero_share: float) -> bool:
        """Whether data with this share of zeros is sparse: its zeros get a code of their own."""
        return zero_share >= SPARSE_ZERO_SHARE

    def array(self) -> np.ndarray:
        return np.array([self.signed, self.zero], dtype=np.float64)

    @classmethod
    def from_array(cls, a: np.ndarray) -> "DataShape":
        return cls(bool(a[0]), bool(a[1]))

    def describe(self) -> str:
        return ("signed" if self.signed else "non-negative") + (", sparse (exact zeros kept)" if self.zero else "")


# Parameters written before the data shape was recorded came from fits that assumed dense signed data.
LEGACY_SHAPE = DataShape(True, False)


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
        self.shape = LEGACY_SHAPE

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
        self.shape = self._choose_shape(DataShape.of(sample))
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
        units = units_numpy(codes, self.bits)
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
        units = units_torch(codes, self.bits)
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

    def clipped(self, rows: np.ndarray) -> np.ndarray | None:
        """Which values of `rows` lie outside the range the fit chose (None: the quantizer has no range)."""
        return None

    def state(self) -> dict[str, np.ndarray]:
        """The fitted parameters as named arrays (what the params file stores), the data shape among them."""
        self._need_fit()
        return {**self._state(), "shape": self.shape.array()}

    def load_state(self, arrays: dict[str, np.ndarray]) -> "Quantizer":
        """Fits this quantizer from `state()`'s arrays (a params file's); checks their names, dtypes
        and shapes. Returns self."""
        arrays = {"shape": LEGACY_SHAPE.array(), **arrays}
        self.shape = self._choose_shape(DataShape.from_array(np.asarray(arrays["shape"])))
        expected = {**self._state_layout(), "shape": ("float64", (2,))}
        if set(arrays) != set(expected):
            raise DiskgnnError(f"quantize {self.spec}: params hold {sorted(arrays)}, expected {sorted(expected)}")
        for name, (dtype, shape) in expected.items():
            a = arrays[name]
            if a.dtype != np.dtype(dtype) or a.shape != shape:
                raise DiskgnnError(f"quantize {self.spec}: params array {name!r} is {a.dtype}{list(a.shape)}, "
                                   f"expected {np.dtype(dtype)}{list(shape)}")
            if not np.isfinite(a).all():
                raise DiskgnnError(f"quantize {self.spec}: params array {name!r} has NaN or inf")
        # own, writable copies (torch wants them); the shape is already set
        self._load({name: np.array(arrays[name]) for name in expected if name != "shape"})
        self._build_decoder()
        return self

    def work_bytes(self, rows: int) -> int:
        """Memory `encode` needs for a chunk of `rows` rows (chunk sizes come from a budget)."""
        # Input row, float64/int64 temporaries of the symbol computation, the code row.
        return rows * (48 * self.dim + self.code_bytes)

    def fit_bytes(self, rows: int) -> int:
        """Memory `fit` needs for a sample of `rows` rows."""
        # The sample, its |x| copy and the percentile's working copy (float64 at worst).
        return rows * 16 * self.dim

    def _choose_shape(self, found: DataShape) -> DataShape:
        """The shape this quantizer encodes for, given what the sample holds."""
        return found

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
            raise RuntimeError(f"quantize {self.spec}: fit() the quantizer or load_state() a fitted one first")
