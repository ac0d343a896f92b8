"""Each source's dataset equals an oracle built straight from the input."""

import gzip
import io
import zipfile

import numpy as np
import pytest

from diskgnn.data.csc import CscBuilder
from diskgnn.data.format import DatasetBuilder, open_dataset
from diskgnn.data.prepare import prepare

from conftest import oracle_csc, random_graph, run_module, shared_dataset, write_npy_dir


def assert_dataset(path, g, undirected=False, self_loops=False, drop_self_loops=False):
    ds = open_dataset(path)
    n = len(g["labels"])
    indptr, indices = oracle_csc(n, g["src"], g["dst"], undirected, self_loops, drop_self_loops)
    np.testing.assert_array_equal(ds.indptr, indptr)
    np.testing.assert_array_equal(ds.indices, indices)
    np.testing.assert_array_equal(ds.features, g["feat"])
    np.testing.assert_array_equal(ds.labels, g["labels"])
    assert ds.num_edges == len(indices) and ds.num_nodes == n
    return ds


@pytest.mark.parametrize("layout", ["2xE", "Ex2", "csc"])
@pytest.mark.parametrize("undirected,self_loops,drop", [(False, False, False), (True, False, True),
                                                        (True, True, False)])
def test_npy_source_matches_oracle(tmp_path, layout, undirected, self_loops, drop):
    g = random_graph()
    src = write_npy_dir(tmp_path / "src", g, layout, splits={"train": [3, 1, 4], "val": [5], "test": [9, 2]})
    out = prepare(src, tmp_path / "ds", undirected=undirected, self_loops=self_loops, drop_self_loops=drop,
                  progress=False)
    ds = assert_dataset(out, g, undirected, self_loops, drop)
    np.testing.assert_array_equal(ds.split("train"), [3, 1, 4])
    np.testing.assert_array_equal(ds.split("test"), [9, 2])


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("byteorder", ["<", ">"])
@pytest.mark.parametrize("layout", ["2xE", "Ex2", "csc"])
def test_fortran_ordered_and_foreign_endian_npy_read_streaming(tmp_path, order, byteorder, layout):
    """Files as numpy writes them without being asked (a.T, np.unique(..., axis=1), another platform's byte
    order): the dataset equals the oracle, read in blocks of a few rows (a budget that forces many)."""
    g = random_graph(n=199, e=1500, d=33)
    src = write_npy_dir(tmp_path / "src", g, layout, splits={"train": [3, 1, 4], "val": [5], "test": [9, 2]})
    for f in src.glob("*.npy"):
        a = np.load(f)
        np.save(f, np.asarray(a, dtype=a.dtype.newbyteorder(byteorder), order=order))
    if order == "F":
        assert np.lib.format.read_array_header_1_0(_after_magic(src / "feat.npy"))[1], "not stored Fortran-ordered"
    out = prepare(src, tmp_path / "ds", progress=False, memory_budget="161MiB")
    assert_dataset(out, g)


def _after_magic(path):
    f = open(path, "rb")
    np.lib.format.read_magic(f)
    return f


def test_npy_rows_of_every_order_and_shape_match_np_load(tmp_path):
    from diskgnn.data.sources.base import NpyArray

    rng = np.random.default_rng(0)
    for shape in [(1, 1), (199, 33), (7, 3, 4), (5,), (3, 4097)]:
        for order in "CF":
            for byteorder in "<>":
                a = np.asarray(rng.standard_normal(shape), dtype=np.dtype("f4").newbyteorder(byteorder), order=order)
                np.save(tmp_path / "a.npy", a)
                arr = NpyArray(tmp_path / "a.npy")
                for block_rows in (1, 2, 7, 1000):
                    got = np.concatenate(list(arr.rows(block_rows)))
                    np.testing.assert_array_equal(got, a)
                np.testing.assert_array_equal(arr.load(), a)


