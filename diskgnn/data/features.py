"""The feature rows training moves: features.bin as stored, or a quantized variant's code rows.

A `FeatureSource` is a file of fixed-size rows and the decoder that turns
them into the model's float32 input. Everything below the model (placement
budgets, packs, memory tiers, reads) works on stored rows of `row_bytes`, so
another encoding needs only a file of fixed-size rows and a decoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UsageError
from .format import Dataset
from .quantize.variants import load_quantized, variant_key

RAW_FEATURES = "fp32"  # the name (--features) of features.bin as stored, whatever its dtype


class AsFloat32:
    """Decoder of features.bin rows: their values as float32 (a no-op for float32 features)."""

    @staticmethod
    def decode_torch(rows):
        return rows.float()

    @staticmethod
    def decode_bytes(rows: int) -> int:
        """Temporary memory beside the output: none."""
        return 0


@dataclass(eq=False)
class FeatureSource:
    """The feature rows training moves: a file of fixed-size rows and the decoder that turns
    them into the model's float32 input.

    `fp32` is features.bin as stored; a quantized variant (docs/quantization.md) is its code
    file, uint8 rows of code_bytes, decoded by its quantizer. Everything below the model works
    on stored rows of `row_bytes` (placement budgets, packs, memory tiers, reads), so another
    encoding needs only a file of fixed-size rows and a decoder (decode_torch, decode_bytes).
    """

    name: str  # RAW_FEATURES or a canonical quantize spec; recorded in pack files
    path: Path
    rows: np.ndarray  # read-only memory map [num_rows, width] of the stored rows
    decoder: object
    checksum: str  # the manifest's checksum of `path`: packs of other rows are refused
    dim: int  # values per decoded row
    fidelity: dict | None = None  # a quantized variant's report from its fit (quantize.fidelity), if it has one

    @property
    def num_rows(self) -> int:
        return self.rows.shape[0]

    @property
    def width(self) -> int:
        """Elements per stored row."""
        return self.rows.shape[1]

    @property
    def dtype(self) -> np.dtype:
        return self.rows.dtype

    @property
    def row_bytes(self) -> int:
        return self.width * self.dtype.itemsize

    @property
    def decoded_row_bytes(self) -> int:
        return self.dim * 4

    def decode_torch(self, rows):
        """Stored rows as a tensor [n, width] on any device -> float32 [n, dim] on that device."""
        return self.decoder.decode_torch(rows)

    def decode_bytes(self, rows: int) -> int:
        """Temporary memory a decode of `rows` rows takes beside its float32 output."""
        return self.decoder.decode_bytes(rows)


def type_variants(features: str, schema, option: str = "--features") -> dict[str, str]:
    """--features on a typed graph, per featured node type: one variant for every type (`sq8`), or `type=variant`
    pairs, comma-separated (`paper=sq4,term=fp32`; a type not named: fp32). A variant's own commas stay its own
    (`paper=vq:w=16,L=2048`): a new pair starts only where a featured type's name and "=" begin the item."""
    featured, names = [t.name for t in schema.types if t.feature_dim], [t.name for t in schema.types]
    items = features.split(",")
    if not any(item.split("=", 1)[0] in names and "=" in item for item in items):
        return dict.fromkeys(featured, features)
    out, name = dict.fromkeys(featured, RAW_FEATURES), None
    for item in items:
        head, _, rest = item.partition("=")
        if head in featured and rest:
            name, out[head] = head, rest
        elif name is None or head in names:
            raise UsageError(f"{option} {features}: {item!r} names no featured node type (those: "
                             f"{', '.join(featured)})")
        else:
            out[name] += "," + item
    return out


def feature_source(ds: Dataset, name: str = RAW_FEATURES, node_type: str | None = None) -> FeatureSource:
    """The rows training reads of a node type (a homogeneous dataset's one type; a typed dataset's `node_type`): its
    stored features for `fp32`, else the stored quantized variant `name`."""
    dim = ds.schema.type(node_type).feature_dim if ds.typed else ds.feature_dim
    if name == RAW_FEATURES:
        kind = ds.feature_kind(node_type)
        return FeatureSource(RAW_FEATURES, ds.file_path(kind), ds.array(kind), AsFloat32(),
                             ds.manifest["files"][kind]["checksum"], dim)
    node_type = node_type if ds.typed else None
    q = load_quantized(ds, name, node_type)
    entry = ds.manifest["quantized"][variant_key(q.quantizer.spec, node_type)]
    checksum = ds.manifest["files"][entry["codes"]]["checksum"]
    return FeatureSource(q.quantizer.spec, q.path, q.codes, q.quantizer, checksum, dim, entry["fit"].get("report"))
