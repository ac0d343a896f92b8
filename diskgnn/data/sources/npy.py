"""A directory of .npy files (and the zarr variant with feat.zarr).

Files: edge_index.npy (2 x E or E x 2, src -> dst) or indptr.npy + indices.npy
(CSC: in-neighbours of v are indices[indptr[v]:indptr[v+1]]); feat.npy (N x D)
or feat.zarr; labels.npy (N); optional train_idx.npy, val_idx.npy, test_idx.npy;
optional val_edges.npy, test_edges.npy (E x 2 or 2 x E): a link split of the
source's own, edge_index (or the CSC) then being the train graph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import DiskgnnError
from .base import NpyArray, Source, require


def _int_array(arr: NpyArray, what: str) -> NpyArray:
    if not np.issubdtype(arr.dtype, np.integer):
        raise DiskgnnError(f"{arr.path}: {what} must be integers, found dtype {arr.dtype}")
    return arr


def read_split_files(directory: Path) -> dict[str, np.ndarray] | None:
    found = {name: directory / f"{name}_idx.npy" for name in ("train", "val", "test")}
    if not any(p.exists() for p in found.values()):
        return None
    out = {}
    for name, p in found.items():
        if p.exists():
            a = _int_array(NpyArray(p), "split ids")
            if len(a.shape) != 1:
                raise DiskgnnError(f"{p}: split ids must be one-dimensional, found shape {a.shape}")
            out[name] = a.load().astype(np.int64)
        else:
            out[name] = np.empty(0, dtype=np.int64)
    return out


class FeatureLabelFiles:
    """feat.npy (or feat.zarr) and labels.npy of a directory, checked against each other."""

    def __init__(self, directory: Path, feat_path: Path | None = None, labels_path: Path | None = None):
        zarr_path = directory / "feat.zarr"
        if feat_path is None and zarr_path.exists() and not (directory / "feat.npy").exists():
            self.feat = ZarrFeatures(zarr_path)
        else:
            self.feat = NpyArray(require(feat_path or directory / "feat.npy", "node features N x D"))
            if len(self.feat.shape) != 2:
                raise DiskgnnError(f"{self.feat.path}: features must be 2-D (N x D), found shape {self.feat.shape}")
            if not (np.issubdtype(self.feat.dtype, np.floating) or np.issubdtype(self.feat.dtype, np.integer)):
                raise DiskgnnError(f"{self.feat.path}: features must be numeric, found dtype {self.feat.dtype}")
        self.labels = _int_array(NpyArray(require(labels_path or directory / "labels.npy", "node labels N")),
                                 "labels")
        if len(self.labels.shape) != 1:
            raise DiskgnnError(f"{self.labels.path}: labels must be one-dimensional, found shape {self.labels.shape}")
        if self.labels.shape[0] != self.feat.shape[0]:
            raise DiskgnnError(f"{self.labels.path}: {self.labels.shape[0]} labels but {self.feat.path} "
                               f"has {self.feat.shape[0]} feature rows")
        if self.feat.shape[0] == 0:
            raise DiskgnnError(f"{self.feat.path}: empty graph (0 nodes)")


class ZarrFeatures:
    """Features in a zarr array (optional dependency: pip install diskgnn[zarr])."""

    def __init__(self, path: Path):
        try:
            import zarr
        except ImportError:
            raise DiskgnnError(f"{path}: reading zarr needs the optional dependency zarr "
                               f"(pip install 'diskgnn[zarr]')") from None
        try:
            self.array = zarr.open_array(str(path), mode="r")
        except Exception as e:  # zarr raises several types for a bad store
            raise DiskgnnError(f"{path}: not a readable zarr array ({e})") from None
        self.path = path
        self.shape = tuple(self.array.shape)
        self.dtype = np.dtype(self.array.dtype)
        if len(self.shape) != 2:
            raise DiskgnnError(f"{path}: features must be 2-D (N x D), found shape {self.shape}")

    def rows(self, max_rows: int):
        # Align blocks to zarr's chunking so every chunk is decoded once.
        chunk = self.array.chunks[0]
        step = max(chunk, max_rows // chunk * chunk)
        for r in range(0, self.shape[0], step):
            yield np.asarray(self.array[r: r + step])


class NpySource(Source):
    def __init__(self, directory: Path):
        directory = Path(directory)
        self.dir = directory
        self.files = FeatureLabelFiles(directory)
        n, d = self.files.feat.shape
        super().__init__(name=str(directory), num_nodes=n, feature_dim=d, feature_dtype=self.files.feat.dtype)
        ei = directory / "edge_index.npy"
        if ei.exists():
            self.edge_index = _int_array(NpyArray(ei), "edge ids")
            shape = self.edge_index.shape
            if len(shape) != 2 or 2 not in shape:
                raise DiskgnnError(f"{ei}: edge_index must have shape (2, E) or (E, 2), found {shape}")
            self.edge_count_hint = shape[1] if shape[0] == 2 else shape[0]
            self.indptr = None
        else:
            self.indptr = _int_array(NpyArray(require(directory / "indptr.npy",
                                                      "edge_index.npy, or indptr.npy + indices.npy")), "indptr")
            self.indices = _int_array(NpyArray(require(directory / "indices.npy", "CSC indices")), "indices")
            if self.indptr.shape != (n + 1,):
                raise DiskgnnError(f"{self.indptr.path}: shape {self.indptr.shape}, expected ({n + 1},) "
                                   f"for {n} nodes")
            self.edge_count_hint = self.indices.shape[0]

    def edges(self, max_edges):
        if self.indptr is None:
            yield from edge_index_chunks(self.edge_index, max_edges)
        else:
            yield from csc_chunks(self.indptr, self.indices, max_edges)

    def features(self, max_rows):
        return self.files.feat.rows(max_rows)

    def labels(self, max_rows):
        for block in self.files.labels.rows(max_rows):
            yield block

    def splits(self):
        return read_split_files(self.dir)

    def edge_splits(self):
        found = {s: self.dir / f"{s}_edges.npy" for s in ("val", "test")}
        if not any(p.exists() for p in found.values()):
            return None
        out = {}
        for s, p in found.items():
            if not p.exists():
                out[s] = np.empty((0, 2), dtype=np.int64)
                continue
            a = _int_array(NpyArray(p), "edge ids")
            if len(a.shape) != 2 or 2 not in a.shape:
                raise DiskgnnError(f"{p}: held-out edges must have shape (E, 2) or (2, E), found {a.shape}")
            edges = a.load().astype(np.int64)
            out[s] = np.ascontiguousarray(edges.T if a.shape[0] == 2 and a.shape[1] != 2 else edges)
        return out


def edge_index_chunks(edge_index: NpyArray, max_edges: int):
    """(src, dst) chunks of a (2, E) or (E, 2) edge array, in either storage order: the file holds either
    every source then every destination (C-ordered (2, E), Fortran-ordered (E, 2)) or the pairs interleaved."""
    rows, cols = edge_index.shape
    e = cols if rows == 2 else rows
    separate = (rows == 2) != edge_index.fortran
    with edge_index._open() as f:
        for s in range(0, e, max_edges):
            n = min(max_edges, e - s)
            if separate:
                yield edge_index.read_flat(s, n, f), edge_index.read_flat(e + s, n, f)
            else:
                pairs = edge_index.read_flat(2 * s, 2 * n, f).reshape(n, 2)
                yield pairs[:, 0], pairs[:, 1]


def csc_chunks(indptr: NpyArray, indices: NpyArray, max_edges: int):
    """(src, dst) chunks of a CSC graph, one range of destinations at a time."""
    n = indptr.shape[0] - 1
    ptr = indptr.load()
    if ptr[0] != 0 or np.any(np.diff(ptr) < 0) or ptr[-1] != indices.shape[0]:
        raise DiskgnnError(f"{indptr.path}: not a valid CSC pointer array (must start at 0, never decrease "
                           f"and end at len(indices) = {indices.shape[0]})")
    v = 0
    with indices._open() as f:
        while v < n:
            # Take at least one node, then as many as fit in max_edges.
            end = max(v + 1, int(np.searchsorted(ptr, ptr[v] + max_edges, side="right")) - 1)
            end = min(end, n)
            src = indices.read_flat(int(ptr[v]), int(ptr[end] - ptr[v]), f)
            dst = np.repeat(np.arange(v, end, dtype=np.int64), np.diff(ptr[v: end + 1]))
            yield src, dst
            v = end
