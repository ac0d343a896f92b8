"""A typed dataset's feature rows: the tier chain of store.py once per featured node type, keyed by (type, row).

`TypedRows` holds each featured type's rows (its source, its memory tier placed across the types under one budget
by placement.densest, its counters); `TypedStore` is what a pass reads a typed batch through: the calls of one
FeatureStore (start, finish, to_device), made of each type's with the batch's nodes of that type, so the loaders'
stages (loading/loaders.py) move typed batches as they move plain ones.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .. import defaults
from ..data.features import RAW_FEATURES, feature_source
from ..data.format import Dataset
from ..io.reader import FileReader
from ..offline.batches import Batch
from ..offline.pack import PackFile
from ..offline.placement import Placement, held_placement
from .store import FeatureStore
from .tiers import TierStats, load_tiers


class TypedRows:
    """A typed dataset's feature rows, per featured node type through a tier chain of its own (a FeatureStore of
    that type's rows): the memory tier placed for it (placement.densest ranks every type's rows under one budget),
    then a batch's pack region of the type, or, without packs, its feature file. What the stores of a type served,
    each pass's counted apart, is summed in one place as each pass ends (`add`: `stats[type]`, by tier)."""

    def __init__(self, dataset: Dataset, backend: str = "auto", variants: dict[str, str] | None = None):
        """`variants`: each featured type's rows (data/features.py's type_variants; default: as stored)."""
        self.dataset, self.backend = dataset, backend
        self.sources = {t.name: feature_source(dataset, (variants or {}).get(t.name, RAW_FEATURES), t.name)
                        for t in dataset.schema.types if t.feature_dim}
        self.stats: dict[str, dict[str, TierStats]] = {name: {} for name in self.sources}
        # no rows held until placed: nothing to load
        self.placements = {name: held_placement(src.num_rows, np.empty(0, np.int64))
                           for name, src in self.sources.items()}
        self.tiers = {name: [] for name in self.sources}

    def place(self, placements: dict[str, Placement]) -> None:
        """Fills each type's memory tier with the rows its placement holds (placement.held_placement)."""
        self.placements = placements
        self.tiers = {name: load_tiers(self.dataset, self.placements[name], "cpu", self.backend, src)
                      for name, src in self.sources.items()}

    def store(self, packs: dict[str, PackFile] | None = None, read_depth: int = defaults.READ_DEPTH) -> "TypedStore":
        """A typed batch's store: per featured type a FeatureStore over its tier and `packs[type]` (None: any ids,
        from the file)."""
        return TypedStore(self.stores(packs, read_depth), [t.name for t in self.dataset.schema.types])

    def stores(self, packs: dict[str, PackFile] | None = None, read_depth: int = defaults.READ_DEPTH) -> dict:
        """Per featured type a FeatureStore over its tier and `packs[type]` (None: any ids, from the file)."""
        return {name: FeatureStore(self.dataset, self.placements[name], None if packs is None else packs[name],
                                   backend=self.backend, tiers=self.tiers[name], features=src, read_depth=read_depth)
                for name, src in self.sources.items()}

    def add(self, store: "TypedStore") -> None:
        """Counts what a pass's store served, per type and tier."""
        for name, typed in store.stores.items():
            for st in typed.stats():
                acc = self.stats[name].setdefault(st.name, TierStats(st.name))
                acc.hits += st.hits
                acc.bytes += st.bytes

    @property
    def backend_name(self) -> str:
        """The reader the stores read with (`auto` resolved, and whether O_DIRECT), or none without features."""
        src = next(iter(self.sources.values()), None)
        if src is None:
            return "none"
        reader = FileReader(src.path, self.backend)
        try:
            return reader.backend + (" + O_DIRECT" if reader.direct else "")
        finally:
            reader.close()

    def summary(self) -> dict:
        """Per type: rows asked for, those its memory tier served, bytes read from disk, rows each tier served."""
        out = {}
        for name, tiers in self.stats.items():
            host = tiers.get("host")
            out[name] = {"rows": sum(t.hits for t in tiers.values()), "hits": host.hits if host else 0,
                         "bytes_read": sum(t.bytes for n, t in tiers.items() if n != "host"),
                         "tiers": {n: t.hits for n, t in tiers.items()}}
        return out


class TypedStore:
    """A typed batch's rows, each featured type's from its own FeatureStore (its nodes of that type as a one-type
    batch): the calls a pass makes of a store (start, finish, to_device), made of every type's, so the loaders'
    stages move typed batches as they move plain ones. `x` is then a dict, a type's rows under its name."""

    def __init__(self, stores: dict[str, FeatureStore], type_names: list[str]):
        self.stores = stores
        self.types = [(type_names.index(name), name) for name in stores]

    def start(self, batch, record=None) -> dict:
        pending = {}
        try:
            for t, name in self.types:
                pending[name] = self.stores[name].start(Batch.one_type(batch.index, batch.type_nodes[t], [], 0))
        except BaseException:
            self.release(pending)
            raise
        return pending

    def finish(self, pending: dict) -> dict:
        try:
            for name, p in pending.items():
                self.stores[name].finish(p)
        except BaseException:
            self.release(pending)
            raise
        return pending

    def to_device(self, pending: dict) -> dict:
        return {name: self.stores[name].to_device(p) for name, p in pending.items()}

    def release(self, pending: dict, event=None) -> None:
        for name, p in pending.items():
            self.stores[name].release(p, event)

    def stream(self):
        return contextlib.nullcontext()

    def ready_event(self):
        return None

    def stats(self) -> list[TierStats]:
        return [st for store in self.stores.values() for st in store.stats()]

    @property
    def disk(self) -> TierStats:
        disk = TierStats("disk")
        for store in self.stores.values():
            disk.hits += store.disk.hits
            disk.bytes += store.disk.bytes
        return disk

    @property
    def backend(self) -> str:
        """The reader the stores read with ("auto" resolved), or none without featured types."""
        return next((store.backend for store in self.stores.values()), "none")

    def bytes_read(self) -> int:
        """Bytes the stores' feature files were read for by id (an online pass's)."""
        return sum(store.bytes_read() for store in self.stores.values())

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
