"""The tiers of the feature store: each serves the rows of a batch it holds, and passes the rest on.

A batch's input rows are looked up tier by tier, fastest first: the memory
tiers the placement filled (`PlacedTier`: the device cache with CUDA, the host
cache), then the rows the last batches already brought into memory
(`RecentTier`), then the rows its segment shares with neighbouring batches
through the page cache (`SegmentTier`), then its own pack region on disk
(`PackTier`), which must hold whatever is left. Without packs (ids known only
when asked for: the PyG feature store) the chain ends in `FileTier`, which
gathers whatever is left from the feature file itself. Every tier has one interface: `claim` (which
of the positions still unserved it holds, and the start of fetching them) and
`fill` (write them into the batch's rows). A new kind of tier (the rows of the
previous batches, another rank's rows) is one new class in the chain.

Tiers move stored rows of a FeatureSource (features.bin's or a quantized
variant's codes); decoding happens after the last tier, on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.features import FeatureSource, feature_source
from ..data.format import Dataset
from ..errors import DiskgnnError
from ..io.reader import FeatureReader, FileReader
from ..offline.pack import PackFile
from ..offline.placement import Placement


@dataclass
class TierStats:
    name: str
    hits: int = 0
    bytes: int = 0


class Tier:
    """One level of the store. Subclasses set `name` and implement claim and fill."""

    name: str
    on_device = False  # filled into the device tensor after the host rows crossed, not into host rows

    def claim(self, batch, todo: np.ndarray) -> tuple[np.ndarray, object]:
        """Of the batch positions `todo` (rows of batch.nodes no earlier tier serves), a mask of those
        this tier holds, and what fill needs for them (reads it started, slots)."""
        raise NotImplementedError

    def fill(self, batch, positions: np.ndarray, state, out) -> None:
        """Writes the claimed rows: out[positions] (a numpy array of host rows, or the device tensor)."""
        raise NotImplementedError

    def assembled(self, batch, rows: np.ndarray) -> None:
        """Sees a batch's finished host rows (the tiers that keep rows for later batches keep them here)."""

    def close(self) -> None:
        pass


class PlacedTier(Tier):
    """The rows one memory tier of the placement holds, as one tensor in that tier's memory."""

    def __init__(self, name: str, index: int, placement: Placement, rows):
        self.name, self.index, self.placement = name, index, placement
        self.rows = rows  # torch.Tensor [num_rows, width] of stored rows
        self.on_device = rows.device.type != "cpu"

    def claim(self, batch, todo):
        nodes = batch.nodes if todo.size == batch.nodes.size else batch.nodes[todo]
        tier, slot = self.placement.locate(nodes)
        held = tier == self.index
        return held, slot[held]

    def fill(self, batch, positions, slots, out):
        if not self.on_device:
            # numpy's fancy indexing is 3-4x faster than torch's on CPU tensors
            out[positions] = np.take(self.rows.numpy(), slots, axis=0)
            return
        import torch

        device = self.rows.device
        out[torch.from_numpy(positions).to(device)] = self.rows[torch.from_numpy(slots.astype(np.int64)).to(device)]


class ZeroCopyTier(PlacedTier):
    """A host tier the GPU gathers from itself (PyTorch-Direct, store/uva.py): its rows page-locked and mapped
    into the device's address space, a batch's rows read by a kernel straight into the device tensor."""

    def __init__(self, name: str, index: int, placement: Placement, rows):
        from .uva import MappedRows

        super().__init__(name, index, placement, rows)
        self.on_device = True
        self.mapped = MappedRows(rows)

    def fill(self, batch, positions, slots, out):
        self.mapped.gather(slots, positions, out)


def host_gather_path(device: str, zero_copy: str = "auto") -> tuple[bool, str]:
    """Whether host tiers are gathered by the GPU (zero copy) on `device`, and the plan's line of why."""
    if device == "cpu":
        return False, "host tiers: rows gathered by the CPU (no device)"
    from .uva import why_not

    reason = "--zero-copy off" if zero_copy == "off" else why_not(device)
    if reason is None:
        return True, "host tiers: zero-copy, rows gathered by the GPU from mapped pinned memory (CuPy kernel)"
    if zero_copy == "on":
        raise DiskgnnError(f"--zero-copy on: {reason}")
    return False, f"host tiers: CPU gather + pinned copy ({reason})"


def load_tiers(dataset: Dataset, placement: Placement, device: str = "cpu", backend: str = "auto",
               features: FeatureSource | None = None, zero_copy: str = "auto") -> list[PlacedTier]:
    """Reads every placement tier's rows of `features` (default: features.bin) with coalesced gathers
    (ids are sorted, so reads run forwards); the first tier goes to the device when there is one; host
    tiers with a device are gathered by the GPU where host_gather_path says so, else pinned for the
    copy. Shared by the stores of every pack file of a run."""
    import torch

    gpu_gathers = host_gather_path(device, zero_copy)[0]
    tiers = []
    with FeatureReader(features or feature_source(dataset), backend) as reader:
        for t, (name, ids) in enumerate(zip(placement.tier_names, placement.tier_ids)):
            rows = reader.gather(ids)
            if t == 0 and device != "cpu":
                tiers.append(PlacedTier(name, t, placement, rows.to(device)))
            elif gpu_gathers:
                tiers.append(ZeroCopyTier(name, t, placement, rows))
            else:
                tiers.append(PlacedTier(name, t, placement, rows.pin_memory() if torch.cuda.is_available()
                                        else rows))
    return tiers


