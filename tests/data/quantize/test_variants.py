"""A dataset's quantized variants: streaming encode, prepare and quantize commands, checks, the budget."""

import json
import os
import re

import numpy as np
import pytest
import torch

from diskgnn.data.files import ArrayFileWriter, file_checksum, manifest_checksum
from diskgnn.data.format import MANIFEST, open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.data.quantize.cli import quantize_dataset
from diskgnn.data.quantize.spec import spec_slug
from diskgnn.data.quantize.variants import encode_file, load_quantized
from diskgnn.data.verify import verify
from diskgnn.errors import DiskgnnError

from conftest import random_graph, run_module, write_npy_dir
from quantize_cases import SPECS, features, fitted


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
        q, codes, path = load_quantized(ds, spec)
        assert path == ds.path / f"features.{spec_slug(spec)}.bin" and path.stat().st_size % 4096 == 0
        assert codes.shape == (199, q.code_bytes) and codes.dtype == np.uint8
        np.testing.assert_array_equal(codes, q.encode(x))  # every row encoded by the stored quantizer
        ids = np.array([5, 0, 198, 5])
        assert torch.equal(q.decode_torch(torch.from_numpy(codes[ids])), torch.from_numpy(q.decode_numpy(codes[ids])))
    assert ds.manifest["quantized"]["sq4"]["fit"]["sample_rows"] == 180  # 19 of 199 held back for the report
    with pytest.raises(DiskgnnError, match="no quantized features lin8 \\(stored: sq4, vq:w=3,L=16\\)"):
        load_quantized(ds, "lin8")


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

    fails("--spec", "sq3", match="--spec sq3: sq bits must be one of")
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
    assert ds.quantized_specs == ["lin4", "sq8"] and ds.manifest["quantized"]["lin4"]["fit"]["sample_rows"] == 180  # 19 of 199 held back for the report
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
    assert proc.returncode == 2 and proc.stderr.strip() == "prepare: error: --quantize vq:w=16,L=1: L=1 must be in [2, 65536]"
    assert sorted(os.listdir(tmp_path)) == ["src"]


def flip_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupted_quantized_files_are_detected(tmp_path, src):
    ds_path = prepare(src, tmp_path / "ds", progress=False, quantize=["lin4", "vq:w=2,L=8"])
    flip_byte(ds_path / "features.lin4.bin", 100)
    with pytest.raises(DiskgnnError, match="features.lin4.bin: checksum mismatch"):
        open_dataset(ds_path)
    assert any("features.lin4.bin: checksum mismatch" in p for p in verify(ds_path))
    flip_byte(ds_path / "features.lin4.bin", 100)

    params = ds_path / "features.vq-w2-L8.params.bin"
    flip_byte(params, 5)
    with pytest.raises(DiskgnnError, match="features.vq-w2-L8.params.bin: checksum mismatch"):
        open_dataset(ds_path)
    problems = verify(ds_path)
    assert len(problems) == 1 and "params.bin: checksum mismatch" in problems[0]
    flip_byte(params, 5)
    assert verify(ds_path) == []


def test_verify_checks_codes_behind_valid_checksums(tmp_path, src):
    """A code out of range (VQ with L=3 in 2 bits' worth of a byte) under a consistent manifest."""
    ds_path = prepare(src, tmp_path / "ds", progress=False)
    quantize_dataset(ds_path, ["vq:w=2,L=3"], force=True)  # 3 centroids of 2 values are refused otherwise
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


def test_a_typed_dataset_is_quantized_per_featured_type(tmp_path):
    """quantize on a heterogeneous dataset: each featured type (or those --types names) gets its own variant,
    fitted on its own rows, stored beside its features under `<type>/<spec>` and verified; a featureless or unknown
    type is refused in one line; each type's codes decode to its rows within the spec's error."""
    from conftest import small_hetero
    from diskgnn.data.features import feature_source, type_variants

    data = small_hetero(tmp_path)
    quantize_dataset(data, ["sq8"], memory_budget="512MiB")
    quantize_dataset(data, ["lin4"], memory_budget="512MiB", types=["paper"])
    ds = open_dataset(data, typed=True)
    assert set(ds.manifest["quantized"]) == {"paper/sq8", "term/sq8", "paper/lin4"}
    assert ds.manifest["files"]["features/paper.sq8"]["name"] == "features-paper.sq8.bin"
    from diskgnn.data.hetero.verify import verify_hetero

    assert verify_hetero(data) == []
    for t in ("paper", "term"):
        src = feature_source(ds, "sq8", t)
        raw = np.asarray(ds.type_features(t), np.float32)
        assert src.rows.shape == (raw.shape[0], src.row_bytes) and src.row_bytes < raw.shape[1] * 4
        got = src.decode_torch(torch.from_numpy(np.array(src.rows))).numpy()
        cos = (got * raw).sum(1) / np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(raw, axis=1), 1e-12)
        assert cos.mean() > 0.99, t
    assert type_variants("sq8", ds.schema) == {"paper": "sq8", "term": "sq8"}
    assert type_variants("paper=vq:w=4,L=16,term=fp32", ds.schema) == {"paper": "vq:w=4,L=16", "term": "fp32"}
    assert type_variants("paper=lin4", ds.schema) == {"paper": "lin4", "term": "fp32"}
    with pytest.raises(DiskgnnError, match="no quantized features term/lin4"):
        feature_source(ds, "lin4", "term")
    for types, match in ((["author"], "'author' is not a featured node type"), (["x"], "'x' is not a featured")):
        proc = run_module("diskgnn.quantize", data, "--spec", "sq4", "--types", ",".join(types))
        assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1 and match in proc.stderr
    with pytest.raises(Exception, match="'author=sq8' names no featured node type"):
        type_variants("paper=sq8,author=sq8", ds.schema)
