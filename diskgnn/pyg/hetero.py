"""A heterogeneous diskgnn dataset behind PyG's remote-backend interfaces, with typed keys, so that PyG's hetero
models (`to_hetero`, HeteroConv) train through NodeLoader unchanged:

    fs, gs = HeteroFeatureStore("data/acm"), HeteroGraphStore("data/acm")
    loader = NodeLoader((fs, gs), node_sampler=HeteroSampler("data/acm", fanouts=[10, 10]),
                        input_nodes=("paper", train_ids), batch_size=128, shuffle=True)
    for data in loader:   # HeteroData: x per featured type, y of the target, edge_index per relation, n_id
        out = model(data.x_dict, data.edge_index_dict)["paper"][:data["paper"].batch_size]

The feature store serves each featured type's `x` (group = the type) and the target's `y` through each type's
tier chain (store/by_type.py's TypedRows: a host tier of the rows with the highest in-degree over the relations
into the type, `cache` bytes across types; the rest read by id with O_DIRECT). The graph store hands out each
relation's CSC memory-mapped, keyed by (source type, relation, destination type). The sampler is diskgnn's native hetero
sampler (a count per hop for every relation, or per relation as `relation_fanouts` reads them), each call its
own random stream. Featureless types have no `x`: embed them from `data[type].n_id`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.sampler import BaseSampler, HeteroSamplerOutput, NodeSamplerInput

from ..data.format import open_dataset
from ..data.schema import relation_fanouts
from ..errors import DiskgnnError
from ..offline.sample import open_graph, sample_batch
from ..offline.batches import Batch
from ..offline.placement import densest, held_placement
from ..store.by_type import TypedRows
from ..units import parse_size
from .stores import DEFAULT_CACHE, _read_only


def _in_degrees(ds) -> dict[str, np.ndarray]:
    deg = {t.name: np.zeros(t.count, np.int64) for t in ds.schema.types if t.feature_dim}
    for i, r in enumerate(ds.schema.relations):
        if r.dst in deg:
            deg[r.dst] += np.diff(np.asarray(ds.csc(i)[0], dtype=np.int64))
    return deg


class HeteroFeatureStore(FeatureStore):
    """`x` of each featured node type and `y` of the target type, by id local to the type."""

    def __init__(self, dataset_dir, *, cache=DEFAULT_CACHE, backend: str = "auto"):
        super().__init__()
        self._setup(Path(dataset_dir), parse_size(cache, "cache") if isinstance(cache, str) else int(cache), backend)

    def _setup(self, path: Path, cache_bytes: int, backend: str) -> None:
        self.path, self.cache_bytes, self.backend_asked = path, cache_bytes, backend
        self.ds = open_dataset(path, typed=True)
        self.schema = self.ds.schema
        self._open()

    def _open(self) -> None:
        # A forked DataLoader worker must not share its parent's io_uring: each process opens its own readers.
        self._pid = os.getpid()
        self.rows = TypedRows(self.ds, self.backend_asked)
        costs = {name: src.row_bytes + 8 for name, src in self.rows.sources.items()}  # a row and its id
        degrees = _in_degrees(self.ds)
        held = densest(degrees, costs, self.cache_bytes)
        self.rows.place({name: held_placement(src.num_rows, held[name], degrees[name])
                         for name, src in self.rows.sources.items()})
        self.stores = self.rows.stores()

    def stats(self) -> dict:
        """Per featured type: rows asked for, those its memory tier served, bytes read from disk."""
        return self.rows.summary()

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group_name=t.name, attr_name="x") for t in self.schema.types if t.feature_dim] + \
            [TensorAttr(group_name=self.schema.target, attr_name="y")]

    def _ids(self, attr: TensorAttr) -> np.ndarray:
        n = self.schema.type(attr.group_name).count
        index = attr.index
        if index is None:
            return np.arange(n, dtype=np.int64)
        if isinstance(index, slice):
            return np.arange(n, dtype=np.int64)[index]
        ids = np.asarray(index.cpu() if isinstance(index, torch.Tensor) else index).astype(np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise DiskgnnError(f"{self.path}: {attr.group_name} id {int(ids[(ids < 0) | (ids >= n)][0])} out of "
                               f"range [0, {n})")
        return ids

    def _check(self, attr: TensorAttr) -> None:
        if (attr.group_name, attr.attr_name) not in {(a.group_name, a.attr_name) for a in self.get_all_tensor_attrs()}:
            raise KeyError(f"{self.path}: no tensor {attr.group_name!r}/{attr.attr_name!r}: this dataset has "
                           + ", ".join(f"{a.group_name}/{a.attr_name}" for a in self.get_all_tensor_attrs()))

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor:
        if os.getpid() != self._pid:
            self._open()
        self._check(attr)
        ids = self._ids(attr)
        if attr.attr_name == "x":
            return self.stores[attr.group_name].load(Batch.one_type(-1, ids, [], 0))
        y = np.asarray(self.ds.labels[ids])
        return torch.from_numpy(y.astype(np.float32 if self.schema.multilabel else np.int64))

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...]:
        self._check(attr)
        t = self.schema.type(attr.group_name)
        if attr.attr_name == "x":
            return (t.count, t.feature_dim)
        return (t.count, self.schema.num_classes) if self.schema.multilabel else (t.count,)

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        raise _read_only("HeteroFeatureStore", self.path)

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise _read_only("HeteroFeatureStore", self.path)

    def close(self) -> None:
        for store in self.stores.values():
            store.close()

    def __getstate__(self):
        return {"args": (self.path, self.cache_bytes, self.backend_asked)}

    def __setstate__(self, state):
        self.__dict__["_tensor_attr_cls"] = TensorAttr
        self._setup(*state["args"])


class HeteroGraphStore(GraphStore):
    """Each relation's CSC, memory-mapped (indices as stored: int32 below 2^31 sources), keyed by (source type,
    relation, destination type)."""

    def __init__(self, dataset_dir):
        super().__init__()
        self.path = Path(dataset_dir)
        self.ds = open_dataset(self.path, typed=True)
        s = self.ds.schema
        self.attrs = [EdgeAttr(edge_type=r.key, layout=EdgeLayout.CSC, is_sorted=True,
                               size=(s.type(r.src).count, s.type(r.dst).count)) for r in s.relations]

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return list(self.attrs)

    def _get_edge_index(self, edge_attr: EdgeAttr):
        keys = [a.edge_type for a in self.attrs]
        if edge_attr.edge_type not in keys:
            return None
        if edge_attr.layout != EdgeLayout.CSC:
            raise DiskgnnError(f"{self.path}: HeteroGraphStore holds each relation as CSC only (ask for "
                               "layout='csc', or sample with HeteroSampler)")
        i = keys.index(edge_attr.edge_type)
        # Copy-on-write maps, as DiskgnnGraphStore's: writable for torch, the topology never copied whole.
        return (torch.from_numpy(self.ds.array(f"rel/{i}/indices", mode="c")),
                torch.from_numpy(self.ds.array(f"rel/{i}/indptr", mode="c")))

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        raise _read_only("HeteroGraphStore", self.path)

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise _read_only("HeteroGraphStore", self.path)


class HeteroSampler(BaseSampler):
    """Samples `fanouts` (per hop: one count for every relation, or "writes=10,cites=5"; -1 all) around each
    batch of seeds of the loader's input type, with diskgnn's native hetero sampler."""

    def __init__(self, dataset_dir, fanouts=(10, 5), seed: int = 0, threads: int | None = None):
        self.path = Path(dataset_dir)
        self.ds = open_dataset(self.path, typed=True)
        self.fanouts = relation_fanouts(list(fanouts), self.ds.schema, "HeteroSampler: fanouts")
        self.seed, self.threads = int(seed), threads or max(1, os.cpu_count() or 1)
        self.graph = open_graph(self.ds)
        self.calls = 0

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "graph"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.graph = open_graph(self.ds)

    def sample_from_nodes(self, inputs: NodeSamplerInput) -> HeteroSamplerOutput:
        s = self.ds.schema
        kind = inputs.input_type or s.target
        if kind not in [t.name for t in s.types]:
            raise DiskgnnError(f"{self.path}: input nodes of type {kind!r}: the graph's types are "
                               + ", ".join(t.name for t in s.types))
        seeds = np.asarray(inputs.node.cpu(), dtype=np.int64).reshape(-1)
        if np.unique(seeds).size != seeds.size:
            raise DiskgnnError(f"{self.path}: a batch lists a seed twice (give each input node once)")
        worker = torch.utils.data.get_worker_info()
        key = ((worker.id + 1 if worker is not None else 0) << 40) + self.calls
        self.calls += 1
        b = sample_batch(self.graph, seeds, key=key, fanouts=self.fanouts, seed=self.seed, threads=self.threads,
                         seed_type=s.type_index(kind))
        node = {t.name: torch.from_numpy(np.array(b.type_nodes[i], dtype=np.int64)) for i, t in enumerate(s.types)}
        row, col, edges = {}, {}, {}
        for r, rel in enumerate(s.relations):
            src, dst = [], []
            for hop in b.hops:
                blk = hop[r]  # None: a relation this hop does not follow (no edges)
                src.append(np.asarray([] if blk is None else blk.indices, dtype=np.int64))
                dst.append(np.empty(0, np.int64) if blk is None else
                           np.repeat(np.arange(blk.num_dst, dtype=np.int64), np.diff(blk.indptr)))
            row[rel.key], col[rel.key] = torch.from_numpy(np.concatenate(src)), torch.from_numpy(np.concatenate(dst))
            edges[rel.key] = [0 if hop[r] is None else int(hop[r].indices.size) for hop in b.hops]
        counts = b.counts
        sampled = {t.name: [int(counts[0, i])] + [int(counts[h, i] - counts[h - 1, i]) for h in range(1, len(counts))]
                   for i, t in enumerate(s.types)}
        return HeteroSamplerOutput(node=node, row=row, col=col, edge={k: None for k in row}, batch=None,
                                   num_sampled_nodes=sampled, num_sampled_edges=edges,
                                   metadata=(inputs.input_id, inputs.time))

    def sample_from_edges(self, inputs, neg_sampling=None):
        raise DiskgnnError("HeteroSampler: link prediction on heterogeneous graphs is not supported")

    @property
    def edge_permutation(self):
        return None
