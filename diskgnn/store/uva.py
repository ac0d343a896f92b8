"""Zero-copy gathers (PyTorch-Direct): a host tier's rows in page-locked memory mapped into the GPU's address
space, gathered by a CUDA kernel (uva_gather.cu) straight into the batch's device tensor.

Without it a host tier's rows are gathered by the CPU into the batch's pinned slab and cross with the batch's
other host rows in one copy (store/store.py); with it the GPU reads only the rows a batch needs, over PCIe,
while the CPU does nothing. The kernel is compiled at run time by CuPy (NVRTC), which the GPU machines carry,
and launched on the torch stream the batch's copies run on; its ids are sorted on the device. Which way a
run takes is the plan's decision (`host_gather`): `--zero-copy auto` takes zero copy only where a short
calibration at start-up measured it faster than the CPU gather and its copy; `why_not` says why zero copy
cannot run where it cannot (no CUDA device, no CuPy, the kernel failed to compile).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .. import defaults
from ..cuda_kernels import THREADS, compiled, launch
from ..errors import DiskgnnError

KERNEL = Path(__file__).with_name("uva_gather.cu")
ROWS_PER_WARP = 4  # uva_gather.cu's ROWS
MAX_BLOCKS = 8192  # rows in flight: 256 Ki, far more than PCIe round trips need
_HOST_REGISTER_PORTABLE, _HOST_REGISTER_MAPPED = 1, 2


def why_not(device: str) -> str | None:
    """None where zero-copy gathers can run on `device`, else why not (one line)."""
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import cupy
    except ImportError as e:
        return f"CuPy is not installed ({e}); pip install cupy-cuda12x (or -cuda13x) for zero-copy gathers"
    try:
        index = torch.cuda.current_device()
        with cupy.cuda.Device(index):
            compiled(KERNEL, "gather_rows", index)
    except Exception as e:  # noqa: BLE001 - NVRTC's and CuPy's errors vary by version; the reason is reported
        return f"the zero-copy kernel did not compile: {type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def _unregister(ptr: int, rows) -> None:
    import cupy

    cupy.cuda.runtime.hostUnregister(ptr)


class MappedRows:
    """A host tensor's memory page-locked and mapped into the device's address space, for `gather`."""

    def __init__(self, rows):
        import cupy

        self.rows = rows.contiguous()
        self.row_bytes = self.rows.shape[1] * self.rows.element_size() if self.rows.dim() == 2 else 0
        self._ptr, size = self.rows.data_ptr(), self.rows.numel() * self.rows.element_size()
        if size:
            cupy.cuda.runtime.hostRegister(self._ptr, size, _HOST_REGISTER_MAPPED | _HOST_REGISTER_PORTABLE)
            # Unregistered when this object goes (or on close), the rows kept alive until then: memory must not
            # be freed while registered. Tiers are shared by every store of a run, so no store closes them.
            self.close = weakref.finalize(self, _unregister, self._ptr, self.rows)
            self.close.atexit = False  # at exit the process's mappings go anyway, CUDA's state possibly first

    def gather(self, slots, positions, out) -> None:
        """out[positions[i]] = rows[slots[i]], issued on the current stream of out's device: `slots` and
        `positions` int64 tensors on that device, `out` a contiguous device tensor of rows as wide as these.
        Nothing here waits for the device."""
        import torch

        n = int(slots.numel())
        if n == 0:
            return
        slots, order = torch.sort(slots)  # neighbouring warps read neighbouring host rows
        positions = positions.index_select(0, order)
        blocks = min(MAX_BLOCKS, -(-n // (ROWS_PER_WARP * THREADS // 32)))
        launch(KERNEL, "gather_rows", blocks, out, (np.uint64(self._ptr), np.uint64(slots.data_ptr()),
                                                    np.uint64(positions.data_ptr()), np.int64(n),
                                                    np.int64(self.row_bytes), np.uint64(out.data_ptr())))

    def close(self) -> None:
        """Unregisters the memory (replaced per object by its finalizer where something was registered)."""


@dataclass(frozen=True)
class HostGather:
    """How host tiers' rows reach the device: `zero_copy` (the GPU gathers them) or not, the plan's line of why,
    and the calibration's numbers where one ran (GB/s each way)."""

    zero_copy: bool
    line: str
    measured: dict | None = None


