"""Batched packing of a heterogeneous epoch: per featured node type, each batch's cold rows of that type written
into the batch's region of the type's own pack file, by pack.py's packer (one front-to-back pass over the type's
feature file), so that training reads one contiguous range per batch and type instead of one random block per row.

Types are packed one after another: their rows differ in size, each has its own feature file, and the packer's
buffers are then one type's at a time. A row is cold where the type's host tier (store/typed.py, placed from
epoch 0's reads) does not hold it. Files: `<name>.<type>.packs` with its `.json` and `.pos`, as pack.py writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.features import RAW_FEATURES, AsFloat32, FeatureSource
from ..data.format import Dataset
from ..io.reader import FileReader
from .pack import PackFile, pack_epoch
from .placement import Placement


@dataclass
class TypeBatch:
    index: int
    nodes: np.ndarray


class TypeBatches:
    """One node type's view of a hetero sample file: batch b's `nodes` are its nodes of that type (what pack.py's
    plan reads of a sample file)."""

    def __init__(self, samples, type_index: int):
        self.samples, self.t = samples, type_index
        self.meta = samples.meta

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, b: int) -> TypeBatch:
        return TypeBatch(b, self.samples[b].type_nodes[self.t])

    def __iter__(self):
        return (self[b] for b in range(len(self)))


def type_source(ds: Dataset, name: str) -> FeatureSource:
    """A featured type's stored rows as the packer reads them."""
    t = ds.schema.type(name)
    kind = f"features/{name}"
    return FeatureSource(RAW_FEATURES, ds.file_path(kind), ds.type_features(name), AsFloat32(),
                         ds.manifest["files"][kind]["checksum"], t.feature_dim)


def type_placement(count: int, held: np.ndarray) -> Placement:
    """The host tier of one type as pack.py's plan asks it which rows are cold."""
    return Placement(count, ["host"], [np.asarray(held, np.int64)], [0.0], 0)


class HeteroPacks:
    """An epoch's (or an eval set's) packs, one PackFile per featured type, with a reader of each."""

    def __init__(self, files: dict[str, PackFile], backend: str = "auto"):
        self.files = files
        self.readers = {name: FileReader(p.path, backend) for name, p in files.items() if p.offsets[-1]}

    def read(self, name: str, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch b's packed rows of type `name`: their positions among the batch's nodes of that type, and the
        rows (uint8 [n, row_bytes], in the region's order), checked against the region's checksum."""
        packs = self.files[name]
        pos = packs.own_pos[b]
        rows = np.empty((pos.size, packs.row_bytes), np.uint8)
        if pos.size:
            offset, length = packs.region(b)
            self.readers[name].read_ranges([[offset, length, 0]], rows)
            packs.check(b, rows)
        return pos, rows

    def close(self) -> None:
        for r in self.readers.values():
            r.close()
        self.readers.clear()

    def delete(self) -> None:
        self.close()
        for path in (f for p in self.files.values() for f in p.paths):
            path.unlink(missing_ok=True)


def pack_hetero(ds: Dataset, samples, held: dict[str, np.ndarray], out_dir, name: str, *,
                pack_memory: int, threads: int | None = None, backend: str = "auto") -> tuple[HeteroPacks, dict]:
    """Packs every featured type's cold rows of `samples` (a typed SampleFile) into `out_dir/<name>.<type>.packs`;
    `held[type]`: the sorted ids its host tier holds. Returns the packs opened and the packer's statistics summed
    over the types (plan_s, write_s, bytes_written, ...)."""
    files, stats = {}, {}
    for t, ty in enumerate(ds.schema.types):
        if not ty.feature_dim:
            continue
        packs = pack_epoch(None, TypeBatches(samples, t), type_placement(ty.count, held.get(ty.name, [])),
                           Path(out_dir) / f"{name}.{ty.name}.packs", features=type_source(ds, ty.name),
                           pack_memory=pack_memory, threads=threads)
        files[ty.name] = packs
        for key, value in packs.packing.items():
            if isinstance(value, (int, float)):
                stats[key] = stats.get(key, 0) + value
    return HeteroPacks(files, backend), stats
