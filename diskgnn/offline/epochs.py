"""Each epoch's offline work: its sample file and its packs, prepared one epoch ahead.

Epoch 0 is sampled first and its access counts decide the placement (which
rows the memory tiers hold) for the whole run: which rows are hot is a
property of the graph's degrees, so it barely changes between epochs, while
reloading the tiers every epoch would cost a full read of them. Every epoch's
packs are written against that placement. In the default mode each epoch has
fresh samples, and epoch e + 1 is sampled and packed in a background thread
while epoch e trains (the native sampler and packer release the GIL); at
most two epochs' files are on disk at once. In replay mode (DiskGNN's) epoch
0's samples and packs are reused, visited in a new order each epoch.
Placement budgets and packs count the stored rows of the run's FeatureSource,
so a quantized variant's code rows fill 4-32x more of a tier and of a pack.
With `recent` = W, each fresh epoch's packs leave out the rows one of the W
batches before already read (the store's recent-rows tier serves them); a
replayed epoch is visited in a new order, and the eval sets in any, so
their packs hold every cold row.
Under torchrun (diskgnn/distributed/), `shard` keeps the train batches this
rank trains (data parallelism); for cooperative minibatching every rank
samples the whole global batch and `rows` narrows what its placement and
packs see to the input rows it owns.
A typed dataset's epochs are the same files, its rows per featured node type:
epoch 0's reads counted per type, one memory tier placed across the types by
the run (`place_held`), each epoch packed per type (`pack_types`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..data.features import FeatureSource
from ..data.format import Dataset
from .batches import TypeView
from .link_batches import LinkEpoch, LinkSpec
from .pack import PackFile, pack_counts, pack_epoch
from .partitions import EdgeBuckets
from .placement import Placement, access_counts, held_placement, place
from .batches import SampleFile
from .sample import NEIGHBOR, Sampler, batch_order, read_topology_ahead, sample_epoch


@dataclass
class EpochFiles:
    samples: SampleFile
    packs: PackFile | dict  # a typed epoch's: per featured node type

    @property
    def paths(self) -> list[Path]:
        packs = self.packs.values() if isinstance(self.packs, dict) else [self.packs]
        return [*self.samples.paths, *(path for p in packs for path in p.paths)]


@dataclass(frozen=True)
class EpochSpec:
    """What every epoch's offline work follows; the run's plan makes it (train/plan.py, offline_spec).

    `pack_memory`: the packer's share of the run's memory; `recent`: the recent-rows tier's window (none
    for replay); `shard`: (rank, world) of the train batches this rank keeps; `rows`: the view of a sample file
    whose input rows this rank places, packs and reads (default: all of them); `eval_batch_size`: the eval
    sets' (default: `batch_size`), whose batches are those one process evaluates, every world-th one this
    rank's (`eval_shard`: rank, world), so that their sums over the ranks are one process's evaluation; `hag`:
    a HagBuilder whose HAGs every sample file stores (loading/hag.py); `read_ahead`: the topology read into the
    page cache before each sampling pass; `link`: --task link's batching, whose batches' seeds are their
    edges' endpoints and negatives (link_batches.LinkEpoch); `partitions`: (P, buffer capacity) of a partitioned
    link epoch (--embedding-partitions, offline/partitions.py)."""

    fanouts: tuple  # per hop; a typed graph's per hop and relation
    batch_size: int
    seed: int
    pack_memory: int
    features: FeatureSource | dict  # a typed graph's: per featured node type
    replay: bool = False
    max_blowup: float | None = None
    threads: int | None = None
    max_batches: int | None = None
    read_ahead: bool = False
    sampler: Sampler = NEIGHBOR
    recent: int = 0
    shard: tuple[int, int] = (0, 1)
    rows: Callable | None = None
    eval_batch_size: int | None = None
    eval_shard: tuple[int, int] = (0, 1)
    hag: object = None
    link: LinkSpec | None = None
    partitions: tuple[int, int] | None = None


def pack_types(dataset: Dataset, samples, placements: dict[str, Placement], out_dir, name: str, *, pack_memory: int,
               sources: dict[str, FeatureSource], threads: int | None = None, max_blowup: float | None = None,
               recent: int = 0) -> tuple[dict[str, PackFile], dict]:
    """A typed epoch's packs: per featured node type, each batch's rows of that type its memory tier
    (`placements[type]`) does not hold, written into `out_dir/<name>.<type>.packs` by pack_epoch from the type's view
    of the sample file (one front-to-back pass over its rows, `sources[type]`: as stored, or a quantized variant's
    code rows). The types are packed one after another: their
    rows differ in size, each has its own feature file, and the packer's buffers are then one type's at a time.
    `max_blowup` caps each type's packed rows against that type's count, `recent` leaves out of each type's packs
    the rows one of the `recent` batches before read (each type's store has its recent-rows tier), as for one
    type. Returns the packs and the packer's statistics summed over the types."""
    files, stats = {}, {}
    for t, ty in enumerate(dataset.schema.types):
        if not ty.feature_dim:
            continue
        packs = pack_epoch(None, TypeView(samples, t), placements[ty.name], Path(out_dir) / f"{name}.{ty.name}.packs",
                           features=sources[ty.name], pack_memory=pack_memory,
                           threads=threads, max_blowup=max_blowup, recent=recent)
        files[ty.name] = packs
        for key, value in packs.packing.items():
            if isinstance(value, (int, float)):
                stats[key] = stats.get(key, 0) + value
    return files, stats


def delete(files: EpochFiles) -> None:
    """Deletes an epoch's (or an eval chunk's) sample and pack files."""
    for path in files.paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class OfflineEpochs:
    def __init__(self, dataset: Dataset, workdir: Path, spec: EpochSpec):
        self.dataset, self.dir, self.spec = dataset, Path(workdir), spec
        self.typed = dataset.typed  # rows per node type: counted, placed and packed per featured type
        self.rows = spec.rows or (lambda samples: samples)
        self.source = spec.features
        self.recent = 0 if spec.replay else spec.recent
        # Fresh-sample epochs that stop after max_batches need only those; replay visits a random subset.
        self.max_batches = None if spec.replay else spec.max_batches
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pack_s = 0.0
        # Where the offline seconds went, summed over every pass (summary.json's "offline").
        self.phases = dict.fromkeys(("read_ahead_s", "sampling_s", "placement_s", "pack_plan_s", "pack_write_s",
                                     "pack_buffer_wait_s", "pack_read_wait_s", "pack_bytes_written"), 0.0)
        self.placement: Placement | dict | None = None  # a typed run's: per featured type
        self._ready: dict[int, EpochFiles] = {}
        self._samples0: SampleFile | None = None
        self._input_rows0 = 0  # epoch 0's input rows in all, counted by sample_first
        self.counts0: np.ndarray | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._buckets: EdgeBuckets | None = None

    def _sample(self, out_name: str, **kwargs) -> SampleFile:
        start = time.perf_counter()
        spec = self.spec
        if spec.read_ahead:
            read_topology_ahead(self.dataset)
        sampling = time.perf_counter()
        kwargs.setdefault("batch_size", spec.batch_size)
        sf = sample_epoch(self.dataset, self.dir / out_name, seed=spec.seed, threads=spec.threads,
                          sampler=spec.sampler, hag=spec.hag, **kwargs)
        self.phases["read_ahead_s"] += sampling - start
        self.phases["sampling_s"] += time.perf_counter() - sampling
        return sf

    @property
    def sample_s(self) -> float:
        """Seconds in sampling passes, the topology's read-ahead included."""
        return self.phases["read_ahead_s"] + self.phases["sampling_s"]

    def sample(self, epoch: int) -> SampleFile:
        link = None if self.spec.link is None else self.link_batches(epoch)
        rows = 0 if link is None or link.buckets is None else link.buckets.rows
        return self._sample(f"epoch-{epoch:05d}.samples", fanouts=list(self.spec.fanouts), epoch=epoch,
                            max_batches=self.max_batches, shard=self.spec.shard, batches=link, partition_rows=rows)

    def link_batches(self, epoch: int) -> LinkEpoch:
        """--task link: the epoch's batches (their seeds are what sample() samples, each computed when asked)."""
        ds, spec = self.dataset, self.spec
        if spec.partitions is not None and self._buckets is None:
            start = time.perf_counter()
            self._buckets = EdgeBuckets.train(ds.indptr, ds.indices, spec.partitions[0], self.dir / "edge-buckets.bin")
            self.phases["buckets_s"] = time.perf_counter() - start
        return LinkEpoch(ds.indptr, ds.indices, spec.link, seed=spec.seed, epoch=epoch, buckets=self._buckets,
                         capacity=0 if spec.partitions is None else spec.partitions[1])

    def take_counts0(self) -> np.ndarray | None:
        """Epoch 0's access counts, handed over once (4 bytes a node freed here)."""
        counts, self.counts0 = self.counts0, None
        return counts

    def follow(self, spec: EpochSpec) -> None:
        """What the epochs follow from here on: the run's refined plan's packer buffers and topology read-ahead
        (before epoch 0 is packed; its samples stay as sampled)."""
        self.spec = spec

    def sample_first(self) -> int:
        """Samples epoch 0 and counts, in one pass over its batches as this rank's store sees them, how many read
        each node (`counts0`, what placement ranks rows by) and how many input rows each reads: returns the most."""
        self._samples0 = self.sample(0)
        start = time.perf_counter()
        if self.typed:  # one pass over epoch 0: every featured type's reads, each batch's rows
            featured = [(t, ty) for t, ty in enumerate(self.dataset.schema.types) if ty.name in self.source]
            self.counts0 = {ty.name: np.zeros(ty.count, np.int32) for _, ty in featured}
            sizes = []
            for batch in self._samples0:
                for t, ty in featured:
                    self.counts0[ty.name][batch.type_nodes[t]] += 1  # a batch's nodes of a type are distinct
                sizes.append(sum(batch.type_nodes[t].size for t, _ in featured))
            self._input_rows0 = int(sum(sizes))
            self.phases["placement_s"] += time.perf_counter() - start
            return int(max(sizes, default=0))
        sizes = []

        def batches():
            for batch in self.rows(self._samples0):
                sizes.append(batch.nodes.size)
                yield batch

        self.counts0 = access_counts([batches()], self.dataset.num_nodes)
        self._input_rows0 = int(sum(sizes))
        self.phases["placement_s"] += time.perf_counter() - start
        return int(max(sizes, default=0))

    def plan_placement(self, budgets: list[tuple[str, int]], keep_counts: bool = False) -> Placement:
        """Places epoch 0's hottest rows (sample_first) in the tiers (name, byte budget); `keep_counts`: its
        access counts stay as `counts0` (learnable embeddings place their hot rows from them too)."""
        start = time.perf_counter()
        self.placement = place(self.counts0, self.source.row_bytes, budgets)
        if not keep_counts:
            self.counts0 = None
        self.phases["placement_s"] += time.perf_counter() - start
        return self.placement

    def place_held(self, held: dict[str, np.ndarray]) -> dict[str, Placement]:
        """A typed run's memory tier: per featured type the sorted ids `held[type]` (chosen across the types and
        their tables by placement.densest); epoch 0's counts give their expected hit rates."""
        counts = self.counts0 or {}
        self.placement = {name: held_placement(src.num_rows, held.get(name, np.empty(0, np.int64)), counts.get(name))
                          for name, src in self.source.items()}
        return self.placement

    @property
    def samples0(self) -> SampleFile:
        """Epoch 0's sample file (sample_first's)."""
        return self._samples0

    def samples_bytes(self) -> int:
        """Size of epoch 0's sample file (every epoch's is about the same)."""
        return self._samples0.meta["file_bytes"]

    def epoch0_rows(self) -> dict:
        """Epoch 0's rows as its packs will see them: input rows per batch, rows the packs hold (every cold access
        not served by the recent-rows tier) and rows that tier serves, and the packs' bytes before any blow-up
        cap (4 KiB-padded)."""
        samples = self.rows(self._samples0)
        packed, recent = pack_counts(samples, self.placement, self.spec.threads or os.cpu_count() or 1, self.recent)
        batches = max(1, len(samples))
        total = packed * self.source.row_bytes + 4096 * len(self._samples0)
        if self.spec.max_blowup is not None:
            total = min(total, int(self.spec.max_blowup * self.dataset.num_nodes * self.source.row_bytes))
        inputs = self._input_rows0
        return {"input_rows_per_batch": inputs / batches, "packed_rows": packed, "recent_rows": recent,
                "input_rows": inputs, "pack_bytes": total}

    def pack(self, samples: SampleFile, name: str, recent: int = 0) -> PackFile:
        start = time.perf_counter()
        spec = self.spec
        if self.typed:
            packs, stats = pack_types(self.dataset, samples, self.placement, self.dir, name.removesuffix(".packs"),
                                      pack_memory=spec.pack_memory, sources=self.source, threads=spec.threads,
                                      max_blowup=spec.max_blowup, recent=recent)
        else:
            packs = pack_epoch(self.dataset, samples, self.placement, self.dir / name, max_blowup=spec.max_blowup,
                               pack_memory=spec.pack_memory, threads=spec.threads, features=self.source,
                               recent=recent)
            stats = packs.packing
        self.pack_s += time.perf_counter() - start
        for key, phase in (("plan_s", "pack_plan_s"), ("write_s", "pack_write_s"), ("buffer_wait_s",
                           "pack_buffer_wait_s"), ("read_wait_s", "pack_read_wait_s"),
                           ("bytes_written", "pack_bytes_written")):
            self.phases[phase] += stats[key]
        return packs

    def eval_files(self, split: str, seeds: np.ndarray | None, fanouts, epoch_key: int,
                   max_batches: int | None = None, batches=None, first: int = 0,
                   name: str | None = None) -> EpochFiles:
        """This rank's eval batches of a split from batch `first` on (at most `max_batches` in all ranks), sampled
        and packed into files `name` (default: the split's): batches of `seeds`, or the given `batches`' seeds
        (link prediction's held-out edges)."""
        name = name or split
        samples = self._sample(f"{name}.samples", fanouts=list(fanouts), epoch=epoch_key, seeds=seeds,
                               max_batches=max_batches, batch_size=self.eval_batch_size,
                               shard=self.spec.eval_shard, every_batch=True, batches=batches, first_batch=first)
        return EpochFiles(samples, self.pack(samples, f"{name}.packs"))

    @property
    def eval_batch_size(self) -> int:
        return self.spec.eval_batch_size or self.spec.batch_size

    def settle(self) -> None:
        """Waits for the background epoch to be made (its error, if any, is raised when its files are asked for):
        the eval sets' packer then runs alone, as the plan counts it."""
        if self._thread is not None:
            self._thread.join()

    def _prepare(self, epoch: int) -> EpochFiles:
        samples = self._samples0 if epoch == 0 else self.sample(epoch)
        return EpochFiles(samples, self.pack(self.rows(samples), f"epoch-{epoch:05d}.packs", self.recent))

    def files(self, epoch: int) -> EpochFiles:
        """Epoch's files, waiting for the background preparation when it is running (not where they are made: a
        pass that goes on mid-epoch, after a validation, does not wait for the next epoch's)."""
        key = 0 if self.spec.replay else epoch
        if key in self._ready:
            return self._ready[key]
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._error is not None:
                error, self._error = self._error, None
                raise error
        if key not in self._ready:
            self._ready[key] = self._prepare(key)
        return self._ready[key]

    def order(self, epoch: int, num_batches: int) -> np.ndarray:
        return batch_order(num_batches, self.spec.seed, epoch) if self.spec.replay else np.arange(num_batches)

    def prefetch(self, epoch: int) -> None:
        """Starts preparing `epoch` in the background (nothing to do in replay mode)."""
        if self.spec.replay or epoch in self._ready or self._thread is not None:
            return

        def run():
            try:
                self._ready[epoch] = self._prepare(epoch)
            except BaseException as e:  # noqa: BLE001 - re-raised by files()
                self._error = e

        self._thread = threading.Thread(target=run, name="diskgnn-next-epoch", daemon=True)
        self._thread.start()

    def release(self, epoch: int) -> None:
        """Deletes a finished epoch's files (fresh-sample mode keeps two epochs on disk at most)."""
        if self.spec.replay or epoch not in self._ready:
            return
        delete(self._ready.pop(epoch))

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
