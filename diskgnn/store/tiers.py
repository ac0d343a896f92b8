"""The tiers of the feature store: each serves the rows of a batch it holds, and passes the rest on.

A batch's input rows are looked up tier by tier, fastest first: the memory
tiers the placement filled (`PlacedTier`: the device cache with CUDA, the host
cache), then the rows the last batches already brought into memory
(`RecentTier`), then the rows its segment shares with neighbouring batches
through the page cache (`SegmentTier`), then its own pack region on disk
(`PackTier`), which must hold whatever is left. Without packs (ids known only
when asked for: the PyG feature store) the chain ends in `FileTier`, which
gathers whatever is left from the feature file itself. Every tier has one
interface: `claim` (which of the positions still unserved it holds, and the
start of fetching them: reads land in the batch's staging slab) and `served`
(where those rows are, as `Rows`: in the slab, or in a table by slot). The
store puts every tier's `Rows` in place in one step (store.py). A new kind of
tier (another rank's rows) is one new class in the chain.

Tiers move stored rows of a FeatureSource (features.bin's or a quantized
variant's codes); decoding happens after the last tier, on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import defaults
from ..data.features import FeatureSource, feature_source
from ..data.format import Dataset
from ..errors import DiskgnnError
from ..io.reader import FeatureReader, FileReader
from ..offline.pack import PackFile
from ..offline.placement import Placement
from .staging import Slab, fill_rows


@dataclass
class TierStats:
    name: str
    hits: int = 0
    bytes: int = 0


@dataclass
class Rows:
    """Where some of a batch's rows are: row `positions[i]` of the batch is `table[slots[i]]`, or, without a
    table, row `first + i` of the batch's slab. `table`: host rows (numpy), a device tensor, a zero-copy
    MappedRows, or a callable giving one of those where the rows are put in place (rows an earlier batch
    brought, ready by then)."""

    positions: np.ndarray
    table: object = None
    slots: np.ndarray | None = None
    first: int = 0

    def resolved(self):
        return self.table() if callable(self.table) else self.table


class Tier:
    """One level of the store. Subclasses set `name` and implement claim and rows."""

    name: str

    def claim(self, batch, todo: np.ndarray, slab: Slab) -> tuple[np.ndarray, object]:
        """Of the batch positions `todo` (rows of batch.nodes no earlier tier serves), a mask of those
        this tier holds, and what `served` needs for them (reads it started into `slab`, slots)."""
        raise NotImplementedError

    def served(self, batch, positions: np.ndarray, state) -> Rows | None:
        """Where the claimed rows are (reads waited for and checked), or None where it claimed none."""
        raise NotImplementedError

    def assembled(self, batch, rows) -> None:
        """Sees a batch's finished rows (host rows, or the device tensor on the device path): the tiers that
        keep rows for later batches keep them here."""

    def close(self) -> None:
        pass


class PlacedTier(Tier):
    """The rows one memory tier of the placement holds, as one tensor in that tier's memory."""

    def __init__(self, name: str, index: int, placement: Placement, rows):
        self.name, self.index, self.placement = name, index, placement
        self.rows = rows  # torch.Tensor [num_rows, width] of stored rows
        self.table = rows.numpy() if rows.device.type == "cpu" else rows

    def claim(self, batch, todo, slab):
        nodes = batch.nodes if todo.size == batch.nodes.size else batch.nodes[todo]
        tier, slot = self.placement.locate(nodes)
        held = tier == self.index
        return held, slot[held].astype(np.int64)

    def served(self, batch, positions, slots):
        return Rows(positions, self.table, slots) if positions.size else None


class ZeroCopyTier(PlacedTier):
    """A host tier the GPU gathers from itself (PyTorch-Direct, store/uva.py): its rows page-locked and mapped
    into the device's address space, a batch's rows read by a kernel straight into the device tensor."""

    def __init__(self, name: str, index: int, placement: Placement, rows):
        from .uva import MappedRows

        super().__init__(name, index, placement, rows)
        self.table = MappedRows(rows)


def load_tiers(dataset: Dataset, placement: Placement, device: str = "cpu", backend: str = "auto",
               features: FeatureSource | None = None, zero_copy: bool = False) -> list[PlacedTier]:
    """Reads every placement tier's rows of `features` (default: features.bin) with coalesced gathers
    (ids are sorted, so reads run forwards), each straight into its own memory: the first tier, with a
    device, into device memory through bounded pinned chunks (staging.fill_rows); host tiers into host
    memory, mapped for the GPU's gathers under `zero_copy` (the plan's decision). Shared by the stores of
    every pack file of a run."""
    import torch

    tiers = []
    with FeatureReader(features or feature_source(dataset), backend) as reader:
        for t, (name, ids) in enumerate(zip(placement.tier_names, placement.tier_ids)):
            on_device = t == 0 and device != "cpu"
            rows = torch.empty((ids.size, reader.width), dtype=reader.dtype, device=device if on_device else "cpu")
            if on_device:
                fill_rows(reader, ids, rows, defaults.DEVICE_FILL_CHUNK)
                tiers.append(PlacedTier(name, t, placement, rows))
            else:
                if reader.row_bytes:  # a featureless dataset's rows hold nothing to read
                    reader.gather(ids, out=rows)
                tiers.append((ZeroCopyTier if zero_copy else PlacedTier)(name, t, placement, rows))
    return tiers


def _held(positions: np.ndarray, size: int, todo: np.ndarray) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    mask[positions] = True
    return mask[todo]


