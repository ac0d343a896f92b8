"""The feature store: a batch's input rows from a chain of tiers, behind three calls the pipeline spreads
over its threads.

`start` walks the chain (store/tiers.py): each tier claims the positions it
holds among those still unserved and starts fetching them into the batch's
staging slab (the pack read is submitted and returns at once, so several
batches are in flight); `finish` waits for them and learns from every tier
where its rows are (`Rows`); `to_device` puts them in place. Two ways:

- on a CPU (`HostAssembly`), `finish` writes every tier's rows into the
  batch's matrix in one native multi-threaded call, which is the model's
  input after decoding;
- with a device (`DeviceAssembly`), `finish` gathers what the CPU must (a
  host tier's rows where the GPU does not read them itself) into the pinned
  slab, and `to_device`, on a copy stream, sends the slab's rows across as
  one copy and puts every row in place on the device by index: slab rows,
  device-tier rows, zero-copy rows the GPU reads from host memory, rows an
  earlier batch brought. The CPU copies no row one by one.

Batches pass `finish` in order (the pipeline's assemble stage is one thread),
and `to_device` likewise, which the recent-rows tier relies on. Each tier's
hits and bytes are counted here.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import defaults
from ..data.features import FeatureSource, feature_source
from ..data.format import Dataset
from ..errors import DiskgnnError
from ..offline.pack import PackFile
from ..offline.placement import Placement
from .staging import Slab, Slabs
from .tiers import FileTier, PackTier, PlacedTier, RecentTier, Rows, SegmentTier, TierStats, load_tiers

# Batches the pipeline holds between the start of their reads and the end of their copy, beyond the reads in
# flight: the read stage's own, the assemble stage's and its queue of 2, the copy stage's (loading/loaders.py).
HELD_BEYOND_READS = {"host": 2, "device": 5}


@dataclass
class PendingBatch:
    """A batch between the pipeline's read, assemble and copy stages."""

    batch: "object"
    slab: Slab | None  # None once returned
    claims: list  # per tier of the chain: (positions it serves, its state)
    rows: list = field(default_factory=list)  # where each tier's rows are (finish)
    host: "object" = None  # the assembled host rows (host assembly)
    ids: int = 0  # device assembly: ids written into the slab's id buffer
    ready: "object" = None  # device assembly: the event after the batch's rows are in place
    record: "object" = None  # device assembly: the batch's record (target/record.py), crossing after the ids
    words: "object" = None  # ... and where it landed on the device


def _flat(rows: list) -> list[Rows]:
    out = []
    for r in rows:
        if isinstance(r, list):
            out.extend(r)
        elif r is not None:
            out.append(r)
    return out


def _host_table(table) -> bool:
    return isinstance(table, np.ndarray)


class _Assembly:
    copy_stream = None  # the CUDA stream a batch's copies run on

    def stream(self):
        """The copy stream's context (the batch's other tensors are copied under it too)."""
        return torch.cuda.stream(self.copy_stream) if self.copy_stream is not None else contextlib.nullcontext()


class HostAssembly(_Assembly):
    """Every tier's rows written into the batch's host matrix by one native call (the CPU path)."""

    device = torch.device("cpu")
    pinned = False
    held_beyond_reads = HELD_BEYOND_READS["host"]

    def finish(self, store: "FeatureStore", pending: PendingBatch) -> None:
        from .. import _native

        n, slab = pending.batch.nodes.size, pending.slab
        out = torch.empty((n, store.source.width), dtype=store.dtype)
        rows = out.numpy()
        sources = []
        for r in _flat(pending.rows):
            table = r.resolved()
            if table is None:
                sources.append((slab.rows.numpy()[r.first: r.first + r.positions.size], None, r.positions, 0))
            else:
                sources.append((table, r.slots, r.positions, 0))
        _native.assemble_rows(_bytes(rows), [(_bytes(t), s, p, f) for t, s, p, f in sources],
                              defaults.aggregate_threads())
        store.release(pending)
        for tier in store.chain:
            tier.assembled(pending.batch, rows)
        pending.host = out

    def to_device(self, store: "FeatureStore", pending: PendingBatch):
        return pending.host