def test_csc_builder_splits_skewed_buckets(tmp_path):
    # Half of all edges point at node 0 and the budget is tiny: buckets must be re-split.
    rng = np.random.default_rng(1)
    n, e = 5000, 60_000
    src = rng.integers(0, n, e)
    dst = np.where(rng.random(e) < 0.5, rng.integers(0, 3, e), rng.integers(0, n, e))
    with DatasetBuilder(tmp_path / "ds") as b:
        csc = CscBuilder(n, b, memory_bytes=40 * 40_000, undirected=True, edge_count_hint=10)
        for s in range(0, e, 7000):
            csc.add(src[s:s + 7000], dst[s:s + 7000])
        assert csc.finish() == len(oracle_csc(n, src, dst, True)[1])
        indptr = np.fromfile(b.tmp / "indptr.bin", dtype=np.int64)[: n + 1]
        indices = np.fromfile(b.tmp / "indices.bin", dtype=np.int32)[: indptr[-1]]
    o_ptr, o_ind = oracle_csc(n, src, dst, True)
    np.testing.assert_array_equal(indptr, o_ptr)
    np.testing.assert_array_equal(indices, o_ind)


def test_memory_budget_does_not_change_the_result(tmp_path):
    a = prepare("synthetic", tmp_path / "a", memory_budget="160MiB", progress=False,
                synthetic=dict(nodes=70_000, feat_dim=16, avg_degree=6, classes=4, seed=3), undirected=True)
    b = prepare("synthetic", tmp_path / "b", memory_budget="4GiB", progress=False,
                synthetic=dict(nodes=70_000, feat_dim=16, avg_degree=6, classes=4, seed=3), undirected=True)
    ma, mb = open_dataset(a).manifest, open_dataset(b).manifest
    assert {k: v["checksum"] for k, v in ma["files"].items()} == {k: v["checksum"] for k, v in mb["files"].items()}


def test_synthetic_is_homophilous_heavy_tailed_and_seeded(tmp_path):
    kw = dict(nodes=20_000, feat_dim=32, avg_degree=10, classes=8)
    ds = open_dataset(prepare("synthetic", tmp_path / "s0", progress=False, undirected=True,
                              synthetic=dict(seed=0, **kw)))
    other = open_dataset(prepare("synthetic", tmp_path / "s1", progress=False, undirected=True,
                                 synthetic=dict(seed=1, **kw)))
    assert ds.manifest["files"]["features"]["checksum"] != other.manifest["files"]["features"]["checksum"]
    deg = np.diff(ds.indptr)
    assert 8 < deg.mean() < 12 and deg.max() > 20 * deg.mean()
    dst = np.repeat(np.arange(ds.num_nodes), deg)
    same = (ds.labels[dst] == ds.labels[np.asarray(ds.indices)]).mean()
    assert same > 0.7  # chance would be 1/8
    # Features carry the class: nearest class mean beats chance by far.
    x, y = np.asarray(ds.features), np.asarray(ds.labels)
    means = np.stack([x[y == c].mean(0) for c in range(8)])
    assert ((x @ means.T - 0.5 * (means**2).sum(1)).argmax(1) == y).mean() > 0.3
    assert np.bincount(y, minlength=8).min() > 0


def test_train_fraction_replaces_the_train_share(tmp_path):
    """papers100M's 1.1 % of train nodes; val and test as --split-ratios says."""
    ds = open_dataset(prepare("synthetic", tmp_path / "f", undirected=True, progress=False, train_fraction=0.011,
                              split_ratios=(0.5, 0.05, 0.1),
                              synthetic=dict(nodes=100_000, feat_dim=4, avg_degree=2, classes=4, seed=0)))
    counts = {s: ds.split(s).size for s in ("train", "val", "test")}
    assert abs(counts["train"] - 1100) < 5 * 33 and abs(counts["val"] - 5000) < 5 * 69 \
        and abs(counts["test"] - 10_000) < 5 * 95, counts
    assert ds.manifest["producer"]["options"]["split"] == "ratios 0.011,0.05,0.1 (seed 0)"


