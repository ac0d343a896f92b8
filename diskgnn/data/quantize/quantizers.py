"""Quantizers by spec: an unfitted one to fit, or a fitted one from a params file's arrays."""

from __future__ import annotations

import numpy as np

from ...errors import DiskgnnError
from .base import Quantizer
from .product import ProductQuantizer
from .scalar import LinearQuantizer, LogQuantizer
from .spec import SQ_DEFAULT_P, parse_spec


def make_quantizer(spec: str, dim: int) -> Quantizer:
    """An unfitted quantizer for rows of `dim` values."""
    kind, bits, opts = parse_spec(spec)
    if dim < 1:
        raise DiskgnnError(f"quantize: rows of {dim} values cannot be quantized")
    if kind == "sq":
        return LogQuantizer(dim, bits, opts.get("p", SQ_DEFAULT_P))
    if kind == "lin":
        return LinearQuantizer(dim, bits, opts["p"])
    return ProductQuantizer(dim, opts["w"], opts["L"])


def from_state(spec: str, dim: int, arrays: dict[str, np.ndarray]) -> Quantizer:
    """A fitted quantizer from `Quantizer.state()`'s arrays."""
    return make_quantizer(spec, dim).load_state(arrays)
