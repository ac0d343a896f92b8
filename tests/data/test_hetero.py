"""Heterogeneous datasets: prepare from HGB's text layout and the npy directory layout, checked against numpy
oracles; verify; bad input as one line."""

import json
import zipfile

import numpy as np
import pytest

from conftest import run_module, shared_dataset, write_hetero_npy


def relation_oracle(num_dst, src, dst):
    """CSC of one relation the obvious way: unique (dst, src) pairs, sorted."""
    pairs = np.unique(np.stack([np.asarray(dst), np.asarray(src)], 1), axis=0)
    indptr = np.r_[0, np.cumsum(np.bincount(pairs[:, 0], minlength=num_dst))]
    return indptr, pairs[:, 1]


@pytest.fixture
def awkward(tmp_path):
    """Types of 1, 199 and 33 nodes; rows of 4097 int8-wide floats, 1 float, none; duplicate edges."""
    rng = np.random.default_rng(0)
    counts, dims = {"a": 199, "b": 1, "c": 33}, {"a": 4097, "b": 1}
    rels = {("a", "cites", "a"): np.r_[rng.integers(0, 199, (700, 2)), [[3, 4], [3, 4]]],
            ("b", "to", "a"): np.stack([np.zeros(50, int), rng.integers(0, 199, 50)], 1),
            ("c", "tags", "a"): np.stack([rng.integers(0, 33, 300), rng.integers(0, 199, 300)], 1)}
    labels = rng.integers(-1, 4, 199)
    labels[:3] = [0, 1, 2]
    return write_hetero_npy(tmp_path / "src", counts, dims, rels, "a", labels), counts, dims, rels, labels


def test_npy_dir_matches_oracle(tmp_path, awkward):
    from diskgnn.data.format import open_dataset
    from diskgnn.data.hetero.prepare import prepare_hetero

    src, counts, dims, rels, labels = awkward
    out = prepare_hetero(src, tmp_path / "ds", add_reverse=True, memory_budget="512MiB")
    ds = open_dataset(out, typed=True)
    s = ds.schema
    assert [t.name for t in s.types] == ["a", "b", "c"] and s.target == "a" and s.num_classes == 4
    assert [r.name for r in s.relations] == ["cites", "to", "tags", "rev_cites", "rev_to", "rev_tags"]  # folder order
    for t in s.types:
        assert t.count == counts[t.name] and t.feature_dim == dims.get(t.name, 0)
        x = ds.type_features(t.name)
        if dims.get(t.name):
            np.testing.assert_array_equal(x, np.load(src / "nodes" / t.name / "features.npy"))
        else:
            assert x is None
    for i, r in enumerate(s.relations):
        base = next(k for k in rels if k[1] == r.name.removeprefix("rev_"))
        e = rels[base]
        sd = (e[:, 1], e[:, 0]) if r.name.startswith("rev_") else (e[:, 0], e[:, 1])
        want = relation_oracle(counts[r.dst], *sd)
        got = ds.csc(i)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert r.num_edges == want[1].size
    np.testing.assert_array_equal(ds.labels, labels)
    ids = np.concatenate([ds.split(x) for x in ("train", "val", "test")])
    assert np.array_equal(np.sort(ids), np.flatnonzero(labels >= 0))
    assert run_module("diskgnn.verify", out).returncode == 0


def test_multilabel_and_given_split(tmp_path):
    from diskgnn.data.format import open_dataset
    from diskgnn.data.hetero.prepare import prepare_hetero

    labels = np.array([[1, 0, 1], [-1, -1, -1], [0, 0, 0], [0, 1, 0]], dtype=np.int64)
    src = write_hetero_npy(tmp_path / "src", {"m": 4, "k": 2}, {"m": 3}, {("k", "of", "m"): [[0, 1], [1, 3]]}, "m",
                           labels, splits={"train": [0, 2], "val": [3], "test": []})
    ds = open_dataset(prepare_hetero(src, tmp_path / "ds"), typed=True)
    assert ds.schema.multilabel and ds.schema.num_classes == 3
    np.testing.assert_array_equal(ds.labels, labels)
    assert ds.split("train").tolist() == [0, 2] and ds.split("test").size == 0
    np.save(src / "nodes" / "m" / "test_idx.npy", np.array([1]))  # a split on an unlabeled node is refused
    one_line_failure(tmp_path, src, match="test split contains unlabeled nodes")


