"""Planetoid raw files (ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}).

The files are Python-2 pickles. They are read with a restricted unpickler that
admits only the handful of types they contain; scipy's csr_matrix is replaced
by a stand-in that just keeps the CSR arrays, so no scipy code runs and any
other type in the stream is refused. Assembly follows Kipf & Welling / PyG:
X = vstack(allx, tx) with the test rows reordered to test.index; the public
split is train = first len(y) nodes, val = the next 500, test = test.index.
"""

from __future__ import annotations

import collections
import copyreg
import pickle
from pathlib import Path

import numpy as np

from ...errors import DiskgnnError
from .base import Source, require

SUFFIXES = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")


class _CsrStandIn:
    """Holds the state of a pickled scipy.sparse.csr_matrix: data, indices, indptr, _shape."""

    def __setstate__(self, state):
        self.__dict__.update(state)

    def dense(self) -> np.ndarray:
        n, d = self._shape
        out = np.zeros((n, d), dtype=np.float32)
        rows = np.repeat(np.arange(n), np.diff(self.indptr))
        out[rows, self.indices] = self.data
        return out


_ALLOWED = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): np._core.multiarray._reconstruct,
    ("scipy.sparse.csr", "csr_matrix"): _CsrStandIn,
    ("scipy.sparse._csr", "csr_matrix"): _CsrStandIn,
    ("collections", "defaultdict"): collections.defaultdict,
    ("__builtin__", "list"): list,
    ("builtins", "list"): list,
    ("copy_reg", "_reconstructor"): copyreg._reconstructor,
    ("copyreg", "_reconstructor"): copyreg._reconstructor,
    ("__builtin__", "object"): object,
    ("builtins", "object"): object,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}") from None


def load_pickle(path: Path):
    try:
        with open(path, "rb") as f:
            return _RestrictedUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise DiskgnnError(f"{path}: not a Planetoid pickle this reader accepts ({e})") from None


def find_name(directory: Path) -> str:
    names = sorted({p.name.split(".")[1] for p in directory.glob("ind.*.graph")})
    if len(names) != 1:
        raise DiskgnnError(f"{directory}: expected one Planetoid dataset (ind.<name>.graph), found {names or 'none'}")
    return names[0]


class PlanetoidSource(Source):
    def __init__(self, directory: Path):
        directory = Path(directory)
        name = find_name(directory)
        parts = {s: require(directory / f"ind.{name}.{s}", "Planetoid raw file") for s in SUFFIXES}
        loaded = {s: load_pickle(p) for s, p in parts.items() if s not in ("test.index",)}
        try:
            test_index = np.loadtxt(parts["test.index"], dtype=np.int64, ndmin=1)
        except ValueError as e:
            raise DiskgnnError(f"{parts['test.index']}: cannot read test ids ({e})") from None
        allx, tx = loaded["allx"].dense(), loaded["tx"].dense()
        ally, ty = np.asarray(loaded["ally"]), np.asarray(loaded["ty"])
        test_sorted = np.sort(test_index)
        span = int(test_sorted[-1] - test_sorted[0] + 1)
        if span != len(test_sorted):
            # CiteSeer: some test-range nodes are isolated and absent from test.index.
            pad_x = np.zeros((span, tx.shape[1]), dtype=tx.dtype)
            pad_y = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
            pad_x[test_sorted - test_sorted[0]] = tx
            pad_y[test_sorted - test_sorted[0]] = ty
            tx, ty = pad_x, pad_y
        x = np.vstack([allx, tx])
        y = np.vstack([ally, ty])
        x[test_index] = x[test_sorted]
        y[test_index] = y[test_sorted]
        self.x = x
        self._labels = np.where(y.any(axis=1), y.argmax(axis=1), -1).astype(np.int64)
        self.graph = loaded["graph"]
        n = x.shape[0]
        n_train = np.asarray(loaded["y"]).shape[0]
        self._splits = {
            "train": np.arange(n_train, dtype=np.int64),
            "val": np.arange(n_train, n_train + 500, dtype=np.int64),
            "test": test_sorted,
        }
        super().__init__(name=str(directory / f"ind.{name}"), num_nodes=n, feature_dim=x.shape[1],
                         feature_dtype=np.dtype(np.float32), num_classes=y.shape[1],
                         edge_count_hint=sum(len(v) for v in self.graph.values()))

    def edges(self, max_edges):
        src = np.fromiter((k for k, vs in self.graph.items() for _ in vs), dtype=np.int64)
        dst = np.fromiter((v for vs in self.graph.values() for v in vs), dtype=np.int64)
        for s in range(0, src.size, max_edges):
            yield src[s: s + max_edges], dst[s: s + max_edges]

    def features(self, max_rows):
        for r in range(0, self.num_nodes, max_rows):
            yield self.x[r: r + max_rows]

    def labels(self, max_rows):
        for r in range(0, self.num_nodes, max_rows):
            yield self._labels[r: r + max_rows]

    def splits(self):
        return self._splits
