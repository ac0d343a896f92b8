"""The GPU target's train step as a CUDA graph: forward, backward and the fused Adam captured once per bucket of
shapes and replayed for every batch that fits it, so that a batch costs the host its copies into the static tensors
and one replay rather than the hundred-odd operator calls of an eager step.

A bucket bounds a batch's input rows and each block's destinations and edges. Each batch's rows and record
(labels, node ids, blocks) are copied into the bucket's static tensors, padded so that nothing real changes:
- labels past the seeds are -100, which cross_entropy ignores: its mean is the seeds';
- a block's rows past its destinations have no edges, but for the bucket's last row, which takes every padding
  edge (from the last source row): padded rows get no gradient, so nothing they read gets any from them;
- input rows past the batch's keep what they held (zeros at first, then earlier batches' rows): finite, and read
  by padded rows alone.
A batch that does not fit grows the bucket by GRAPH_BUCKET_GROWTH (new static tensors, a new capture: a few in a
run's first batches, counted in `stats`). A bucket's first GRAPH_WARMUP batches run the same padded step eagerly
(real steps; on a side stream, as capture wants: the optimizer's state and the libraries' handles are made
there), then the step is captured and replayed. Its neighbour sums run csr_sum.cu, forward and over the transpose
(cuSPARSE's product sizes and allocates a workspace per call); dropout's keys are mixed on the device from the
epoch's key (a device scalar set when it changes) and the batch's first seed (keyed_dropout.device_mix).

With a CPU device (the tests' stand-in) nothing is captured: the padded step runs eagerly every batch, which the
tests compare with the unpadded eager step; tests/cuda compares the replays with it on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import defaults
from ..loading.aggregate import CsrSum
from .csr_sum import segment_product
from .cuda import CudaKernels
from .keyed_dropout import _signed, device_mix
from .record import BatchRecord, device_block

IGNORED = -100  # cross_entropy's ignore_index


class CaptureFailed(RuntimeError):
    """The step could not be captured (the reason is CUDA's or a library's); the batch did not train."""


@dataclass(frozen=True)
class Bucket:
    """The shapes a captured step takes: input rows, and per block in the model's order (destinations, edges).
    Block i's sources are block i-1's destinations (block 0's: the input rows)."""

    nodes: int
    blocks: tuple[tuple[int, int], ...]

    def shapes(self) -> tuple[tuple[int, int, int], ...]:
        """BatchRecord's (num_dst, num_src, edges) per block."""
        sources = (self.nodes, *(d for d, _ in self.blocks[:-1]))
        return tuple((d, s, e) for (d, e), s in zip(self.blocks, sources))

    def holds(self, record: BatchRecord) -> bool:
        """Whether the batch pads into it: no dimension larger, and a padded row for its padding edges."""
        if record.nodes > self.nodes or len(record.shapes) != len(self.blocks):
            return False
        return all(nd <= d and e <= bound and (e == bound or nd < d)
                   for (nd, _, e), (d, bound) in zip(record.shapes, self.blocks))

    def grown(self, record: BatchRecord, growth: float) -> "Bucket":
        """A bucket that holds `record` and everything this one holds, its dimensions `growth` times the batch's
        where it grows; each block's destinations within its sources."""
        old = self.blocks if self.blocks else ((0, 0),) * len(record.shapes)

        def up(have: int, need: int) -> int:
            return have if need < have else int(need * growth) + 1

        dst = [up(d, nd) for (nd, _, _), (d, _) in zip(record.shapes, old)]
        edges = [up(bound, e) for (_, _, e), (_, bound) in zip(record.shapes, old)]
        for i in range(len(dst) - 1, 0, -1):
            dst[i - 1] = max(dst[i - 1], dst[i])
        return Bucket(max(up(self.nodes, record.nodes), dst[0]), tuple(zip(dst, edges)))


class GraphKernels(CudaKernels):
    """The CUDA target's kernels as a captured step runs them: neighbour sums by csr_sum.cu (which allocates its
    output alone), dropout's key mixed on the device from `epoch_key`, the epoch's key, and a salt whose first
    word is a device scalar (the batch's first seed)."""

    def __init__(self, epoch_key: torch.Tensor):
        self.epoch_key = epoch_key

    @staticmethod
    def aggregate(block, h: torch.Tensor, scale, self_loop: bool) -> torch.Tensor:
        return CsrSum.apply(h, block, scale, self_loop, segment_product)

    def key(self, key: int, salt: tuple, device) -> torch.Tensor:
        return device_mix(self.epoch_key, *salt)


class GraphedStep:
    """A node-classification train step (the model's blocks, input rows and labels: zero_grad, forward, loss,
    backward, optimizer step) captured per bucket and replayed; `capture` False runs the padded step eagerly."""

    def __init__(self, model, optimizer, device, bf16: bool, capture: bool, stats: dict | None = None):
        self.model, self.optimizer, self.device, self.bf16, self.capture = model, optimizer, device, bf16, capture
        self.epoch_key = torch.zeros((), dtype=torch.int64, device=device)
        self._key = None
        self.kernels = GraphKernels(self.epoch_key)
        self.bucket = Bucket(0, ())
        self.graph, self.warm, self.loss = None, 0, None
        self.side = torch.cuda.Stream(device) if capture else None
        self.stats = stats if stats is not None else {}  # the run's summary keeps it
        self.stats.update(captures=0, replays=0, eager=0, buckets=0)

    def __call__(self, mb) -> tuple[torch.Tensor, int]:
        """Trains on `mb` (a batch the CUDA target sent with its record); returns its loss (a device scalar,
        valid until the next call) and its seeds."""
        if not self.bucket.holds(mb.record):
            self._resize(self.bucket.grown(mb.record, defaults.GRAPH_BUCKET_GROWTH), mb.x)
        self._fill(mb)
        key = _signed(self.model.dropout.key)
        if key != self._key:  # a new epoch's masks
            self.epoch_key.fill_(key)
            self._key = key
        if self.graph is not None:
            self.graph.replay()
            self.stats["replays"] += 1
        elif self.warm < defaults.GRAPH_WARMUP or not self.capture:
            self._eager()
        else:
            self._capture()
        return self.loss, mb.record.seeds

    def _resize(self, bucket: Bucket, x: torch.Tensor) -> None:
        """The bucket's static tensors (zeros), its graph to be captured anew after its warm-up."""
        self.graph, self.warm, self.bucket = None, 0, bucket
        shapes = bucket.shapes()
        layout = BatchRecord(None, shapes[-1][0], bucket.nodes, shapes)
        words = torch.zeros(layout.seeds + layout.nodes + sum(d + 1 + e for d, _, e in shapes), dtype=torch.int64,
                            device=self.device)
        self.labels, self.node_ids, self.parts = layout.split(words)  # views: they keep it
        self.x = torch.zeros((bucket.nodes, x.shape[1]), dtype=x.dtype, device=self.device)
        self.stats["buckets"] += 1

    def _fill(self, mb) -> None:
        """The batch into the static tensors, padded (the module's docstring), on the current stream."""
        rows, seeds = mb.x.shape[0], mb.labels.numel()
        self.x[:rows].copy_(mb.x)
        self.labels[:seeds].copy_(mb.labels)
        self.labels[seeds:].fill_(IGNORED)
        self.node_ids[:rows].copy_(mb.node_ids)
        self.node_ids[rows:].fill_(0)
        parts = mb.record.split(mb.pending.words)[2]  # the batch's blocks' CSC (the copy stage made no blocks)
        for (ptr, idx), (indptr, indices), (nd, _, e), (d, s, bound) in zip(self.parts, parts, mb.record.shapes,
                                                                             self.bucket.shapes()):
            ptr[: nd + 1].copy_(indptr)
            ptr[nd + 1: d].fill_(e)
            ptr[d:].fill_(bound)
            idx[:e].copy_(indices)
            idx[e:].fill_(s - 1)

    def _step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        blocks = [device_block(ptr, idx, d, s, self.kernels)
                  for (ptr, idx), (d, s, _) in zip(self.parts, self.bucket.shapes())]
        # no autocast cache: a captured cast must be recomputed at every replay, not kept from the capture
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=False):
            out = self.model(blocks, self.x, ((self.node_ids[0],), self.node_ids))
        loss = F.cross_entropy(out.float(), self.labels, ignore_index=IGNORED)
        loss.backward()
        self.optimizer.step()
        self.loss = loss.detach()

    def _eager(self) -> None:
        self.warm += 1
        self.stats["eager"] += 1
        if self.side is None:
            self._step()
            return
        current = torch.cuda.current_stream(self.device)
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            self._step()
        current.wait_stream(self.side)

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: the pipeline's threads go on copying and allocating on their own streams meanwhile, which
            # a global capture would forbid them (and fail)
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._step()
        except Exception as e:  # noqa: BLE001 - CUDA's and the libraries' capture errors vary; the reason is said
            raise CaptureFailed(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        self.graph = graph
        self.stats["captures"] += 1
        graph.replay()  # the capture ran nothing: this batch trains now
        self.stats["replays"] += 1


@dataclass(frozen=True)
class StepChoice:
    """The plan's decision for the train step: `graphed` (captured and replayed) or eager, and its line."""

    graphed: bool
    line: str
    required: bool = False  # --cuda-graphs on: a capture that fails stops the run


def choose(option: str, device: str, why_not: str | None) -> StepChoice:
    """--cuda-graphs `option` (auto, on, off) on a resolved `device`, where the run's step cannot be captured for
    `why_not` (None: it can)."""
    from ..errors import UsageError

    if device != "cuda":
        if option == "on":
            raise UsageError("--cuda-graphs on: no CUDA device (a step is captured on a GPU only)")
        return StepChoice(False, "step: eager (no CUDA device)")
    if option == "off":
        return StepChoice(False, "step: eager (--cuda-graphs off)")
    if why_not is not None:
        if option == "on":
            raise UsageError(f"--cuda-graphs on: {why_not}")
        return StepChoice(False, f"step: eager ({why_not})")
    return StepChoice(True, f"step: a CUDA graph (--cuda-graphs {option}): forward, backward and Adam captured per "
                            "bucket of batch shapes and replayed, batches padded to it"
                      + ("; a capture that fails says why once and the run goes on eagerly" if option == "auto"
                         else ""), required=option == "on")
