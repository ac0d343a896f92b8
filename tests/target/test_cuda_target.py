"""The GPU target run on the CPU (diskgnn/target/cuda.py with a CPU device standing in): its node-keyed dropout
against the native kernel bit for bit, its batch record against the host's blocks, its sums against the native
ones, the copies and pinned buffers a batch costs (counted), and its step's operators against a plain torch
step's (counted, and none that reads a device value back)."""

from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from diskgnn.loading.aggregate import CsrSum
from diskgnn.loading.blocks import sampled_blocks
from diskgnn.loading.loaders import OfflineLoader
from diskgnn.nn.dropout import mix, native_dropout, row_positions
from diskgnn.nn.models import GNN
from diskgnn.offline.pack import PackFile
from diskgnn.offline.batches import Batch, Block
from diskgnn.offline.sample import sample_epoch
from diskgnn.store.store import FeatureStore
from diskgnn.store.tiers import load_tiers
from diskgnn.target.cpu import CpuTarget
from diskgnn.target.cuda import CudaTarget
from diskgnn.target.keyed_dropout import KeyedDropout, _signed, device_mix, keep_mask, key_tensor, reference_mask
from diskgnn.target.csr_sum import csr_sum, segment_product
from diskgnn.target.record import BatchRecord, device_block

from conftest import CASES, every_tier

STAND_IN = CudaTarget("cpu")


@pytest.mark.parametrize("width", [1, 7, 256, 4097])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keyed_masks_are_the_native_kernels_bit_for_bit(width, p):
    ids = np.array([5, 0, 199, 5, 123456789, (1 << 40) + 3], dtype=np.int64)  # duplicates, a large id
    key = mix(0xDEADBEEF, 7, 1)
    bases = torch.from_numpy(row_positions(ids, width))
    h = torch.randn(ids.size, width, generator=torch.Generator().manual_seed(width))
    for relu in (False, True):
        want = native_dropout(h, p, key, 0, relu=relu, bases=bases.numpy())
        x = h.clone().requires_grad_()
        got = KeyedDropout.apply(x, p, key_tensor(key, "cpu"), bases, relu)
        assert torch.equal(got, want)
        got.backward(torch.ones_like(got))
        assert torch.equal(x.grad, (want != 0).float() / (1 - p) * (1 if not relu else (h > 0).float()))
    assert torch.equal(keep_mask(bases, width, key_tensor(key, "cpu"), p), reference_mask(bases, width, key, p))
    assert keep_mask(bases[:0], width, key_tensor(1, "cpu"), p).shape == (0, width)


@pytest.mark.parametrize("key", [0, 1, 0xDEADBEEF, (1 << 64) - 1, 1 << 63])
def test_keys_mixed_on_the_device_are_the_hosts(key):
    """A captured step's keys (the epoch's key and the batch's first seed as device scalars) are mix's."""
    for words in [(), (7,), (123456789, 1), ((1 << 40) + 3, 2), (0, 0)]:
        as_tensors = [torch.tensor(words[0])] + list(words[1:]) if words else []
        got = device_mix(key_tensor(key, "cpu"), *as_tensors)
        assert got.dtype == torch.int64 and int(got) == _signed(mix(key, *words)), words


def _batch(shapes_seed: int, empty_block: bool = False) -> Batch:
    """A two-layer batch with awkward sizes: duplicate neighbours, a destination without any, an empty block."""
    rng = np.random.default_rng(shapes_seed)
    seeds, mid, src = 3, 11, 29
    inner_ptr = np.array([0, 2, 2, 5], np.int32)  # seed 1 has no neighbours
    inner = rng.integers(0, mid, 5).astype(np.int32)
    outer_counts = np.zeros(mid, np.int32) if empty_block else rng.integers(0, 4, mid).astype(np.int32)
    outer_ptr = np.concatenate([[0], np.cumsum(outer_counts)]).astype(np.int32)
    outer = rng.integers(0, src, int(outer_ptr[-1])).astype(np.int32)
    outer[:2] = outer[0] if outer.size >= 2 else outer[:2]  # a duplicate source
    nodes = rng.permutation(1000)[:src].astype(np.int64)
    return Batch.one_type(0, nodes, [Block(inner_ptr, inner, seeds, mid), Block(outer_ptr, outer, mid, src)], seeds)


