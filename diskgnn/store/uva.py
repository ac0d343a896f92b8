"""Zero-copy gathers (PyTorch-Direct): a host tier's rows in page-locked memory mapped into the GPU's address
space, gathered by a CUDA kernel (uva_gather.cu) straight into the batch's device tensor.

Without it a host tier's rows are gathered by the CPU into a pinned staging matrix and copied; with it the
GPU reads only the rows a batch needs, over PCIe, while the CPU does nothing. The kernel is compiled at run
time by CuPy (NVRTC), which the GPU machines carry; `why_not` says why the fallback (CPU gather + pinned copy)
is taken where it is: no CUDA device, no CuPy, or the kernel failed to compile.
"""

from __future__ import annotations

import weakref
from functools import lru_cache
from pathlib import Path

import numpy as np

KERNEL = Path(__file__).with_name("uva_gather.cu")
THREADS = 256  # 8 warps a block, one row per warp at a time
MAX_BLOCKS = 4096  # rows in flight: 32 Ki warps, far more than PCIe round trips need
_HOST_REGISTER_PORTABLE, _HOST_REGISTER_MAPPED = 1, 2


@lru_cache(maxsize=1)
def _kernel():
    import cupy

    return cupy.RawModule(code=KERNEL.read_text(), options=("--std=c++17",)).get_function("gather_rows")


def why_not(device: str) -> str | None:
    """None where zero-copy gathers can run on `device`, else why not (one line)."""
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import cupy  # noqa: F401
    except ImportError as e:
        return f"CuPy is not installed ({e}); pip install cupy-cuda12x (or -cuda13x) for zero-copy gathers"
    try:
        _kernel()
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

    def gather(self, slots: np.ndarray, positions: np.ndarray, out) -> None:
        """out[positions[i]] = rows[slots[i]] on out's device, in the current stream; `out` is a contiguous
        device tensor of rows as wide as these."""
        import cupy
        import torch

        n = int(slots.size)
        if n == 0:
            return
        order = np.argsort(slots, kind="stable")  # neighbouring warps read neighbouring host rows
        ids = torch.from_numpy(np.stack([np.asarray(slots, dtype=np.int64)[order],
                                         np.asarray(positions, dtype=np.int64)[order]])).pin_memory()
        ids = ids.to(out.device, non_blocking=True)
        blocks = min(MAX_BLOCKS, -(-n * 32 // THREADS))
        stream = torch.cuda.current_stream(out.device)
        with cupy.cuda.Device(out.device.index or 0), cupy.cuda.ExternalStream(stream.cuda_stream):
            _kernel()((blocks,), (THREADS,), (np.uint64(self._ptr), np.uint64(ids[0].data_ptr()),
                                              np.uint64(ids[1].data_ptr()), np.int64(n), np.int64(self.row_bytes),
                                              np.uint64(out.data_ptr())))

    def close(self) -> None:
        """Unregisters the memory (replaced per object by its finalizer where something was registered)."""
