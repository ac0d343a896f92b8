"""Batches into the pipeline: the stages that turn a batch index into model inputs.

Offline (the default): batches come from a sample file and their features
from the feature store (memory tiers, segment rows, the batch's pack read
with O_DIRECT). Online: each batch is sampled when the pipeline reaches it,
with the same random stream the offline sampler would use, and its rows are
gathered straight from the feature file (no placement: the future is not
known); this is the baseline offline sampling is measured against.
Both move stored rows (features.bin's or a quantized variant's codes) and
decode them into the model's float32 input as their last step, on the
training device: in the copy stage with CUDA, in the assemble stage on a CPU.
How a batch is laid out and moved is the run's target's (diskgnn/target/),
which the loaders are handed and call.

Stages: sample (decode the batch, build the blocks' tensors, look up labels)
-> read (start the reads; `read_depth` batches in flight) -> assemble (wait,
check, scatter into the feature matrix) -> copy (to the device; only with
CUDA) -> the consumer's train or eval step.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from ..data.features import FeatureSource, feature_source
from ..offline.batches import SampleFile
from ..offline.sample import NEIGHBOR, Sampler, epoch_seeds, open_graph, sample_batch
from ..store.store import FeatureStore
from ..store.tiers import TierStats
from .pipeline import Pipeline, Stage


class MiniBatch:
    """One batch on its way through the stages, and what a pass yields: `blocks` (TensorBlocks, input hop first),
    `x` (the input rows' float32 features, row i for `input_nodes[i]`), `labels` (the seeds'), and `batch`
    (the sampled batch: global ids). Under cooperative minibatching `share` is this rank's part of the
    global batch, and `input_nodes` the rows it reads. Under --task link `link` is the batch's LinkBatch (its
    edges and negatives; diskgnn/offline/link_batches.py), computed in the pipeline's first stage."""

    __slots__ = ("batch", "blocks", "labels", "label_source", "pending", "x", "share", "ready", "salt", "link",
                 "record", "node_ids")

    def __init__(self, batch, blocks, labels, share=None, label_source=None, salt=(0,)):
        self.batch, self.blocks, self.labels, self.share = batch, blocks, labels, share
        self.label_source = label_source  # every node's labels (to_pyg's y)
        self.salt = salt  # the (global) batch's: its first seed, which keys its dropout masks with the epoch's
        self.pending = None
        self.link = None
        self.x = None
        self.ready = None  # with CUDA: the event after the batch's copies, on the copy stream
        self.record = None  # the GPU target's: the batch's structure as one int64 record (target/record.py)
        self.node_ids = None  # the input rows' node ids where the step runs, where the target put them there

    def wait(self) -> None:
        """Makes the consumer's stream wait for the batch's copies (a no-op on a CPU), and ties the batch's
        device memory to that stream, so that the allocator reuses none of it while the step still runs."""
        if self.ready is None:
            return
        stream = torch.cuda.current_stream(self.x.device)
        stream.wait_event(self.ready)
        if self.record is not None:  # the blocks and labels are views of the record's device buffer
            self.pending.words.record_stream(stream)
            held = [self.x, *(t for b in self.blocks for t in b.made)]
        else:
            shared = [t for layer in self.share.layers for t in (layer.send, layer.gather)] if self.share else []
            held = [self.x, self.labels, *(t for b in self.blocks for t in b.tensors()), *shared]
        for t in held:
            t.record_stream(stream)
        self.ready = None

    @property
    def y(self):
        return self.labels

    @property
    def destinations(self) -> list[int]:
        """Each layer's destination rows, input layer first (from the record where the blocks were left to a
        captured step)."""
        if self.blocks or self.record is None:
            return [b.num_dst for b in self.blocks]
        return [nd for nd, _, _ in self.record.shapes]

    @property
    def rows(self):
        """What the model takes beside `blocks` and `x`: (salt, node ids of x's rows), which key the step's dropout
        masks by node (nn/dropout.py); a typed batch's node ids per type (`nodes`: featureless types' rows are by
        id)."""
        if self.batch.typed:
            return self.nodes
        return self.salt, self.input_nodes if self.node_ids is None else self.node_ids

    @property
    def input_nodes(self) -> np.ndarray:
        """Global ids of the rows of `x` (seeds first)."""
        return self.batch.nodes

    @property
    def nodes(self) -> dict[str, np.ndarray]:
        """A typed batch's node ids per type (local to the type, seeds first among theirs); `x` then holds each
        featured type's rows and `blocks[l][r]` relation r's block of layer l (None where it is not followed)."""
        return dict(zip(self.batch.type_names, self.batch.type_nodes))

    @property
    def hops(self) -> list:
        """The blocks in sampling order, the seeds' hop first."""
        return self.blocks[::-1]

    @property
    def num_seeds(self) -> int:
        return len(self.seeds)

    @property
    def seeds(self) -> np.ndarray:
        """Global ids of the nodes whose labels are `labels`."""
        return self.batch.seeds if self.share is None else self.share.seed_ids

    def moved(self, device) -> "MiniBatch":
        """A typed batch laid out on the host, its rows, blocks and labels moved to `device`."""
        self.x = {name: x.to(device, non_blocking=True) for name, x in self.x.items()}
        self.blocks = [[b if b is None else b.to(device, non_blocking=True) for b in hop] for hop in self.blocks]
        self.labels = self.labels.to(device, non_blocking=True)
        return self

    def to_pyg(self):
        """This batch as a PyTorch Geometric `Data` (loading/subgraph.py; needs torch_geometric)."""
        from .subgraph import to_pyg

        return to_pyg(self)


