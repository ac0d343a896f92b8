"""The whole graph's stored HAG: searched once beside the dataset, reused, checked on read, and layer-wise
inference through it equal to inference without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diskgnn.data.format import open_dataset
from diskgnn.errors import DiskgnnError
from diskgnn.nn.inference import full_neighbour_logits
from diskgnn.nn.models import GNN
from diskgnn.loading.graph_hag import GraphHag, graph_hag


@pytest.fixture(scope="module")
def redundant_source(tmp_path_factory):
    """600 nodes whose in-neighbours are unions of a few shared groups: pairs that many destinations share."""
    from conftest import random_graph, write_npy_dir

    rng = np.random.default_rng(5)
    groups = [rng.choice(600, size=rng.integers(3, 9), replace=False) for _ in range(20)]
    src, dst = [], []
    for v in range(600):
        picked = set()
        for g in rng.choice(len(groups), size=rng.integers(1, 4), replace=False):
            picked.update(groups[g].tolist())
        src += sorted(picked)
        dst += [v] * len(picked)
    g = random_graph(n=600, e=1, d=8, classes=3, seed=5)
    g["src"], g["dst"] = np.asarray(src), np.asarray(dst)
    return write_npy_dir(tmp_path_factory.mktemp("redundant") / "src", g,
                         splits={"train": np.arange(0, 600, 2), "test": np.arange(1, 600, 2)})


@pytest.fixture
def dataset(redundant_source, tmp_path):
    """Prepared per test: these tests write the HAG beside it."""
    from diskgnn.data.prepare import prepare

    return open_dataset(prepare(redundant_source, tmp_path / "data", progress=False))


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_inference_through_the_graph_hag_equals_plain_inference(dataset, tmp_path, model):
    # chunks of 199 destinations: the last one short, every chunk's HAG its own
    said = []
    hag = graph_hag(dataset, "on", fallback_dir=tmp_path / "work", chunk=199, threads=2, say=said.append)
    assert hag.path.parent == dataset.path / "hag" and "searching" in said[0]
    assert hag.bounds == list(range(0, 600, 199)) + [600]
    assert 0 < sum(hag.used) <= len(hag) and hag.stats()["rows_hag"] < hag.stats()["rows_plain"]
    torch.manual_seed(0)
    net = GNN(model, dataset.feature_dim, 16, dataset.num_classes, 3, 0.0).eval()
    nodes = np.array([5, 0, 599, 5, 301])  # unsorted, a duplicate
    plain = full_neighbour_logits(net, dataset, nodes, tmp_path / "a", batch_size=50)
    through = full_neighbour_logits(net, dataset, nodes, tmp_path / "b", batch_size=50, hag=hag)
    torch.testing.assert_close(through, plain, rtol=1e-4, atol=1e-5)
    again = graph_hag(dataset, "on", fallback_dir=tmp_path / "work", chunk=199, say=said.append)
    assert len(said) == 2 and again.meta["checksums"] == hag.meta["checksums"]  # found, not searched again


def test_auto_runs_no_chunk_the_cost_model_says_is_slower(dataset, tmp_path, monkeypatch):
    said = []
    monkeypatch.setattr("diskgnn.defaults.HAG_SAVED_ROW_COST", 0.0)  # nothing to gain: not even searched
    assert graph_hag(dataset, "auto", fallback_dir=tmp_path, chunk=199, say=said.append) is None
    assert "no HAG of this graph's chunks could be faster" in said[0] and not (dataset.path / "hag").exists()
    monkeypatch.setattr("diskgnn.loading.graph_hag.model_allows", lambda mode: True)  # searched, then none runs
    monkeypatch.setattr("diskgnn.loading.graph_hag.may_pay", lambda mode, block: True)
    hag = graph_hag(dataset, "auto", fallback_dir=tmp_path, chunk=199, say=lambda line: None)
    assert not any(hag.used) and all(hag[c] is None for c in range(len(hag)))
    assert hag.stats()["rows_hag"] == hag.stats()["rows_plain"]


def test_a_corrupted_chunk_fails_its_checksum_and_a_changed_dataset_is_searched_again(dataset, tmp_path):
    hag = graph_hag(dataset, "on", fallback_dir=tmp_path, chunk=199, say=lambda line: None)
    c = hag.used.index(True)
    raw = bytearray(hag.path.read_bytes())
    raw[hag.meta["offsets"][c + 1] - 1] ^= 1
    hag.path.write_bytes(bytes(raw))
    with pytest.raises(DiskgnnError, match=f"chunk {c} fails its checksum"):
        GraphHag(hag.path, dataset, "on")[c]
    index = hag.path.with_suffix(".json")
    index.write_text(index.read_text().replace(dataset.manifest["manifest_checksum"], "0" * 16))
    said = []
    graph_hag(dataset, "on", fallback_dir=tmp_path, chunk=199, say=said.append)
    assert "searching" in said[0]


def test_a_dataset_that_cannot_be_written_keeps_its_graph_hag_in_the_workdir(dataset, tmp_path, monkeypatch):
    from diskgnn.loading import graph_hag as module

    real = module.build

    def read_only(ds, path, chunk, threads):  # as guard_io reports EROFS (root ignores a chmod)
        if dataset.path in path.parents:
            raise DiskgnnError(f"{path}: cannot write: Read-only file system")
        return real(ds, path, chunk, threads)

    monkeypatch.setattr(module, "build", read_only)
    said = []
    hag = graph_hag(dataset, "on", fallback_dir=tmp_path / "work", chunk=199, say=said.append)
    assert hag.path.parent == tmp_path / "work" / "hag" and "Read-only file system; trying" in said[1]
    assert not (dataset.path / "hag").exists()
