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

from ..errors import DiskgnnError
from .format import Dataset
from .quantize.variants import load_quantized

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


def feature_source(ds: Dataset, name: str = RAW_FEATURES, node_type: str | None = None) -> FeatureSource:
    """The rows training reads of a node type (a homogeneous dataset's one type; a typed dataset's `node_type`): its
    stored features for `fp32`, else the stored quantized variant `name`."""
    if name == RAW_FEATURES:
        kind = ds.feature_kind(node_type)
        dim = ds.schema.type(node_type).feature_dim if ds.typed else ds.feature_dim
        return FeatureSource(RAW_FEATURES, ds.file_path(kind), ds.array(kind), AsFloat32(),
                             ds.manifest["files"][kind]["checksum"], dim)
    if ds.typed:
        raise DiskgnnError(f"{ds.path}: quantized variants are not stored per node type; train from the stored "
                           "features (fp32)")
    q = load_quantized(ds, name)
    entry = ds.manifest["quantized"][q.quantizer.spec]
    checksum = ds.manifest["files"][entry["codes"]]["checksum"]
    return FeatureSource(q.quantizer.spec, q.path, q.codes, q.quantizer, checksum, ds.feature_dim,
                         entry["fit"].get("report"))