class RecentTier(Tier):
    """Rows one of the last batches (the pack index says which and where) already brought into memory: copied
    from that batch's assembled rows, which this tier keeps for the pack's window of batches. Those rows are in
    no pack region. The batches must come in file order; where the batch a row is due from did not pass
    through this store (a pass that starts mid-epoch, after --resume), the row is read from the feature file."""

    name = "recent"

    def __init__(self, packs: PackFile, source: FeatureSource, backend: str):
        self.packs, self.source, self.backend = packs, source, backend
        self.batch_rows = packs.batch_rows
        self.window = self.batch_rows.window
        self._kept: dict[int, object] = {}
        self._started: set[int] = set()  # batches claimed here lately: assembled before any later batch
        self._reader = None

    def claim(self, batch, todo, slab):
        b, rows = batch.index, self.batch_rows
        self._started.add(b)
        self._started.discard(b - self.window - 1)
        pos = rows.recent_pos[b]
        if not pos.size:
            return np.zeros(todo.size, dtype=bool), None
        back, slot = rows.recent_back[b], rows.recent_slot[b]
        parts = []
        for w in np.unique(back).tolist():
            mine = back == w
            if b - w in self._started:
                parts.append(("kept", pos[mine], b - w, slot[mine].astype(np.int64)))
                continue
            if self._reader is None:
                self._reader = FeatureReader(self.source, self.backend)
            first, buf = slab.take(int(mine.sum()))
            out = slab.view(first, buf.shape[0], self._reader.dtype)
            parts.append(("read", pos[mine], first, self._reader.gather_async(batch.nodes[pos[mine]], out=out)))
        return _held(pos, batch.nodes.size, todo), parts

    def served(self, batch, positions, parts):
        if parts is None:
            return None
        out = []
        for kind, pos, where, how in parts:
            if kind == "kept":
                out.append(Rows(pos, (lambda earlier=where: self._kept[earlier]), how))
            else:
                how.wait()
                out.append(Rows(pos, first=where))
        return out

    def assembled(self, batch, rows):
        if self.window:
            self._kept[batch.index] = rows
            self._kept.pop(batch.index - self.window, None)

    def close(self) -> None:
        self._kept.clear()
        if self._reader is not None:
            self._reader.close()


class SegmentTier(Tier):
    """Rows a batch shares with the other batches of its segment (packed once, in the segment's region),
    gathered through the page cache with coalesced buffered reads into the batch's slab; a region's checksum
    is checked on its first use."""

    name = "page_cache"

    def __init__(self, packs: PackFile, source: FeatureSource):
        self.packs, self.source = packs, source
        self._reader = None
        self._checked = set()

    def claim(self, batch, todo, slab):
        shared = self.packs.shared_pos[batch.index]
        if not shared.size:
            return np.zeros(todo.size, dtype=bool), None
        return _held(shared, batch.nodes.size, todo), self._read(batch.index, slab)

    def served(self, batch, positions, first):
        return None if first is None else Rows(self.packs.shared_pos[batch.index], first=first)

    def _read(self, b: int, slab: Slab) -> int:
        r = self.packs.segment_region(b)
        offset, length = self.packs.region(r)
        if self._reader is None:
            self._reader = FileReader(self.packs.path, "pread", direct=False)
        if r not in self._checked:
            whole = np.empty(length, dtype=np.uint8)
            self._reader.read_ranges([[offset, length, 0]], whole)
            self.packs.check(r, whole)
            self._checked.add(r)
        slots = self.packs.shared_slot[b]
        first, out = slab.take(slots.size)
        self._reader.gather_rows(slots, self.source.row_bytes, base_offset=offset, out=out,
                                 num_rows=length // self.source.row_bytes)
        return first

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()


class PackTier(Tier):
    """The batch's own cold rows: one O_DIRECT range read of its pack region into the batch's slab (started at
    claim, so that several batches' reads are in flight), checked against the region's checksum. It ends the
    chain: every row no earlier tier holds must be here."""

    name = "disk"

    def __init__(self, packs: PackFile, source: FeatureSource, backend: str):
        self.packs, self.source = packs, source
        self.reader = FileReader(packs.path, backend)

    def claim(self, batch, todo, slab):
        own = self.packs.own_pos[batch.index]
        held = _held(own, batch.nodes.size, todo)
        if held.sum() != own.size:
            raise DiskgnnError(f"{self.packs.path}: batch {batch.index}'s packed rows overlap rows a memory tier "
                               "holds (the packs were written for another placement); pack again")
        if not own.size:
            return held, None
        offset, length = self.packs.region(batch.index)
        first, out = slab.take(own.size)
        return held, (first, self.reader.read_ranges_async([[offset, length, 0]], out))

    def served(self, batch, positions, state):
        if state is None:
            return None
        first, read = state
        self.packs.check(batch.index, read.wait())
        return Rows(self.packs.own_pos[batch.index], first=first)

    def close(self) -> None:
        self.reader.close()


class FileTier(Tier):
    """Rows no memory tier holds, gathered by id from the feature file (O_DIRECT row reads into the batch's slab,
    started at claim): the end of a chain without packs, for ids that were not known ahead (the online
    loader's and the PyG feature store's)."""

    name = "disk"

    def __init__(self, source: FeatureSource, backend: str):
        self.reader = FeatureReader(source, backend)

    def claim(self, batch, todo, slab):
        if not todo.size:
            return np.ones(0, dtype=bool), None
        nodes = batch.nodes if todo.size == batch.nodes.size else batch.nodes[todo]
        first, _ = slab.take(nodes.size)
        return np.ones(todo.size, dtype=bool), (first, self.reader.gather_async(
            nodes, out=slab.view(first, nodes.size, self.reader.dtype)))

    def served(self, batch, positions, state):
        if state is None:
            return None
        first, read = state
        read.wait()
        return Rows(positions, first=first)

    def close(self) -> None:
        self.reader.close()