def _work(batch, labels: np.ndarray, target, cooperative=None, hag=None) -> MiniBatch:
    """The batch's MiniBatch without features, as the run's target (diskgnn/target/) lays it out; with
    `cooperative` (a global batch -> this rank's Share), this rank's share of it. `hag`: a HagBuilder."""
    return target.prepare(batch, labels, None if cooperative is None else cooperative(batch), hag)


class _Loader:
    """What both loaders share: a FeatureStore (`store`) and the pipeline of one pass over their batches
    (`_work(b)`, a batch index -> its MiniBatch without features, is each loader's own)."""

    store: FeatureStore
    read_depth: int
    target: "object"  # the run's diskgnn.target.Target

    def _work(self, b: int) -> MiniBatch:
        raise NotImplementedError

    def pipeline(self, order) -> Pipeline:
        """sample (the batch, its blocks and labels) -> read (the store's reads start) -> assemble (waited for,
        checked; on a CPU the model's input) -> copy (with a device: to it, on the copy stream)."""
        store, target = self.store, self.target

        def read(work):
            work.pending = store.start(work.batch, work.record)
            return work

        def assemble(work):
            store.finish(work.pending)
            return work if target.copy_stage else target.transfer(work, store)

        stages = [Stage("sample", lambda b: self._work(int(b))), Stage("read", read, depth=self.read_depth),
                  Stage("assemble", assemble)]
        if target.copy_stage:
            stages.append(Stage("copy", lambda work: target.transfer(work, store)))
        return Pipeline(order, stages)

    def stats(self) -> list[TierStats]:
        return self.store.stats()


class OfflineLoader(_Loader):
    """Batches of one sample file, features from a FeatureStore over its packs."""

    def __init__(self, sample_file: SampleFile, store: FeatureStore, labels: np.ndarray, read_depth: int, target,
                 cooperative=None, hag=None, link=None):
        """`target`: where the batches go (diskgnn/target/; the store's assembly is its). `cooperative`: a global
        batch -> this rank's Share (diskgnn/distributed/cooperative.py), for the batches of a cooperative run; the
        store then holds this rank's rows only. `hag`: a HagBuilder. `link`:
        the LinkEpoch whose batch b the file's batch b was sampled for (--task link)."""
        self.samples, self.store, self.labels, self.target = sample_file, store, labels, target
        self.read_depth, self.cooperative, self.hag, self.link = read_depth, cooperative, hag, link

    def __len__(self) -> int:
        return len(self.samples)

    def _work(self, b: int) -> MiniBatch:
        work = _work(self.samples[b], self.labels, self.target, self.cooperative, self.hag)
        if self.link is not None:
            work.link = self.link[self.samples.batch_id(work.batch.index)]
        return work

    def disk_bytes(self) -> int:
        return self.store.disk.bytes


class OnlineLoader(_Loader):
    """Batches sampled during training; stored rows gathered by id from their file (O_DIRECT row reads), through
    a FeatureStore without packs or memory tiers."""

    def __init__(self, dataset, seeds: np.ndarray, *, fanouts, batch_size: int, seed: int, epoch: int,
                 labels: np.ndarray, target, read_depth: int, backend: str, graph=None,
                 features: FeatureSource | None = None, sampler: Sampler = NEIGHBOR, hag=None, batches=None,
                 store=None):
        """`batches`: the batches' seeds (a sequence of id arrays) instead of `seeds` shuffled into batches of
        `batch_size` (the epoch's order; diskgnn.infer's batches are its nodes in their order). `store`: where the
        rows come from instead of the feature file alone (a typed dataset's: store/by_type.py's, by id)."""
        self.fanouts, self.seed, self.epoch, self.sampler, self.hag = list(fanouts), seed, epoch, sampler, hag
        self.batches = epoch_seeds(seeds, batch_size, seed, sampler.order_epoch(epoch)) if batches is None else batches
        self.labels, self.read_depth, self.target = labels, read_depth, target
        self.graph = graph or open_graph(dataset)
        self.store = store or FeatureStore(dataset, None, None, device=target.device, backend=backend, tiers=[],
                                           features=features or feature_source(dataset), read_depth=read_depth,
                                           assembly=target.assembly())

    def __len__(self) -> int:
        return len(self.batches)

    def _work(self, b: int) -> MiniBatch:
        return _work(self.sample(b), self.labels, self.target, hag=self.hag)

    def sample(self, b: int):
        """Batch b, identical to what sample_epoch writes for it (same stream key)."""
        return sample_batch(self.graph, self.batches[b], key=self.sampler.key(self.epoch, b, len(self.batches)),
                            fanouts=self.fanouts, seed=self.seed, threads=max(1, (os.cpu_count() or 1) // 2), index=b,
                            sampler=self.sampler)

    def disk_bytes(self) -> int:
        """What the reads moved, sector-aligned: an online run reads row by row."""
        return self.store.bytes_read()