def _bytes(rows) -> np.ndarray:
    """Host rows (numpy, or a CPU tensor) as a (n, row_bytes) uint8 view."""
    rows = rows.numpy() if isinstance(rows, torch.Tensor) else rows
    return rows.view(np.uint8)  # 2-d and C-contiguous: the last axis widens to bytes


class DeviceAssembly(_Assembly):
    """The batch's rows put in place on `device` (the GPU path): host rows cross as one copy of the pinned slab
    on a copy stream, then every row goes to its place by index there. On a CPU device (tests) the same index
    logic runs with plain tensors."""

    held_beyond_reads = HELD_BEYOND_READS["device"]

    def __init__(self, device):
        self.device = torch.device(device)
        self.pinned = self.device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(self.device) if self.pinned else None

    def finish(self, store: "FeatureStore", pending: PendingBatch) -> None:
        """Host tables' rows gathered into the slab by one native call; then the slab's id buffer: the batch
        positions of the slab's rows, then each device-side table's slots and positions."""
        from .. import _native

        slab, rows = pending.slab, _flat(pending.rows)
        gathers, placed = [], []
        for r in rows:
            if r.table is not None and _host_table(r.table):
                first, _ = slab.take(r.positions.size)
                gathers.append((_bytes(r.table), r.slots, None, first))
                placed.append(Rows(r.positions, first=first))
            else:
                placed.append(r)
        if gathers:
            _native.assemble_rows(slab.rows.numpy(), gathers, defaults.aggregate_threads())
        ids = slab.ids.numpy()
        used = slab.used
        for r in placed:
            if r.table is None:
                ids[r.first: r.first + r.positions.size] = r.positions
        end = used
        for r in placed:
            if r.table is not None:
                n = r.positions.size
                ids[end: end + n] = r.slots
                ids[end + n: end + 2 * n] = r.positions
                end += 2 * n
        if pending.record is not None:  # the batch's structure crosses in the ids' copy
            words = pending.record.words
            ids[end: end + words.size] = words
            end += words.size
        pending.rows, pending.ids = placed, end

    def to_device(self, store: "FeatureStore", pending: PendingBatch):
        """The batch's stored rows on the device, issued on the copy stream (its event in pending.ready)."""
        slab, n = pending.slab, pending.batch.nodes.size
        with self.stream():
            x = torch.empty((n, store.source.width), dtype=store.dtype, device=self.device)
            # a copy even on a CPU standing in for the device: the record's views outlive the slab
            ids = slab.ids[: pending.ids].to(self.device, non_blocking=True, copy=True)
            if pending.record is not None:
                pending.words = ids[pending.ids - pending.record.words.size:]
            if slab.used:
                staged = slab.view(0, slab.used, store.dtype).to(self.device, non_blocking=True)
                x.index_copy_(0, ids[: slab.used], staged)
            end = slab.used
            for r in pending.rows:
                if r.table is None:
                    continue
                k = r.positions.size
                slots, positions = ids[end: end + k], ids[end + k: end + 2 * k]
                end += 2 * k
                table = r.resolved()
                if isinstance(table, torch.Tensor):
                    x.index_copy_(0, positions, table.index_select(0, slots))
                else:
                    table.gather(slots, positions, x)  # zero copy: the GPU reads host memory itself
            for tier in store.chain:
                tier.assembled(pending.batch, x)
            pending.ready = store.ready_event()
        store.release(pending, pending.ready)
        return x


