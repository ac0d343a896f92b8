"""Feature store: memory tiers in front of the packs on disk, behind one call per batch.

The placement (placement.py) says which rows each memory tier holds; the
packs (pack.py) hold every other row a batch needs, contiguously. Assembling
a batch copies its hot rows from the memory tiers, gathers the rows its
segment shares with neighbouring batches through the page cache (buffered,
coalesced reads of the segment region, whose checksum is checked on first
use), and reads its own cold rows with one range read of its pack region
(O_DIRECT through the native reader), then scatters them into place. Each
tier counts the rows it served and their bytes.
On a CPU-only machine the host tier is the top tier; with CUDA the first tier
lives on the device and host tiers are pinned.

All of this moves stored rows of a FeatureSource (features.bin's, or a
quantized variant's code rows, 4-32x smaller); they are decoded into the
model's float32 input only at the end, on the training device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .format import Dataset, FeatureSource
from .pack import PackFile
from .placement import Placement
from .reader import FeatureReader, FileReader


@dataclass
class TierStats:
    name: str
    hits: int = 0
    bytes: int = 0


@dataclass
class MemoryTier:
    """Rows of one placement tier, as one tensor in the tier's memory."""

    name: str
    rows: "object"  # torch.Tensor [num_rows, width]: stored rows

    @property
    def on_device(self) -> bool:
        return self.rows.device.type != "cpu"


def load_tiers(dataset: Dataset, placement: Placement, device: str = "cpu", backend: str = "auto",
               features: FeatureSource | None = None) -> list[MemoryTier]:
    """Reads every tier's rows of `features` (default: features.bin) with coalesced gathers (ids are
    sorted, so reads run forwards); the first tier goes to the device when there is one, host tiers
    are pinned when CUDA is present."""
    import torch

    tiers = []
    with FeatureReader(features or dataset.feature_source(), backend) as reader:
        for t, (name, ids) in enumerate(zip(placement.tier_names, placement.tier_ids)):
            rows = reader.gather(ids)
            if t == 0 and device != "cpu":
                rows = rows.to(device)
            elif torch.cuda.is_available():
                rows = rows.pin_memory()
            tiers.append(MemoryTier(name, rows))
    return tiers


@dataclass
class PendingBatch:
    """A batch between the pipeline's read, assemble and copy stages."""

    batch: "object"
    tier: np.ndarray  # per node: memory tier index, -1 = packs
    slot: np.ndarray  # per node: row in that tier
    shared_rows: np.ndarray | None = None  # rows from the segment region, in shared_pos order
    read: "object" = None  # ReadHandle of the pack region
    host: "object" = None  # assembled host tensor


