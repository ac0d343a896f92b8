"""Quantized features end to end: placement budgets, packs, memory tiers, reads and the trainer move code
rows, and what reaches the model is exactly the dequantized oracle, quantizer.decode_numpy(codes[nodes])."""

import json

import numpy as np
import pytest
import torch

from diskgnn.data.features import feature_source
from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.data.quantize.cli import quantize_dataset
from diskgnn.data.quantize.variants import load_quantized
from diskgnn.errors import DiskgnnError
from diskgnn.loading.loaders import OnlineLoader
from diskgnn.nn.inference import full_neighbour_logits
from diskgnn.nn.models import GNN
from diskgnn.offline.pack import pack_epoch
from diskgnn.offline.placement import access_counts, place
from diskgnn.offline.sample import sample_epoch
from diskgnn.store.store import FeatureStore
from diskgnn.train.config import TrainConfig
from diskgnn.train.loop import train

from conftest import random_graph, write_npy_dir

# Awkward code rows for 33 values: sq1 5 B (33 bits), lin4 17 B, sq8 33 B, vq with 3 sub-vectors of
# uint8 codes 3 B, vq with 5 sub-vectors of uint16 codes 10 B.
SPECS = {"sq1": 5, "lin4": 17, "sq8": 33, "vq:w=16,L=16": 3, "vq:w=7,L=300": 10}


def graph_dataset(tmp, n, dim, feat=None, seed=0):
    g = random_graph(n=n, e=5 * n, d=dim, classes=4, seed=seed)
    if feat is not None:
        g["feat"] = feat
    else:  # learnable: the features carry the label
        g["feat"][np.arange(n), g["labels"] % dim] += 3.0
    splits = {"train": np.arange(0, n, 3), "val": np.arange(1, n, 6), "test": np.arange(2, n, 6)}
    return prepare(write_npy_dir(tmp / "src", g, splits=splits), tmp / "ds", progress=False)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = graph_dataset(tmp_path_factory.mktemp("qpath"), 400, 33)
    quantize_dataset(path, list(SPECS), force=True)  # the mechanics, not the fidelity, are under test here
    return open_dataset(path)


