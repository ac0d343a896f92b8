"""What a run asks of where it runs (the package's docstring says why it is one place)."""

from __future__ import annotations

import numpy as np
import torch


def salt_of(batch) -> tuple[int]:
    """What keys a (global) batch's dropout masks with the epoch's: its first seed."""
    return (int(batch.seeds[0]),) if batch.num_seeds else (0,)


class Target:
    """What the rest of the run asks of where it runs (cpu.py and cuda.py say how)."""

    name = "cpu"
    device = torch.device("cpu")
    copy_stage = False  # the pipeline copies each batch to the device in a stage of its own
    hag = False  # the HAG kernels run here
    device_tier = False  # a memory tier in device memory before the host's

    def assembly(self):
        """The store's way of putting a batch's rows in place (store/store.py)."""
        raise NotImplementedError

    def prepare(self, batch, labels, share=None, hag=None):
        """A sampled batch -> its MiniBatch without features (the pipeline's sample stage). `share`: this rank's
        share of a cooperative global batch; `hag`: a HagBuilder for the blocks that have no stored HAGs."""
        raise NotImplementedError

    @staticmethod
    def minibatch(batch, labels, share=None):
        """The batch's blocks and labels as host tensors; with `share`, this rank's share: its blocks, its seeds'
        labels, and as `batch` the input rows it reads."""
        from ..loading.blocks import sampled_blocks
        from ..loading.loaders import MiniBatch
        from ..offline.batches import Batch

        seeds = batch.seeds if share is None else share.seed_ids
        y = torch.from_numpy(np.asarray(labels[seeds], dtype=np.int64))
        if share is None:
            return MiniBatch(batch, sampled_blocks(batch), y, None, labels, salt_of(batch))
        blocks = [layer.block for layer in share.layers]
        return MiniBatch(Batch.one_type(batch.index, share.input_ids, [], 0), blocks, y, share, labels, salt_of(batch))

    def typed_batch(self, mb):
        """A typed batch, laid out on the host (a target lays out plain batches only, so far), where the step runs."""
        return mb

    def transfer(self, work, store):
        """The batch's features and structure where the step runs (the copy stage; on a CPU, the assemble's)."""
        raise NotImplementedError

    def for_captured_steps(self) -> "Target":
        """This target for the train passes of a run whose step is captured (target/graphed.py)."""
        return self

    def autocast(self, enabled: bool):
        """bf16 autocast on this target's device, or nothing."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=enabled)

    def optimizer(self, params, lr: float, weight_decay: float = 0.0,
                  capturable: bool = False) -> torch.optim.Optimizer:
        raise NotImplementedError

    def device_ids(self, local_rank: int) -> list[int] | None:
        """DistributedDataParallel's device_ids: the rank's GPU, or None for CPU modules."""
        return None

    def use_bf16(self) -> None:
        """Set up what the step's bf16 needs here, once, before its first step."""

    def bf16_note(self) -> str:
        """What bf16 costs here, where it is worth saying (appended to the precision's plan line)."""
        return ""

    def host_bytes(self, source, cfg, layers, dims, rows: int, read_depth: int, precision: str) -> int:
        """The host memory its batches take besides the run's tables and packer (train/working_set.py)."""
        raise NotImplementedError
