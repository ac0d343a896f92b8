"""The CPU target: every tier's rows written into the batch's matrix by one native call, the step's neighbour sums
and dropout by the native kernels (loading/aggregate.py, nn/dropout.py), through the batch's HAGs where they pay;
no copy stage."""

from __future__ import annotations

import os

import torch

from .. import defaults
from ..loading.hag import decode as hag_decode, set_hags
from ..nn.models import activation_bytes
from .base import Target


class CpuTarget(Target):
    name = "cpu"
    device = torch.device("cpu")
    hag = True

    def assembly(self):
        from ..store.store import HostAssembly

        return HostAssembly()

    def optimizer(self, params, lr: float, weight_decay: float = 0.0,
                  capturable: bool = False) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)

    def use_bf16(self) -> None:
        # oneDNN, which runs the CPU's bf16 products, otherwise keeps primitives for 1024 shapes: each batch
        # has its own, so its cache only grows. Read at its first primitive, which is still to come.
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(defaults.ONEDNN_CACHE))

    def bf16_note(self) -> str:
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return ""
        # Asked for by name (auto would have taken fp32): say what it costs. Measured on an AMD EPYC without
        # AVX-512: the step's linear maps alone took 179 ms in bf16 against 17 ms in fp32.
        return ("; this CPU has no bf16 instructions (oneDNN finds none), so its bf16 matrix products are "
                "emulated and run many times slower than fp32: --precision auto takes fp32 here")

    def prepare(self, batch, labels, share=None, hag=None):
        """The host blocks with the HAGs stored with the batch (offline sampling), or those `hag` finds now where
        they pay."""
        stored = batch.hag_bytes if share is None else None
        work = self.minibatch(batch, labels, share)
        if stored is not None:
            set_hags(work.blocks, hag_decode(stored))
        elif hag is not None:
            hag.attach(work.blocks)
        return work

    def transfer(self, work, store):
        work.x, work.pending = store.to_device(work.pending), None  # the stored rows (float16, codes) decoded: freed
        return work

    def host_bytes(self, source, cfg, layers, dims, rows: int, read_depth: int, precision: str) -> int:
        """Rows, ids and blocks in the stages: stored rows up to the decode (the reads in flight and the queues
        between), float32 model input after it (two queued, one being trained), the step's temporaries and the
        assembled rows the recent-rows tier keeps."""
        queued = rows * ((read_depth + 3) * (source.row_bytes + 64) + 3 * (source.decoded_row_bytes + 64))
        activations = activation_bytes(cfg.model, layers, dims, cfg.heads, precision)
        recent = cfg.recent_window * rows * source.row_bytes
        return queued + source.decode_bytes(rows) + activations + recent
