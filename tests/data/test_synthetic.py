"""The synthetic generators: uniform (W1) unchanged, powerlaw (a degree-corrected SBM) as specified, both seeded."""

import json

import numpy as np
import pytest

from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.data.sources.powerlaw import PowerLawSource
from diskgnn.errors import UsageError
from diskgnn.hashing import Bijection

from conftest import run_module

KEYS7 = (7, 8, 9, 10)

SMALL = dict(nodes=30_000, feat_dim=16, avg_degree=8, classes=4)


def powerlaw(tmp_path, name="ds", budget="2GiB", **kw):
    return open_dataset(prepare("synthetic", tmp_path / name, undirected=True, progress=False, memory_budget=budget,
                                synthetic={"structure": "powerlaw", **SMALL, "seed": 0, **kw}))


def checksums(ds):
    return {k: v["checksum"] for k, v in ds.manifest["files"].items()}


def test_uniform_is_the_generator_it_was(tmp_path):
    """Checksums of W1's generator before --structure existed (commit ac8a478): existing datasets stay valid."""
    ds = open_dataset(prepare("synthetic", tmp_path / "u", undirected=True, progress=False,
                              synthetic=dict(nodes=3000, feat_dim=8, avg_degree=6, classes=4, seed=5)))
    assert checksums(ds) == {
        "features": "xxh3_128:049c0be8983d9d4d84d3c95b91c704e6",
        "indices": "xxh3_128:440cdbccd7173c87922516207d53d122",
        "indptr": "xxh3_128:3dce901f25ce044d452a033af2224de4",
        "labels": "xxh3_128:6fc6e910de96fb044f9b22a251c5ccfc",
        "test_idx": "xxh3_128:c2c91b12c0d9c3d2f308a1b8693523d3",
        "train_idx": "xxh3_128:d1640a56a4489d3eda0c762de82e17c7",
        "val_idx": "xxh3_128:726d86221f15254210a072fe8c1223d9",
    }
    assert ds.manifest["producer"]["source"] == "synthetic(nodes=3000, feat_dim=8, avg_degree=6, classes=4, seed=5)"
    assert ds.manifest["synthetic"]["structure"] == "uniform"


def test_powerlaw_depends_on_the_seed_alone(tmp_path):
    a = powerlaw(tmp_path, "a", budget="160MiB")
    b = powerlaw(tmp_path, "b", budget="4GiB")
    assert checksums(a) == checksums(b)
    assert a.manifest["synthetic"] == b.manifest["synthetic"]
    other = powerlaw(tmp_path, "c", seed=1)
    assert all(checksums(a)[k] != checksums(other)[k] for k in ("features", "indices", "labels"))
    # Edge chunks of any size concatenate to the same edges.
    src = PowerLawSource(**SMALL, seed=0)
    whole = [np.concatenate(x) for x in zip(*src.edges(10**9))]
    small = [np.concatenate(x) for x in zip(*src.edges(1000))]
    np.testing.assert_array_equal(whole, small)


def test_bijection_permutes_and_inverts():
    for n in (1, 2, 3, 17, 4096, 4097, 50_000):
        ids = Bijection(n, KEYS7)(np.arange(n))
        np.testing.assert_array_equal(np.sort(ids), np.arange(n))
        np.testing.assert_array_equal(Bijection(n, KEYS7).inverse(ids), np.arange(n))
    ids = Bijection(50_000, KEYS7)(np.arange(50_000))
    assert abs(np.corrcoef(np.arange(50_000), ids)[0, 1]) < 0.02  # no locality by rank


def test_labels_follow_communities_with_the_noise_asked(tmp_path):
    ds = powerlaw(tmp_path, label_noise=0.2, homophily=0.7)
    src = PowerLawSource(**SMALL, seed=0, label_noise=0.2, homophily=0.7)
    nodes = np.arange(ds.num_nodes)
    community = src.community_of(nodes)
    labels = np.asarray(ds.labels)
    assert abs((labels != community % 4).mean() - 0.2) < 0.015  # 30k nodes: sd 0.0023
    assert np.bincount(community, minlength=16).min() == ds.num_nodes // 16  # 4 x classes, equal sizes
    assert np.bincount(labels, minlength=4).min() > 0.2 * ds.num_nodes
    # Edges stay in their community as --homophily says (the reverse of each edge is stored too).
    dst = np.repeat(nodes, np.diff(ds.indptr))
    assert abs((community[dst] == community[np.asarray(ds.indices)]).mean() - 0.7) < 0.02
    clean = powerlaw(tmp_path, "clean", label_noise=0)
    np.testing.assert_array_equal(clean.labels, community % 4)