@pytest.mark.parametrize("empty_block", [False, True])
def test_the_record_gives_the_hosts_blocks_and_the_same_sums(empty_block):
    batch = _batch(1, empty_block)
    labels = np.arange(1000) % 5
    record = BatchRecord.of(batch, labels[batch.seeds])
    y, nodes, parts = record.split(torch.from_numpy(record.words))
    assert torch.equal(y, torch.from_numpy(labels[batch.seeds])) and torch.equal(nodes, torch.from_numpy(batch.nodes))
    for (ptr, idx), (nd, ns, _), host in zip(parts, record.shapes, sampled_blocks(batch)):
        block = device_block(ptr, idx, nd, ns, STAND_IN.kernels)
        for got, want in zip(block.tensors(), host.tensors()):
            assert torch.equal(got, want)
        a, a_t = (m.to_dense() for m in block.csr)
        assert torch.equal(a_t, a.T)
        for self_loop in (False, True):
            h = torch.randn(ns, 6, generator=torch.Generator().manual_seed(ns), requires_grad=True)
            h2 = h.detach().clone().requires_grad_()
            got, want = block.mean_neighbours(h, self_loop), host.mean_neighbours(h2, self_loop)
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
            g = torch.randn_like(got)
            got.backward(g)
            want.backward(g)
            torch.testing.assert_close(h.grad, h2.grad, rtol=1e-6, atol=1e-6)


def _lists(rows: int, sources: int, seed: int):
    """CSR lists with empty rows and duplicate entries (int64, as a record's)."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4 if sources else 1, rows)
    counts[: rows // 3] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = rng.integers(0, max(1, sources), int(indptr[-1])).astype(np.int64)
    if indices.size >= 2:
        indices[1] = indices[0]
    return torch.from_numpy(indptr), torch.from_numpy(indices)


@pytest.mark.parametrize("rows,sources,width", [(1, 1, 1), (199, 260, 7), (5, 9, 4097), (60, 30, 2), (0, 4, 3),
                                                (6, 0, 5)])
def test_csr_sums_equal_the_sparse_product_and_their_transpose_backward(rows, sources, width):
    """The captured step's sums (csr_sum's reference here; the CUDA kernel against it in tests/cuda) against the
    plain sum of each list and, through CsrSum, against cuSPARSE's path forward and backward."""
    indptr, indices = _lists(rows, sources, rows + width)
    h = torch.randn(sources, width, generator=torch.Generator().manual_seed(width))
    want = torch.stack([h[indices[indptr[i]:indptr[i + 1]]].sum(0) for i in range(rows)]) if rows else \
        torch.zeros(0, width)
    torch.testing.assert_close(csr_sum(indptr, indices, h, rows), want, rtol=1e-6, atol=1e-6)
    if not 0 < rows <= sources:  # a block's destinations are its first sources
        return
    block = device_block(indptr, indices, rows, sources, STAND_IN.kernels)
    for self_loop in (False, True):
        x, y = h.clone().requires_grad_(), h.clone().requires_grad_()
        got = CsrSum.apply(x, block, block.inv_deg, self_loop, segment_product)
        ref = CsrSum.apply(y, block, block.inv_deg, self_loop)
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
        g = torch.randn_like(got)
        got.backward(g)
        ref.backward(g)
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-6, atol=1e-6)


class Counted:
    """Counts calls of torch.Tensor methods while active (the test's instrument); `to` where it names a device
    (a copy to it), not a dtype."""

    def __init__(self, monkeypatch, names):
        self.calls = Counter()
        for name in names:
            original = getattr(torch.Tensor, name)

            def counted(t, *a, _name=name, _original=original, **k):
                if _name != "to" or "device" in k or (a and isinstance(a[0], (str, torch.device))):
                    self.calls[_name] += 1
                return _original(t, *a, **k)

            monkeypatch.setattr(torch.Tensor, name, counted)


