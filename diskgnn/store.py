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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .format import Dataset
from .pack import PackFile
from .placement import Placement
from .reader import FileReader, open_features


@dataclass
class TierStats:
    name: str
    hits: int = 0
    bytes: int = 0


@dataclass
class MemoryTier:
    """Rows of the placement's tier `index`, as one tensor in the tier's memory."""

    name: str
    rows: "object"  # torch.Tensor [num_rows, dim]
    stats: TierStats = field(init=False)

    def __post_init__(self):
        self.stats = TierStats(self.name)


def load_tier(dataset: Dataset, name: str, ids: np.ndarray, device: str, backend: str = "auto") -> MemoryTier:
    """Reads a tier's rows with coalesced gathers (ids are sorted, so reads run forwards)."""
    import torch

    with open_features(dataset.path, backend) as features:
        host = features.gather(ids)
    if device != "cpu":
        host = host.to(device)
    elif torch.cuda.is_available():
        host = host.pin_memory()
    return MemoryTier(name, host)


class FeatureStore:
    """Assembles each batch's input features from the memory tiers and its pack."""

    def __init__(self, dataset: Dataset, placement: Placement, packs: PackFile, *, device: str = "cpu",
                 backend: str = "auto"):
        import torch

        self.dataset = dataset
        self.placement = placement
        self.packs = packs
        self.device = device
        self.dtype = torch.from_numpy(np.empty(0, dataset.feature_dtype)).dtype
        self.tiers = [load_tier(dataset, name, ids, device if t == 0 else "cpu", backend)
                      for t, (name, ids) in enumerate(zip(placement.tier_names, placement.tier_ids))]
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
        return [t.stats for t in self.tiers] + [self.page_cache, self.disk]

    def load(self, batch):
        """The features of batch.nodes, row i for node i, on the host."""
        torch = self._torch
        n, dim = batch.nodes.size, self.dataset.feature_dim
        out = torch.empty((n, dim), dtype=self.dtype)
        tier, slot = self.placement.locate(batch.nodes)
        for t, cache in enumerate(self.tiers):
            mine = np.flatnonzero(tier == t)
            if mine.size:
                out[torch.from_numpy(mine)] = cache.rows[torch.from_numpy(slot[mine])].to(out.device)
                cache.stats.hits += mine.size
                cache.stats.bytes += mine.size * self.dataset.row_bytes
        shared = self.packs.shared_pos[batch.index]
        if shared.size:
            rows = self._segment_rows(batch.index)
            out[torch.from_numpy(shared.astype(np.int64))] = torch.from_numpy(rows)
            self.page_cache.hits += shared.size
            self.page_cache.bytes += shared.size * self.dataset.row_bytes
        offset, length = self.packs.region(batch.index)
        positions = self.packs.own_pos[batch.index]
        if length:
            buf = np.empty(length, dtype=np.uint8)
            self.reader.read_ranges([[offset, length, 0]], buf)
            self.packs.check(batch.index, buf)
            rows = torch.from_numpy(buf.view(self.dataset.feature_dtype).reshape(-1, dim))
            out[torch.from_numpy(positions.astype(np.int64))] = rows
            self.disk.hits += positions.size
            self.disk.bytes += length
        return out

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
        rows = self._segment_reader.gather_rows(slots, self.dataset.row_bytes, base_offset=offset,
                                                num_rows=length // self.dataset.row_bytes)
        return rows.view(self.dataset.feature_dtype).reshape(slots.size, -1)

    def close(self) -> None:
        self.reader.close()
        if self._segment_reader is not None:
            self._segment_reader.close()
