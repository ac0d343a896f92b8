"""`DiskgnnLoader`: diskgnn's own pipeline (offline samples, packs, memory tiers) yielding PyG `Data`.

The fast path for PyG models: batches are sampled and packed an epoch ahead
and assembled by the pipeline exactly as in `python -m diskgnn.train`
(diskgnn.Loader), then laid out as NeighborLoader's (diskgnn/loading/subgraph.py). Iterating
the loader runs the next epoch; `evaluation(split)` the val or test batches.
"""

from __future__ import annotations

from ..train.loader import Loader
from ..loading.subgraph import to_pyg


class DiskgnnLoader:
    """Iterate for one epoch's PyG mini-batches; the next iteration is the next epoch."""

    def __init__(self, data=None, **options):
        """`data`: a dataset directory; `options`: diskgnn.Loader's (diskgnn.train's options: fanouts,
        batch_size, memory_budget, sampler, features, workdir, ...)."""
        self.loader = Loader(data, **options).open()
        self.next_epoch = 0

    @property
    def device(self) -> str:
        """Where the batches' tensors are: the model belongs there too."""
        return self.loader.device

    def __len__(self) -> int:
        """Batches in the next epoch."""
        return self.loader.num_batches

    def __iter__(self):
        epoch, self.next_epoch = self.next_epoch, self.next_epoch + 1
        return (to_pyg(mb) for mb in self.loader.epoch(epoch))

    def evaluation(self, split: str):
        """The split's ("val" or "test") batches as Data; the first `batch_size` nodes of each are its seeds."""
        return (to_pyg(mb) for mb in self.loader.evaluation(split))

    def close(self) -> None:
        self.loader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
