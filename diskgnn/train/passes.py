"""A Loader's passes over batches, and what its train passes did (stage times, tier rows, disk bytes, rows).

A `Pass` runs one pipeline over batches in order (an epoch's, from a resumed epoch's next batch on, or a split's);
an `EvalPass` is a split's eval set chunk by chunk (offline/eval_sets.py), each chunk a Pass. A typed pass's
batches are laid out on the host and moved by the target where the step runs, and its store (a tier chain per
featured type) is closed when it ends, its rows counted into the loader's per-type counters.
"""

from __future__ import annotations

from contextlib import closing

import numpy as np

from ..loading.loaders import MiniBatch
from ..loading.pipeline import StageTime
from ..offline.eval_sets import EvalSet


class PassAccounting:
    """What the Loader's train passes did, summed: stage times, each tier's rows and bytes, disk bytes, the rows
    and seeds trained (a checkpoint keeps `accounting`)."""

    def __init__(self):
        self.stage_times: dict[str, StageTime] = {}
        # Summed over the trained batches: input rows, each layer's destinations (input layer first), seeds.
        self.trained = {"batches": 0, "input_rows": 0, "destinations": [], "seeds": 0}
        # Tier hits and bytes and disk bytes, summed over finished train passes.
        self.accounting = {"tiers": {}, "disk_bytes": 0}

    def _finished(self, p: "Pass", pipeline) -> None:
        """Closes a typed pass's store, its rows counted per type; adds a train pass's stage times, tier rows and
        disk bytes to the run's."""
        if self.typed:
            self.source.add(p.source.store)
            p.source.store.close()
        if not p.train or pipeline is None:
            return
        for name, t in pipeline.times.items():
            acc = self.stage_times.setdefault(name, StageTime())
            acc.busy_s += t.busy_s
            acc.wait_s += t.wait_s
            acc.items += t.items
        tiers = self.accounting.setdefault("tiers", {})  # (a typed run's last.pt of an earlier version has none)
        for s in p.stats():
            t = tiers.setdefault(s.name, {"hits": 0, "bytes": 0})
            t["hits"] += s.hits
            t["bytes"] += s.bytes
        self.accounting["disk_bytes"] = self.accounting.get("disk_bytes", 0) + p.disk_bytes()
        self.accounting["backend"] = p.source.store.backend  # the reader's, "auto" resolved

    def _count(self, mb: MiniBatch) -> None:
        t = self.trained
        t["batches"] += 1
        if self.typed:
            t["input_rows"] += sum(int(x.shape[0]) for x in mb.x.values())
            t["seeds"] += mb.num_seeds
            return
        t["input_rows"] += int(mb.x.shape[0])
        t["seeds"] += int(mb.labels.numel())
        dst = mb.destinations
        t["destinations"] = [a + b for a, b in zip(t["destinations"], dst)] if t["destinations"] else dst

    def rows_per_batch(self) -> dict:
        """Mean input rows and destinations per layer (input layer first) of the batches trained so far."""
        n = max(1, self.trained["batches"])
        return {"input": self.trained["input_rows"] / n, "destinations": [d / n for d in self.trained["destinations"]]}

    @property
    def backend(self) -> str:
        """The reader backend the finished train passes read with ("auto" resolved; --backend before any)."""
        return self.accounting.get("backend", self.cfg.backend)

    def stats(self) -> dict:
        """Rows and bytes served by each tier (memory tiers, page cache, disk) over the finished train passes,
        with each tier's share of the rows (a typed run's: every featured type's together)."""
        tiers = {name: dict(t) for name, t in self.accounting.get("tiers", {}).items()}
        rows = sum(t["hits"] for t in tiers.values())
        for t in tiers.values():
            t["hit_rate"] = t["hits"] / rows if rows else 0.0
        return tiers


class Pass:
    """One pass over batches in order: iterating runs the pipeline and yields MiniBatches as they are ready
    (once; stopping early closes the pipeline). `stats()` and `disk_bytes()` count this pass's rows."""

    def __init__(self, loader, source, order: np.ndarray, start: int, train: bool):
        self.loader, self.source, self.order, self.start, self.train = loader, source, order, start, train

    def __len__(self) -> int:
        """Batches in the whole pass (those before `start` included)."""
        return len(self.order)

    def __iter__(self):
        if self.source is None:
            return
        loader, pipeline = self.loader, None
        try:
            if self.start >= len(self.order):
                return
            pipeline = self.source.pipeline(self.order[self.start:])
            with pipeline:
                for mb in pipeline:
                    mb.wait()  # the consumer's stream waits for the batch's copies
                    if self.train:
                        loader._count(mb)
                    yield loader.target.typed_batch(mb) if loader.typed else mb
        finally:
            loader._finished(self, pipeline)

    def stats(self) -> list:
        return self.source.stats() if self.source is not None else []

    def disk_bytes(self) -> int:
        return self.source.disk_bytes() if self.source is not None else 0


class EvalPass:
    """An evaluation's batches, chunk by chunk (offline/eval_sets.py), each chunk a Pass."""

    def __init__(self, loader, eval_set: EvalSet, split: str):
        self.loader, self.eval_set, self.split = loader, eval_set, split

    def __len__(self) -> int:
        return len(self.eval_set)

    def __iter__(self):
        with closing(self.eval_set.chunks()) as chunks:
            for files in chunks:
                source = self.loader._offline_source(files, self.split)
                yield from Pass(self.loader, source, np.arange(len(files.samples)), 0, train=False)
