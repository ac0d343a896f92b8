"""Each quantizer: error bounds, codes, decoders against a plain oracle (numpy, torch, GPU), its state."""

import numpy as np
import pytest
import torch

from diskgnn.data.quantize.bits import unpack_bits
from diskgnn.data.quantize.quantizers import from_state, make_quantizer
from diskgnn.data.quantize.spec import parse_spec
from diskgnn.errors import DiskgnnError

from quantize_cases import SPECS, features, fitted


@pytest.mark.parametrize("bits", [2, 4, 8, 16])
def test_sq_error_within_half_a_log_bucket(bits):
    x = features()
    q = fitted(f"sq{bits}", x)
    fmin, fmax, emin, emax = q.range
    delta = (emax - emin) / (1 << (bits - 1))
    y = q.decode_numpy(q.encode(x)).astype(np.float64)
    slack = 1e-6  # float32 rounding of the stored values
    assert ((y > 0) == (x > 0)).all()  # sign kept; zero goes to the negative side, as in BiFeat
    a = np.abs(x.astype(np.float64))
    inside = (a >= fmin) & (a <= fmax)
    ratio = np.abs(y[inside]) / a[inside]
    assert inside.mean() > 0.9  # all but the zero columns and the 0.5 % tails
    assert ratio.min() >= 2 ** (-delta / 2) * (1 - slack) and ratio.max() <= 2 ** (delta / 2) * (1 + slack)
    # Outside the range magnitudes are clipped to the outer buckets' midpoints.
    np.testing.assert_allclose(np.abs(y[a < fmin]), 2 ** (emin + delta / 2), rtol=slack)
    np.testing.assert_allclose(np.abs(y[a > fmax]), 2 ** (emax - delta / 2), rtol=slack)
    assert (a < fmin).any() and (a > fmax).any()


def test_sq_buckets_agree_with_the_log2_formula():
    """Thresholds replace BiFeat's floor((log2|x| - emin) / (emax - emin) * D); they may differ
    only for values within rounding of a bucket edge."""
    x = features(d=64)
    for bits in (2, 4, 8, 16):
        q = fitted(f"sq{bits}", x)
        fmin, fmax, emin, emax = q.range
        half = 1 << (bits - 1)
        a = np.clip(np.abs(x.astype(np.float64)), fmin, fmax)
        e = np.clip(np.floor((np.log2(a) - emin) / (emax - emin) * half), 0, half - 1)
        oracle = np.where(x > 0, half + e, half - 1 - e)
        got = unpack_bits(q.encode(x), bits)[:, :x.shape[1]].astype(np.int64)
        assert np.abs(got - oracle).max() <= 1 and (got == oracle).mean() > 0.999


@pytest.mark.parametrize("bits", [2, 4, 8, 16])
def test_sq_values_at_bucket_edges_follow_the_thresholds(bits):
    """Bucket e holds thresholds[e-1] <= |x| < thresholds[e], exactly, where a float log2 would waver."""
    q = fitted(f"sq{bits}", features())
    t32 = q.thresholds.astype(np.float32)
    edges = np.concatenate([t32, np.nextafter(t32, 0), np.nextafter(t32, np.inf), [0, 1e-30, 1e30]])
    x = np.concatenate([edges, -edges]).astype(np.float32)[None, :]
    q = from_state(q.spec, x.shape[1], q.state())  # the range does not depend on the width
    half = 1 << (bits - 1)
    e = np.searchsorted(q.thresholds, np.abs(x[0]).astype(np.float64), side="right")
    oracle = np.where(x[0] > 0, half + e, half - 1 - e)
    np.testing.assert_array_equal(unpack_bits(q.encode(x), bits)[0, :x.shape[1]], oracle)


def test_sq1_is_sign_times_mean_magnitude():
    x = features()
    q = fitted("sq1", x)
    m0 = np.abs(x).mean(dtype=np.float64)
    m = np.float32(m0 + 0.1 if m0 < 0.1 else m0)
    y = q.decode_numpy(q.encode(x))
    np.testing.assert_array_equal(y, np.where(x > 0, m, -m))
    small = np.full((3, 5), 0.01, dtype=np.float32)
    small[0] *= -1  # signed: on non-negative data sq1 spends its bit on two magnitudes instead
    assert fitted("sq1", small).range[0] == pytest.approx(0.11)  # BiFeat lifts a scale below 0.1 by 0.1


@pytest.mark.parametrize("spec", ["lin4", "lin8", "lin8:p=1", "lin4:p=10"])
def test_lin_error_within_half_a_step(spec):
    x = features()
    q = fitted(spec, x)
    y = q.decode_numpy(q.encode(x)).astype(np.float64)
    lo, hi = q.lo.astype(np.float64), q.hi.astype(np.float64)
    step = (hi - lo) / (q.levels - 1)
    slack = 1e-6 * np.maximum(np.abs(lo), np.abs(hi)) + 1e-30
    clipped = np.clip(x, lo, hi)
    assert (np.abs(y - clipped) <= step / 2 + slack).all()
    if spec.endswith("p=10"):
        assert (clipped != x).any()  # percentile clipping did clip
    else:
        assert (y >= lo - slack).all() and (y <= hi + slack).all()
    assert not y[:, [3, x.shape[1] - 1]].any()  # all-zero columns come back exactly


