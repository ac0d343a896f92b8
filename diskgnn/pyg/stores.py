"""A diskgnn dataset behind PyG's remote-backend interfaces: `DiskgnnFeatureStore` and `DiskgnnGraphStore`, for
either kind of graph (a typed one with typed keys, so that PyG's hetero models, `to_hetero` and HeteroConv, train
through NodeLoader unchanged).

The feature store serves `x` (the stored rows, fp32 or a quantized variant,
decoded to float32) and `y` (labels) of any node ids through diskgnn's
feature store: the highest in-degree rows in a memory tier (`cache` bytes;
ids asked for by a NodeLoader are not known ahead, so no placement from
samples), the rest gathered by id from the feature file with O_DIRECT reads.
The graph store hands out the CSC topology as memory-mapped tensors (indptr,
indices in their stored dtype); nothing is copied whole into RAM. Both are
read-only: datasets are written by `diskgnn.prepare` (`prepare(data)` takes a
PyG Data).

On a typed dataset the feature store serves each featured type's `x` (group = the type; its `features` variant,
`type=variant` pairs as diskgnn.train takes them) and the target's `y`, through each type's tier chain
(store/by_type.py; one host tier of the rows of highest in-degree over the relations into their type, `cache`
bytes across the types), and the graph store each relation's CSC keyed by (source type, relation, destination
type). Featureless types have no `x`: embed them from `data[type].n_id`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout

from ..data.features import RAW_FEATURES, type_variants
from ..data.format import open_dataset
from ..errors import DiskgnnError
from ..offline.placement import densest, held_placement, place
from ..offline.batches import Batch
from ..store.by_type import TypedRows
from ..units import parse_size

DEFAULT_CACHE = "512MiB"
# Readers a forked DataLoader worker inherited: never closed there, since closing one joins an io_uring or pread
# thread that only the parent has (the worker would hang). Workers leave with os._exit, which runs no destructor.
_INHERITED = []


def _read_only(what: str, path: Path):
    return DiskgnnError(f"{path}: {what} is read-only (diskgnn datasets are written by diskgnn.prepare, which "
                        "also takes a PyG Data)")


class DiskgnnFeatureStore(FeatureStore):
    """`x` and `y` by node id (a typed dataset's by id local to its type, grouped by type), through a memory tier
    and O_DIRECT reads."""

    def __init__(self, dataset_dir, *, features: str = RAW_FEATURES, cache=DEFAULT_CACHE, backend: str = "auto"):
        """`features`: fp32 or a quantized variant stored in the dataset (decoded on read); `cache`: bytes of
        stored rows kept in memory, highest in-degree first (0: none); `backend`: the reader's."""
        super().__init__()
        self._setup(Path(dataset_dir), features, parse_size(cache, "cache") if isinstance(cache, str) else int(cache),
                    backend)

    def _setup(self, path: Path, features: str, cache_bytes: int, backend: str) -> None:
        self.path, self.features, self.cache_bytes, self.backend_asked = path, features, cache_bytes, backend
        ds = self.ds = open_dataset(path, typed=True)
        self.schema, self._labels = ds.schema, ds.labels
        self.rows = TypedRows(ds, backend, type_variants(features, ds.schema, "features"))
        degrees = {name: np.zeros(src.num_rows, np.int64) for name, src in self.rows.sources.items()}
        for i, r in enumerate(ds.schema.relations):
            if r.dst in degrees:
                degrees[r.dst] += np.diff(np.asarray(ds.csc(i)[0], dtype=np.int64))
        if ds.typed:  # one budget across the types, by in-degree per byte
            held = densest(degrees, {n: src.row_bytes + 8 for n, src in self.rows.sources.items()}, cache_bytes)
            placements = {n: held_placement(src.num_rows, held[n], degrees[n]) for n, src in self.rows.sources.items()}
        else:
            placements = {n: place(degrees[n], src.row_bytes, [("host", cache_bytes)])
                          for n, src in self.rows.sources.items()}
        self.rows.place(placements)
        self.stores = {}
        self._open()

    def _open(self) -> None:
        # A forked DataLoader worker must not share its parent's io_uring: each process opens its own readers.
        _INHERITED.extend(self.stores.values())
        self._pid = os.getpid()
        self.stores = self.rows.stores()

    def _store(self, group):
        """The FeatureStore of a group's rows (a plain dataset's: group None)."""
        return self.stores[group] if self.ds.typed else next(iter(self.stores.values()))

    @property
    def backend(self) -> str:
        return next(iter(self.stores.values())).backend

    def stats(self) -> dict:
        """Rows and bytes each tier (host, disk) served so far in this process (a typed dataset's per type)."""
        tiers = {name: {s.name: {"hits": s.hits, "bytes": s.bytes} for s in store.stats()}
                 for name, store in self.stores.items()}
        return tiers if self.ds.typed else next(iter(tiers.values()))

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        if not self.ds.typed:
            return [TensorAttr(group_name=None, attr_name=name) for name in ("x", "y")]
        return [TensorAttr(group_name=t.name, attr_name="x") for t in self.schema.types if t.feature_dim] + \
            [TensorAttr(group_name=self.schema.target, attr_name="y")]

    def _count(self, group) -> int:
        return self.schema.type(group).count if self.ds.typed else self.ds.num_nodes

    def _ids(self, attr: TensorAttr) -> np.ndarray:
        n, index = self._count(attr.group_name), attr.index
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
            what = f"{attr.group_name} id" if self.ds.typed else "node id"
            raise DiskgnnError(f"{self.path}: {what} {bad} out of range [0, {n})")
        return ids

    def _check(self, attr: TensorAttr) -> None:
        known = {(a.group_name, a.attr_name) for a in self.get_all_tensor_attrs()}
        if (attr.group_name, attr.attr_name) not in known:
            raise KeyError(f"{self.path}: no tensor {attr.group_name!r}/{attr.attr_name!r}: this dataset has "
                           + ", ".join(f"{g}/{a}" for g, a in sorted(known, key=str)))

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[torch.Tensor]:
        if os.getpid() != self._pid:
            self._open()
        for attr in attrs:
            self._check(attr)
        # Every x read is started before any is waited for, so they are in flight together.
        pending = {i: self._store(a.group_name).start(Batch.one_type(-1, self._ids(a), [], 0))
                   for i, a in enumerate(attrs) if a.attr_name == "x"}
        out = []
        for i, attr in enumerate(attrs):
            if attr.attr_name == "x":
                store = self._store(attr.group_name)
                out.append(store.to_device(store.finish(pending[i])))
            else:
                y = np.asarray(self._labels[self._ids(attr)])
                out.append(torch.from_numpy(y.astype(np.float32 if self.schema.multilabel else np.int64)))
        return out

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor:
        return self._multi_get_tensor([attr])[0]

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...]:
        self._check(attr)
        n = self._count(attr.group_name)
        if attr.attr_name == "x":
            return (n, self.schema.type(attr.group_name).feature_dim if self.ds.typed else self.ds.feature_dim)
        return (n, self.schema.num_classes) if self.schema.multilabel else (n,)

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        raise _read_only("DiskgnnFeatureStore", self.path)

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise _read_only("DiskgnnFeatureStore", self.path)

    def close(self) -> None:
        for store in self.stores.values():
            store.close()

    def __getstate__(self):
        # A DataLoader worker started with spawn gets the store pickled: it opens the dataset again.
        return {"args": (self.path, self.features, self.cache_bytes, self.backend_asked)}

    def __setstate__(self, state):
        self.__dict__["_tensor_attr_cls"] = TensorAttr
        self._setup(*state["args"])


