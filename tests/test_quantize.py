"""Quantized features: bit packing, error bounds, decoders against a plain oracle, streaming, files."""

import json
import os
import re

import numpy as np
import pytest
import torch

from diskgnn.errors import DiskgnnError
from diskgnn.format import MANIFEST, ArrayFileWriter, file_checksum, manifest_checksum, open_dataset
from diskgnn.prepare import prepare
from diskgnn.quantize import (Quantizer, canonical_spec, encode_file, make_quantizer, pack_bits, parse_spec,
                              spec_slug, unpack_bits)
from diskgnn.verify import verify
from conftest import random_graph, run_module, write_npy_dir

SPECS = ["sq1", "sq2", "sq4", "sq8", "sq16", "lin4", "lin8", "lin8:p=1", "vq:w=4,L=16", "vq:w=5,L=300"]


def features(n=199, d=33, seed=0):
    """Awkward features: mixed signs and scales, a heavy tail, two all-zero columns (from 5 values)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) * rng.uniform(0.01, 3, d)
    x[:, 0] = rng.standard_cauchy(n)
    if d >= 5:
        x[:, [3, d - 1]] = 0
    return x.astype(np.float32)


def fitted(spec, x, seed=0):
    return make_quantizer(spec, x.shape[1]).fit(x, seed=seed)


# ---------------------------------------------------------------- bit packing

def oracle_pack(values, bits):
    """The layout as docs/quantization.md states it: symbol j in bits [j*bits, (j+1)*bits) of the row
    read as one little-endian integer, built from a bit string."""
    out = []
    for row in values:
        stream = "".join(format(int(v), f"0{bits}b")[::-1] for v in row)  # least significant bit first
        stream += "0" * (-len(stream) % 8)
        out.append([int(stream[i:i + 8][::-1], 2) for i in range(0, len(stream), 8)])
    return np.array(out, dtype=np.uint8)


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("n,symbols", [(1, 1), (199, 33), (1, "4097 bytes")])
def test_bit_pack_round_trip_and_layout(bits, n, symbols):
    if symbols == "4097 bytes":  # a row of 4097 bytes, with padding bits wherever bits < 8
        symbols = 4097 * 8 // bits - (bits < 8)
    rng = np.random.default_rng(bits)
    values = rng.integers(0, 1 << bits, (n, symbols)).astype(np.uint16 if bits == 16 else np.uint8)
    packed = pack_bits(values, bits)
    assert packed.dtype == np.uint8 and packed.shape == (n, -(-symbols * bits // 8))
    np.testing.assert_array_equal(packed, oracle_pack(values, bits))
    unpacked = unpack_bits(packed, bits)
    np.testing.assert_array_equal(unpacked[:, :symbols], values)
    assert not unpacked[:, symbols:].any()


# ---------------------------------------------------------------- specs

@pytest.mark.parametrize("spec,canonical,slug", [
    ("sq4", "sq4", "sq4"), ("sq4:p=0.5", "sq4", "sq4"), ("sq4:p=1.0", "sq4:p=1", "sq4-p1"),
    ("lin8:p=0", "lin8", "lin8"), ("lin4:p=0.25", "lin4:p=0.25", "lin4-p0.25"),
    ("vq", "vq:w=16,L=2048", "vq-w16-L2048"), ("vq:L=256,w=8", "vq:w=8,L=256", "vq-w8-L256"),
])
def test_spec_spellings(spec, canonical, slug):
    assert canonical_spec(spec) == canonical and spec_slug(spec) == slug
    assert make_quantizer(spec, 10).spec == canonical


@pytest.mark.parametrize("spec,what", [
    ("sq3", "sq bits must be one of 1, 2, 4, 8, 16"), ("lin2", "lin bits must be one of 4, 8"),
    ("pq8", "expected sq1"), ("vq:w=0", "w=0 must be at least 1"), ("vq:L=1", "L=1 must be in [2, 65536]"),
    ("vq:L=70000", "must be in [2, 65536]"), ("vq:k=3", "'k=3' is not an option of vq (options: w, L)"),
    ("sq1:p=1", "not an option of sq1 (options: none)"), ("sq4:p=50", "p=50 must be in [0, 50)"),
    ("vq:w=a", "w='a' is not a whole number"), ("lin8:p=1,p=2", "p given twice"),
])
def test_bad_specs_name_the_problem(spec, what):
    with pytest.raises(DiskgnnError, match=re.escape(what)):
        parse_spec(spec)


def test_code_sizes_and_compression_for_128_values():
    expected = {"sq1": 16, "sq2": 32, "sq4": 64, "sq8": 128, "sq16": 256, "lin4": 64, "lin8": 128,
                "vq:w=16,L=256": 8, "vq:w=16,L=2048": 16, "vq:w=12,L=1024": 22}
    print("\nspec             bytes/row  vs float32 (128 values, 512 bytes)")
    for spec, size in expected.items():
        q = make_quantizer(spec, 128)
        assert q.code_bytes == size
        print(f"{spec:16} {q.code_bytes:9}  {q.compression_ratio:5.1f}x")


# ---------------------------------------------------------------- error bounds

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
    q = Quantizer.from_state(q.spec, x.shape[1], q.state())  # the range does not depend on the width
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


# ---------------------------------------------------------------- decoders against an oracle

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
    q2 = Quantizer.from_state(spec, d, {k: v.copy() for k, v in q.state().items()})
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
        Quantizer.from_state("sq4", 33, {"lookup": state["lookup"]})
    with pytest.raises(DiskgnnError, match="'lookup' is float32\\[15\\], expected float32\\[16\\]"):
        Quantizer.from_state("sq4", 33, {**state, "lookup": state["lookup"][:15]})
    with pytest.raises(DiskgnnError, match="NaN or inf"):
        Quantizer.from_state("sq4", 33, {**state, "range": np.full(4, np.nan)})
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


# ---------------------------------------------------------------- streaming

@pytest.mark.parametrize("spec", SPECS)
def test_streaming_with_a_tiny_budget_gives_the_one_shot_bytes(tmp_path, spec):
    x = features(n=199, d=33)
    raw = tmp_path / "features.bin"
    x.tofile(raw)
    q = fitted(spec, x[::3])
    outputs = []
    for budget in (1, 5 * q.work_bytes(1), 1 << 30):  # one row, a few rows, everything per chunk
        w = ArrayFileWriter(tmp_path / f"codes-{budget}.bin", np.uint8, (q.code_bytes,))
        encode_file(q, raw, np.float32, 199, w, budget)
        entry = w.close()
        assert entry["shape"] == [199, q.code_bytes]
        outputs.append((tmp_path / f"codes-{budget}.bin").read_bytes()[:entry["bytes"]])
    assert outputs[0] == outputs[1] == outputs[2] == q.encode(x).tobytes()


# ---------------------------------------------------------------- files and commands

@pytest.fixture
def src(tmp_path):
    return write_npy_dir(tmp_path / "src", random_graph())  # 199 nodes, 7 feature values


@pytest.mark.filterwarnings("error")  # e.g. torch warning about read-only arrays
def test_prepare_stores_quantized_variants_that_verify(tmp_path, src):
    proc = run_module("diskgnn.prepare", src, "--out", tmp_path / "ds", "--no-progress",
                      "--quantize", "sq4", "--quantize", "vq:L=16,w=3", "--quantize", "sq4:p=0.5", check=True)
    assert "quantize sq4" in proc.stdout
    ds = open_dataset(tmp_path / "ds")
    assert ds.quantized_specs == ["sq4", "vq:w=3,L=16"]
    assert verify(ds.path) == []
    x = np.asarray(ds.features)
    for spec in ds.quantized_specs:
        q, codes, path = ds.quantized(spec)
        assert path == ds.path / f"features.{spec_slug(spec)}.bin" and path.stat().st_size % 4096 == 0
        assert codes.shape == (199, q.code_bytes) and codes.dtype == np.uint8
        np.testing.assert_array_equal(codes, q.encode(x))  # every row encoded by the stored quantizer
        ids = np.array([5, 0, 198, 5])
        assert torch.equal(q.decode_torch(torch.from_numpy(codes[ids])), torch.from_numpy(q.decode_numpy(codes[ids])))
    assert ds.manifest["quantized"]["sq4"]["fit"]["sample_rows"] == 199
    with pytest.raises(DiskgnnError, match="no quantized features lin8 \\(stored: sq4, vq:w=3,L=16\\)"):
        ds.quantized("lin8")


def test_quantize_command_adds_variants_atomically(tmp_path, src):
    ds_path = prepare(src, tmp_path / "ds", progress=False)
    before = sorted(os.listdir(ds_path))
    manifest_before = (ds_path / MANIFEST).read_bytes()

    def fails(*args, match):
        proc = run_module("diskgnn.quantize", ds_path, *args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert match in lines[0], lines[0]
        assert sorted(os.listdir(ds_path)) == before and (ds_path / MANIFEST).read_bytes() == manifest_before

    fails("--spec", "sq3", match="quantize spec 'sq3': sq bits must be one of")
    fails("--spec", "lin8", "--memory-budget", "10MiB", match="--memory-budget 10.0 MiB is too small")
    fails("--spec", "vq:w=1,L=65536", "--memory-budget", "160MiB", match="more than the")

    proc = run_module("diskgnn.quantize", ds_path, "--spec", "lin4", "--spec", "sq8", "--sample-rows", "50",
                      "--seed", "3", check=True)
    assert "lin4: wrote features.lin4.bin (4 B/row, 7.0x smaller than float32)" in proc.stdout
    assert verify(ds_path) == []
    ds = open_dataset(ds_path)
    assert ds.quantized_specs == ["lin4", "sq8"]
    assert ds.manifest["quantized"]["lin4"]["fit"] == {**ds.manifest["quantized"]["lin4"]["fit"],
                                                       "sample_rows": 50, "seed": 3}
    assert not [p for p in os.listdir(ds_path) if ".tmp" in p]

    before = sorted(os.listdir(ds_path))
    manifest_before = (ds_path / MANIFEST).read_bytes()
    fails("--spec", "lin4", match="already has quantized features lin4 (pass --overwrite")
    run_module("diskgnn.quantize", ds_path, "--spec", "lin4", "--overwrite", check=True)
    ds = open_dataset(ds_path)
    assert ds.quantized_specs == ["lin4", "sq8"] and ds.manifest["quantized"]["lin4"]["fit"]["sample_rows"] == 199
    assert verify(ds_path) == []


def test_nonfinite_features_are_refused_with_the_row(tmp_path):
    g = random_graph()
    g["feat"][42, 3] = np.nan
    src = write_npy_dir(tmp_path / "src", g)
    ds_path = prepare(src, tmp_path / "ds", progress=False, allow_nonfinite=True)
    proc = run_module("diskgnn.quantize", ds_path, "--spec", "sq8")
    assert proc.returncode != 0 and "feature row 42 has NaN or inf" in proc.stderr and "Traceback" not in proc.stderr
    assert not [p for p in os.listdir(ds_path) if "sq8" in p]
    proc = run_module("diskgnn.prepare", src, "--out", tmp_path / "ds2", "--allow-nonfinite", "--quantize", "sq8")
    assert proc.returncode != 0 and "feature row 42" in proc.stderr and not (tmp_path / "ds2").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".ds2")]


def test_prepare_refuses_a_bad_spec_before_any_work(tmp_path, src):
    proc = run_module("diskgnn.prepare", src, "--out", tmp_path / "ds", "--quantize", "vq:w=16,L=1")
    assert proc.returncode != 0 and proc.stderr.strip() == \
        "prepare: error: quantize spec 'vq:w=16,L=1': L=1 must be in [2, 65536]"
    assert sorted(os.listdir(tmp_path)) == ["src"]


def flip_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupted_quantized_files_are_detected(tmp_path, src):
    ds_path = prepare(src, tmp_path / "ds", progress=False, quantize=["lin4", "vq:w=2,L=3"])
    flip_byte(ds_path / "features.lin4.bin", 100)
    with pytest.raises(DiskgnnError, match="features.lin4.bin: checksum mismatch"):
        open_dataset(ds_path)
    assert any("features.lin4.bin: checksum mismatch" in p for p in verify(ds_path))
    flip_byte(ds_path / "features.lin4.bin", 100)

    params = ds_path / "features.vq-w2-L3.params.bin"
    flip_byte(params, 5)
    with pytest.raises(DiskgnnError, match="features.vq-w2-L3.params.bin: checksum mismatch"):
        open_dataset(ds_path)
    problems = verify(ds_path)
    assert len(problems) == 1 and "params.bin: checksum mismatch" in problems[0]
    flip_byte(params, 5)
    assert verify(ds_path) == []


def test_verify_checks_codes_behind_valid_checksums(tmp_path, src):
    """A code out of range (VQ with L=3 in 2 bits' worth of a byte) under a consistent manifest."""
    ds_path = prepare(src, tmp_path / "ds", progress=False, quantize=["vq:w=2,L=3"])
    codes = ds_path / "features.vq-w2-L3.bin"
    data = bytearray(codes.read_bytes())
    data[4 * 17 + 2] = 3  # row 17 (4 code bytes per row), part 2
    codes.write_bytes(bytes(data))
    m = json.loads((ds_path / MANIFEST).read_text())
    m["files"]["features.vq-w2-L3"]["checksum"] = "xxh3_128:" + file_checksum(codes)
    m["manifest_checksum"] = manifest_checksum(m)
    (ds_path / MANIFEST).write_text(json.dumps(m))
    assert verify(ds_path) == [f"{codes}: row 17 has a code out of range or nonzero padding bits"]
    proc = run_module("diskgnn.verify", ds_path)
    assert proc.returncode != 0 and "row 17 has a code out of range" in proc.stderr


def test_quantize_stays_inside_the_memory_budget(tmp_path):
    """The memory contract: features larger than the budget are quantized within it."""
    budget = 160 << 20
    run_module("diskgnn.prepare", "synthetic", "--nodes", "360000", "--feat-dim", "128", "--avg-degree", "2",
               "--out", tmp_path / "ds", "--no-progress", check=True)
    assert open_dataset(tmp_path / "ds").manifest["files"]["features"]["bytes"] > budget
    proc = run_module("diskgnn.quantize", tmp_path / "ds", "--spec", "sq4", "--spec", "lin8",
                      "--memory-budget", budget, check=True)
    peaks = [int(p) for p in re.findall(r"peak RSS (\d+) bytes", proc.stdout)]
    assert len(peaks) == 2 and 0 < max(peaks) <= budget, proc.stdout
    assert verify(tmp_path / "ds") == []
