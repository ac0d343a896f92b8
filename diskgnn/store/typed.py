"""Feature rows of a heterogeneous graph, one file per node type, served out of core.

Each featured type has its own reader (io_uring with O_DIRECT where the kernel has it: reads bypass the page
cache, so the budget holds what it says) and its own host tier: the rows the known future reads most, placed
from epoch 0's sampled batches under one budget shared by every type (rows ranked by reads per byte, so a
small hot type and a large cold one share the memory by what it saves). A batch's rows of a type come from the
tier where held, the rest from the batch's region of the type's packs (offline/hetero_pack.py: one contiguous
read) where the batches were packed, else in one gather from the file (the PyG seam's ids, not known ahead).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..data.format import Dataset
from ..errors import DiskgnnError
from ..io.reader import FileReader


@dataclass
class TypeStats:
    rows: int = 0  # rows asked for
    hits: int = 0  # of those, served by the host tier
    bytes_read: int = 0  # from the file


def densest(counts: dict[str, np.ndarray], costs: dict[str, int], budget: int) -> dict[str, np.ndarray]:
    """Per type, the sorted ids of the rows read most per byte (`counts[type]`: reads per row; `costs[type]`: a
    held row's bytes), taken densest first across the types until `budget` bytes are spent."""
    cands = []
    for name, c in counts.items():
        ids = np.flatnonzero(c)
        keep = ids[np.argsort(-c[ids], kind="stable")][: max(0, budget // costs[name])]
        cands.append((name, keep, c[keep] / costs[name], costs[name]))
    if not cands:
        return {}
    value = np.concatenate([v for _, _, v, _ in cands])
    cost = np.concatenate([np.full(k.size, b) for _, k, _, b in cands])
    bounds = np.cumsum([0] + [k.size for _, k, _, _ in cands])
    rank = np.argsort(-value, kind="stable")
    taken = rank[np.cumsum(cost[rank]) <= budget]  # densest first: what a byte of the tier saves
    return {name: np.sort(keep[taken[(taken >= bounds[i]) & (taken < bounds[i + 1])] - bounds[i]])
            for i, (name, keep, _, _) in enumerate(cands)}


@dataclass
class TypedFeatures:
    """Per featured type: its reader, its host tier (sorted ids and their rows) and its counters."""

    ds: Dataset
    backend: str = "auto"
    readers: dict = field(default_factory=dict)
    tiers: dict = field(default_factory=dict)  # type -> (sorted ids int64, rows uint8 [n, row_bytes])
    stats: dict = field(default_factory=dict)

    def __post_init__(self):
        for t in self.ds.schema.types:
            if t.feature_dim:
                self.readers[t.name] = FileReader(self.ds.file_path(f"features/{t.name}"), self.backend)
                self.stats[t.name] = TypeStats()

    @property
    def backend_name(self) -> str:
        r = next(iter(self.readers.values()), None)
        return "none" if r is None else r.backend + (" + O_DIRECT" if r.direct else "")

    def place(self, counts: dict[str, np.ndarray], budget: int, tables: dict[str, int] | None = None) -> dict:
        """Fills the host tiers with the most-read rows per byte (`counts[type]`: reads per row in the known
        future) within `budget` bytes (each held row costs its bytes and its 8-byte id), ranked together with the
        hot rows of learnable tables (`tables[type]`: a held row's bytes); returns the ids chosen per type (the
        tables' to be placed by their owner)."""
        costs = {t.name: t.row_bytes + 8 for t in self.ds.schema.types if t.name in self.readers}
        costs.update(tables or {})
        chosen = densest({n: c for n, c in counts.items() if n in costs}, costs, budget)
        for name, ids in chosen.items():
            if name in self.readers:
                self.tiers[name] = (ids, self._read(name, ids))
        return chosen

    def _read(self, name: str, ids: np.ndarray) -> np.ndarray:
        t = self.ds.schema.type(name)
        out = np.empty((ids.size, t.row_bytes), np.uint8)
        if ids.size:
            self.readers[name].gather_rows(ids, t.row_bytes, out=out, num_rows=t.count)
        return out

    def gather(self, name: str, ids: np.ndarray, packs=None, batch: int = -1) -> torch.Tensor:
        """float32 [len(ids), dim]: type `name`'s rows `ids` (duplicates allowed), the tier's first; the rest from
        batch `batch`'s region of `packs` (offline/hetero_pack.HeteroPacks, one contiguous read), else gathered
        from the feature file."""
        t = self.ds.schema.type(name)
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((ids.size, t.row_bytes), np.uint8)
        st = self.stats[name]
        st.rows += ids.size
        held, rows = self.tiers.get(name, (np.empty(0, np.int64), None))
        miss = np.ones(ids.size, dtype=bool)
        if held.size and ids.size:
            at = np.minimum(np.searchsorted(held, ids), held.size - 1)
            hit = held[at] == ids
            out[hit] = rows[at[hit]]
            miss = ~hit
            st.hits += int(hit.sum())
        if packs is not None:
            pos, got = packs.read(name, batch)
            if pos.size != int(miss.sum()) or not miss[pos].all():
                raise DiskgnnError(f"{packs.files[name].path}: batch {batch}'s packed rows are not the rows the "
                                   "host tier misses (packed for another placement); pack again")
            out[pos] = got
            st.bytes_read += got.nbytes
        elif miss.any():
            want = ids[miss]
            got = np.empty((want.size, t.row_bytes), np.uint8)
            self.readers[name].gather_rows(want, t.row_bytes, out=got, num_rows=t.count)
            out[miss] = got
            st.bytes_read += got.nbytes
        x = out.view(np.dtype(t.feature_dtype).newbyteorder("<")).reshape(ids.size, t.feature_dim)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    def held(self) -> dict[str, np.ndarray]:
        """Per type, the sorted ids its host tier holds (what packs leave out)."""
        return {name: ids for name, (ids, _) in self.tiers.items()}

    def held_bytes(self) -> int:
        return sum(ids.nbytes + rows.nbytes for ids, rows in self.tiers.values())

    def close(self) -> None:
        for r in self.readers.values():
            r.close()
        self.readers.clear()