def test_vq_codes_are_nearest_centroids_and_error_falls_with_L():
    x = features(d=33)
    errors = []
    for L in (2, 8, 32, 128):
        q = fitted(f"vq:w=4,L={L}", x)
        codes = unpack_bits(q.encode(x), q.bits)[:, :q.parts].astype(np.int64)
        assert codes.max() < L
        xp = np.zeros((x.shape[0], q.parts * 4), np.float32)
        xp[:, :33] = x
        xp = xp.reshape(-1, q.parts, 4).astype(np.float64)
        dist = ((xp[:, :, None, :] - q.codebook[None].astype(np.float64)) ** 2).sum(-1)  # [n, P, L]
        chosen = np.take_along_axis(dist, codes[:, :, None], 2)[:, :, 0]
        assert (chosen <= dist.min(axis=2) * (1 + 1e-5) + 1e-6).all()
        errors.append(float(((q.decode_numpy(q.encode(x)) - x) ** 2).mean()))
    print("\nvq:w=4 MSE by L=2,8,32,128:", ", ".join(f"{e:.4g}" for e in errors))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors


def test_vq_uses_uint16_codes_above_256_centroids():
    x = features(n=400)
    q = fitted("vq:w=5,L=300", x)
    assert q.bits == 16 and q.code_bytes == 2 * 7
    codes = unpack_bits(q.encode(x), 16)
    assert codes.max() >= 256 and codes.max() < 300


def oracle_decode(spec, state, codes, dim):
    """Plain loops over the format of docs/quantization.md, from the stored params alone."""
    kind, bits, opts = parse_spec(spec)
    bits = bits if kind != "vq" else (8 if opts["L"] <= 256 else 16)
    out = []
    for row in codes:
        def symbol(j):
            if bits == 16:
                return int(row[2 * j]) | int(row[2 * j + 1]) << 8
            return (int(row[j * bits // 8]) >> (j * bits % 8)) & ((1 << bits) - 1)

        values = []
        if kind == "vq":
            for p in range(state["codebook"].shape[0]):
                values.extend(state["codebook"][p, symbol(p)])
        elif kind == "lin":
            lo, hi = state["lo"].astype(float), state["hi"].astype(float)
            values = [lo[j] + symbol(j) * (hi[j] - lo[j]) / ((1 << bits) - 1) for j in range(dim)]
        elif bits == 1:
            values = [state["range"][0] * (1 if symbol(j) else -1) for j in range(dim)]
        else:
            half = 1 << (bits - 1)
            emin, emax = state["range"][2:]
            for j in range(dim):
                t = symbol(j) - half + 0.5
                values.append(np.sign(t) * 2.0 ** (abs(t) * (emax - emin) / half + emin))
        out.append(np.array(values[:dim], dtype=np.float32))
    return np.stack(out)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n,d", [(1, 1), (199, 33), (1, 4097)])
def test_decoders_agree_with_the_oracle(spec, n, d):
    x = features(max(n, 40), d)
    q = fitted(spec, x)
    codes = q.encode(x[:n])
    assert codes.shape == (n, q.code_bytes) and codes.dtype == np.uint8
    y = q.decode_numpy(codes)
    assert y.shape == (n, d) and y.dtype == np.float32
    t = q.decode_torch(torch.from_numpy(codes))
    assert t.dtype == torch.float32 and torch.equal(t, torch.from_numpy(y))
    np.testing.assert_allclose(y, oracle_decode(q.spec, q.state(), codes, d), rtol=1e-6, atol=0)
    # A row decodes alone to what it decodes to among others.
    np.testing.assert_array_equal(q.decode_numpy(codes[-1:]), y[-1:])
    # The stored state gives the same quantizer.
    q2 = from_state(spec, d, {k: v.copy() for k, v in q.state().items()})
    np.testing.assert_array_equal(q2.encode(x[:n]), codes)
    np.testing.assert_array_equal(q2.decode_numpy(codes), y)
    assert q.invalid_row(codes) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("spec", SPECS)
def test_decode_on_the_gpu_matches_the_cpu(spec):
    x = features()
    q = fitted(spec, x)
    codes = q.encode(x)
    on_gpu = q.decode_torch(torch.from_numpy(codes).cuda())
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), torch.from_numpy(q.decode_numpy(codes)))


def test_state_is_checked():
    q = fitted("sq4", features())
    state = q.state()
    with pytest.raises(DiskgnnError, match="params hold"):
        from_state("sq4", 33, {"lookup": state["lookup"]})
    with pytest.raises(DiskgnnError, match="'lookup' is float32\\[15\\], expected float32\\[16\\]"):
        from_state("sq4", 33, {**state, "lookup": state["lookup"][:15]})
    with pytest.raises(DiskgnnError, match="NaN or inf"):
        from_state("sq4", 33, {**state, "range": np.full(4, np.nan)})
    with pytest.raises(RuntimeError, match="fit"):
        make_quantizer("sq4", 33).encode(features())


def test_invalid_codes_are_found():
    x = features(d=7)
    q = fitted("lin4", x)  # 7 values -> 4 bytes, the last high nibble is padding
    codes = q.encode(x)
    assert q.invalid_row(codes) is None
    codes[5, 3] |= 0x10
    assert q.invalid_row(codes) == 5
    v = fitted("vq:w=4,L=3", x)
    vc = v.encode(x)
    vc[7, 1] = 3
    assert v.invalid_row(vc) == 7
