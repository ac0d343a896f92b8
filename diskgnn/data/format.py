"""On-disk dataset format v1 (specified byte for byte in docs/format.md).

A dataset is a directory::

    manifest.json    what is here: sizes, dtypes, one checksum per file, its own checksum
    indptr.bin       int64[num_nodes + 1], CSC: in-neighbours of v are indices[indptr[v]:indptr[v+1]]
    indices.bin      int32 (num_nodes < 2**31) or int64 [num_edges]
    features.bin     feature_dtype[num_nodes, feature_dim], row-major, zero-padded to 4 KiB
    labels.bin       int32[num_nodes], -1 where a node has no label
    train_idx.bin    int64 node ids, and likewise val_idx.bin and test_idx.bin
    val_edges.bin, test_edges.bin
                     optional int64[E, 2] (src, dst) held-out edges of an edge split (link prediction)
    features.<spec>.bin, features.<spec>.params.bin
                     optional quantized variants of the features (docs/quantization.md)

Every file is raw little-endian data starting at byte 0 (so 4 KiB-aligned for
O_DIRECT) and padded with zeros to a multiple of 4 KiB; nothing needs pickle.
This module writes datasets atomically (`DatasetBuilder`: built in a temporary
directory beside the target, then renamed) and opens them with the cheap checks
done on open (`open_dataset`).
"""

from __future__ import annotations

import json
import mmap
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import defaults
from ..build import __version__
from ..errors import DiskgnnError
from .files import (
    CHECKSUM_ALGO,
    ArrayFileWriter,
    StagedDirectory,
    file_checksum,
    is_temp,
    manifest_checksum,
    write_atomic,
)
from .schema import NodeType, Relation, Schema

FORMAT_NAME = "diskgnn-dataset"
TYPED_FORMAT_NAME = "diskgnn-hetero-dataset"  # data/hetero/format.py: several node types and relations
FORMAT_VERSION = 1
KINDS = {FORMAT_NAME: "homogeneous", TYPED_FORMAT_NAME: "heterogeneous"}
# A homogeneous dataset's one node type and one relation, as its schema names them.
ONE_TYPE, ONE_RELATION = "node", "edge"
MANIFEST = "manifest.json"

FILE_NAMES = {
    "indptr": "indptr.bin",
    "indices": "indices.bin",
    "features": "features.bin",
    "labels": "labels.bin",
    "train_idx": "train_idx.bin",
    "val_idx": "val_idx.bin",
    "test_idx": "test_idx.bin",
    "val_edges": "val_edges.bin",
    "test_edges": "test_edges.bin",
}
SPLITS = ("train", "val", "test")
FEATURE_DTYPES = ("float32", "float16", "float64", "int8", "uint8")