@pytest.fixture(scope="module")
def acm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("acm")
    with zipfile.ZipFile(shared_dataset("hgb_acm") / "ACM.zip") as z:
        z.extractall(tmp)
    return tmp / "ACM"


def test_hgb_acm(tmp_path, acm):
    from diskgnn.data.format import open_dataset

    proc = run_module("diskgnn.prepare", acm, "--out", tmp_path / "ds", "--no-progress", "--memory-budget", "1GiB")
    assert proc.returncode == 0, proc.stderr
    ds = open_dataset(tmp_path / "ds", typed=True)
    s = ds.schema
    assert [(t.name, t.count, t.feature_dim) for t in s.types] == [
        ("paper", 3025, 1902), ("author", 5959, 1902), ("subject", 56, 1902), ("term", 1902, 0)]
    assert ds.num_edges == 547_872 and len(s.relations) == 8 and s.num_classes == 3 and not s.multilabel
    assert ds.split("train").size + ds.split("val").size == 907 and ds.split("test").size == 1059
    links = np.loadtxt(acm / "link.dat", dtype=np.int64, usecols=(0, 1, 2))
    offset = {"paper": 0, "author": 3025, "subject": 8984, "term": 9040}
    for i, r in enumerate(s.relations):
        e = links[links[:, 2] == i]
        want = relation_oracle(s.type(r.dst).count, e[:, 0] - offset[r.src], e[:, 1] - offset[r.dst])
        np.testing.assert_array_equal(ds.csc(i)[0], want[0])
        np.testing.assert_array_equal(ds.csc(i)[1], want[1])
    first = open(acm / "node.dat").readline().rstrip("\n").split("\t")[-1]
    np.testing.assert_array_equal(ds.type_features("paper")[0], np.array(first.split(","), dtype=np.float32))
    test = np.loadtxt(acm / "label.dat.test", dtype=str, delimiter="\t")
    np.testing.assert_array_equal(ds.labels[test[:, 0].astype(int)], test[:, 3].astype(int))
    assert run_module("diskgnn.verify", tmp_path / "ds").returncode == 0
    rel = ds.file_path("rel/6/indices")  # a flipped byte is named by verify
    data = bytearray(rel.read_bytes())
    data[100] ^= 1
    rel.write_bytes(bytes(data))
    proc = run_module("diskgnn.verify", tmp_path / "ds")
    assert proc.returncode != 0 and "rel-06.indices.bin: checksum mismatch" in proc.stderr


def one_line_failure(tmp_path, source, *flags, match):
    out = tmp_path / "out"
    proc = run_module("diskgnn.prepare", source, "--out", out, "--no-progress", *flags)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert match in lines[0], lines[0]
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_bad_inputs_are_one_line(tmp_path, awkward):
    src = awkward[0]
    (src / "relations" / "a__bad__zz").mkdir()
    one_line_failure(tmp_path, src, match="a__bad__zz: names node type 'zz'")
    (src / "relations" / "a__bad__zz").rmdir()
    np.save(src / "relations" / "c__tags__a" / "edges.npy", np.array([[0, 1], [33, 2]]))
    one_line_failure(tmp_path, src, match="relation tags: source (c) id 33 out of range [0, 33)")
    np.save(src / "relations" / "c__tags__a" / "edges.npy", np.array([[0, 1]]))
    np.save(src / "nodes" / "c" / "labels.npy", np.zeros(33, dtype=np.int64))
    one_line_failure(tmp_path, src, match="labels.npy in 2 node types")


