"""The GPU target: a batch crosses in two copies, its blocks are views on the device, its step reads nothing back.

A batch's structure (labels, input node ids, every block's CSC) is one int64 record (record.py), written by
the sample stage and appended by the assemble stage to the pinned slab's id buffer, so that a batch crosses
as the slab's rows and that buffer, two asynchronous copies on the copy stream; the blocks are views of the
device buffer, their scales and transposes derived there. No tensor is pinned per batch (the slabs are pinned
once). The step's neighbour sums are CSR products (cuSPARSE, loading/aggregate.py's CsrSum) over matrices
made once a batch, the transpose for backward among them, and its dropout is keyed by node
(keyed_dropout.py). With a CPU `device` it is the tests' stand-in: the same records, views and kernels on
host tensors.

Cooperative batches keep their shares' tensors (each layer's exchange plan) and cross tensor by tensor.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import torch

from ..loading.aggregate import CsrSum
from ..nn.dropout import mix, row_positions
from .base import Target, salt_of
from .keyed_dropout import KeyedDropout, key_tensor
from .record import BatchRecord, device_block


class CudaKernels:
    """The step's kernels on the GPU target (a block made by `device_block` carries them)."""

    @staticmethod
    def aggregate(block, h: torch.Tensor, scale, self_loop: bool) -> torch.Tensor:
        """CsrSum (loading/aggregate.py) over the matrices the block was made with, on whichever device h is."""
        return CsrSum.apply(h, block, scale, self_loop)

    def dropout(self, h: torch.Tensor, p: float, key: int, salt: tuple, ids, relu: bool) -> torch.Tensor:
        """Dropout keyed by the rows' node ids (a device tensor, or numpy for blocks made on the host) under the
        epoch's `key` mixed with the batch's `salt`."""
        bases = ids * (h.shape[-1] + h.shape[-1] % 2) if isinstance(ids, torch.Tensor) else \
            torch.from_numpy(row_positions(ids, h.shape[-1])).to(h.device)
        return KeyedDropout.apply(h, p, self.key(key, salt, h.device), bases, relu)

    def key(self, key: int, salt: tuple, device) -> torch.Tensor:
        """The masks' key on the device: mixed on the host here, filled there."""
        return key_tensor(mix(key, *salt), device)


class CudaTarget(Target):
    name = "cuda"
    copy_stage = True
    device_tier = True

    def __init__(self, device="cuda", step_blocks: bool = True):
        self.device = torch.device(device)
        self.kernels = CudaKernels()
        # whether the copy stage makes a batch's blocks (their CSR matrices too) for an eager step; a captured step
        # makes them from its padded copy of the record, so its train passes leave them out (for_captured_steps)
        self.step_blocks = step_blocks

    def for_captured_steps(self) -> "CudaTarget":
        return CudaTarget(self.device, step_blocks=False)

    def typed_batch(self, mb):
        return mb.moved(self.device)

    def assembly(self):
        from ..store.store import DeviceAssembly

        return DeviceAssembly(self.device)

    def device_ids(self, local_rank: int) -> list[int]:
        return [local_rank]

    def optimizer(self, params, lr: float, weight_decay: float = 0.0,
                  capturable: bool = False) -> torch.optim.Optimizer:
        """Adam's update for every parameter in one fused kernel (torch's fused Adam), not a loop of them;
        `capturable`: its step counts on the device, as a captured step (graphed.py) needs them."""
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=True,
                                capturable=capturable and self.device.type == "cuda")

    def prepare(self, batch, labels, share=None, hag=None):
        from ..loading.loaders import MiniBatch

        if share is not None:
            return self.minibatch(batch, labels, share)
        work = MiniBatch(batch, None, None, None, labels, salt_of(batch))
        work.record = BatchRecord.of(batch, np.asarray(labels[batch.seeds], dtype=np.int64))
        return work

    def transfer(self, work, store):
        """The batch's rows and record on the device (two copies, issued on the copy stream), its blocks and
        labels as views of the record there; `ready` marks the end of that work."""
        with store.stream():
            work.x = store.to_device(work.pending)
            if work.record is not None:
                work.labels, work.node_ids, parts = work.record.split(work.pending.words)
                work.blocks = self.blocks_of(work, parts) if self.step_blocks else []
            else:
                work.blocks = [b.to(self.device, non_blocking=True) for b in work.blocks]
                work.labels = work.labels.to(self.device, non_blocking=True)
                work.share = work.share.to(self.device, work.blocks)
            work.ready = store.ready_event()
        return work

    def blocks_of(self, work, parts=None) -> list:
        """The blocks of a batch sent with its record, views of its device copy (made on the current stream);
        `parts`: the record's split, where it was cut already."""
        parts = work.record.split(work.pending.words)[2] if parts is None else parts
        return [device_block(ptr, idx, nd, ns, self.kernels)
                for (ptr, idx), (nd, ns, _) in zip(parts, work.record.shapes)]

    def host_bytes(self, source, cfg, layers, dims, rows: int, read_depth: int, precision: str) -> int:
        """Past the copy stage every row, block and activation is device memory (the recent-rows tier keeps
        device rows too): the host holds the batches' pinned slabs (rows, ids and the batch's record), the
        device tier's two fill buffers and the CUDA context, measured (`cuda_context_bytes`)."""
        from .. import defaults
        from ..store.store import HELD_BEYOND_READS

        slabs = (read_depth + HELD_BEYOND_READS["device"]) * rows * (source.row_bytes + 64)
        return slabs + 2 * defaults.DEVICE_FILL_CHUNK + cuda_context_bytes()


def measure_cuda_context() -> int:
    """The anonymous host memory this process gains by starting CUDA and a cuBLAS product (0 where it had)."""
    from ..memory import anon_bytes

    before = anon_bytes()
    a = torch.ones((256, 256), device="cuda")
    (a @ a).sum().item()
    return max(0, anon_bytes() - before)


@lru_cache(maxsize=1)
def cuda_context_bytes() -> int:
    """The CUDA context's and its libraries' host memory, as the plan counts it: DISKGNN_CUDA_BASE_RSS where set,
    else measured once a process with the knob's default as the floor (a context started before the plan
    measures as nothing), or the default where there is no CUDA device (a plan made for CUDA in the tests)."""
    from .. import defaults

    if "DISKGNN_CUDA_BASE_RSS" in os.environ or not torch.cuda.is_available():
        return defaults.CUDA_BASE_RSS
    return max(defaults.CUDA_BASE_RSS, measure_cuda_context())
