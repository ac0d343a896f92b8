"""--task link: the sampled batches are the link batches' seeds, and the run's metrics are those of its best
model recomputed in plain torch with every neighbour."""

import json

import numpy as np
import pytest
import torch

from diskgnn.data.format import open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.errors import run_cli
from diskgnn.nn.inference import full_neighbour_logits
from diskgnn.nn.link import Decoder, metrics_of, rank_sums
from diskgnn.nn.models import GNN
from diskgnn.offline.link_batches import LinkEpoch
from diskgnn.offline.batches import SampleFile
from diskgnn.train.checkpoints import Checkpoints
from diskgnn.train.options import from_options
from diskgnn.train.__main__ import main as train_main


def run(link_data, workdir, *extra):
    """Two epochs (unless `extra` says otherwise; later flags win)."""
    argv = ["--data", str(link_data), "--task", "link", "--workdir", str(workdir), "--no-progress", "--epochs", "2",
            "--batch-size", "64", "--hidden", "8", "--fanouts=-1,-1", "--negatives", "7", "--chunks", "3",
            "--eval-negatives", "50", "--dropout", "0", "--lr", "0.01", "--checkpoint-every", "off", *extra]
    assert run_cli("train", train_main, argv) == 0
    return json.loads((workdir / "summary.json").read_text())


def test_link_runs_sample_the_link_batches_seeds_and_score_like_plain_torch(link_data, tmp_path):
    summary = run(link_data, tmp_path / "run", "--degree-fraction", "0.5")
    ds = open_dataset(link_data)
    cfg = from_options(task="link", batch_size=64, negatives=7, chunks=3, degree_fraction=0.5, eval_negatives=50)
    # The eval sets' sample files hold the held-out batches' seeds, batch for batch (the runs keep them).
    test = LinkEpoch.held_out(ds.held_out_edges("test"), ds.indptr, ds.indices, negatives=50, split_key=(1 << 20) + 1)
    sampled = SampleFile(tmp_path / "run" / "epochs" / "test.samples")
    assert len(sampled) == len(test) >= 1
    for b in range(len(test)):
        np.testing.assert_array_equal(sampled[b].seeds, test[b].seeds)
    train = LinkEpoch(ds.indptr, ds.indices, cfg.link_spec, seed=0, epoch=0)
    assert summary["task"] == "link" and len(summary["val_mrr_per_epoch"]) == 2
    assert summary["rows_per_batch"]["input"] > 0 and summary["stage_times_s"]["train"]["items"] == 2 * len(train)
    # The best model, with every neighbour (fanouts -1), in plain torch: the same test metrics.
    model = GNN("sage", ds.feature_dim, 8, 8, 2, 0.0)
    model.decoder = Decoder("dot", 8)
    model.load_state_dict(Checkpoints(tmp_path / "run" / "checkpoints").load("best")["model"])
    model.eval()
    h = full_neighbour_logits(model, ds, np.arange(ds.num_nodes), tmp_path / "inference")
    sums = {}
    for batch in test:
        src = h[batch.src]
        pos = model.decoder(src, h[batch.dst])
        neg = model.decoder.against(src, h[torch.from_numpy(batch.negatives)], torch.from_numpy(batch.chunk_of))
        sums = {k: sums.get(k, 0) + v for k, v in rank_sums(pos, neg).items()}
    want = metrics_of(sums)
    assert summary["test_metrics"] == pytest.approx(want, abs=1e-5)
    assert summary["test_mrr"] == pytest.approx(want["mrr"], abs=1e-5)