def write_hgb(src, links=((0, 1, "p-a"),), link_dat="0\t2\t0\t1.0\n1\t2\t0\t1.0\n"):
    """A small HGB directory: papers p0, p1 (2 features) and author a0 (none), labels on p; link type i is
    links[i] = (start, end, meaning), the ends written to info.dat as given (ints as ACM's, strings as DBLP's)."""
    src.mkdir(exist_ok=True)
    link_types = {str(i): {"start": s, "end": e, "meaning": m} for i, (s, e, m) in enumerate(links)}
    (src / "info.dat").write_text(json.dumps({"node.dat": {"node type": {"0": "p", "1": "a"}},
                                              "link.dat": {"link type": link_types},
                                              "label.dat": {"node type": {"0": {"0": "x", "1": "y"}}}}))
    (src / "node.dat").write_text("0\tp0\t0\t1,2\n1\tp1\t0\t3,4\n2\ta0\t1\n")
    (src / "link.dat").write_text(link_dat)
    (src / "label.dat").write_text("0\tp0\t0\t1\n1\tp1\t0\t0\n")
    return src


def test_bad_hgb_inputs_are_one_line(tmp_path):
    src = write_hgb(tmp_path / "hgb")
    assert run_module("diskgnn.prepare", src, "--out", tmp_path / "ok", "--no-progress").returncode == 0
    (src / "label.dat").write_text("0\tp0\t0\t1\n2\ta0\t1\t0\n")
    one_line_failure(tmp_path, src, match="node 2 is not a p node (the target type")
    (src / "label.dat").write_text("0\tp0\t0\t1\n")
    (src / "link.dat").write_text("0\t1\t0\t1.0\n")
    one_line_failure(tmp_path, src, match="relation p-a: destination (a; global id - 2) id -1 out of range")
    (src / "link.dat").write_text("0\t2\t0\t1.0\n")
    (src / "node.dat").write_text("0\tp0\t0\t1,2\n1\tp1\t0\t3,4,5\n2\ta0\t1\n")
    one_line_failure(tmp_path, src, match="node.dat: line 2: 3 feature values, but type p's first node has 2")
    (src / "node.dat").write_text("0\tp0\t0\t1,2\n1\tp1\t0\t3,4\n2\ta0\t1\n")
    write_hgb(src, links=((0, 7, "p-a"),))
    one_line_failure(tmp_path, src, match="link type 0 (p-a) names node type 7, not one of [0, 1]")


def test_hgb_link_ends_as_ints_or_strings(tmp_path):
    """HGB's info.dat gives a link type's ends as integers (ACM) or as strings (DBLP, IMDB, Freebase): both
    prepare to the same dataset."""
    from diskgnn.data.format import open_dataset

    links = ((0, 1, "p-a"), (1, 0, "a-p"), (0, 0, "p-p"))
    link_dat = "0\t2\t0\t1.0\n1\t2\t0\t1.0\n2\t1\t1\t1.0\n0\t1\t2\t1.0\n1\t1\t2\t1.0\n"
    datasets = []
    for flavour, ends in (("ints", lambda t: t), ("strings", str)):
        src = write_hgb(tmp_path / flavour, [(ends(s), ends(e), m) for s, e, m in links], link_dat)
        out = tmp_path / f"ds-{flavour}"
        proc = run_module("diskgnn.prepare", src, "--format", "hgb", "--out", out, "--no-progress")
        assert proc.returncode == 0, proc.stderr
        datasets.append(open_dataset(out, typed=True))
    assert '"start": "1"' in (tmp_path / "strings" / "info.dat").read_text()
    a, b = datasets
    assert [(t.name, t.count, t.feature_dim) for t in a.schema.types] == [("p", 2, 2), ("a", 1, 0)]
    assert [r.key for r in a.schema.relations] == [("p", "p-a", "a"), ("a", "a-p", "p"), ("p", "p-p", "p")]
    assert a.schema == b.schema and a.num_edges == b.num_edges == 5
    for i in range(len(a.schema.relations)):
        for x, y in zip(a.csc(i), b.csc(i)):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.csc(2)[0], [0, 0, 2])  # p-p: p0 -> p1, p1 -> p1
    np.testing.assert_array_equal(a.labels, b.labels)
    assert {k: v["checksum"] for k, v in a.manifest["files"].items()} == {
        k: v["checksum"] for k, v in b.manifest["files"].items()}