class FeatureStore:
    """Assembles each batch's input features from the memory tiers and its pack."""

    def __init__(self, dataset: Dataset, placement: Placement, packs: PackFile, *, device: str = "cpu",
                 backend: str = "auto", tiers: list[MemoryTier] | None = None,
                 features: FeatureSource | None = None):
        """`features`: the rows the packs and tiers hold (default: features.bin); packs of other
        rows are refused. `tiers`: the placement's rows already loaded (load_tiers), shared by the
        stores of several pack files (each epoch's, the eval sets'); loaded here when not given."""
        import torch

        self.source = features or dataset.feature_source()
        packs.check_features(self.source)
        self.placement = placement
        self.packs = packs
        self.device = device
        self.dtype = torch.from_numpy(np.empty(0, self.source.dtype)).dtype
        self.tiers = tiers if tiers is not None else load_tiers(dataset, placement, device, backend, self.source)
        self.tier_stats = [TierStats(t.name) for t in self.tiers]
        self.reader = FileReader(packs.path, backend)
        self.page_cache = TierStats("page_cache")
        self.disk = TierStats("disk")
        self._segment_reader = None
        self._checked_segments = set()
        self._torch = torch

    @property
    def backend(self) -> str:
        return self.reader.backend

    def stats(self) -> list[TierStats]:
        return self.tier_stats + [self.page_cache, self.disk]

    def load(self, batch):
        """The model input of batch.nodes (float32, decoded), row i for node i, on the store's device."""
        return self.to_device(self.finish(self.start(batch)))

    def start(self, batch) -> "PendingBatch":
        """Tier lookups, the segment's shared rows, and the O_DIRECT read of the batch's pack region
        (returns at once: the read runs in the reader's engine while the caller starts more)."""
        tier, slot = self.placement.locate(batch.nodes)
        pending = PendingBatch(batch, tier, slot)
        shared = self.packs.shared_pos[batch.index]
        if shared.size:
            pending.shared_rows = self._segment_rows(batch.index)
        offset, length = self.packs.region(batch.index)
        if length:
            pending.read = self.reader.read_ranges_async([[offset, length, 0]], np.empty(length, dtype=np.uint8))
        return pending

    def finish(self, pending: "PendingBatch"):
        """Waits for the batch's read and assembles its stored host rows (every row but the device tier's).

        The copies run in numpy: its fancy indexing is 3-4x faster than torch's on CPU tensors,
        and the output tensor shares the array's memory.
        """
        batch, row, width = pending.batch, self.source.row_bytes, self.source.width
        out = self._torch.empty((batch.nodes.size, width), dtype=self.dtype, pin_memory=self.device != "cpu")
        rows = out.numpy()
        for t, cache in enumerate(self.tiers):
            mine = np.flatnonzero(pending.tier == t)
            if mine.size and not cache.on_device:
                rows[mine] = np.take(cache.rows.numpy(), pending.slot[mine], axis=0)
            self.tier_stats[t].hits += mine.size
            self.tier_stats[t].bytes += mine.size * row
        if pending.shared_rows is not None:
            shared = self.packs.shared_pos[batch.index]
            rows[shared] = pending.shared_rows
            self.page_cache.hits += shared.size
            self.page_cache.bytes += shared.size * row
        if pending.read is not None:
            buf = pending.read.wait()
            self.packs.check(batch.index, buf)
            positions = self.packs.own_pos[batch.index]
            rows[positions] = buf.view(self.source.dtype).reshape(-1, width)
            self.disk.hits += positions.size
            self.disk.bytes += buf.size
        pending.host = out
        return pending

    def to_device(self, pending: "PendingBatch"):
        """The model input: the assembled rows copied to the device (non-blocking from pinned
        memory), the device tier's rows filled in there, then decoded there, in the copy's
        stream: only stored rows cross to the device. Without a device the host rows are decoded here."""
        if self.device == "cpu":
            return self.source.decode_torch(pending.host)
        torch = self._torch
        x = pending.host.to(self.device, non_blocking=True)
        for t, cache in enumerate(self.tiers):
            mine = np.flatnonzero(pending.tier == t)
            if mine.size and cache.on_device:
                x[torch.from_numpy(mine).to(self.device)] = cache.rows[
                    torch.from_numpy(pending.slot[mine].astype(np.int64)).to(self.device)]
        return self.source.decode_torch(x)

    def _segment_rows(self, b: int) -> np.ndarray:
        """Batch b's shared rows, gathered from its segment region through the page cache."""
        r = self.packs.segment_region(b)
        offset, length = self.packs.region(r)
        if self._segment_reader is None:
            self._segment_reader = FileReader(self.packs.path, "pread", direct=False)
        if r not in self._checked_segments:
            whole = np.empty(length, dtype=np.uint8)
            self._segment_reader.read_ranges([[offset, length, 0]], whole)
            self.packs.check(r, whole)
            self._checked_segments.add(r)
        slots = self.packs.shared_slot[b]
        rows = self._segment_reader.gather_rows(slots, self.source.row_bytes, base_offset=offset,
                                                num_rows=length // self.source.row_bytes)
        return rows.view(self.source.dtype).reshape(slots.size, -1)

    def close(self) -> None:
        self.reader.close()
        if self._segment_reader is not None:
            self._segment_reader.close()
