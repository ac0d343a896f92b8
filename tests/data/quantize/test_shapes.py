"""Every quantizer on the feature shapes users have: dense signed, non-negative, sparse (bag-of-words,
TF-IDF), binary 0/1; against plain numpy oracles on awkward matrices."""

import numpy as np
import pytest

from diskgnn.data.quantize.base import DataShape
from diskgnn.data.quantize.quantizers import from_state, make_quantizer

from quantize_cases import SPECS, features, fitted

SQ = ["sq1", "sq2", "sq4", "sq8", "sq16"]
LIN = ["lin4", "lin8", "lin8:p=1", "lin4:p=10"]


def sparse_nonnegative(n=199, d=33, density=0.02, seed=0):
    """Row-normalised bag-of-words: a few non-zeros per row in [0, 1], many distinct values, one
    all-zero column, one row with a single non-zero, one all-zero row."""
    rng = np.random.default_rng(seed)
    x = np.where(rng.random((n, d)) < density, rng.exponential(1.0, (n, d)), 0.0)
    x[np.arange(n), rng.integers(0, d, n)] += rng.uniform(0.1, 2, n)  # at least one non-zero per row
    x[:, 5] = 0
    x[7] = 0
    x[8] = 0
    x[8, 3] = 0.25
    x /= np.maximum(x.sum(axis=1, keepdims=True), 1e-30)
    return x.astype(np.float32)


def roundtrip(q, x):
    return q.decode_numpy(q.encode(x))


@pytest.mark.parametrize("spec", SPECS)
def test_exact_zeros_of_sparse_data_stay_exactly_zero(spec):
    x = sparse_nonnegative()
    q = fitted(spec, x)
    assert q.shape == DataShape(signed=False, zero=True)
    y = roundtrip(q, x)
    if spec.startswith("vq"):
        # a sub-vector of zeros decodes to zeros (centroid 0 is pinned)
        w = q.w
        pad = np.zeros((x.shape[0], q.parts * w), dtype=np.float32)
        pad[:, :x.shape[1]] = x
        ypad = np.zeros_like(pad)
        ypad[:, :x.shape[1]] = y
        empty = (pad.reshape(x.shape[0], q.parts, w) == 0).all(axis=2)
        assert empty.any() and (ypad.reshape(x.shape[0], q.parts, w)[empty] == 0).all()
    else:
        assert (y[x == 0] == 0).all()
        assert (y[x != 0] != 0).all()  # and no non-zero becomes zero
        assert (y >= 0).all()


@pytest.mark.parametrize("spec", SQ[1:] + LIN)
def test_sparse_ranges_come_from_the_nonzero_values(spec):
    """At 99.9 % zeros, BiFeat's percentiles over all entries clip every non-zero to ~2e-5; fitted
    on the non-zeros, each keeps its magnitude within its bucket."""
    rng = np.random.default_rng(1)
    x = np.zeros((2000, 50), dtype=np.float32)
    nz = rng.random(x.shape) < 0.001
    x[nz] = rng.uniform(0.05, 1, nz.sum()).astype(np.float32)
    q = fitted(spec, x)
    y = roundtrip(q, x)
    rel = np.abs(y[nz] - x[nz]) / x[nz]
    bound = {"sq2": 0.8, "sq4": 0.25, "sq8": 0.02, "sq16": 1e-4, "lin4": 1.0, "lin8": 0.1}[spec.split(":")[0]]
    assert np.median(rel) < bound and (y[~nz] == 0).all()


@pytest.mark.parametrize("spec", SQ + LIN)
def test_binary_data_is_exact(spec):
    rng = np.random.default_rng(2)
    x = (rng.random((199, 33)) < 0.1).astype(np.float32)
    q = fitted(spec, x)
    np.testing.assert_array_equal(roundtrip(q, x), x)


def test_sq1_on_sparse_nonnegative_data_keeps_zero_and_the_mean_nonzero():
    x = sparse_nonnegative()
    q = fitted("sq1", x)
    m = np.float32(x[x != 0].mean(dtype=np.float64))
    np.testing.assert_array_equal(roundtrip(q, x), np.where(x != 0, m, 0))


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_nonnegative_dense_data_spends_no_bit_on_a_sign(bits):
    x = np.abs(features())
    x[x == 0] = 0.5  # dense: no zeros at all
    q = fitted(f"sq{bits}", x)
    assert q.shape == DataShape(signed=False, zero=False) and q.levels == 1 << bits
    y = roundtrip(q, x)
    assert (y > 0).all() and np.unique(y).size > (1 << bits) // 2  # more magnitudes than one sign's share
    signed = fitted(f"sq{bits}", features())  # signed data: half the levels for each sign
    assert signed.levels == 1 << bits and signed.magnitudes == (1 << bits) // 2


@pytest.mark.parametrize("spec", SQ)
def test_negative_only_columns_and_constant_rows(spec):
    x = features()
    x[:, 1] = -np.abs(x[:, 1]) - 0.1  # a negative-only column
    x[4] = 1.5                        # a constant row
    q = fitted(spec, x)
    y = roundtrip(q, x)
    assert (np.delete(y[:, 1], 4) < 0).all() and (np.sign(y[4]) == 1).all()
    if spec != "sq1":
        assert (y[4] == y[4, 0]).all()  # one value, one code


@pytest.mark.parametrize("spec", SQ + LIN)
def test_signed_sparse_data_keeps_zeros_and_signs(spec):
    x = sparse_nonnegative() * np.where(np.random.default_rng(3).random((199, 33)) < 0.5, -1, 1).astype(np.float32)
    q = fitted(spec, x)
    y = roundtrip(q, x)
    if spec == "sq1":  # one bit holds a sign or a zero: it keeps the sign
        assert q.shape == DataShape(signed=True, zero=False) and (np.sign(y[x != 0]) == np.sign(x[x != 0])).all()
        return
    assert q.shape == DataShape(signed=True, zero=True)
    clipped = q.clipped(x)  # a value clipped to a range that ends at 0 may become 0 (None: no range)
    inside = (x != 0) & (True if clipped is None else ~clipped)
    assert (y[x == 0] == 0).all() and (np.sign(y[inside]) == np.sign(x[inside])).all()


@pytest.mark.parametrize("spec", SPECS)
def test_the_data_shape_travels_with_the_state(spec):
    x = sparse_nonnegative()
    q = fitted(spec, x)
    state = q.state()
    np.testing.assert_array_equal(state["shape"], [0, 1])
    again = from_state(q.spec, x.shape[1], state)
    assert again.shape == q.shape
    np.testing.assert_array_equal(again.encode(x), q.encode(x))
    np.testing.assert_array_equal(roundtrip(again, x), roundtrip(q, x))


@pytest.mark.parametrize("spec", SPECS)
def test_parameters_from_before_the_shape_load_as_dense_signed(spec):
    """Variants stored before the data shape was recorded hold BiFeat's dense signed fits."""
    x = features()
    q = fitted(spec, x)
    assert q.shape == DataShape(signed=True, zero=False)
    state = {k: v for k, v in q.state().items() if k != "shape"}
    legacy = from_state(q.spec, x.shape[1], state)
    np.testing.assert_array_equal(roundtrip(legacy, x), roundtrip(q, x))


def test_every_zero_sample_fits_and_decodes_zeros():
    x = np.zeros((10, 7), dtype=np.float32)
    for spec in SQ + LIN + ["vq:w=2,L=4"]:
        q = make_quantizer(spec, 7).fit(x)
        np.testing.assert_array_equal(roundtrip(q, x), x)
