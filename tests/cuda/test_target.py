"""The GPU target on a GPU: the keyed-dropout kernel against torch's reference, a pass's batches against the CPU
target's. The same logic runs on the CPU with a CPU device standing in (tests/target/); the kernel's source is
compiled by nvcc wherever nvcc is installed (test_zero_copy.py)."""

import numpy as np
import pytest
import torch

from diskgnn.offline.pack import PackFile
from diskgnn.store.uva import why_not
from diskgnn.target.csr_sum import csr_sum
from diskgnn.target.keyed_dropout import keep_mask, key_tensor, reference_mask

from conftest import every_tier

WHY_NOT = why_not("cuda")
needs_gpu = pytest.mark.skipif(WHY_NOT is not None, reason=f"the GPU target's kernels cannot run here: {WHY_NOT}")


@needs_gpu
@pytest.mark.parametrize("width", [1, 7, 256, 4097])
def test_the_dropout_kernel_equals_the_reference(width):
    ids = torch.tensor([5, 0, 199, 5, 123456789], dtype=torch.int64)
    bases = ids * (width + width % 2)
    for key in (1, 0xDEADBEEFCAFEF00D):
        got = keep_mask(bases.cuda(), width, key_tensor(key, "cuda"), 0.3).cpu()
        assert torch.equal(got, reference_mask(bases, width, key, 0.3))
    assert keep_mask(bases[:0].cuda(), width, key_tensor(1, "cuda"), 0.3).shape == (0, width)


@needs_gpu
@pytest.mark.parametrize("rows,sources,width", [(1, 1, 1), (199, 60, 7), (5, 3, 4097), (0, 4, 3), (6, 0, 5),
                                                (70000, 40000, 128)])
def test_the_csr_sum_kernel_equals_the_reference(rows, sources, width):
    """Empty lists, duplicates, one row, rows wider than a warp, more rows than the grid's threads at once."""
    rng = np.random.default_rng(rows)
    counts = rng.integers(0, 12 if sources else 1, rows)
    counts[: rows // 3] = 0
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    indices = torch.from_numpy(rng.integers(0, max(1, sources), int(indptr[-1])).astype(np.int64))
    h = torch.randn(sources, width)
    got = csr_sum(indptr.cuda(), indices.cuda(), h.cuda(), rows).cpu()
    torch.testing.assert_close(got, csr_sum(indptr, indices, h, rows), rtol=1e-5, atol=1e-5)


@needs_gpu
def test_a_pass_on_the_gpu_equals_the_cpu_targets(tmp_path):
    from diskgnn.loading.loaders import OfflineLoader
    from diskgnn.store.store import FeatureStore
    from diskgnn.store.tiers import load_tiers
    from diskgnn.target.cpu import CpuTarget
    from diskgnn.target.cuda import CudaTarget

    ds, sf, _, placement, packs = every_tier(tmp_path, 199, 7, np.float32)
    labels = np.asarray(ds.labels)

    def batches(target):
        tiers = load_tiers(ds, placement, target.name)
        store = FeatureStore(ds, placement, PackFile(packs), tiers=tiers, assembly=target.assembly(), read_depth=2)
        out = []
        for mb in OfflineLoader(sf, store, labels, 2, target).pipeline(np.arange(len(sf))):
            mb.wait()
            out.append((mb.x.cpu(), mb.labels.cpu(), [tuple(t.cpu() for t in b.tensors()) for b in mb.blocks]))
        return out

    for (x, y, blocks), (x0, y0, blocks0) in zip(batches(CudaTarget("cuda")), batches(CpuTarget()), strict=True):
        assert torch.equal(x, x0) and torch.equal(y, y0)
        for a, b in zip(blocks, blocks0, strict=True):
            assert all(torch.equal(u, v) for u, v in zip(a, b))
