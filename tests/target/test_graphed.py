"""The captured step's padding (diskgnn/target/graphed.py), run eagerly with a CPU standing in for the device: it
trains to the eager unpadded step's losses and weights over batches of awkward and growing shapes (a seed without
neighbours, an empty block, one seed, duplicate neighbours); a Run through the captured step's path (blockless
train passes, the fallback after a failed capture) trains as the eager Run; the plan decides --cuda-graphs as
documented. The capture and its replays are tested on a GPU (tests/cuda/test_cuda_graphs.py)."""

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from diskgnn.errors import UsageError
from diskgnn.nn.models import GNN
from diskgnn.offline.batches import Batch, Block
from diskgnn.offline.sample import sample_epoch
from diskgnn.target.cuda import CudaTarget
from diskgnn.target.graphed import Bucket, CaptureFailed, GraphedStep, choose
from diskgnn.target.record import BatchRecord, device_block

from conftest import CASES, every_tier

STAND_IN = CudaTarget("cpu")


def _minibatch(batch: Batch, labels: np.ndarray, x: torch.Tensor):
    """What the CUDA target's transfer gives the step: the record, and the rows, labels, ids and blocks on the
    device (here: views of the record on the host)."""
    record = BatchRecord.of(batch, labels[batch.seeds])
    y, nodes, parts = record.split(torch.from_numpy(record.words))
    blocks = [device_block(p, i, nd, ns, STAND_IN.kernels) for (p, i), (nd, ns, _) in zip(parts, record.shapes)]
    salt = (int(batch.nodes[0]),) if batch.num_seeds else (0,)
    return SimpleNamespace(record=record, x=x, labels=y, node_ids=nodes, blocks=blocks, salt=salt,
                           pending=SimpleNamespace(words=torch.from_numpy(record.words)))


def _odd_batches(dim: int, classes: int):
    """Two-layer batches over 1,000 nodes with the shapes a bucket must pad: a seed without neighbours and a
    duplicate neighbour; an outer block without edges; a single seed."""
    rng = np.random.default_rng(5)
    out = []
    for seeds, mid, src, empty in [(3, 11, 29, False), (3, 11, 29, True), (1, 4, 9, False)]:
        counts = np.zeros(seeds, np.int32)
        counts[1:] = rng.integers(1, 4, seeds - 1)
        inner_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        inner = rng.integers(0, mid, int(inner_ptr[-1])).astype(np.int32)
        outer_counts = np.zeros(mid, np.int32) if empty else rng.integers(0, 4, mid).astype(np.int32)
        outer_ptr = np.concatenate([[0], np.cumsum(outer_counts)]).astype(np.int32)
        outer = rng.integers(0, src, int(outer_ptr[-1])).astype(np.int32)
        outer[:2] = outer[0] if outer.size >= 2 else outer[:2]
        nodes = rng.permutation(1000)[:src].astype(np.int64)
        blocks = [Block(inner_ptr, inner, seeds, mid), Block(outer_ptr, outer, mid, src)]
        batch = Batch.one_type(0, nodes, blocks, seeds)
        out.append((batch, torch.randn(src, dim, generator=torch.Generator().manual_seed(src))))
    labels = np.arange(1000) % classes
    return [_minibatch(b, labels, x) for b, x in out]