def index_dtype(num_nodes: int) -> np.dtype:
    """Dtype of `indices`: int32 while every node id fits, else int64."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


def _manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def write_manifest(path, manifest: dict) -> None:
    """Replaces an existing dataset's manifest atomically (a temporary file renamed over it),
    with its checksum recomputed; for files added to a dataset after prepare (quantized features)."""
    manifest["manifest_checksum"] = manifest_checksum(manifest)
    write_atomic(Path(path) / MANIFEST, _manifest_bytes(manifest))


class DatasetBuilder(StagedDirectory):
    """Builds a dataset directory: its array files, then finish() writes the manifest and commits."""

    def __init__(self, out_dir, overwrite: bool = False):
        super().__init__(out_dir, overwrite)
        self.files: dict[str, dict] = {}

    def scratch_dir(self, name: str) -> Path:
        """A directory for temporary files on the same file system as the output."""
        d = self.tmp / f"scratch-{name}"
        d.mkdir(exist_ok=True)
        return d

    def writer(self, kind: str, dtype, row_shape=()) -> ArrayFileWriter:
        return ArrayFileWriter(self.tmp / FILE_NAMES[kind], dtype, row_shape)

    def add(self, kind: str, entry: dict) -> None:
        self.files[kind] = entry

    def staged(self, meta: dict) -> "Dataset":
        """The files written so far, opened as a dataset with `meta` for the manifest's other keys (for
        statistics measured before the manifest exists)."""
        return Dataset(self.tmp, {**meta, "files": self.files})

    def finish(self, meta: dict) -> Path:
        """Writes the manifest and moves the dataset into place."""
        for d in self.tmp.glob("scratch-*"):
            shutil.rmtree(d)
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            **meta,
            "files": self.files,
            "producer": {"name": "diskgnn", "version": __version__, **meta.get("producer", {})},
        }
        manifest["manifest_checksum"] = manifest_checksum(manifest)
        write_atomic(self.tmp / MANIFEST, _manifest_bytes(manifest))
        return self.commit()


@dataclass
class Dataset:
    """An opened dataset: metadata from the manifest, arrays memory-mapped on demand.

    Every dataset has a schema: node types, relations, the target type. A homogeneous dataset's is one type
    (ONE_TYPE) and one relation (ONE_RELATION) over its own files, so readers of types and relations (`schema`,
    `type_features`, `csc`, `feature_kind`, `relation_kinds`) take either kind; the one-type accessors
    (`num_nodes`, `features`, `indptr`, ...) are the homogeneous manifest's."""

    path: Path
    manifest: dict

    @property
    def typed(self) -> bool:
        """Written in the typed layout (data/hetero/format.py), whatever its number of types."""
        return self.manifest.get("format") == TYPED_FORMAT_NAME

    @property
    def schema(self) -> Schema:
        m = self.manifest
        if self.typed:
            return Schema.from_dict(m["hetero"])
        return Schema((NodeType(ONE_TYPE, m["num_nodes"], m["feature_dim"], m["feature_dtype"]),),
                      (Relation(ONE_TYPE, ONE_RELATION, ONE_TYPE, m["num_edges"]),), ONE_TYPE,
                      m.get("num_classes", 0))  # a dataset prepared without labels has none

    def feature_kind(self, node_type: str | None = None) -> str:
        """The file kind of a node type's features (a homogeneous dataset's one type: any name, or None)."""
        return f"features/{node_type}" if self.typed else "features"

    def relation_kinds(self, relation: int) -> tuple[str, str]:
        """The file kinds of relation `relation`'s CSC (its index in the schema): indptr, indices."""
        return (f"rel/{relation}/indptr", f"rel/{relation}/indices") if self.typed else ("indptr", "indices")

    def type_features(self, node_type: str) -> np.ndarray | None:
        """A node type's feature rows memory-mapped, or None for a type without features."""
        kind = self.feature_kind(node_type)
        return self.array(kind) if kind in self.manifest["files"] else None

    def csc(self, relation: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Relation `relation`'s CSC over its destination type: indptr, indices (source ids)."""
        return tuple(self.array(kind) for kind in self.relation_kinds(relation))

    @property
    def checksum(self) -> str:
        return self.manifest["manifest_checksum"]

    @property
    def num_nodes(self) -> int:
        return self.manifest["num_nodes"]

    @property
    def num_edges(self) -> int:
        return sum(r.num_edges for r in self.schema.relations) if self.typed else self.manifest["num_edges"]

    @property
    def feature_dim(self) -> int:
        return self.manifest["feature_dim"]

    @property
    def feature_dtype(self) -> np.dtype:
        return np.dtype(self.manifest["feature_dtype"])

    @property
    def num_classes(self) -> int:
        return self.manifest["num_classes"]

    @property
    def row_bytes(self) -> int:
        return self.feature_dim * self.feature_dtype.itemsize

    def file_path(self, kind: str) -> Path:
        return self.path / self.manifest["files"][kind]["name"]

    def array(self, kind: str, mode: str = "r") -> np.ndarray:
        """Memory map of one file's data (without its padding): read-only, or with mode "c" copy-on-write
        (writable in memory, for consumers such as torch that want writable arrays; the file never changes)."""
        return mapped(self.file_path(kind), self.manifest["files"][kind], mode)

    @property
    def indptr(self) -> np.ndarray:
        return self.array("indptr")

    @property
    def indices(self) -> np.ndarray:
        return self.array("indices")

    @property
    def features(self) -> np.ndarray:
        return self.array("features")

    @property
    def labels(self) -> np.ndarray:
        return self.array("labels")

    def split(self, name: str) -> np.ndarray:
        return self.array(f"{name}_idx")

    def held_out_edges(self, name: str) -> np.ndarray:
        """The val or test edges of an edge split, rows (src, dst); the graph holds the train edges."""
        if "edge_split" not in self.manifest:
            raise DiskgnnError(f"{self.path}: has no edge split (prepare it with --edge-split TRAIN,VAL,TEST)")
        return self.array(f"{name}_edges")

    @property
    def quantized_specs(self) -> list[str]:
        """Specs of the quantized feature variants stored beside the features (docs/quantization.md)."""
        return list(self.manifest.get("quantized", {}))


def mapped(path: Path, entry: dict, mode: str = "r") -> np.ndarray:
    """A file's data (its manifest `entry`, without the padding) memory-mapped: read-only, or "c" copy-on-write."""
    shape = tuple(entry["shape"])
    if entry["bytes"] == 0:
        return np.zeros(shape, dtype=entry["dtype"])
    return np.memmap(path, dtype=np.dtype(entry["dtype"]).newbyteorder("<"), mode=mode, shape=shape)


def random_access(a: np.ndarray) -> np.ndarray:
    """`a`, with the kernel's read-ahead turned off where it is a memory map (MADV_RANDOM): read at random under a
    small page cache, each fault of a map read the device's read_ahead_kb around it (8 MiB on this project's VMs)
    and evicted the rest, 30-50x the bytes the reads needed."""
    base = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is not None:
        base.madvise(mmap.MADV_RANDOM)
    return a


def random_map(a: np.ndarray) -> np.ndarray:
    """A second map of memory-mapped `a`'s file with random_access's advice (`a` keeps its read-ahead for reads in
    order); `a` itself where it is not a whole file's map."""
    if not isinstance(a, np.memmap) or a.filename is None or not isinstance(a.base, mmap.mmap):
        return a
    return random_access(np.memmap(a.filename, dtype=a.dtype, mode="r", offset=a.offset, shape=a.shape))


def read_manifest(path, fmt: str | None = FORMAT_NAME) -> dict:
    """Loads and checks manifest.json: format (`fmt`: a homogeneous or a heterogeneous dataset; None: either),
    version, its own checksum."""
    path = Path(path)
    mpath = path / MANIFEST
    if is_temp(path):
        raise DiskgnnError(f"{path}: the temporary directory of a prepare that did not finish, not a dataset (the "
                           "next prepare of the same --out removes it)")
    if not path.is_dir():
        raise DiskgnnError(f"{path}: not a dataset directory (does not exist or is not a directory)")
    if not mpath.is_file():
        raise DiskgnnError(f"{mpath}: missing; not a diskgnn dataset (create one with python -m diskgnn.prepare)")
    try:
        manifest = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DiskgnnError(f"{mpath}: not valid JSON ({e})") from None
    if fmt is None and isinstance(manifest, dict) and manifest.get("format") in KINDS:
        fmt = manifest["format"]
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        if found in KINDS and fmt in KINDS:
            raise DiskgnnError(f"{path}: a {KINDS[found]} dataset; this command reads {KINDS[fmt]} ones")
        raise DiskgnnError(f"{mpath}: not a {fmt or FORMAT_NAME} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DiskgnnError(f"{mpath}: format version {manifest.get('format_version')} is not supported "
                           f"(this diskgnn reads version {FORMAT_VERSION})")
    if manifest.get("manifest_checksum") != manifest_checksum(manifest):
        raise DiskgnnError(f"{mpath}: checksum mismatch (the manifest was modified or corrupted)")
    return manifest


def check_file_sizes(path: Path, manifest: dict) -> None:
    for kind, entry in manifest["files"].items():
        fpath = path / entry["name"]
        if not fpath.is_file():
            raise DiskgnnError(f"{fpath}: missing ({kind} file named in the manifest)")
        size = fpath.stat().st_size
        if size != entry["file_bytes"]:
            raise DiskgnnError(f"{fpath}: {size} bytes, the manifest says {entry['file_bytes']} (truncated or "
                               "replaced)")


def check_file_checksum(path: Path, entry: dict) -> None:
    fpath = path / entry["name"]
    algo, _, expected = entry["checksum"].partition(":")
    if algo != CHECKSUM_ALGO:
        raise DiskgnnError(f"{fpath}: unknown checksum algorithm {algo!r}")
    if file_checksum(fpath) != expected:
        raise DiskgnnError(f"{fpath}: checksum mismatch (file is corrupted)")


def checksum_problems(path: Path, manifest: dict) -> list[str]:
    """Every file's size (a wrong one stops verify: one line) and checksum (each bad one a problem)."""
    check_file_sizes(path, manifest)
    problems = []
    for entry in manifest["files"].values():
        try:
            check_file_checksum(path, entry)
        except DiskgnnError as e:
            problems.append(str(e))
    return problems


def open_dataset(path, typed: bool = False) -> Dataset:
    """Opens a dataset directory; with `typed`, one in either layout (homogeneous or typed), else a homogeneous one
    (a typed one is refused in one line, for the readers that take one node type).

    Checks on open: the manifest (format, version, own checksum), every file's
    size, and the checksum of each file up to defaults.VERIFY_ON_OPEN_BYTES. Larger files
    are checked by `python -m diskgnn.verify`.
    """
    path = Path(path).absolute()
    ds = Dataset(path, checked_manifest(path, None if typed else FORMAT_NAME))
    if ds.typed:
        try:
            ds.schema
        except (KeyError, TypeError) as e:
            raise DiskgnnError(f"{path / MANIFEST}: the hetero schema is incomplete ({e})") from None
    return ds


def checked_manifest(path: Path, fmt: str | None = FORMAT_NAME) -> dict:
    """The manifest with the checks done on open: its own, every file's size, the small files' checksums."""
    manifest = read_manifest(path, fmt)
    check_file_sizes(path, manifest)
    for entry in manifest["files"].values():
        if entry["file_bytes"] <= defaults.VERIFY_ON_OPEN_BYTES:
            check_file_checksum(path, entry)
    return manifest