CPU_GATHER = "CPU gather into the batch's pinned slab, one copy with its other host rows"


def decide(option: str, reason: str | None, measure: Callable[[], tuple[float, float]]) -> HostGather:
    """--zero-copy `option` (auto, on, off) where zero copy cannot run for `reason` (None: it can); `measure`
    gives (zero-copy GB/s, CPU gather GB/s) and is called only for auto where zero copy can run."""
    if option == "off":
        return HostGather(False, f"host tiers: {CPU_GATHER} (--zero-copy off)")
    if reason is not None:
        if option == "on":
            raise DiskgnnError(f"--zero-copy on: {reason}")
        return HostGather(False, f"host tiers: {CPU_GATHER} ({reason})")
    if option == "on":
        return HostGather(True, "host tiers: zero copy, rows gathered by the GPU from mapped pinned memory "
                                "(--zero-copy on)")
    zero, cpu = measure()
    measured = {"zero_copy_gb_per_s": zero, "cpu_gather_gb_per_s": cpu}
    numbers = f"calibrated: zero copy {zero:.1f} GB/s, CPU gather and copy {cpu:.1f} GB/s"
    if zero >= defaults.ZERO_COPY_MARGIN * cpu:
        return HostGather(True, f"host tiers: zero copy, rows gathered by the GPU from mapped pinned memory "
                                f"(--zero-copy auto, {numbers})", measured)
    return HostGather(False, f"host tiers: {CPU_GATHER} (--zero-copy auto, {numbers})", measured)


def host_gather(device: str, option: str, row_bytes: int) -> HostGather:
    """The plan's decision for host tiers on `device`."""
    if device == "cpu":
        return HostGather(False, "host tiers: rows gathered by the CPU (no device)")
    return decide(option, why_not(device), lambda: calibrate(row_bytes))


def calibrate(row_bytes: int, rows: int = 0, repeat: int = 5) -> tuple[float, float]:
    """GB/s of `rows` random rows of `row_bytes` (default ZERO_COPY_CALIBRATION_ROWS) moved from host memory into
    device memory by the zero-copy kernel, and by the CPU path (a native multi-threaded gather into a pinned
    buffer and its copy); the best of `repeat` runs each, the device synchronised around each."""
    import torch

    from .. import _native
    from .staging import Slab

    rows = rows or defaults.ZERO_COPY_CALIBRATION_ROWS
    table_rows = max(4 * rows, (64 << 20) // max(1, row_bytes))
    table = torch.ones((table_rows, row_bytes), dtype=torch.uint8)  # written, so every page is resident
    slots = np.sort(np.random.default_rng(0).choice(table_rows, rows, replace=False))
    out = torch.empty((rows, row_bytes), dtype=torch.uint8, device="cuda")
    slots_d = torch.from_numpy(slots).cuda()
    positions_d = torch.arange(rows, device="cuda")
    mapped, slab = MappedRows(table), Slab(rows, row_bytes, pinned=True)

    def zero_copy():
        mapped.gather(slots_d, positions_d, out)

    def cpu():
        slab.reset(rows)
        slab.take(rows)
        _native.assemble_rows(slab.rows.numpy(), [(table.numpy(), slots, None, 0)], defaults.aggregate_threads())
        out.copy_(slab.rows, non_blocking=True)

    speeds = []
    for way in (zero_copy, cpu):
        way()  # the kernel's first launch, the allocator
        best = float("inf")
        for _ in range(repeat):
            torch.cuda.synchronize()
            t = time.perf_counter()
            way()
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t)
        speeds.append(rows * row_bytes / best / 1e9)
    mapped.close()
    return speeds[0], speeds[1]
