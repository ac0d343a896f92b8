"""The execution target: where a run's batches are put together and its steps computed, chosen once by the plan.

Everything that differs between a CPU run and a GPU run is decided here, in one place, rather than by
`device == ...` tests spread over the loaders, the store, the blocks and the trainer:

- `cpu.py`, `CpuTarget`: batches assembled on the host by one native call, neighbour sums and dropout by the
  native kernels (HAGs where they pay), no copy stage;
- `cuda.py`, `CudaTarget`: a batch's structure laid out as one int64 record (`record.py`) that crosses beside
  its rows in the slab's two copies, the blocks as views of it on the device; neighbour sums as CSR products
  with the transpose built once a batch for backward; dropout keyed by node (`keyed_dropout.py`), the same
  masks as the CPU's kernel draws. With a CPU device it is the stand-in the tests run the GPU path through.

A target is duck-typed for the data side (loading/, store/): they call what it hands them and never import it.
"""

from __future__ import annotations

from .base import Target


def target_for(device: str) -> Target:
    """The target of a resolved --device (cpu or cuda)."""
    if device == "cpu":
        from .cpu import CpuTarget

        return CpuTarget()
    from .cuda import CudaTarget

    return CudaTarget(device)