def test_link_refusals_are_one_line(link_data, tmp_path, capsys):
    plain = prepare("synthetic", tmp_path / "plain", synthetic=dict(nodes=100, feat_dim=4, avg_degree=4, classes=2,
                                                                      seed=0), undirected=True, progress=False)
    for data, extra, want in ((plain, [], "--task link needs held-out edges to score: prepare it with --edge-split"),
                              (link_data, ["--sampling", "online"], "--sampling online: --task link trains with"),
                              (link_data, ["--negatives", "0"], "--negatives 0: must be at least 1")):
        code = run_cli("train", train_main, ["--data", str(data), "--task", "link", "--workdir", str(tmp_path / "w"),
                                             "--no-progress", *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code != 0 and len(err) == 1 and want in err[0], err


def test_a_resumed_link_run_ends_as_the_straight_one(link_data, tmp_path):
    dm = ("--decoder", "distmult", "--link-loss", "softmax")
    straight = run(link_data, tmp_path / "straight", *dm)
    run(link_data, tmp_path / "resumed", *dm, "--epochs", "1")
    resumed = run(link_data, tmp_path / "resumed", *dm, "--resume")
    assert resumed["train_loss"] == pytest.approx(straight["train_loss"], rel=1e-6)
    assert resumed["val_mrr_per_epoch"] == straight["val_mrr_per_epoch"]
    assert resumed["test_metrics"] == straight["test_metrics"]
    a = Checkpoints(tmp_path / "straight" / "checkpoints").load("last")["model"]
    b = Checkpoints(tmp_path / "resumed" / "checkpoints").load("last")["model"]
    assert "decoder.relation" in a and all(torch.equal(a[k], b[k]) for k in a)  # DistMult's vector saved too


def test_the_loader_api_pairs_each_batch_with_its_edges(link_data, tmp_path):
    from diskgnn import Loader

    loader = Loader(link_data, task="link", batch_size=64, negatives=7, chunks=3, eval_negatives=50, fanouts=[3, 2],
                    workdir=str(tmp_path / "api"), progress=False, log=None).open()
    try:
        for split_or_epoch, batches in ((0, loader.epoch(0)), ("val", loader.evaluation("val"))):
            link = loader.task.pass_batches(loader, split_or_epoch)
            seen = [mb.batch.index for mb in batches if np.array_equal(mb.batch.seeds,
                                                                       link[mb.batch.index].seeds)]
            assert seen == list(range(len(link))), split_or_epoch
    finally:
        loader.close()


def test_the_link_plan_is_sized_from_pilot_batches_that_bound_every_batch(tmp_path):
    """The plan sizes a link run for the rows its pilot batches read (with headroom), not the fanouts' bound,
    which counts every seed's neighbours as new: every train batch of epoch 0 and every val batch fits it."""
    from diskgnn.data.features import feature_source
    from diskgnn.data.format import open_dataset
    from diskgnn.data.prepare import prepare
    from diskgnn.offline.link_batches import LinkEpoch
    from diskgnn.offline.sample import batch_key, open_graph, sample_batch
    from diskgnn.train.plan import make_plan
    from diskgnn.train.tasks.base import EVAL_EPOCH
    from diskgnn.train.working_set import batch_layers

    from conftest import train_config

    data = prepare("synthetic", tmp_path / "ds", undirected=True, progress=False, edge_split=(0.8, 0.1, 0.1),
                   synthetic=dict(structure="powerlaw", nodes=20_000, feat_dim=0, avg_degree=2, classes=2, seed=0))
    ds = open_dataset(data)
    cfg = train_config(data, tmp_path / "w", task="link", embeddings=8, batch_size=1000, chunks=10, negatives=50,
                       fanouts="5", eval_fanouts="-1", memory_budget="1GiB")
    plan = make_plan(ds, feature_source(ds), cfg)
    bound = batch_layers(ds, cfg.seeds_per_batch, cfg.fanout_list)[0][0]
    graph = open_graph(ds)
    train = LinkEpoch(ds.indptr, ds.indices, cfg.link_spec, seed=cfg.seed, epoch=0)
    val = LinkEpoch.held_out(ds.held_out_edges("val"), ds.indptr, ds.indices, negatives=cfg.eval_negatives,
                             split_key=EVAL_EPOCH["val"])
    most = max(sample_batch(graph, batches[b].seeds, key=batch_key(0, b), fanouts=fanouts, seed=cfg.seed,
                            threads=1).nodes.size
               for batches, fanouts in ((train, [5]), (val, [-1])) for b in range(len(batches)))
    assert most <= plan.batch_rows < bound / 2, (most, plan.batch_rows, bound)
