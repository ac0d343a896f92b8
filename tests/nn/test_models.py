"""Models over blocks: native aggregation against torch's index ops, dropout, layer-wise inference."""

import numpy as np
import pytest
import torch

from diskgnn.loading.aggregate import CsrSum
from diskgnn.loading.blocks import TensorBlock, full_block, sampled_blocks
from diskgnn.nn.inference import full_neighbour_logits
from diskgnn.nn.models import GNN
from diskgnn.offline.sample import sample_epoch

from conftest import small_dataset_at


def block_cases():
    rng = np.random.default_rng(0)
    yield "empty", np.zeros(1, np.int64), np.zeros(0, np.int64), 0, 3
    yield "one row", np.array([0, 1]), np.array([0]), 1, 1
    # zero-degree destinations, duplicate sources, more than one thread's share of edges
    counts = rng.integers(0, 40, size=199)
    counts[[0, 7, 198]] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = rng.integers(0, 4097, size=indptr[-1])
    indices[:50] = 3
    yield "skewed", indptr, indices, 199, 4097


@pytest.mark.parametrize("case", list(block_cases()), ids=lambda c: c[0])
@pytest.mark.parametrize("dim", [1, 33, 256])
def test_native_neighbour_sum_equals_index_add(case, dim):
    _, indptr, indices, nd, ns = case
    block = TensorBlock.from_csc(indptr, indices, nd, ns)
    h = torch.randn(ns, dim, requires_grad=True)
    got = block.sum_neighbours(h)
    h2 = h.detach().clone().requires_grad_(True)
    want = torch.zeros(nd, dim).index_add_(0, block.dst, h2[block.indices])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    g = torch.randn(nd, dim)
    (got * g).sum().backward()
    (want * g).sum().backward()
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-5, atol=1e-5)


def aggregate(block, h, how, path):
    """The block's sum, mean or mean with self over h through the native kernels (the CPU's way) or the CSR
    products (the way of other devices: here run on the CPU)."""
    if path == "native":
        return block.sum_neighbours(h) if how == "sum" else block.mean_neighbours(h, self_loop=how == "mean with self")
    scale = {"sum": None, "mean": block.inv_deg, "mean with self": block.inv_deg_self}[how]
    return CsrSum.apply(h, block, scale, how == "mean with self")


@pytest.mark.parametrize("case", list(block_cases()), ids=lambda c: c[0])
@pytest.mark.parametrize("dim", [1, 33, 256])
@pytest.mark.parametrize("how", ["sum", "mean", "mean with self"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("path", ["native", "csr"])
def test_sums_and_means_equal_float64_sums_rounded_once(case, dim, how, dtype, path):
    """float32 or bf16 rows in, the same out, float32 inside: within one rounding of the float64 oracle (bf16:
    2^-8 relative), forward and backward, a mean's scale (and GCN's self row) folded in; on both paths."""
    _, indptr, indices, nd, ns = case
    if how == "mean with self" and nd > ns:
        return
    block = TensorBlock.from_csc(indptr, indices, nd, ns)
    torch.manual_seed(dim)  # float32 sums of a hub's many terms stray past 1e-5 on rare draws: these draws are fixed
    h = torch.randn(ns, dim).to(dtype).requires_grad_(True)
    got = aggregate(block, h, how, path)
    assert got.dtype == dtype
    deg = block.deg.double()
    scale = {"sum": torch.ones_like(deg), "mean": 1 / deg.clamp(min=1), "mean with self": 1 / (deg + 1)}[how]
    rows, cols = block.dst, block.indices
    if how == "mean with self":  # the node's own row, as one more edge
        rows, cols = torch.cat([rows, torch.arange(nd)]), torch.cat([cols, torch.arange(nd)])
    want = torch.zeros(nd, dim, dtype=torch.float64).index_add_(0, rows, h.detach().double()[cols]) * scale
    tol = dict(rtol=2 ** -8, atol=1e-5) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.double(), want, **tol)
    g = torch.randn(nd, dim).to(dtype)
    got.backward(g)
    want_grad = torch.zeros(ns, dim, dtype=torch.float64).index_add_(0, cols, (g.double() * scale)[rows])
    assert h.grad.dtype == dtype
    torch.testing.assert_close(h.grad.double(), want_grad, **tol)


@pytest.mark.parametrize("self_loop", [False, True])
def test_torch_path_means_equal_the_native_ones(self_loop):
    """Rows that are not 2-d take torch's path (as CUDA does): the same means, with GCN's self row too."""
    _, indptr, indices, nd, ns = list(block_cases())[2]
    block = TensorBlock.from_csc(indptr, indices, nd, ns)
    h = torch.randn(ns, 12)
    native = block.mean_neighbours(h, self_loop=self_loop)
    torch.testing.assert_close(block.mean_neighbours(h.unsqueeze(1), self_loop=self_loop).squeeze(1), native)
    torch.testing.assert_close(block.sum_neighbours(h.view(ns, 3, 4)).view(nd, 12), block.sum_neighbours(h))


def test_native_mean_equals_sum_over_degree():
    _, indptr, indices, nd, ns = list(block_cases())[2]
    block = TensorBlock.from_csc(indptr, indices, nd, ns)
    h = torch.randn(ns, 40, requires_grad=True)
    got = block.mean_neighbours(h)
    h2 = h.detach().clone().requires_grad_(True)
    want = torch.zeros(nd, 40).index_add_(0, block.dst, h2[block.indices]) / block.deg.clamp(min=1)
    torch.testing.assert_close(got, want)
    assert (got[torch.from_numpy(np.diff(indptr) == 0)] == 0).all()  # no neighbours: a zero mean
    g = torch.randn(nd, 40)
    (got * g).sum().backward()
    (want * g).sum().backward()
    torch.testing.assert_close(h.grad, h2.grad)


def test_native_neighbour_sum_rejects_bad_ids():
    block = TensorBlock.from_csc(np.array([0, 2]), np.array([0, 5]), 1, 3)
    with pytest.raises(ValueError, match="out of range"):
        block.sum_neighbours(torch.randn(3, 4))


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    return small_dataset_at(tmp_path_factory.mktemp("models"))  # node 11 has no in-edges


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_sampled_blocks_with_all_neighbours_equal_layerwise_inference(small_dataset, tmp_path, kind):
    ds = small_dataset
    sf = sample_epoch(ds, tmp_path / "all.samples", fanouts=[-1, -1], batch_size=37, seed=0, epoch=0,
                      seeds=ds.split("val"))
    torch.manual_seed(0)
    model = GNN(kind, ds.feature_dim, 16, ds.num_classes, 2, 0.5).eval()
    features = torch.from_numpy(np.array(ds.features))
    seeds, outs = [], []
    with torch.no_grad():
        for batch in sf:
            outs.append(model(sampled_blocks(batch), features[torch.from_numpy(np.array(batch.nodes))]))
            seeds.append(batch.seeds)
    seeds = np.concatenate(seeds)
    layerwise = full_neighbour_logits(model, ds, seeds, tmp_path / "inf", batch_size=50)
    torch.testing.assert_close(torch.cat(outs), layerwise, rtol=1e-4, atol=1e-5)
    assert not list((tmp_path / "inf").iterdir())  # intermediate layers are removed


def test_full_block_of_every_node_is_the_graph(small_dataset):
    ds = small_dataset
    block, src = full_block(ds.indptr, ds.indices, np.arange(ds.num_nodes))
    assert np.array_equal(src, np.arange(ds.num_nodes))
    assert np.array_equal(block.indices.numpy(), np.asarray(ds.indices))
    assert block.deg[11].item() == 0