def test_csv_source(tmp_path):
    g = random_graph()
    d = write_npy_dir(tmp_path / "src", g)
    (d / "edge_index.npy").unlink()
    lines = ["src\tdst", "# a comment"] + [f"{s}\t{t}" for s, t in zip(g["src"], g["dst"])]
    with gzip.open(d / "edges.tsv.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    assert_dataset(prepare(d, tmp_path / "ds", progress=False, memory_budget="160MiB"), g)


def _write_ogb(root, g, binary):
    raw = root / "raw"
    raw.mkdir(parents=True)
    n = len(g["labels"])
    if binary:
        np.savez(raw / "data.npz", edge_index=np.stack([g["src"], g["dst"]]), node_feat=g["feat"],
                 num_nodes_list=np.array([n]))
        lab = g["labels"].astype(np.float32)
        lab[::7] = np.nan
        np.savez_compressed(raw / "node-label.npz", node_label=lab.reshape(-1, 1))
    else:
        def gz(name, rows):
            with gzip.open(raw / name, "wt") as f:
                f.write("\n".join(rows) + "\n")

        gz("edge.csv.gz", [f"{s},{t}" for s, t in zip(g["src"], g["dst"])])
        gz("node-feat.csv.gz", [",".join(repr(float(v)) for v in row) for row in g["feat"]])
        gz("node-label.csv.gz", [str(v) for v in g["labels"]])
        gz("num-node-list.csv.gz", [str(n)])
        gz("num-edge-list.csv.gz", [str(len(g["src"]))])
    split = root / "split" / "time"
    split.mkdir(parents=True)
    for name, ids in (("train", [1, 2, 3]), ("valid", [8]), ("test", [10, 12])):
        with gzip.open(split / f"{name}.csv.gz", "wt") as f:
            f.write("\n".join(map(str, ids)) + "\n")


@pytest.mark.parametrize("binary", [False, True])
def test_ogb_source(tmp_path, binary):
    g = random_graph()
    _write_ogb(tmp_path / "ogbn_x", g, binary)
    out = prepare(tmp_path / "ogbn_x", tmp_path / "ds", undirected=True, progress=False)
    if binary:
        g = dict(g, labels=np.where(np.arange(len(g["labels"])) % 7 == 0, -1, g["labels"]))
    ds = assert_dataset(out, g, undirected=True)
    np.testing.assert_array_equal(ds.split("train"), [1, 2, 3])
    np.testing.assert_array_equal(ds.split("val"), [8])


def test_gnnbench_npz_and_zip(tmp_path):
    g = random_graph(n=50, e=300)
    n = 50
    order = np.lexsort((g["dst"], g["src"]))
    src, dst = g["src"][order], g["dst"][order]
    keep = np.r_[True, (np.diff(src) != 0) | (np.diff(dst) != 0)]
    src, dst = src[keep], dst[keep]
    feat = (g["feat"] > 0.5).astype(np.float32) * 3
    nz = np.nonzero(feat)
    arrays = dict(adj_data=np.ones(src.size), adj_indices=dst,
                  adj_indptr=np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]), adj_shape=[n, n],
                  attr_data=feat[nz], attr_indices=nz[1],
                  attr_indptr=np.concatenate([[0], np.cumsum(np.bincount(nz[0], minlength=n))]),
                  attr_shape=list(feat.shape), labels=g["labels"])
    np.savez(tmp_path / "g.npz", **arrays)
    with zipfile.ZipFile(tmp_path / "g.zip", "w") as z:
        z.write(tmp_path / "g.npz", "inner/g.npz")
    for name in ("g.npz", "g.zip"):
        out = prepare(tmp_path / name, tmp_path / f"ds-{name}", split_per_class=(2, 3), progress=False)
        ds = assert_dataset(out, dict(g, feat=feat, src=src, dst=dst))
        tr, va = np.asarray(ds.split("train")), np.asarray(ds.split("val"))
        assert np.bincount(ds.labels[tr], minlength=5).max() == 2
        assert len(ds.split("test")) == n - len(tr) - len(va)


def test_zarr_features(tmp_path):
    zarr = pytest.importorskip("zarr", reason="zarr is an optional extra (pip install 'diskgnn[zarr]')")
    g = random_graph()
    d = write_npy_dir(tmp_path / "src", g)
    (d / "feat.npy").unlink()
    z = zarr.open_array(str(d / "feat.zarr"), mode="w", shape=g["feat"].shape, chunks=(16, 7), dtype="f4")
    z[:] = g["feat"]
    assert_dataset(prepare(d, tmp_path / "ds", progress=False), g)