def oracle(ds, spec, nodes):
    """The dequantized rows of `nodes`, from the stored codes and the quantizer's numpy decoder."""
    q, codes, _ = load_quantized(ds, spec)
    return q.decode_numpy(np.asarray(codes)[nodes])


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("cache_fraction", [0.0, 0.3])
@pytest.mark.parametrize("max_blowup", [None, 1.1])
def test_quantized_packs_assemble_to_the_dequantized_oracle(dataset, tmp_path, spec, cache_fraction, max_blowup):
    source = feature_source(dataset, spec)
    q, codes, _ = load_quantized(dataset, spec)
    assert source.row_bytes == q.code_bytes == SPECS[spec]
    sf = sample_epoch(dataset, tmp_path / "e.samples", fanouts=[3, 2], batch_size=16, seed=0, epoch=0)
    counts = access_counts([sf], dataset.num_nodes)
    budget = int(cache_fraction * dataset.num_nodes * source.row_bytes)
    placement = place(counts, source.row_bytes, [("host", budget // 2), ("host2", budget - budget // 2)])
    # Byte budgets count code rows: 30 % of the nodes' code bytes hold 30 % of the nodes.
    assert [ids.size for ids in placement.tier_ids] == [budget // 2 // source.row_bytes,
                                                        (budget - budget // 2) // source.row_bytes]
    packs = pack_epoch(dataset, sf, placement, tmp_path / "e.packs", chunk_bytes=5 * source.row_bytes,
                       max_blowup=max_blowup, features=source)
    assert packs.row_bytes == q.code_bytes and packs.meta["features"] == spec
    if max_blowup is not None:
        assert packs.meta["blowup"] <= max_blowup and sum(packs.meta["shared_rows"]) > 0
    store = FeatureStore(dataset, placement, packs, features=source, backend="pread")
    codes = np.asarray(codes)
    for batch in sf:
        pending = store.finish(store.start(batch))
        np.testing.assert_array_equal(pending.host.numpy(), codes[batch.nodes])  # code rows moved, not floats
        x = store.to_device(pending)
        assert x.dtype == torch.float32 and x.shape == (batch.nodes.size, dataset.feature_dim)
        np.testing.assert_array_equal(x.numpy(), oracle(dataset, spec, batch.nodes))
    stats = {s.name: s for s in store.stats()}
    assert stats["disk"].hits == sum(packs.meta["rows"][: len(sf)])
    for s in stats.values():
        assert s.bytes == s.hits * q.code_bytes
    store.close()


def test_online_loader_reads_code_rows(dataset):
    from diskgnn.target.cpu import CpuTarget

    source = feature_source(dataset, "sq1")
    loader = OnlineLoader(dataset, dataset.split("train"), fanouts=[3, 2], batch_size=40, seed=0, epoch=0,
                          labels=np.asarray(dataset.labels), target=CpuTarget(), read_depth=2, backend="pread",
                          features=source)
    with loader.pipeline(range(len(loader))) as pipeline:
        works = list(pipeline)
    assert len(works) == len(loader) > 1
    for work in works:
        np.testing.assert_array_equal(work.x.numpy(), oracle(dataset, "sq1", work.batch.nodes))
    assert loader.store.disk.bytes == loader.store.disk.hits * 5 == sum(w.batch.nodes.size for w in works) * 5


def test_full_neighbour_inference_decodes_the_codes(dataset, tmp_path):
    source = feature_source(dataset, "vq:w=7,L=300")
    model = GNN("sage", dataset.feature_dim, 8, dataset.num_classes, 2, 0.0).eval()
    seeds = np.arange(0, dataset.num_nodes, 7)
    got = full_neighbour_logits(model, dataset, seeds, tmp_path / "inf", batch_size=50, features=source)
    # The same model over a dataset whose float features are the dequantized rows.
    deq = open_dataset(graph_dataset(tmp_path / "deq", 400, 33, feat=oracle(dataset, source.name, np.arange(400))))
    want = full_neighbour_logits(model, deq, seeds, tmp_path / "inf2", batch_size=50)
    assert torch.equal(got, want)


def test_a_pack_of_another_variant_is_refused(dataset, tmp_path):
    sf = sample_epoch(dataset, tmp_path / "e.samples", fanouts=[2], batch_size=50, seed=0, epoch=0)
    sq8 = feature_source(dataset, "sq8")
    placement = place(access_counts([sf], dataset.num_nodes), sq8.row_bytes, [("host", 0)])
    packs = pack_epoch(dataset, sf, placement, tmp_path / "e.packs", features=sq8)
    for other, name in ((feature_source(dataset, "sq1"), "sq1"), (feature_source(dataset), "fp32")):
        with pytest.raises(DiskgnnError, match=f"e.packs: packed from features sq8, not {name}; pack again"):
            FeatureStore(dataset, placement, packs, features=other)
    with pytest.raises(DiskgnnError, match="packed from features fp32, not sq8"):
        FeatureStore(dataset, placement, pack_epoch(dataset, sf, placement, tmp_path / "f.packs"), features=sq8)


def test_a_pack_of_a_rewritten_variant_is_refused(tmp_path):
    path = graph_dataset(tmp_path, 300, 9, seed=3)
    quantize_dataset(path, ["sq8"], sample_rows=40, seed=0)
    ds = open_dataset(path)
    sf = sample_epoch(ds, tmp_path / "e.samples", fanouts=[2], batch_size=50, seed=0, epoch=0)
    placement = place(access_counts([sf], ds.num_nodes), 9, [("host", 0)])
    packs = pack_epoch(ds, sf, placement, tmp_path / "e.packs", features=feature_source(ds, "sq8"))
    quantize_dataset(path, ["sq8"], sample_rows=40, seed=1, overwrite=True)  # another sample: other codes
    ds = open_dataset(path)
    with pytest.raises(DiskgnnError, match="packed from an earlier .*features.sq8.bin .*pack again"):
        FeatureStore(ds, placement, packs, features=feature_source(ds, "sq8"))


# ---------------------------------------------------------------- the trainer

@pytest.fixture(scope="module")
def train_data(tmp_path_factory):
    """16-value rows: fp32 64 B, sq8 16 B (4x), sq1 2 B (32x); and a copy whose float features are sq8's
    dequantized rows, which must train exactly like --features sq8."""
    tmp = tmp_path_factory.mktemp("qtrain")
    path = graph_dataset(tmp / "q", 600, 16, seed=1)
    quantize_dataset(path, ["sq8", "sq1"])
    return path, graph_dataset(tmp / "deq", 600, 16, feat=oracle(open_dataset(path), "sq8", np.arange(600)), seed=1)


def config(data, workdir, **kw):
    base = dict(data=str(data), workdir=str(workdir), fanouts="4,3", batch_size=47, hidden=16, epochs=2,
                lr=0.02, progress=False, memory_budget="2GiB", host_cache="0", seed=0, device="cpu")
    base.update(kw)
    return TrainConfig(**base)


def test_trainer_learns_from_sq8_and_reads_4x_fewer_bytes(train_data, tmp_path):
    path, _ = train_data
    fp32 = train(config(path, tmp_path / "fp32", epochs=3))
    sq8 = train(config(path, tmp_path / "sq8", epochs=3, features="sq8", summary_json=str(tmp_path / "s.json")))
    assert sq8["test_acc"] > 0.6  # chance: 0.25
    assert json.loads((tmp_path / "s.json").read_text())["features"] == "sq8" and sq8["feature_row_bytes"] == 16
    # No cache: every row comes from the packs, so the bytes read fall by exactly the 4x of the rows.
    assert sq8["tiers"]["disk"]["hits"] == fp32["tiers"]["disk"]["hits"] > 0
    assert fp32["disk_bytes_read"] / sq8["disk_bytes_read"] == 4.0
    assert sq8["plan"]["feature_bytes"] * 4 == fp32["plan"]["feature_bytes"]


def test_a_tier_budget_holds_as_many_more_code_rows(train_data, tmp_path):
    path, _ = train_data
    runs = {f: train(config(path, tmp_path / f, features=f, epochs=1, host_cache="4KiB", eval="none"))
            for f in ("fp32", "sq1")}
    assert runs["fp32"]["plan"]["tier_rows"] == {"host": 4096 // 64}
    assert runs["sq1"]["plan"]["tier_rows"] == {"host": 4096 // 2}
    assert runs["sq1"]["tiers"]["host"]["hit_rate"] > runs["fp32"]["tiers"]["host"]["hit_rate"]


@pytest.mark.parametrize("kw", [dict(), dict(sampling="online"), dict(eval="full", max_blowup=1.0, host_cache="2KiB")])
def test_sq8_trains_exactly_like_its_dequantized_floats(train_data, tmp_path, kw):
    path, deq = train_data
    a = train(config(path, tmp_path / "a", features="sq8", **kw))
    b = train(config(deq, tmp_path / "b", **kw))
    assert a["train_loss"] == b["train_loss"] and a["val_acc"] == b["val_acc"] and a["test_acc"] == b["test_acc"]


def test_quantized_bench_smoke(tmp_path):
    from bench import quantized as bench_quantized
    from bench.harness.memcap import CapUnavailable, run_capped

    try:
        run_capped(["true"], "256MiB")
        cap = ["--cap", "1GiB"]
    except CapUnavailable:  # the bench then runs uncapped; the cap itself is tested in test_memcap
        cap = ["--no-cap"]
    assert bench_quantized.parse_features("fp32,sq8,vq:w=16,L=2048,lin8:p=1,sq1") == [
        "fp32", "sq8", "vq:w=16,L=2048", "lin8:p=1", "sq1"]
    result = bench_quantized.main(["--smoke", *cap, "--features", "vq:w=8,L=16", "--workdir", str(tmp_path),
                                   "--out", str(tmp_path / "q.json")])
    saved = json.loads((tmp_path / "q.json").read_text())
    assert saved["variants"] == result["variants"] == ["fp32", "vq:w=8,L=16"]  # fp32 added as the baseline
    assert all("error" not in r for r in saved["runs"].values()), saved["runs"]
    rows = {(r["features"], r["cache"]): r for r in saved["rows"]}
    assert set(rows) == {(v, c) for v in ("fp32", "vq:w=8,L=16") for c in ("auto", "none")}
    vq = rows[("vq:w=8,L=16", "none")]
    assert vq["row_bytes"] == 16 and vq["compression"] == 32
    assert vq["disk_saving"] == 32  # no cache: every row, 32x smaller, from the packs