def _held(positions: np.ndarray, size: int, todo: np.ndarray) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    mask[positions] = True
    return mask[todo]


class RecentTier(Tier):
    """Rows one of the last batches (the pack index says which and where) already brought into memory: copied
    from that batch's assembled rows, which this tier keeps for the pack's window of batches. Those rows are in
    no pack region. The batches must come in file order; where the batch a row is due from was not assembled
    in this pass (a pass that starts mid-epoch, after --resume), the row is read from the feature file."""

    name = "recent"

    def __init__(self, packs: PackFile, source: FeatureSource, backend: str):
        self.packs, self.source, self.backend = packs, source, backend
        self.rows = packs.batch_rows
        self.window = self.rows.window
        self._kept: dict[int, np.ndarray] = {}
        self._reader = None

    def claim(self, batch, todo):
        pos = self.rows.recent_pos[batch.index]
        if not pos.size:
            return np.zeros(todo.size, dtype=bool), None
        return _held(pos, batch.nodes.size, todo), None

    def fill(self, batch, positions, state, out):
        b, rows = batch.index, self.rows
        pos, back, slot = rows.recent_pos[b], rows.recent_back[b], rows.recent_slot[b]
        for w in np.unique(back):
            mine = back == w
            earlier = self._kept.get(b - int(w))
            if earlier is not None:
                out[pos[mine]] = earlier[slot[mine]]
            else:
                if self._reader is None:
                    self._reader = FeatureReader(self.source, self.backend)
                out[pos[mine]] = self._reader.gather(batch.nodes[pos[mine]]).numpy()

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
    gathered through the page cache with coalesced buffered reads; a region's checksum is checked on
    its first use."""

    name = "page_cache"

    def __init__(self, packs: PackFile, source: FeatureSource):
        self.packs, self.source = packs, source
        self._reader = None
        self._checked = set()

    def claim(self, batch, todo):
        shared = self.packs.shared_pos[batch.index]
        if not shared.size:
            return np.zeros(todo.size, dtype=bool), None
        return _held(shared, batch.nodes.size, todo), self._rows(batch.index)

    def fill(self, batch, positions, rows, out):
        if rows is not None:
            out[self.packs.shared_pos[batch.index]] = rows

    def _rows(self, b: int) -> np.ndarray:
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
        rows = self._reader.gather_rows(slots, self.source.row_bytes, base_offset=offset,
                                        num_rows=length // self.source.row_bytes)
        return rows.view(self.source.dtype).reshape(slots.size, -1)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()


class PackTier(Tier):
    """The batch's own cold rows: one O_DIRECT range read of its pack region (started at claim, so that
    several batches' reads are in flight), checked against the region's checksum, scattered into place.
    It ends the chain: every row no earlier tier holds must be here."""

    name = "disk"

    def __init__(self, packs: PackFile, source: FeatureSource, backend: str):
        self.packs, self.source = packs, source
        self.reader = FileReader(packs.path, backend)

    def claim(self, batch, todo):
        own = self.packs.own_pos[batch.index]
        held = _held(own, batch.nodes.size, todo)
        if held.sum() != own.size:
            raise DiskgnnError(f"{self.packs.path}: batch {batch.index}'s packed rows overlap rows a memory tier "
                               "holds (the packs were written for another placement); pack again")
        offset, length = self.packs.region(batch.index)
        read = self.reader.read_ranges_async([[offset, length, 0]], np.empty(length, dtype=np.uint8)) \
            if length else None
        return held, read

    def fill(self, batch, positions, read, out):
        if read is None:
            return
        buf = read.wait()
        self.packs.check(batch.index, buf)
        out[self.packs.own_pos[batch.index]] = buf.view(self.source.dtype).reshape(-1, self.source.width)

    def close(self) -> None:
        self.reader.close()


class FileTier(Tier):
    """Rows no memory tier holds, gathered by id from the feature file (O_DIRECT row reads, started at claim):
    the end of a chain without packs, for ids that were not known ahead (the PyG feature store)."""

    name = "disk"

    def __init__(self, source: FeatureSource, backend: str):
        self.reader = FeatureReader(source, backend)

    def claim(self, batch, todo):
        nodes = batch.nodes if todo.size == batch.nodes.size else batch.nodes[todo]
        return np.ones(todo.size, dtype=bool), self.reader.gather_async(nodes) if nodes.size else None

    def fill(self, batch, positions, read, out):
        if read is not None:
            out[positions] = read.wait().numpy()

    def close(self) -> None:
        self.reader.close()