@pytest.mark.parametrize("nodes,dim,dtype", CASES)
def test_a_batch_crosses_in_two_copies_pins_nothing_and_equals_the_cpu_targets(tmp_path, monkeypatch, nodes, dim,
                                                                               dtype):
    """Every batch of an epoch through the GPU target's pipeline (every tier of the chain, a CPU standing in for
    the device): at most 2 host-to-device copies and no pinning a batch, and the same rows, blocks and labels as
    the CPU target's."""
    ds, sf, _, placement, packs = every_tier(tmp_path, nodes, dim, dtype)
    labels = np.asarray(ds.labels)
    tiers = load_tiers(ds, placement)

    def loader(target):
        store = FeatureStore(ds, placement, PackFile(packs), tiers=tiers, assembly=target.assembly(), read_depth=2)
        return OfflineLoader(sf, store, labels, 2, target)

    want = list(loader(CpuTarget()).pipeline(np.arange(len(sf))))
    counted = Counted(monkeypatch, ["to", "pin_memory", "cuda", "copy_"])
    got = list(loader(STAND_IN).pipeline(np.arange(len(sf))))
    assert len(got) == len(want) == len(sf) > 3
    assert counted.calls["pin_memory"] == 0 and counted.calls["cuda"] == 0 and counted.calls["copy_"] == 0
    assert counted.calls["to"] <= 2 * len(sf), counted.calls
    for g, w in zip(got, want):
        assert torch.equal(g.x, w.x) and torch.equal(g.labels, w.labels)
        np.testing.assert_array_equal(g.node_ids.numpy(), w.input_nodes)
        for a, b in zip(g.blocks, w.blocks):
            assert (a.num_dst, a.num_src) == (b.num_dst, b.num_src)
            assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))


class OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


READS_BACK = ("_local_scalar_dense", "nonzero", "item", "bincount", "unique", "masked_select", "_to_cpu")


def _sage_step(model, optimizer, blocks, x, y, rows):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(blocks, x, rows), y)
    loss.backward()
    optimizer.step()
    return loss


class PlainMean(torch.nn.Module):
    """The plain torch SAGE layer the issue measures against: index_add_ means."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.self_lin, self.neigh_lin = torch.nn.Linear(d_in, d_out), torch.nn.Linear(d_in, d_out, bias=False)

    def forward(self, block, h):
        total = torch.zeros((block.num_dst, h.shape[1]), dtype=h.dtype).index_add_(0, block.dst, h[block.indices])
        return self.self_lin(h[: block.num_dst]) + self.neigh_lin(total * block.inv_deg.unsqueeze(1))


def test_the_gpu_targets_step_dispatches_no_more_ops_than_plain_torch_and_reads_nothing_back(train_data):
    from diskgnn.data.format import open_dataset

    ds = open_dataset(train_data)
    sf = sample_epoch(ds, train_data.parent / "ops.samples", fanouts=[5, 3], batch_size=64, seed=0, epoch=0)
    labels = np.asarray(ds.labels)
    batch = sf[0]
    record = BatchRecord.of(batch, labels[batch.seeds])
    y, nodes, parts = record.split(torch.from_numpy(record.words))
    blocks = [device_block(p, i, nd, ns, STAND_IN.kernels) for (p, i), (nd, ns, _) in zip(parts, record.shapes)]
    x = torch.from_numpy(np.asarray(ds.features)[batch.nodes])
    torch.manual_seed(0)
    ours = GNN("sage", ds.feature_dim, 32, ds.num_classes, 2, 0.5).train()
    ours.reseed(1)
    plain = GNN("sage", ds.feature_dim, 32, ds.num_classes, 2, 0.5).train()
    plain.layers = torch.nn.ModuleList([PlainMean(ds.feature_dim, 32), PlainMean(32, ds.num_classes)])
    plain.dropout.forward = lambda h, relu=False, rows=None, kernels=None: F.dropout(F.relu(h), 0.5, True)
    host_blocks = sampled_blocks(batch)
    steps = {"ours": (ours, STAND_IN.optimizer(ours.parameters(), 0.01), blocks, nodes),
             "plain": (plain, torch.optim.Adam(plain.parameters(), 0.01, foreach=True), host_blocks,
                       batch.nodes)}
    counts = {}
    for name, (model, opt, bs, ids) in steps.items():
        _sage_step(model, opt, bs, x, y, ((0,), ids))  # the optimizer's state made
        with OpCount() as mode:
            _sage_step(model, opt, bs, x, y, ((0,), ids))
        counts[name] = mode.ops
    assert sum(counts["ours"].values()) <= sum(counts["plain"].values()), counts
    assert not [op for op in counts["ours"] if any(r in op for r in READS_BACK)], counts["ours"]
    assert counts["ours"]["diskgnn.keep_mask"] == 1 and counts["ours"]["aten._fused_adam_"] == 1
