"""The GPU target's CUDA kernels (keyed_dropout.cu, csr_sum.cu): compiled at run time by CuPy (NVRTC), which the
GPU machines carry, once a process each, and launched on torch's current stream, so that they order with the
step's other work and a CUDA graph captures them with it."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

THREADS = 256
MAX_BLOCKS = 65535


@lru_cache(maxsize=None)
def compiled(source: Path, name: str):
    import cupy

    return cupy.RawModule(code=source.read_text(), options=("--std=c++17",)).get_function(name)


def launch(source: Path, name: str, threads: int, on: torch.Tensor, args: tuple) -> None:
    """Kernel `name` of `source` over `threads` threads at most (grid-strided past MAX_BLOCKS blocks), on the
    current stream of `on`'s device."""
    import cupy

    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(on.device).cuda_stream)
    with stream:
        compiled(source, name)((min(MAX_BLOCKS, -(-threads // THREADS)),), (THREADS,), args)
