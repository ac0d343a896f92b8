"""A split's sampled eval batches: packed once and kept, or streamed a chunk at a time.

Where the eval sets (cut to --eval-max-batches) are no more seeds than a train epoch's, each split's
batches are sampled and packed once, before training, and kept for every evaluation. Beyond that
(train/plan.py eval_chunk_batches says where) an evaluation samples and packs `chunk` batches at a time,
the next chunk in the background while one is evaluated, and deletes each once evaluated: the disk holds
two chunks at most, half a train epoch's seeds each, counted by the plan. Each batch is sampled as in the
whole set (the sampler keys a batch by its index in it), so kept and streamed evaluations are of the same
batches.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from .epochs import EpochFiles, OfflineEpochs, delete


class EvalSet:
    """This rank's eval batches of one split: `chunks()` yields their files in order. `seeds` or `batches` (link
    prediction's held-out edges) as OfflineEpochs.eval_files takes them; `chunk`: batches a chunk holds, or None
    to sample and pack the whole set once (`kept`) and keep it."""

    def __init__(self, epochs: OfflineEpochs, split: str, *, seeds, batches, fanouts, epoch_key: int,
                 max_batches: int | None, chunk: int | None):
        self.epochs, self.split, self.seeds, self.batches = epochs, split, seeds, batches
        self.fanouts, self.epoch_key, self.chunk = list(fanouts), epoch_key, chunk
        total = len(batches) if batches is not None else -(-len(seeds) // epochs.eval_batch_size)
        self.total = total if max_batches is None else min(total, max_batches)
        step = chunk or max(1, self.total)
        self.starts = list(range(0, self.total, step))
        self.kept: EpochFiles | None = None
        if chunk is None:
            self.kept = self._make(0)

    def __len__(self) -> int:
        """This rank's batches (every world-th of the set's)."""
        rank, world = self.epochs.spec.eval_shard
        return len(range(rank, self.total, world))

    def _make(self, c: int) -> EpochFiles:
        first = self.starts[c] if self.starts else 0
        name = self.split if self.chunk is None else f"{self.split}-{c:05d}"
        return self.epochs.eval_files(self.split, self.seeds, self.fanouts, self.epoch_key,
                                      max_batches=min(self.total, first + (self.chunk or self.total)),
                                      batches=self.batches,
                                      first=first, name=name)

    def chunks(self):
        """The set's files, chunk by chunk: the kept set, or each chunk made (the next one meanwhile in the
        background) and deleted once the consumer moves on or stops."""
        if self.kept is not None:
            yield self.kept
            return
        self.epochs.settle()  # one packer at a time: the next train epoch's is done first
        with ThreadPoolExecutor(1, thread_name_prefix="diskgnn-eval-chunk") as maker:
            ahead = maker.submit(self._make, 0) if self.starts else None
            try:
                for c in range(len(self.starts)):
                    files, ahead = ahead.result(), None
                    if c + 1 < len(self.starts):
                        ahead = maker.submit(self._make, c + 1)
                    try:
                        yield files
                    finally:
                        delete(files)
            finally:
                if ahead is not None:
                    try:
                        delete(ahead.result())
                    except Exception:  # noqa: BLE001 - the chunk ahead failed: nothing of it to delete
                        pass


def chunk_batches(train_seeds: int, eval_seeds: int, eval_batch: int) -> int | None:
    """Batches an eval chunk holds: None (the sets kept whole) where the eval sets' `eval_seeds` are no more than a
    train epoch's `train_seeds`, else half of those (the chunk evaluated and the one being made are an epoch's)."""
    if eval_seeds <= train_seeds:
        return None
    return max(1, train_seeds // 2 // max(1, eval_batch))