class DiskgnnGraphStore(GraphStore):
    """The CSC topology, memory-mapped (indices as stored: int32 below 2^31 nodes); a typed dataset's per relation,
    keyed by (source type, relation, destination type)."""

    def __init__(self, dataset_dir):
        super().__init__()
        self.path = Path(dataset_dir)
        self.ds = open_dataset(self.path, typed=True)
        s = self.ds.schema
        self.attrs = [EdgeAttr(edge_type=r.key if self.ds.typed else None, layout=EdgeLayout.CSC, is_sorted=True,
                               size=(s.type(r.src).count, s.type(r.dst).count)) for r in s.relations]

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return list(self.attrs)

    def _get_edge_index(self, edge_attr: EdgeAttr):
        keys = [a.edge_type for a in self.attrs]
        if edge_attr.edge_type not in keys:
            return None
        if edge_attr.layout != EdgeLayout.CSC:
            raise DiskgnnError(f"{self.path}: DiskgnnGraphStore holds the graph as CSC only; a "
                               f"{edge_attr.layout.value} copy would load the whole topology into RAM (ask for "
                               "layout='csc', or sample with DiskgnnSampler)")
        indptr, indices = self.ds.relation_kinds(keys.index(edge_attr.edge_type))
        # Copy-on-write maps: writable for torch, never copied unless written.
        return torch.from_numpy(self.ds.array(indices, mode="c")), torch.from_numpy(self.ds.array(indptr, mode="c"))

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        raise _read_only("DiskgnnGraphStore", self.path)

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise _read_only("DiskgnnGraphStore", self.path)