# Counts stated in the READMEs of ../shared/datasets.
REAL = [
    ("planetoid_cora", [], 2708, 10556, 1433, 7, (140, 500, 1000)),
    ("planetoid_citeseer", ["--drop-self-loops"], 3327, 9104, 3703, 6, (120, 500, 1000)),
    ("gnnbench_cora/cora.npz", [], 2708, 10556, 1433, 7, None),
    ("amazon_computers/amazon-computers.zip", ["--split-per-class", "20,30"], 13752, 491722, 767, 10,
     (200, 300, 13752 - 500)),
    ("coauthor_cs/coauthor-cs.zip", ["--split-per-class", "20,30"], 18333, 163788, 6805, 15,
     (300, 450, 18333 - 750)),
]


@pytest.mark.parametrize("name,flags,nodes,edges,dim,classes,splits", REAL, ids=[r[0].split("/")[0] for r in REAL])
def test_real_datasets_match_their_readmes(tmp_path, name, flags, nodes, edges, dim, classes, splits):
    src = shared_dataset(name)
    run_module("diskgnn.prepare", src, "--out", tmp_path / "ds", "--undirected", "--no-progress", *flags, check=True)
    ds = open_dataset(tmp_path / "ds")
    assert (ds.num_nodes, ds.num_edges, ds.feature_dim, ds.num_classes) == (nodes, edges, dim, classes)
    if splits:
        assert tuple(ds.manifest["splits"][s] for s in ("train", "val", "test")) == splits
    run_module("diskgnn.verify", tmp_path / "ds", check=True)


def test_planetoid_rejects_foreign_pickles(tmp_path):
    import pickle

    src = shared_dataset("planetoid_cora")
    d = tmp_path / "p"
    d.mkdir()
    for f in src.glob("ind.cora.*"):
        (d / f.name).write_bytes(f.read_bytes())
    (d / "ind.cora.y").write_bytes(pickle.dumps(io.StringIO("not allowed")))
    proc = run_module("diskgnn.prepare", d, "--out", tmp_path / "ds")
    assert proc.returncode != 0 and "refusing to load" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("structure", ["uniform", "powerlaw"])
def test_peak_rss_stays_inside_the_budget(tmp_path, structure):
    """The memory contract: a dataset larger than the budget converts within it (powerlaw: hubs' blocks of edges
    and the statistics too)."""
    import re

    budget = 160 << 20
    proc = run_module("diskgnn.prepare", "synthetic", "--nodes", "400000", "--feat-dim", "128", "--avg-degree", "10",
                      "--structure", structure, "--out", tmp_path / "ds", "--memory-budget", budget, "--no-progress",
                      check=True)
    m = open_dataset(tmp_path / "ds").manifest
    assert sum(f["file_bytes"] for f in m["files"].values()) > budget
    assert 0 < int(re.search(r"peak RSS (\d+) bytes", proc.stdout).group(1)) <= budget


def test_normalize_features_divides_rows_by_their_sums(tmp_path):
    """Against numpy on the whole matrix, read in blocks of a few rows: sparse counts, an all-zero row (kept),
    a row with one non-zero (becomes 1) and a float64 input (rounded to float32 once)."""
    g = random_graph(n=199, e=800, d=33)
    rng = np.random.default_rng(5)
    feat = rng.poisson(0.2, size=(199, 33)).astype(np.float64) * rng.random((199, 33))
    feat[7] = 0
    feat[8] = 0
    feat[8, 4] = 3.5
    g["feat"] = feat
    src = write_npy_dir(tmp_path / "src", g, "2xE")
    out = prepare(src, tmp_path / "ds", progress=False, memory_budget="161MiB", feature_dtype="float32",
                  normalize_features=True)
    ds = open_dataset(out)
    sums = feat.sum(axis=1, keepdims=True)
    oracle = (feat / np.where(sums == 0, 1, sums)).astype(np.float32)
    np.testing.assert_array_equal(ds.features, oracle)
    assert not ds.features[7].any() and ds.features[8, 4] == 1
    nonzero = sums[:, 0] != 0
    np.testing.assert_allclose(np.asarray(ds.features, dtype=np.float64)[nonzero].sum(axis=1), 1, rtol=1e-6)
    assert ds.manifest["producer"]["options"]["normalize_features"] is True
