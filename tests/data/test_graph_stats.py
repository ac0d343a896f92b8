"""graph_stats and probe against plain numpy on the written files, in chunks of any size."""

from fractions import Fraction

import numpy as np
import pytest

from diskgnn.data import graph_stats
from diskgnn.data.format import open_dataset, write_manifest
from diskgnn.data.prepare import prepare
from diskgnn.data.probe import fit
from diskgnn.data.verify import verify

from conftest import random_graph, write_npy_dir


@pytest.fixture(scope="module")
def powerlaw(tmp_path_factory):
    out = tmp_path_factory.mktemp("stats") / "pl"
    return open_dataset(prepare("synthetic", out, undirected=True, progress=False, synthetic=dict(
        structure="powerlaw", nodes=40_000, feat_dim=16, avg_degree=10, classes=4, communities=8, seed=2)))


def oracle_homophily(ds):
    dst = np.repeat(np.arange(ds.num_nodes), np.diff(ds.indptr))
    a, b = np.asarray(ds.labels)[np.asarray(ds.indices)], np.asarray(ds.labels)[dst]
    both = (a >= 0) & (b >= 0)
    return (a == b)[both].mean()


def percentile(deg, p):
    """The smallest degree at least p % of the nodes have at most, counted exactly (numpy's inverted_cdf
    rounds n * 0.999 up to the next node)."""
    return min(int(d) for d in np.unique(deg) if (deg <= d).sum() >= Fraction(str(p)) * deg.size / 100)


def test_recorded_statistics_match_numpy(powerlaw):
    stats = powerlaw.manifest["synthetic"]
    deg = np.diff(powerlaw.indptr)
    expected = {f"p{p:g}": percentile(deg, p) for p in (50, 90, 99, 99.9)}
    assert stats["in_degree"] == {**expected, "max": int(deg.max()), "mean": deg.sum() / deg.size}
    assert stats["edge_homophily"] == pytest.approx(oracle_homophily(powerlaw), abs=1e-12)
    assert 0.55 < stats["edge_homophily"] < 0.85  # citation graphs' range, at the default settings
    assert stats["in_degree"]["max"] > 50 * stats["in_degree"]["p50"]


def test_chunk_sizes_do_not_change_the_statistics(powerlaw, monkeypatch):
    whole = graph_stats.in_degrees(powerlaw, 1 << 30)
    # High degrees kept one by one rather than in the histogram; tiny chunks; several passes over the labels.
    monkeypatch.setattr(graph_stats, "HIST_DEGREES", 8)
    assert graph_stats.in_degrees(powerlaw, 1000) == whole
    # 4 passes over the labels, nodes in 12 chunks, edges in chunks of 2000 (less than the hubs' degrees).
    recorded = powerlaw.manifest["synthetic"]["edge_homophily"]
    assert graph_stats.edge_homophily(powerlaw, 160_000) == pytest.approx(recorded, abs=1e-12)


def test_homophily_skips_unlabeled_ends(tmp_path):
    g = random_graph(n=500, e=4000, classes=3, seed=4)
    g["labels"][::7] = -1
    ds = open_dataset(prepare(write_npy_dir(tmp_path / "src", g), tmp_path / "ds", progress=False))
    assert "synthetic" not in ds.manifest  # measured for the generators only
    assert graph_stats.edge_homophily(ds, 2000) == pytest.approx(oracle_homophily(ds), abs=1e-12)
    deg = np.diff(ds.indptr)
    assert graph_stats.in_degrees(ds, 100)["p90"] == percentile(deg, 90)


def test_probe_fits_a_separable_problem_and_not_noise():
    rng = np.random.default_rng(0)
    means = rng.standard_normal((5, 20)).astype(np.float32)
    y = rng.integers(0, 5, 4000)
    x = means[y] * 3 + rng.standard_normal((4000, 20)).astype(np.float32)
    w, c = fit(x - x.mean(0), y, 5)
    assert ((x - x.mean(0)) @ w + c).argmax(1).__eq__(y).mean() > 0.99
    noise = rng.standard_normal((4000, 20)).astype(np.float32)
    w, c = fit(noise[:2000].copy(), y[:2000], 5)
    assert (noise[2000:] @ w + c).argmax(1).__eq__(y[2000:]).mean() < 0.3


def test_verify_recomputes_the_degrees_and_homophily(tmp_path):
    out = prepare("synthetic", tmp_path / "pl", undirected=True, progress=False, synthetic=dict(
        structure="powerlaw", nodes=5000, feat_dim=4, avg_degree=6, classes=4, seed=0))
    assert verify(out) == []
    manifest = open_dataset(out).manifest
    manifest["synthetic"]["in_degree"]["max"] += 1
    manifest["synthetic"]["edge_homophily"] = 0.99
    write_manifest(out, manifest)
    problems = verify(out)
    assert len(problems) == 2 and "synthetic.in_degree" in problems[0] and "synthetic.edge_homophily" in problems[1]
