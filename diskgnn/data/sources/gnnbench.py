"""gnn-benchmark .npz files (Shchur et al.), also inside a .zip.

CSR pieces: adj_data/adj_indices/adj_indptr/adj_shape (row i -> column j is
an edge i -> j) and attr_data/attr_indices/attr_indptr/attr_shape (sparse
features; a dense attr_matrix is accepted too), and labels. These graphs are
small, so the arrays are loaded whole; features are densified block by block.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from ...errors import DiskgnnError
from .base import Source


def _open_npz(path: Path):
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as z:
                inner = [n for n in z.namelist() if n.endswith(".npz")]
                if len(inner) != 1:
                    raise DiskgnnError(f"{path}: expected exactly one .npz inside the zip, found {inner}")
                data = z.read(inner[0])
            return np.load(io.BytesIO(data), allow_pickle=False)
        return np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise DiskgnnError(f"{path}: not a readable .npz ({e})") from None


class GnnBenchSource(Source):
    def __init__(self, path: Path):
        path = Path(path)
        z = _open_npz(path)

        def get(key):
            if key not in z.files:
                raise DiskgnnError(f"{path}: has no array {key!r}")
            return z[key]

        self.path = path
        n = int(get("adj_shape")[0])
        self.adj_indptr = get("adj_indptr").astype(np.int64)
        self.adj_indices = get("adj_indices").astype(np.int64)
        if self.adj_indptr.shape != (n + 1,) or self.adj_indptr[-1] != self.adj_indices.size:
            raise DiskgnnError(f"{path}: adjacency CSR arrays are inconsistent")
        if "attr_matrix" in z.files:
            self.dense = get("attr_matrix")
            d = self.dense.shape[1]
        else:
            self.dense = None
            self.attr = (get("attr_data"), get("attr_indices").astype(np.int64), get("attr_indptr").astype(np.int64))
            d = int(get("attr_shape")[1])
        self._labels = get("labels").astype(np.int64)
        if self._labels.shape != (n,):
            raise DiskgnnError(f"{path}: labels have shape {self._labels.shape}, expected ({n},)")
        super().__init__(name=str(path), num_nodes=n, feature_dim=d, feature_dtype=np.dtype(np.float32),
                         edge_count_hint=self.adj_indices.size)

    def edges(self, max_edges):
        src = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.adj_indptr))
        for s in range(0, src.size, max_edges):
            yield src[s: s + max_edges], self.adj_indices[s: s + max_edges]

    def features(self, max_rows):
        for r in range(0, self.num_nodes, max_rows):
            e = min(self.num_nodes, r + max_rows)
            if self.dense is not None:
                yield np.asarray(self.dense[r:e], dtype=np.float32)
                continue
            data, indices, indptr = self.attr
            lo, hi = indptr[r], indptr[e]
            rows = np.repeat(np.arange(e - r), np.diff(indptr[r: e + 1]))
            # bincount sums duplicate (row, column) entries as scipy's todense does.
            flat = np.bincount(rows * self.feature_dim + indices[lo:hi], weights=data[lo:hi],
                               minlength=(e - r) * self.feature_dim)
            yield flat.astype(np.float32).reshape(e - r, self.feature_dim)

    def labels(self, max_rows):
        for r in range(0, self.num_nodes, max_rows):
            yield self._labels[r: r + max_rows]
