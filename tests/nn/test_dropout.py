"""The native CPU dropout against a numpy oracle of its draws: masks, scale, backward, bf16, resumed streams."""

import numpy as np
import pytest
import torch

from diskgnn.errors import DiskgnnError
from diskgnn.nn.dropout import Dropout, native_dropout



def draws(key: int, offset: int, n: int) -> np.ndarray:
    """Element i's draw, in plain numpy: half i % 2 (low first) of splitmix64's finaliser of key + (i // 2) *
    golden, for the elements offset .. offset + n - 1."""
    index = np.uint64(offset) + np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (index >> np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return ((z >> (np.uint64(32) * (index & np.uint64(1)))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def oracle(h: torch.Tensor, p: float, key: int, offset: int) -> torch.Tensor:
    keep = draws(key, offset, h.numel()) >= np.uint64(round(p * 2 ** 32))
    return torch.where(torch.from_numpy(keep).view(h.shape), h.float() * np.float32(1 / (1 - p)), 0.0).to(h.dtype)


@pytest.mark.parametrize("shape", [(0, 5), (1, 1), (199, 33), (3, 4097)], ids=["empty", "one", "199x33", "3x4097"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_native_dropout_equals_the_oracle_forward_and_backward(shape, dtype, p):
    key, offset = 0xDEADBEEF12345678, 12346
    h = torch.randn(shape).to(dtype).requires_grad_(True)
    d = Dropout(p)
    d.key, d.counter = key, offset
    out = d(h)
    assert out.dtype == dtype and torch.equal(out, oracle(h.detach(), p, key, offset))
    assert d.counter == offset + h.numel() + h.numel() % 2  # draws come in pairs: the next call starts even
    g = torch.randn(shape).to(dtype)
    out.backward(g)
    assert torch.equal(h.grad, oracle(g, p, key, offset))  # the same mask and scale


@pytest.mark.parametrize("shape", [(0, 5), (1, 1), (199, 33), (3, 4097)], ids=["empty", "one", "199x33", "3x4097"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_relu_then_dropout_in_one_pass_equals_the_two_ops(shape, dtype):
    key, offset, p = 99, 8, 0.5
    h = torch.randn(shape).to(dtype)
    h.view(-1)[::5] = 0.0  # ReLU's kink: no gradient at 0, as torch's
    h.requires_grad_(True)
    d = Dropout(p)
    d.key, d.counter = key, offset
    out = d(h, relu=True)
    h2 = h.detach().clone().requires_grad_(True)
    want = oracle(torch.relu(h2), p, key, offset)
    assert out.dtype == dtype and torch.equal(out, want)
    g = torch.randn(shape).to(dtype)
    out.backward(g)
    keep = torch.from_numpy(draws(key, offset, h.numel()) >= np.uint64(round(p * 2 ** 32))).view(shape)
    expected = torch.where(keep & (h2.detach() > 0), g.float() * 2.0, 0.0).to(dtype)
    assert torch.equal(h.grad, expected)
    d.eval()
    assert torch.equal(d(h, relu=True), torch.relu(h))


def test_dropout_is_seeded_scaled_resumable_and_off_in_eval():
    d = Dropout(0.25)
    h = torch.ones(300, 200)
    d.reseed(7)
    a, b = d(h), d(h)
    assert not torch.equal(a, b)  # the stream moves on
    kept = (a != 0).float().mean().item()
    assert 0.74 < kept < 0.76 and torch.allclose(a[a != 0], torch.tensor(1 / 0.75))
    d.reseed(7)
    assert torch.equal(a, d(h))
    state = d.state
    again = Dropout(0.25)
    again.state = state  # a mid-epoch checkpoint's stream: the next mask is b
    assert torch.equal(again(h), b)
    with pytest.raises(DiskgnnError, match="older diskgnn"):
        again.state = np.random.PCG64(0).state
    d.eval()
    assert d(h) is h


def test_native_dropout_refuses_bad_arguments():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        native_dropout(torch.ones(3), 1.0, 0, 0)
    with pytest.raises(ValueError, match="float32"):
        native_dropout(torch.ones(3, dtype=torch.float64), 0.5, 0, 0)
    with pytest.raises(ValueError, match="even"):
        native_dropout(torch.ones(3), 0.5, 0, 1)


@pytest.mark.parametrize("shape", [(0, 5), (1, 1), (199, 33), (3, 4097)], ids=["empty", "one", "199x33", "3x4097"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("relu", [False, True])
def test_masks_keyed_by_node_equal_the_oracle_and_do_not_depend_on_the_other_rows(shape, dtype, relu):
    """With rows=(salt, node ids) element (r, c) draws position id_r * (width rounded up to even) + c under the
    epoch's key mixed with the salt: the oracle, row by row; and a node's row is dropped alike whichever rows
    share its tensor and in whatever order (a cooperative rank's share of a batch, or the whole batch)."""
    from diskgnn.nn.dropout import mix

    n, width = shape
    ids = np.random.default_rng(0).permutation(10 * n + 7)[:n].astype(np.int64)
    ids[-1:] = 10 * n + 6 if n else ids[-1:]  # the largest id present
    h = torch.randn(shape).to(dtype)
    d = Dropout(0.5)
    d.reseed(5)
    salt = (123, 1)
    out = d(h, relu=relu, rows=(salt, ids))
    key, stride = mix(d.key, *salt), width + width % 2
    src = torch.relu(h) if relu else h
    want = [oracle(src[r: r + 1], 0.5, key, int(ids[r]) * stride) for r in range(n)]
    assert torch.equal(out, torch.cat(want) if want else torch.empty(shape, dtype=dtype))
    assert d.counter == 0  # keyed masks do not advance the stream
    if n > 1:
        order = np.random.default_rng(1).permutation(n)
        half = order[: n // 2]
        part = d(h[torch.from_numpy(half)], relu=relu, rows=(salt, ids[half]))
        assert torch.equal(part, out[torch.from_numpy(half)])


def test_keyed_rows_refuse_a_row_count_that_does_not_match():
    from diskgnn import _native

    h = np.ones((4, 6), np.float32)
    with pytest.raises(ValueError, match="one int64 per row"):
        _native.dropout(h.reshape(-1), np.empty(24, np.float32), 0.5, 1, 0, np.arange(3, dtype=np.int64) * 6, 6,
                        False, 1)
    with pytest.raises(ValueError, match="row positions must be even"):
        _native.dropout(h.reshape(-1), np.empty(24, np.float32), 0.5, 1, 0, np.array([0, 6, 13, 18]), 6, False, 1)
