"""Heterogeneous dataset format v1 (docs/format.md, "Heterogeneous datasets").

A directory like a homogeneous dataset's, with the manifest's `format` "diskgnn-hetero-dataset" and its schema
(`hetero`: node types, relations, the target type, classes, multi-label). Ids are local to their type::

    features-<type>.bin    feature_dtype[count, feature_dim] per type that has features
    rel-<i>.indptr.bin     int64[count(dst) + 1], relation i's CSC over its destination type
    rel-<i>.indices.bin    int32 (or int64 from 2**31 sources) [num_edges]: source ids, ascending and unique
                           within each destination
    labels.bin             target type: int32[count] (-1: unlabeled), or multi-label int8[count, classes]
                           (0/1; a row of -1: unlabeled)
    train_idx.bin ...      int64 target-type ids, as for a homogeneous dataset

Every file is checksummed in the manifest, padded to 4 KiB, written in a temporary sibling directory and
renamed into place, exactly as format.py does for homogeneous datasets, whose helpers this module uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import DiskgnnError
from ..files import ArrayFileWriter
from ..format import FILE_NAMES, SPLITS, DatasetBuilder, checked_manifest, mapped, read_manifest
from .schema import Schema

FORMAT_NAME = "diskgnn-hetero-dataset"


def file_name(kind: str) -> str:
    """features/<type> -> features-<type>.bin, rel/<i>/indptr -> rel-<i>.indptr.bin; the rest as format.py."""
    if kind in FILE_NAMES:
        return FILE_NAMES[kind]
    head, _, rest = kind.partition("/")
    if head == "features":
        return f"features-{rest}.bin"
    if head == "rel":
        i, _, what = rest.partition("/")
        return f"rel-{int(i):02d}.{what}.bin"
    raise ValueError(f"unknown file kind {kind}")


class HeteroBuilder(DatasetBuilder):
    """DatasetBuilder for typed files; finish() writes the hetero manifest."""

    def writer(self, kind: str, dtype, row_shape=()) -> ArrayFileWriter:
        return ArrayFileWriter(self.tmp / file_name(kind), dtype, row_shape)

    def finish(self, meta: dict) -> Path:
        return super().finish({**meta, "format": FORMAT_NAME})


@dataclass
class HeteroDataset:
    """An opened heterogeneous dataset: the schema, arrays memory-mapped on demand, ids local to each type."""

    path: Path
    manifest: dict

    @property
    def schema(self) -> Schema:
        return Schema.from_dict(self.manifest["hetero"])

    def file_path(self, kind: str) -> Path:
        return self.path / self.manifest["files"][kind]["name"]

    def array(self, kind: str, mode: str = "r") -> np.ndarray:
        """As Dataset.array: memory-mapped read-only, or "c" copy-on-write."""
        return mapped(self.file_path(kind), self.manifest["files"][kind], mode)

    def features(self, node_type: str) -> np.ndarray | None:
        kind = f"features/{node_type}"
        return self.array(kind) if kind in self.manifest["files"] else None

    def csc(self, relation: int) -> tuple[np.ndarray, np.ndarray]:
        return self.array(f"rel/{relation}/indptr"), self.array(f"rel/{relation}/indices")

    @property
    def labels(self) -> np.ndarray:
        return self.array("labels")

    def split(self, name: str) -> np.ndarray:
        return self.array(f"{name}_idx")

    @property
    def num_edges(self) -> int:
        return sum(r.num_edges for r in self.schema.relations)

    @property
    def checksum(self) -> str:
        return self.manifest["manifest_checksum"]


def is_hetero(manifest: dict) -> bool:
    return manifest.get("format") == FORMAT_NAME


def read_hetero_manifest(path) -> dict:
    return read_manifest(path, FORMAT_NAME)


def open_hetero(path) -> HeteroDataset:
    """Opens a heterogeneous dataset with the checks done on open (as open_dataset: manifest, sizes, the
    checksum of every file up to defaults.VERIFY_ON_OPEN_BYTES)."""
    path = Path(path).absolute()
    manifest = checked_manifest(path, FORMAT_NAME)
    try:
        Schema.from_dict(manifest["hetero"])
    except (KeyError, TypeError) as e:
        raise DiskgnnError(f"{path / 'manifest.json'}: the hetero schema is incomplete ({e})") from None
    return HeteroDataset(path, manifest)


__all__ = ["FORMAT_NAME", "HeteroBuilder", "HeteroDataset", "SPLITS", "file_name", "is_hetero", "open_hetero",
           "read_hetero_manifest"]