def test_degrees_follow_a_power_law(tmp_path):
    ds = open_dataset(prepare("synthetic", tmp_path / "d", undirected=True, progress=False, synthetic=dict(
        structure="powerlaw", nodes=100_000, feat_dim=4, avg_degree=10, classes=4, communities=8, seed=0)))
    deg = np.diff(ds.indptr)
    assert 9 < deg.mean() < 10.5  # K, less the duplicates merged
    assert deg.max() >= 100 * np.median(deg)
    # The tail's exponent (2.5 by default), by the Hill estimator over the top 1 %.
    top = np.sort(deg)[-1000:].astype(float)
    assert 2.1 < 1 + 1 / np.log(top / top[0]).mean() < 2.9
    # Hubs are spread over the id space: as many in the upper half as in the lower.
    hubs = np.argsort(deg)[-200:]
    assert 70 < (hubs < ds.num_nodes // 2).sum() < 130


def test_features_alone_give_far_less_than_uniform(tmp_path):
    kw = dict(nodes=40_000, feat_dim=128, avg_degree=10, classes=16, seed=0)
    uniform = open_dataset(prepare("synthetic", tmp_path / "u", undirected=True, progress=False, synthetic=kw,
                                   split_ratios=(0.5, 0.25, 0.25)))
    pl = open_dataset(prepare("synthetic", tmp_path / "p", undirected=True, progress=False,
                              split_ratios=(0.5, 0.25, 0.25), synthetic=dict(structure="powerlaw", **kw)))
    assert uniform.manifest["synthetic"]["linear_probe"]["accuracy"] > 0.7
    assert 1 / 16 + 0.05 < pl.manifest["synthetic"]["linear_probe"]["accuracy"] < 0.45
    # Averaging a node with its neighbours recovers much of the class: the nearest class mean (whitened) of the mean.
    x, y = np.asarray(pl.features, dtype=np.float64), np.asarray(pl.labels)
    deg = np.diff(pl.indptr)
    sums = x.copy()
    sums[deg > 0] += np.add.reduceat(x[np.asarray(pl.indices)], pl.indptr[:-1][deg > 0])
    means = np.stack([x[y == c].mean(0) for c in range(16)])
    predicted = (sums @ np.linalg.inv(np.cov(x.T)) @ means.T).argmax(1)
    assert (predicted == y).mean() > pl.manifest["synthetic"]["linear_probe"]["accuracy"] + 0.2


@pytest.mark.parametrize("options,flag", [
    (dict(communities=3), "--communities"),
    (dict(communities=30_001), "--communities"),
    (dict(label_noise=1.5), "--label-noise"),
    (dict(degree_exponent=2.0), "--degree-exponent"),
    (dict(homophily=-0.1), "--homophily"),
    (dict(feature_signal=-1), "--feature-signal"),
])
def test_bad_powerlaw_settings_are_refused(options, flag):
    with pytest.raises(UsageError, match=flag):
        PowerLawSource(**SMALL, seed=0, **options)


@pytest.mark.parametrize("flags,match", [
    (["--structure", "scalefree"], "--structure"),
    (["--structure", "powerlaw", "--communities", "2"], "--communities"),
    (["--structure", "powerlaw", "--label-noise", "-0.1"], "--label-noise"),
    (["--structure", "powerlaw", "--degree-exponent", "1.5"], "--degree-exponent"),
    (["--communities", "8"], "--communities is a setting of --structure powerlaw"),
    (["--label-noise", "0.1"], "--label-noise is a setting of --structure powerlaw"),
])
def test_bad_flags_are_one_line_usage_errors(tmp_path, flags, match):
    proc = run_module("diskgnn.prepare", "synthetic", "--nodes", "1000", "--out", tmp_path / "ds", "--no-progress",
                      *flags)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and match in lines[0], proc.stderr
    assert not (tmp_path / "ds").exists()


def test_cli_prepares_verifies_and_prints_the_statistics(tmp_path):
    out = tmp_path / "w"
    proc = run_module("diskgnn.prepare", "synthetic", "--structure", "powerlaw", "--nodes", "20000", "--feat-dim", "32",
                      "--classes", "8", "--out", out, "--no-progress", check=True)
    stats = json.loads((out / "manifest.json").read_text())["synthetic"]
    assert stats["communities"] == 32 and stats["label_noise"] == 0.1 and stats["degree_exponent"] == 2.5
    line = proc.stdout.strip().splitlines()[-1]
    assert "powerlaw structure, 32 communities" in line and f"max {stats['in_degree']['max']}" in line
    assert f"edge homophily {stats['edge_homophily']:.3f}" in line and "linear probe" in line
    proc = run_module("diskgnn.verify", out, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "verify: " + line.removeprefix("prepare: ")
