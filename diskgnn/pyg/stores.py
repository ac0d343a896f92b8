"""A diskgnn dataset behind PyG's remote-backend interfaces: `DiskgnnFeatureStore` and `DiskgnnGraphStore`.

The feature store serves `x` (the stored rows, fp32 or a quantized variant,
decoded to float32) and `y` (labels) of any node ids through diskgnn's
feature store: the highest in-degree rows in a memory tier (`cache` bytes;
ids asked for by a NodeLoader are not known ahead, so no placement from
samples), the rest gathered by id from the feature file with O_DIRECT reads.
The graph store hands out the CSC topology as memory-mapped tensors (indptr,
indices in their stored dtype); nothing is copied whole into RAM. Both are
read-only: datasets are written by `diskgnn.prepare` (`prepare(data)` takes a
PyG Data).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout

from ..data.features import RAW_FEATURES, feature_source
from ..data.format import open_dataset
from ..errors import DiskgnnError
from ..offline.placement import place
from ..offline.batches import Batch
from ..store.store import FeatureStore as RowStore
from ..store.tiers import load_tiers
from ..units import parse_size

NODE_ATTRS = ("x", "y")
DEFAULT_CACHE = "512MiB"
# Readers a forked DataLoader worker inherited: never closed there, since closing one joins an io_uring or pread
# thread that only the parent has (the worker would hang). Workers leave with os._exit, which runs no destructor.
_INHERITED = []


def _read_only(what: str, path: Path):
    return DiskgnnError(f"{path}: {what} is read-only (diskgnn datasets are written by diskgnn.prepare, which "
                        "also takes a PyG Data)")


class DiskgnnFeatureStore(FeatureStore):
    """`x` and `y` of a diskgnn dataset by node id, through a memory tier and O_DIRECT reads."""

    def __init__(self, dataset_dir, *, features: str = RAW_FEATURES, cache=DEFAULT_CACHE, backend: str = "auto"):
        """`features`: fp32 or a quantized variant stored in the dataset (decoded on read); `cache`: bytes of
        stored rows kept in memory, highest in-degree first (0: none); `backend`: the reader's."""
        super().__init__()
        self._setup(Path(dataset_dir), features, parse_size(cache, "cache") if isinstance(cache, str) else int(cache),
                    backend)

    def _setup(self, path: Path, features: str, cache_bytes: int, backend: str) -> None:
        self.path, self.features, self.cache_bytes, self.backend_asked = path, features, cache_bytes, backend
        self.ds = open_dataset(path)
        self.source = feature_source(self.ds, features)
        degree = np.diff(np.asarray(self.ds.indptr, dtype=np.int64))
        self.placement = place(degree, self.source.row_bytes, [("host", cache_bytes)])
        self._tiers = load_tiers(self.ds, self.placement, "cpu", backend, self.source)
        self._labels = self.ds.labels
        self._open()

    def _open(self) -> None:
        # A forked DataLoader worker must not share its parent's io_uring: each process opens its own reader.
        if getattr(self, "rows", None) is not None:
            _INHERITED.append(self.rows)
        self._pid = os.getpid()
        self.rows = RowStore(self.ds, self.placement, None, backend=self.backend_asked, tiers=self._tiers,
                             features=self.source)

    @property
    def backend(self) -> str:
        return self.rows.backend

    def stats(self) -> dict:
        """Rows and bytes each tier (host, disk) served so far in this process."""
        return {s.name: {"hits": s.hits, "bytes": s.bytes} for s in self.rows.stats()}

    def _ids(self, index) -> np.ndarray:
        n = self.ds.num_nodes
        if index is None:
            return np.arange(n, dtype=np.int64)
        if isinstance(index, slice):
            return np.arange(n, dtype=np.int64)[index]
        ids = np.asarray(index.cpu() if isinstance(index, torch.Tensor) else index)
        if ids.dtype == bool:
            ids = np.flatnonzero(ids)
        ids = ids.astype(np.int64, copy=False).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = int(ids[(ids < 0) | (ids >= n)][0])
            raise DiskgnnError(f"{self.path}: node id {bad} out of range [0, {n})")
        return ids

    def _check(self, attr: TensorAttr) -> None:
        if attr.group_name is not None or attr.attr_name not in NODE_ATTRS:
            raise KeyError(f"{self.path}: no tensor {attr.group_name!r}/{attr.attr_name!r}: a diskgnn dataset has "
                           f"node attributes {', '.join(NODE_ATTRS)} (group None)")

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[torch.Tensor]:
        if os.getpid() != self._pid:
            self._open()
        for attr in attrs:
            self._check(attr)
        # Every x read is started before any is waited for, so they are in flight together.
        pending = {i: self.rows.start(Batch.one_type(-1, self._ids(a.index), [], 0))
                   for i, a in enumerate(attrs) if a.attr_name == "x"}
        out = []
        for i, attr in enumerate(attrs):
            if attr.attr_name == "x":
                out.append(self.rows.to_device(self.rows.finish(pending[i])))
            else:
                out.append(torch.from_numpy(np.asarray(self._labels[self._ids(attr.index)], dtype=np.int64)))
        return out

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor:
        return self._multi_get_tensor([attr])[0]

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...]:
        self._check(attr)
        return (self.ds.num_nodes, self.ds.feature_dim) if attr.attr_name == "x" else (self.ds.num_nodes,)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group_name=None, attr_name=name) for name in NODE_ATTRS]

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        raise _read_only("DiskgnnFeatureStore", self.path)

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise _read_only("DiskgnnFeatureStore", self.path)

    def close(self) -> None:
        self.rows.close()

    def __getstate__(self):
        # A DataLoader worker started with spawn gets the store pickled: it opens the dataset again.
        return {"args": (self.path, self.features, self.cache_bytes, self.backend_asked)}

    def __setstate__(self, state):
        self.__dict__["_tensor_attr_cls"] = TensorAttr
        self._setup(*state["args"])


class DiskgnnGraphStore(GraphStore):
    """The CSC topology of a diskgnn dataset, memory-mapped (indices as stored: int32 below 2^31 nodes)."""

    def __init__(self, dataset_dir):
        super().__init__()
        self.path = Path(dataset_dir)
        self.ds = open_dataset(self.path)
        n = self.ds.num_nodes
        self.attr = EdgeAttr(edge_type=None, layout=EdgeLayout.CSC, is_sorted=True, size=(n, n))

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return [self.attr]

    def _get_edge_index(self, edge_attr: EdgeAttr):
        if edge_attr.edge_type is not None:
            return None
        if edge_attr.layout != EdgeLayout.CSC:
            raise DiskgnnError(f"{self.path}: DiskgnnGraphStore holds the graph as CSC only; a "
                               f"{edge_attr.layout.value} copy would load the whole topology into RAM (ask for "
                               "layout='csc', or sample with DiskgnnSampler)")
        # Copy-on-write maps: writable for torch, never copied unless written.
        return (torch.from_numpy(self.ds.array("indices", mode="c")),
                torch.from_numpy(self.ds.array("indptr", mode="c")))

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        raise _read_only("DiskgnnGraphStore", self.path)

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise _read_only("DiskgnnGraphStore", self.path)
