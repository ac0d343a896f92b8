"""prepare --edge-split: held-out edges against a numpy oracle of the input's pairs, and verify's leakage check."""

import numpy as np
import pytest

from diskgnn.data.edge_split import in_graph, pair_shares, split_of
from diskgnn.data.format import open_dataset, write_manifest
from diskgnn.data.files import ArrayFileWriter
from diskgnn.data.prepare import main as prepare_main
from diskgnn.data.prepare import prepare
from diskgnn.data.verify import verify
from diskgnn.errors import DiskgnnError, UsageError, run_cli


def npy_source(tmp_path, n, src, dst, name="g"):
    d = tmp_path / name
    d.mkdir()
    np.save(d / "feat.npy", np.ones((n, 3), dtype=np.float32))
    np.save(d / "labels.npy", np.zeros(n, dtype=np.int64))
    np.save(d / "edge_index.npy", np.stack([src, dst]).astype(np.int64))
    return d


def awkward_edges(n, e, seed):
    """Duplicates, both directions of some pairs, self-loops, a hub."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, e)
    dst = np.where(rng.random(e) < 0.3, 0, rng.integers(0, n, e))
    src, dst = np.r_[src, dst[:50], src[:40], 5, 7], np.r_[dst, src[:50], dst[:40], 5, 7]
    return src, dst


def graph_pairs(ds, undirected: bool) -> set:
    indptr, indices = np.asarray(ds.indptr), np.asarray(ds.indices)
    dst = np.repeat(np.arange(ds.num_nodes), np.diff(indptr))
    return {(min(a, b), max(a, b)) if undirected else (a, b) for a, b in zip(indices.tolist(), dst.tolist())}


@pytest.mark.parametrize("undirected", [True, False])
def test_held_out_edges_partition_the_input_pairs_and_never_reach_the_graph(tmp_path, undirected):
    n = 199
    src, dst = awkward_edges(n, 3000, 0)
    out = prepare(str(npy_source(tmp_path, n, src, dst)), tmp_path / "ds", undirected=undirected,
                  edge_split=(0.7, 0.1, 0.2), split_seed=3, progress=False)
    ds = open_dataset(out)
    assert verify(out) == []
    pairs = {(min(a, b), max(a, b)) if undirected else (a, b) for a, b in zip(src.tolist(), dst.tolist())}
    held = {s: {tuple(r) for r in ds.held_out_edges(s).tolist()} for s in ("val", "test")}
    for s in ("val", "test"):
        assert len(held[s]) == ds.manifest["edge_split"][s] == ds.held_out_edges(s).shape[0]
        assert not any(a == b for a, b in held[s]), "a self-loop was held out"
    train = graph_pairs(ds, undirected)
    assert not held["val"] & held["test"] and not (held["val"] | held["test"]) & train
    assert train | held["val"] | held["test"] == pairs  # every input pair kept, once
    assert {(5, 5), (7, 7)} <= train
    if not undirected:  # a directed graph splits (u, v) and (v, u) on their own
        assert any((b, a) in train for a, b in held["val"] | held["test"])
    # the shares, within sampling noise of 3,000 pairs
    non_loops = len([p for p in pairs if p[0] != p[1]])
    assert abs(len(held["test"]) / non_loops - 0.2) < 0.04 and abs(len(held["val"]) / non_loops - 0.1) < 0.03


def test_the_split_streams_within_a_tiny_budget_to_the_same_files(tmp_path):
    n = 5000
    src, dst = awkward_edges(n, 60_000, 1)
    data = npy_source(tmp_path, n, src, dst)
    a = open_dataset(prepare(str(data), tmp_path / "a", undirected=True, edge_split="0.8,0.1,0.1",
                             memory_budget="2GiB", progress=False))
    b = open_dataset(prepare(str(data), tmp_path / "b", undirected=True, edge_split="0.8,0.1,0.1",
                             memory_budget="160MiB", progress=False))
    for kind in ("val_edges", "test_edges", "indices", "indptr"):
        assert a.manifest["files"][kind]["checksum"] == b.manifest["files"][kind]["checksum"], kind
    keys = a.held_out_edges("val")[:, 0] * n + a.held_out_edges("val")[:, 1]
    assert (np.diff(keys) > 0).all()
    c = open_dataset(prepare(str(data), tmp_path / "c", undirected=True, edge_split="0.8,0.1,0.1", split_seed=1,
                             progress=False))
    assert not np.array_equal(np.asarray(c.held_out_edges("val")), np.asarray(a.held_out_edges("val")))


def test_an_empty_held_out_share_writes_an_empty_file(tmp_path):
    n = 199
    src, dst = awkward_edges(n, 600, 4)
    out = prepare(str(npy_source(tmp_path, n, src, dst)), tmp_path / "ds", undirected=True,
                  edge_split=(0.9, 0.0, 0.1), progress=False)
    ds = open_dataset(out)
    assert ds.held_out_edges("val").shape == (0, 2) and ds.held_out_edges("test").shape[0] > 0
    assert verify(out) == []
    with pytest.raises(DiskgnnError, match="has no edge split"):
        open_dataset(prepare(str(npy_source(tmp_path, n, src, dst, "plain")), tmp_path / "plain-ds",
                             progress=False)).held_out_edges("val")


def test_in_graph_finds_exactly_the_stored_edges(tmp_path):
    n = 199
    src, dst = awkward_edges(n, 800, 2)
    ds = open_dataset(prepare(str(npy_source(tmp_path, n, src, dst)), tmp_path / "ds", progress=False))
    rng = np.random.default_rng(0)
    qs, qd = np.r_[src, rng.integers(0, n, 500)], np.r_[dst, rng.integers(0, n, 500)]
    stored = set(zip(src.tolist(), dst.tolist()))
    np.testing.assert_array_equal(in_graph(ds.indptr, ds.indices, qs, qd),
                                  [(a, b) in stored for a, b in zip(qs.tolist(), qd.tolist())])
    assert in_graph(ds.indptr, ds.indices, np.array([], dtype=np.int64), np.array([], dtype=np.int64)).size == 0


def test_verify_names_a_leaked_edge_an_unsorted_file_and_a_pair_in_the_wrong_split(tmp_path):
    n = 199
    src, dst = awkward_edges(n, 1500, 3)
    out = prepare(str(npy_source(tmp_path, n, src, dst)), tmp_path / "ds", undirected=True, progress=False)
    ds = open_dataset(out)
    ratios, seed = [0.8, 0.1, 0.1], 0
    graph = np.array(sorted(p for p in graph_pairs(ds, True) if p[0] != p[1]))
    val_by_hash = split_of(pair_shares(graph[:, 0], graph[:, 1], n, seed), ratios) == 1
    assert val_by_hash.sum() >= 2

    def with_val_edges(rows):
        for kind, r in (("val_edges", rows), ("test_edges", np.empty((0, 2)))):
            w = ArrayFileWriter(out / f"{kind}.bin", np.int64, (2,))
            w.write(np.asarray(r, dtype=np.int64).reshape(-1, 2))
            ds.manifest["files"][kind] = w.close()
        ds.manifest["edge_split"] = {"ratios": ratios, "seed": seed, "undirected": True, "val": len(rows), "test": 0}
        write_manifest(out, ds.manifest)
        return verify(out)

    leaked = graph[val_by_hash]  # pairs the hash puts in val, yet left in the graph
    assert any(f"held-out edge ({leaked[0][0]}, {leaked[0][1]}) is also in the graph (leakage)" in p
               for p in with_val_edges(leaked)), "verify missed the leak"
    assert any("not sorted" in p for p in with_val_edges(leaked[::-1]))
    assert any("another split" in p for p in with_val_edges(graph[~val_by_hash][:3]))


def test_bad_edge_split_is_one_line(tmp_path, capsys):
    for bad in ("0.9,0.1", "0.5,0.3,0.3", "1,0,0", "a,b,c"):
        argv = ["synthetic", "--nodes", "100", "--out", str(tmp_path / "x"), "--edge-split", bad]
        assert run_cli("prepare", prepare_main, argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"prepare: error: --edge-split {bad}"), err
    with pytest.raises(UsageError):
        prepare("synthetic", tmp_path / "y", edge_split=(0.9, 0.2, -0.1), progress=False)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_pair_shares_are_uniform_and_seeded():
    u, v = np.arange(100_000), np.arange(100_000)[::-1]
    p = pair_shares(u, v, 100_000, 0)
    assert 0 <= p.min() and p.max() < 1 and abs(p.mean() - 0.5) < 0.005
    assert np.histogram(p, bins=10, range=(0, 1))[0].min() > 9_500
    assert np.corrcoef(p, pair_shares(u, v, 100_000, 1))[0, 1] < 0.01


def test_a_sources_own_edge_split_is_kept_and_its_edges_leave_the_graph(tmp_path, capsys):
    n = 199
    src, dst = awkward_edges(n, 1500, 5)
    data = npy_source(tmp_path, n, src, dst)
    val = np.array([[src[100], dst[100]], [dst[100], src[100]], [3, 4]])  # an input edge, its reverse, a new one
    val = val[val[:, 0] != val[:, 1]]
    test = np.array([[10, 11], [12, 13]]).T  # (2, E) is read too
    np.save(data / "val_edges.npy", val)
    np.save(data / "test_edges.npy", test)
    out = prepare(str(data), tmp_path / "ds", undirected=True, progress=False, report=True)
    ds = open_dataset(out)
    assert "the source's edge split" in capsys.readouterr().out
    canon = {(min(a, b), max(a, b)) for a, b in val.tolist()}
    assert {tuple(r) for r in ds.held_out_edges("val").tolist()} == canon
    assert ds.held_out_edges("test").tolist() == [[10, 12], [11, 13]]
    assert not graph_pairs(ds, True) & (canon | {(10, 12), (11, 13)})
    inputs = {(min(a, b), max(a, b)) for a, b in zip(src.tolist(), dst.tolist())}
    assert graph_pairs(ds, True) == inputs - canon - {(10, 12), (11, 13)}
    assert ds.manifest["edge_split"]["given"] and verify(out) == []
    with pytest.raises(UsageError, match="comes with its own val and test edges"):
        prepare(str(data), tmp_path / "again", edge_split=(0.8, 0.1, 0.1), progress=False)
    np.save(data / "test_edges.npy", np.array([[3, 4]]))
    with pytest.raises(DiskgnnError, match=r"edge \(3, 4\) is both a val and a test edge"):
        prepare(str(data), tmp_path / "both", undirected=True, progress=False)
    np.save(data / "test_edges.npy", np.array([[7, 7]]))
    with pytest.raises(DiskgnnError, match=r"test edges: \(7, 7\) is a self-loop"):
        prepare(str(data), tmp_path / "loop", undirected=True, progress=False)
    assert not (tmp_path / "again").exists() and not (tmp_path / "both").exists()
