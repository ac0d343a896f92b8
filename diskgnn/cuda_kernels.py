"""diskgnn's CUDA kernels (store/uva_gather.cu; target/keyed_dropout.cu and csr_sum.cu): compiled at run time by CuPy
(NVRTC), which the GPU machines carry, once a process and device each, and launched on torch's current stream of
the device their tensors are on, so that they order with torch's work there and a CUDA graph captures them with
it. One place for all three, usable by the data side and the target alike."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

THREADS = 256  # 8 warps a block
MAX_BLOCKS = 65535


@lru_cache(maxsize=None)
def compiled(source: Path, name: str, device: int):
    """Kernel `name` of `source`, loaded on `device` (call it with that device current: CuPy loads a module per
    device)."""
    import cupy

    return cupy.RawModule(code=source.read_text(), options=("--std=c++17",)).get_function(name)


def blocks_for(threads: int) -> int:
    """Blocks of THREADS for `threads` threads, at most MAX_BLOCKS (the kernels stride over the rest)."""
    return min(MAX_BLOCKS, -(-threads // THREADS))


def launch(source: Path, name: str, blocks: int, on: torch.Tensor, args: tuple) -> None:
    """Kernel `name` of `source` as `blocks` blocks of THREADS, on the current stream of `on`'s device."""
    import cupy

    device = on.device.index or 0
    with cupy.cuda.Device(device), cupy.cuda.ExternalStream(torch.cuda.current_stream(on.device).cuda_stream):
        compiled(source, name, device)((blocks,), (THREADS,), args)
