"""`diskgnn.Loader` on a heterogeneous dataset: the data side of a hetero run, for one's own training loop.

    with diskgnn.Loader("data/acm", fanouts="10,10", batch_size=128, memory_budget="2GiB") as loader:
        for epoch in range(3):
            for mb in loader.epoch(epoch):   # MiniBatch: hops[h][r] blocks, x[type], nodes[type], labels
                out = model(mb.hops, mb.x, mb.nodes)   # e.g. diskgnn.nn.hetero.HeteroGNN
                ...

`diskgnn.Loader(data)` returns one of these when `data` is a heterogeneous dataset. Constructing it checks the
options as `python -m diskgnn.train` does; opening it locks the workdir, samples epoch 0, makes the plan (the
model options size it: hidden, model, featureless) and fills the typed host tier. `epoch(e)` yields its batches
while e + 1 is sampled and packed in the background (asking for it deletes the files of the epoch before);
`evaluation(split)` the val or test batches (with --eval-fanouts, or every neighbour under eval="full").
"""

from __future__ import annotations

from typing import Callable

from ...errors import UsageError
from ..options import from_options
from .run import HeteroRun


class HeteroLoader:
    def __init__(self, data=None, *, config=None, log: Callable[[str], None] | None = print, **options):
        self.cfg = config if config is not None else from_options(data=None if data is None else str(data),
                                                                   **options)
        if self.cfg.featureless == "table":
            raise UsageError("featureless='table': the tables train inside python -m diskgnn.train (their rows are "
                             "stepped after each backward pass); a Loader's own loop takes learned or hashed rows")
        self.run = HeteroRun(self.cfg, log=log)
        self.schema, self.fanouts = self.run.schema, self.run.fanouts
        self._open = False
        self._epoch, self._files = None, None  # the epoch last asked for, deleted when the next one is

    def open(self) -> "HeteroLoader":
        if not self._open:
            self.run.open(self.run.model())
            self._open = True
        return self

    def epoch(self, epoch: int, start: int = 0):
        """Epoch `epoch`'s batches from batch `start` on, as MiniBatches on the run's device."""
        self.open()
        if self._epoch is not None:
            self.run.finished(self._epoch)
        self._epoch, self._files = epoch, self.run.epoch_file(epoch)
        self.run.prepare_next(epoch + 1)
        return self.run.passes(self._files, start)

    def evaluation(self, split: str):
        self.open()
        return self.run.eval_pass(split)

    @property
    def plan(self) -> dict:
        return self.run.plan

    def stats(self) -> dict:
        """Rows asked for, served by the host tier and bytes read, per featured type."""
        return self.run.features.summary()

    def close(self) -> None:
        self.run.close()

    def __enter__(self) -> "HeteroLoader":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
