"""The feature store: a batch's input rows from a chain of tiers, behind three calls the pipeline spreads
over its threads.

`start` walks the chain (store/tiers.py): each tier claims the positions it
holds among those still unserved and starts fetching them (the pack read is
submitted and returns at once, so several batches are in flight); `finish`
waits and writes every host tier's rows into one (pinned, with CUDA) matrix
(in batch order: the pipeline's assemble stage is one thread, which the
recent-rows tier relies on);
`to_device` copies it to the device, fills the device tier's rows there and
decodes the stored rows into the model's float32 input, so that only stored
rows cross to the device. Each tier's hits and bytes are counted here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.features import FeatureSource, feature_source
from ..data.format import Dataset
from ..errors import DiskgnnError
from ..offline.pack import PackFile
from ..offline.placement import Placement
from .tiers import FileTier, PackTier, PlacedTier, RecentTier, SegmentTier, TierStats, load_tiers


@dataclass
class PendingBatch:
    """A batch between the pipeline's read, assemble and copy stages."""

    batch: "object"
    claims: list  # per tier of the chain: (positions it serves, its fill state)
    host: "object" = None  # the assembled host rows (torch.Tensor)


class FeatureStore:
    """Assembles each batch's input features from the memory tiers and its pack (or, without packs, from the
    feature file)."""

    def __init__(self, dataset: Dataset, placement: Placement, packs: PackFile | None, *, device: str = "cpu",
                 backend: str = "auto", tiers: list[PlacedTier] | None = None,
                 features: FeatureSource | None = None):
        """`features`: the rows the packs and tiers hold (default: features.bin); packs of other
        rows are refused. `tiers`: the placement's rows already loaded (load_tiers), shared by the
        stores of several pack files (each epoch's, the eval sets'); loaded here when not given.
        `packs` None: any ids, the rows no tier holds gathered from the feature file."""
        import torch

        self.source = features or feature_source(dataset)
        self.packs, self.device = packs, device
        self.dtype = torch.from_numpy(np.empty(0, self.source.dtype)).dtype
        placed = tiers if tiers is not None else load_tiers(dataset, placement, device, backend, self.source)
        if packs is None:
            self.chain = [*placed, FileTier(self.source, backend)]
        else:
            packs.check_features(self.source)
            recent = [RecentTier(packs, self.source, backend)] if packs.batch_rows.window else []
            self.chain = [*placed, *recent, SegmentTier(packs, self.source), PackTier(packs, self.source, backend)]
        self.tier_stats = [TierStats(t.name) for t in self.chain]
        self._torch = torch

    @property
    def backend(self) -> str:
        return self.chain[-1].reader.backend

    @property
    def disk(self) -> TierStats:
        return self.tier_stats[-1]

    def stats(self) -> list[TierStats]:
        return self.tier_stats

    def load(self, batch):
        """The model input of batch.nodes (float32, decoded), row i for node i, on the store's device."""
        return self.to_device(self.finish(self.start(batch)))

    def start(self, batch) -> PendingBatch:
        """Each tier claims its rows, fastest first; reads start (returns at once)."""
        todo = np.arange(batch.nodes.size)
        claims = []
        for tier in self.chain:
            held, state = tier.claim(batch, todo)
            claims.append((todo[held], state))
            todo = todo[~held]
        if todo.size:
            raise DiskgnnError(f"{self.packs.path}: batch {batch.index} needs {todo.size} rows that no memory tier "
                               "and no pack region holds (the packs were written for another placement); pack again")
        return PendingBatch(batch, claims)

    def finish(self, pending: PendingBatch) -> PendingBatch:
        """Waits for the batch's reads and assembles its stored host rows (every tier's but the device's)."""
        batch, row = pending.batch, self.source.row_bytes
        out = self._torch.empty((batch.nodes.size, self.source.width), dtype=self.dtype,
                                pin_memory=self.device != "cpu")
        rows = out.numpy()  # shares the tensor's memory
        for tier, stats, (positions, state) in zip(self.chain, self.tier_stats, pending.claims):
            stats.hits += positions.size
            stats.bytes += positions.size * row
            if not tier.on_device:
                tier.fill(batch, positions, state, rows)
        for tier in self.chain:
            tier.assembled(batch, rows)
        pending.host = out
        return pending

    def to_device(self, pending: PendingBatch):
        """The model input on the device: the host rows copied (non-blocking from pinned memory), the
        device tier's rows filled in there, then decoded there, in the copy's stream. Without a device
        the host rows are decoded here."""
        if self.device == "cpu":
            return self.source.decode_torch(pending.host)
        x = pending.host.to(self.device, non_blocking=True)
        for tier, (positions, state) in zip(self.chain, pending.claims):
            if tier.on_device and positions.size:
                tier.fill(pending.batch, positions, state, x)
        return self.source.decode_torch(x)

    def close(self) -> None:
        for tier in self.chain:
            tier.close()
