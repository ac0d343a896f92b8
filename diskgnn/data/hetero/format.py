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
renamed into place, exactly as format.py does for homogeneous datasets, whose helpers this module uses; a
typed dataset opens as any other (`open_dataset(path, typed=True)`: format.py's `Dataset`, its schema the
manifest's).
"""

from __future__ import annotations

from pathlib import Path

from ..files import ArrayFileWriter
from ..format import FILE_NAMES, SPLITS, TYPED_FORMAT_NAME, DatasetBuilder, read_manifest

FORMAT_NAME = TYPED_FORMAT_NAME


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


def is_hetero(manifest: dict) -> bool:
    return manifest.get("format") == FORMAT_NAME


def read_hetero_manifest(path) -> dict:
    return read_manifest(path, FORMAT_NAME)


__all__ = ["FORMAT_NAME", "HeteroBuilder", "SPLITS", "file_name", "is_hetero", "read_hetero_manifest"]