def _eager_step(model, optimizer, mb):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(mb.blocks, mb.x, (mb.salt, mb.node_ids)).float(), mb.labels)
    loss.backward()
    optimizer.step()
    return loss.detach()


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_the_padded_step_trains_as_the_eager_one(train_data, kind):
    from diskgnn.data.format import open_dataset

    ds = open_dataset(train_data)
    sf = sample_epoch(ds, train_data.parent / f"graphed-{kind}.samples", fanouts=[5, 3], batch_size=48, seed=0,
                      epoch=0)
    labels, features = np.asarray(ds.labels), np.asarray(ds.features)
    real = [_minibatch(sf[i], labels, torch.from_numpy(features[sf[i].nodes])) for i in range(len(sf))]
    odd = _odd_batches(ds.feature_dim, ds.num_classes)
    # small first, so that the bucket grows; the epoch's last (smaller) batch; one-seed and empty-block ones later
    batches = [odd[2], real[-1], *real[:4], odd[0], odd[1], real[4], odd[2]]
    torch.manual_seed(0)
    eager = GNN(kind, ds.feature_dim, 16, ds.num_classes, 2, 0.5).train()
    padded = copy.deepcopy(eager)
    eager.reseed(3)
    padded.reseed(3)
    opt_e, opt_p = (STAND_IN.optimizer(m.parameters(), 0.01, 1e-4) for m in (eager, padded))
    step = GraphedStep(padded, opt_p, torch.device("cpu"), bf16=False, capture=False)
    for i, mb in enumerate(batches):
        want = _eager_step(eager, opt_e, mb)
        got, seeds = step(mb)
        assert seeds == mb.labels.numel()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=f"batch {i}")
        assert step.bucket.holds(mb.record)
    for (name, a), b in zip(eager.named_parameters(), padded.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    assert step.stats["eager"] == len(batches) and step.stats["captures"] == step.stats["replays"] == 0
    assert 2 <= step.stats["buckets"] < len(batches)  # grown from the one-seed batch, then kept
    # a new epoch's key reaches the masks: the padded step drops what the eager one does
    eager.reseed(4)
    padded.reseed(4)
    torch.testing.assert_close(step(real[0])[0], _eager_step(eager, opt_e, real[0]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nodes,dim,dtype", CASES[:2])
def test_train_passes_for_a_captured_step_cross_without_blocks_and_train_the_same(tmp_path, nodes, dim, dtype):
    """A pass through the captured step's target (every tier of the chain, a CPU standing in for the device) makes
    no blocks in the copy stage, and the padded step trains on its batches as the eager step on the blocks the
    usual target's copy stage makes (each pass in one run, batch by batch)."""
    from diskgnn.loading.loaders import OfflineLoader
    from diskgnn.offline.pack import PackFile
    from diskgnn.store.store import FeatureStore
    from diskgnn.store.tiers import load_tiers

    ds, sf, _, placement, packs = every_tier(tmp_path, nodes, dim, dtype)
    labels = np.asarray(ds.labels) % 3
    tiers = load_tiers(ds, placement)

    def batches(target):
        store = FeatureStore(ds, placement, PackFile(packs), tiers=tiers, assembly=target.assembly(), read_depth=2)
        return OfflineLoader(sf, store, labels, 2, target).pipeline(np.arange(len(sf)))

    torch.manual_seed(0)
    eager = GNN("sage", ds.feature_dim, 8, 3, 2, 0.5).train()
    padded = copy.deepcopy(eager)
    opt_e, opt_p = (STAND_IN.optimizer(m.parameters(), 0.01) for m in (eager, padded))
    step = GraphedStep(padded, opt_p, torch.device("cpu"), bf16=False, capture=False)
    captured = STAND_IN.for_captured_steps()
    assert not captured.step_blocks and STAND_IN.step_blocks
    seen = 0
    for want, got in zip(batches(STAND_IN), batches(captured), strict=True):
        assert got.blocks == [] and len(want.blocks) == 2 and got.destinations == want.destinations
        loss = _eager_step(eager, opt_e, SimpleNamespace(**{k: getattr(want, k) for k in ("x", "blocks", "labels")},
                                                         salt=want.salt, node_ids=want.node_ids))
        torch.testing.assert_close(step(got)[0], loss, rtol=1e-5, atol=1e-6)
        seen += 1
    assert seen == len(sf) > 3
    for a, b in zip(eager.parameters(), padded.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_a_bucket_grows_to_hold_each_batch_and_keeps_room_for_padding_edges():
    def record(nodes, *blocks):  # blocks: (num_dst, num_src, edges), model order
        return BatchRecord(None, blocks[-1][0], nodes, tuple(blocks))

    a = record(40, (12, 40, 30), (3, 12, 9))
    bucket = Bucket(0, ()).grown(a, 1.1)
    assert bucket.holds(a) and bucket.nodes >= 40 and all(d > nd for (d, _), (nd, _, _) in
                                                          zip(bucket.blocks, a.shapes))
    src = [s for _, s, _ in bucket.shapes()]
    assert src[0] == bucket.nodes and src[1] == bucket.blocks[0][0]
    assert all(d <= s for (d, s, _) in bucket.shapes())
    assert Bucket(40, ((12, 30), (3, 9))).holds(a)  # every dimension exact: nothing to pad
    assert Bucket(40, ((13, 31), (3, 9))).holds(a)  # block 0's padding edges go to its padded row
    assert not Bucket(40, ((12, 31), (3, 9))).holds(a)  # padding edges but no padded row to take them
    b = record(50, (60 // 5, 50, 80), (3, 12, 9))
    grown = bucket.grown(b, 1.1)
    assert grown.holds(a) and grown.holds(b) and grown.blocks[1] == bucket.blocks[1]
    one = record(2, (1, 2, 0), (1, 1, 0))  # a batch of one seed without neighbours
    assert Bucket(0, ()).grown(one, 1.1).holds(one)


def test_cuda_graphs_is_decided_once_by_the_plan():
    assert choose("auto", "cuda", None).graphed and choose("on", "cuda", None).graphed
    assert choose("on", "cuda", None).required and not choose("auto", "cuda", None).required
    assert not choose("off", "cuda", None).graphed
    why = choose("auto", "cuda", "--task link: its loss reads each batch's own edges and negatives")
    assert not why.graphed and why.line == "step: eager (--task link: its loss reads each batch's own edges and " \
                                           "negatives)"
    assert not choose("auto", "cpu", None).graphed
    with pytest.raises(UsageError, match="--cuda-graphs on: no CUDA device"):
        choose("on", "cpu", None)
    with pytest.raises(UsageError, match="--cuda-graphs on: --embeddings"):
        choose("on", "cuda", "--embeddings: the table's rows are gathered and stepped on the host each batch")


def test_the_plan_says_why_a_run_steps_eagerly(train_data, tmp_path):
    from diskgnn.train.plan import _uncapturable

    from conftest import train_config

    assert _uncapturable(train_config(train_data, tmp_path)) is None
    assert _uncapturable(train_config(train_data, tmp_path, task="link")) == \
        "--task link: its loss reads each batch's own edges and negatives"
    assert _uncapturable(train_config(train_data, tmp_path, embeddings=8)).startswith("--embeddings: ")
    assert _uncapturable(train_config(train_data, tmp_path, distributed="independent")) == \
        "--distributed independent: its collectives are not captured"


def _stand_in_run(data, workdir, graphed: bool, fail_at: int | None = None):
    """Two epochs of Run.train_epoch with the CUDA target on a CPU standing in for the device (the plan, made for a
    CPU, is told nothing): with `graphed`, the captured step's path as a GPU run takes it (blockless train passes,
    the padded step run eagerly), its capture made to fail at the `fail_at`-th batch. Returns the model, the losses,
    the run's step record and its trained-rows counts."""
    from diskgnn.train.checkpoints import EpochState
    from diskgnn.train.run import Run

    from conftest import train_config

    run = Run(train_config(data, workdir, seed=2, dropout=0.5))
    try:
        run.target = run.loader.target = run.loader.train_target = CudaTarget("cpu")
        model, optimizer = run.model_and_optimizer()
        if graphed:
            run.graphed = GraphedStep(model, optimizer, torch.device("cpu"), bf16=False, capture=False,
                                      stats=run.step_stats)
            run.loader.train_target = run.target.for_captured_steps()
            if fail_at is not None:
                calls, step = [0], run.graphed

                def failing(mb):  # as GraphedStep's capture raises, at the fail_at-th batch
                    calls[0] += 1
                    if calls[0] == fail_at:
                        raise CaptureFailed("RuntimeError: made to fail")
                    return step(mb)

                run.graphed = failing
        losses = []
        for epoch in range(2):
            state = EpochState(epoch)
            run.train_epoch(model, optimizer, state)
            losses.append(state.loss_sum / state.seen)
        return model, losses, run.step_stats, run.loader.rows_per_batch()
    finally:
        run.loader.close()


def test_a_run_through_the_captured_steps_path_trains_as_the_eager_run_and_falls_back_on_a_failed_capture(
        train_data, tmp_path, capsys):
    eager, eager_losses, eager_step, eager_rows = _stand_in_run(train_data, tmp_path / "eager", graphed=False)
    padded, losses, step, rows = _stand_in_run(train_data, tmp_path / "padded", graphed=True)
    assert step["eager"] == 10 and step["buckets"] >= 1 and "capture_failed" not in step, step
    assert rows == eager_rows  # counted from the records where the passes carried no blocks
    assert losses == pytest.approx(eager_losses, rel=1e-5)
    for a, b in zip(eager.parameters(), padded.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    failed, failed_losses, failed_step, _ = _stand_in_run(train_data, tmp_path / "failed", graphed=True, fail_at=3)
    assert failed_step["capture_failed"] == "RuntimeError: made to fail"
    assert "plan: step: eager from here on: its capture failed (RuntimeError: made to fail)" in capsys.readouterr().out
    assert failed_losses == pytest.approx(eager_losses, rel=1e-5)  # the failed batch and the rest trained eagerly
    for a, b in zip(eager.parameters(), failed.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