class FeatureStore:
    """Assembles each batch's input features from the memory tiers and its pack (or, without packs, from the
    feature file)."""

    def __init__(self, dataset: Dataset, placement: Placement, packs: PackFile | None, *, device: str = "cpu",
                 backend: str = "auto", tiers: list[PlacedTier] | None = None,
                 features: FeatureSource | None = None, read_depth: int = defaults.READ_DEPTH,
                 slab_rows: int = 0, assembly=None):
        """`features`: the rows the packs and tiers hold (default: features.bin); packs of other
        rows are refused. `tiers`: the placement's rows already loaded (load_tiers), shared by the
        stores of several pack files (each epoch's, the eval sets'); loaded here when not given.
        `packs` None: any ids, the rows no tier holds gathered from the feature file. `read_depth`:
        batches whose reads the pipeline keeps in flight (the slabs made are that many plus what its later
        stages hold); `slab_rows`: the plan's bound on a batch's input rows (slabs grow past it when a batch
        needs more). `assembly`: HostAssembly on a CPU, DeviceAssembly(device) with one (the default)."""
        self.source = features or feature_source(dataset)
        self.packs, self.device = packs, device
        self.dtype = torch.from_numpy(np.empty(0, self.source.dtype)).dtype
        self.assembly = assembly or (HostAssembly() if device == "cpu" else DeviceAssembly(device))
        self.slabs = Slabs(read_depth + self.assembly.held_beyond_reads, slab_rows, self.source.row_bytes,
                           self.assembly.pinned)
        placed = tiers if tiers is not None else load_tiers(dataset, placement, device, backend, self.source)
        if packs is None:
            self.chain = [*placed, FileTier(self.source, backend)]
        else:
            packs.check_features(self.source)
            recent = [RecentTier(packs, self.source, backend)] if packs.batch_rows.window else []
            self.chain = [*placed, *recent, SegmentTier(packs, self.source), PackTier(packs, self.source, backend)]
        self.tier_stats = [TierStats(t.name) for t in self.chain]

    @property
    def backend(self) -> str:
        return self.chain[-1].reader.backend

    @property
    def disk(self) -> TierStats:
        return self.tier_stats[-1]

    def bytes_read(self) -> int:
        """What the reads of the last tier's file moved, sector-aligned (rows read by id: an online pass's)."""
        return self.chain[-1].reader.file.stats().get("bytes", 0)

    def stats(self) -> list[TierStats]:
        return self.tier_stats

    def stream(self):
        """The context the batch's copies to the device run in (the copy stream with CUDA)."""
        return self.assembly.stream()

    def ready_event(self):
        """An event after the work issued so far on the copy stream (None on a CPU): what a batch's consumer
        waits for."""
        stream = self.assembly.copy_stream
        if stream is None:
            return None
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def load(self, batch):
        """The model input of batch.nodes (float32, decoded), row i for node i, on the store's device, ready
        on the caller's stream."""
        x = self.to_device(self.finish(self.start(batch)))
        ready = self.ready_event()
        if ready is not None:
            stream = torch.cuda.current_stream(x.device)
            stream.wait_event(ready)
            x.record_stream(stream)
        return x

    def start(self, batch, record=None) -> PendingBatch:
        """Each tier claims its rows, fastest first; reads start into the batch's slab (returns at once).
        `record`: the batch's structure (target/record.py), which a device assembly sends with the ids."""
        todo = np.arange(batch.nodes.size)
        slab = self.slabs.acquire(batch.nodes.size, 0 if record is None else record.words.size)
        claims = []
        try:
            for tier in self.chain:
                held, state = tier.claim(batch, todo, slab)
                claims.append((todo[held], state))
                todo = todo[~held]
        except BaseException:
            claims.clear()  # reads already started into the slab are waited for (ReadHandle) before it is reused
            self.slabs.release(slab)
            raise
        if todo.size:
            self.slabs.release(slab)
            raise DiskgnnError(f"{self.packs.path}: batch {batch.index} needs {todo.size} rows that no memory tier "
                               "and no pack region holds (the packs were written for another placement); pack again")
        return PendingBatch(batch, slab, claims, record=record)

    def finish(self, pending: PendingBatch) -> PendingBatch:
        """Waits for the batch's reads and checks them; on a CPU, the batch's host rows assembled."""
        row = self.source.row_bytes
        try:
            for tier, stats, (positions, state) in zip(self.chain, self.tier_stats, pending.claims):
                stats.hits += positions.size
                stats.bytes += positions.size * row
                pending.rows.append(tier.served(pending.batch, positions, state))
            self.assembly.finish(self, pending)
        except BaseException:
            self.release(pending)
            raise
        return pending

    def to_device(self, pending: PendingBatch):
        """The model input on the store's device: the stored rows put in place (with a device, issued on the
        copy stream) and decoded there."""
        try:
            x = self.assembly.to_device(self, pending)
        except BaseException:
            self.release(pending)
            raise
        with self.stream():
            return self.source.decode_torch(x)

    def release(self, pending: PendingBatch, event=None) -> None:
        """Returns the batch's slab (once): its rows are in place, or the batch failed."""
        if pending.slab is not None:
            self.slabs.release(pending.slab, event)
            pending.slab = None

    def close(self) -> None:
        for tier in self.chain:
            tier.close()

