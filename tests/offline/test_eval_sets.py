"""Streamed evaluation (offline/eval_sets.py) against the kept eval sets and numpy: the same batches, the same
rows, at most two chunks on disk, nothing left behind."""

import numpy as np
import pytest

from tests.conftest import random_graph, write_npy_dir


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """220 train seeds (more than the eval sets': kept whole), a 1-node val split, a 199-node test split; duplicate
    edges from the random graph."""
    from diskgnn.data.prepare import prepare

    tmp = tmp_path_factory.mktemp("evalsets")
    g = random_graph(n=420, e=3400, d=9, classes=3, seed=4)
    splits = {"train": np.arange(220), "val": np.array([220]), "test": np.arange(221, 420)}
    return prepare(write_npy_dir(tmp / "src", g, splits=splits), tmp / "ds", progress=False)


def open_loader(data, workdir, **kw):
    from diskgnn import Loader

    return Loader(data, **{"fanouts": [4, 3], "batch_size": 16, "workdir": str(workdir), "progress": False,
                           "log": None, **kw}).open()


def batches(loader, split):
    """(seeds, input ids, features) of each batch, and the chunk files on disk at each batch."""
    out, on_disk = [], []
    for mb in loader.evaluation(split):
        on_disk.append(len(list((loader.workdir / "epochs").glob(f"{split}-*.samples"))))
        out.append((mb.batch.seeds.copy(), mb.input_nodes.copy(), mb.x.numpy().copy()))
    return out, on_disk


@pytest.mark.parametrize("max_batches, chunk", [(2, 1), (6, 3)])
def test_streamed_eval_batches_equal_the_kept_ones_and_numpy(dataset, tmp_path, max_batches, chunk):
    from diskgnn.data.format import open_dataset

    feats = np.asarray(open_dataset(dataset).features)
    kept = open_loader(dataset, tmp_path / "kept")
    streamed = open_loader(dataset, tmp_path / "streamed", max_batches=max_batches)
    try:
        assert kept.eval_sets["test"].chunk is None and streamed.eval_sets["test"].chunk == chunk
        for split, n in (("val", 1), ("test", 13)):  # 199 seeds: 12 batches of 16 and one of 7
            want, _ = batches(kept, split)
            got, on_disk = batches(streamed, split)
            assert len(got) == len(want) == len(streamed.evaluation(split)) == n
            for (s, nodes, x), (ws, wnodes, wx) in zip(got, want):
                assert np.array_equal(s, ws) and np.array_equal(nodes, wnodes)
                np.testing.assert_array_equal(x, feats[nodes])  # the oracle: numpy indexing
                np.testing.assert_array_equal(x, wx)
            assert max(on_disk) <= 2 and not list((streamed.workdir / "epochs").glob(f"{split}-*"))
        # a second evaluation makes the same batches again
        again, _ = batches(streamed, "test")
        assert len(again) == 13 and all(np.array_equal(a[2], b[2]) for a, b in zip(again, got))
    finally:
        kept.close()
        streamed.close()


def test_a_streamed_eval_stopped_early_leaves_no_chunk_and_the_limit_holds(dataset, tmp_path):
    loader = open_loader(dataset, tmp_path / "w", max_batches=2, eval_max_batches=3)
    kept = open_loader(dataset, tmp_path / "k", eval_max_batches=3)
    try:
        first, want = batches(loader, "test")[0], batches(kept, "test")[0]
        assert kept.eval_sets["test"].chunk is None and loader.eval_sets["test"].chunk == 1
        assert len(loader.evaluation("test")) == len(first) == len(want) == 3
        assert all(np.array_equal(a[0], b[0]) for a, b in zip(first, want))
        it = iter(loader.evaluation("test"))
        next(it)
        it.close()
        assert not list((loader.workdir / "epochs").glob("test-*"))
    finally:
        loader.close()
        kept.close()


def test_the_plan_counts_two_chunks_not_the_whole_eval_sets(dataset, tmp_path):
    """The issue's W2 run in small: a short first run's default evaluation needs no more disk at once than twice
    its --eval none's, and the plan line says how the eval batches are made."""
    lines = []
    quick = dict(epochs=1, max_batches=2, log=lines.append)
    streamed = open_loader(dataset, tmp_path / "s", **quick)
    alone = open_loader(dataset, tmp_path / "n", eval="none", **quick)
    try:
        assert streamed.plan.disk_needed <= 2 * alone.plan.disk_needed
        said = [line for line in lines if line.startswith("plan: evaluation")]
        assert said == ["plan: evaluation (all of each split's batches, --eval-max-batches): val 1 batches, test 13 "
                        "batches; sampled and packed 1 batches at a time at each evaluation (the next chunk "
                        "meanwhile), each deleted once evaluated"]
    finally:
        streamed.close()
        alone.close()


def test_streamed_link_eval_pairs_each_batch_with_its_held_out_edges(tmp_path):
    """--task link: held-out edges, 1,000 a batch (the last one short), streamed one batch a chunk: each batch
    carries its own edges and negatives (by its index in the whole set, not in its chunk), as kept."""
    from diskgnn.data.prepare import prepare

    data = prepare("synthetic", tmp_path / "ds", undirected=True, progress=False, edge_split=(0.7, 0.15, 0.15),
                   synthetic=dict(structure="powerlaw", nodes=3000, feat_dim=4, avg_degree=12, classes=2, seed=3))
    common = dict(task="link", batch_size=64, negatives=5, chunks=2, eval_negatives=30)
    kept = open_loader(data, tmp_path / "k", **common)
    streamed = open_loader(data, tmp_path / "s", max_batches=1, **common)
    try:
        for split in ("val", "test"):
            held = kept.task.pass_batches(kept, split)
            assert len(held) >= 2 and kept.eval_sets[split].chunk is None and streamed.eval_sets[split].chunk == 1
            for loader in (kept, streamed):
                got = [(mb.batch.seeds.copy(), mb.link.src.copy(), mb.link.negatives.copy())
                       for mb in loader.evaluation(split)]
                assert len(got) == len(held)
                for (seeds, src, negatives), want in zip(got, (held[k] for k in range(len(held)))):
                    assert np.array_equal(seeds, want.seeds) and np.array_equal(src, want.src)
                    assert np.array_equal(negatives, want.negatives)
    finally:
        kept.close()
        streamed.close()