@pytest.mark.parametrize("end", ["7", "x", "", None, 1.0, True, [1]])
def test_hgb_link_end_not_a_node_type_is_one_line(tmp_path, end):
    src = write_hgb(tmp_path / "hgb", links=((0, end, "p-a"),))
    one_line_failure(tmp_path, src, "--format", "hgb",
                     match=f"info.dat: link type 0 (p-a) names node type {end!r}, not one of [0, 1]")


def test_mag_schema(tmp_path):
    """`prepare synthetic --schema mag`: the three types and relations with their reverses, MAG240M's degrees
    roughly, the same graph whatever the memory budget (chunking), verify clean."""
    from diskgnn.data.format import open_dataset

    args = ["synthetic", "--schema", "mag", "--nodes", "5000", "--feat-dim", "8", "--avg-degree", "6", "--classes",
            "4", "--seed", "3", "--papers-per-institution", "100", "--no-progress"]
    for out, budget in (("a", "160MiB"), ("b", "1GiB")):
        proc = run_module("diskgnn.prepare", *args, "--out", tmp_path / out, "--memory-budget", budget)
        assert proc.returncode == 0, proc.stderr
    a, b = open_dataset(tmp_path / "a", typed=True), open_dataset(tmp_path / "b", typed=True)
    s = a.schema
    assert [(t.name, t.count, t.feature_dim, t.feature_dtype) for t in s.types] == [
        ("paper", 5000, 8, "float16"), ("author", 5000, 0, "float32"), ("institution", 50, 0, "float32")]
    assert [r.key for r in s.relations] == [("paper", "cites", "paper"), ("author", "writes", "paper"),
                                            ("author", "affiliated_with", "institution"),
                                            ("paper", "rev_cites", "paper"), ("paper", "rev_writes", "author"),
                                            ("institution", "rev_affiliated_with", "author")]
    for i in range(len(s.relations)):
        for x, y in zip(a.csc(i), b.csc(i)):
            np.testing.assert_array_equal(x, y)
    per_paper = np.diff(np.asarray(a.csc(1)[0]))
    assert per_paper.min() >= 1 and 2.6 < per_paper.mean() < 3.4  # 1 + Poisson(2.2), less merged duplicates
    assert 0.3 < s.relations[2].num_edges / 5000 < 0.44
    assert a.manifest["synthetic"]["schema"] == "mag" and a.split("train").size > 0
    assert run_module("diskgnn.verify", tmp_path / "a").returncode == 0


def test_kill_during_prepare_then_rerun(tmp_path):
    """kill -9 in the middle of a hetero prepare leaves no dataset and a temporary directory; the rerun removes
    it and writes the same files as an uninterrupted run."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO
    from diskgnn.data.format import open_dataset

    args = [sys.executable, "-m", "diskgnn.prepare", "synthetic", "--schema", "mag", "--nodes", "300000",
            "--feat-dim", "32", "--avg-degree", "8", "--classes", "4", "--seed", "1", "--no-progress"]
    proc = subprocess.Popen([*args, "--out", str(tmp_path / "k")], cwd=REPO, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".k.tmp-*/rel-00.indptr.bin")) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "k").exists() and list(tmp_path.glob(".k.tmp-*"))
    assert subprocess.run([*args, "--out", str(tmp_path / "k")], cwd=REPO).returncode == 0
    assert subprocess.run([*args, "--out", str(tmp_path / "clean")], cwd=REPO).returncode == 0
    assert not list(tmp_path.glob(".k.tmp-*"))
    killed, clean = open_dataset(tmp_path / "k", typed=True).manifest["files"], open_dataset(tmp_path / "clean", typed=True).manifest["files"]
    assert {k: v["checksum"] for k, v in killed.items()} == {k: v["checksum"] for k, v in clean.items()}
