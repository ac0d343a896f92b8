"""The tiled pass of a mean layer (nn/tiled_sum.py) against the layer on an in-memory full-neighbour block (the
oracle): rows of 4097 bytes, duplicate edges, a node without in-edges, 1, 199 and no targets, blocks of one grid
step and pieces of a few rows; its bytes from a grid point equal a whole run's; LayerWise takes it where it should,
and for a few targets computes the layers below over their receptive fields only."""

import numpy as np
import pytest
import torch

from diskgnn.loading.blocks import full_block
from diskgnn.nn.inference import LayerWise, full_neighbour_logits, receptive_fields
from diskgnn.nn.models import GNN, GCNLayer, SAGELayer
from diskgnn.nn.tiled_sum import blocks, mean_layer_outputs, piece_rows, projects_first


@pytest.fixture(scope="module")
def graph():
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 12, size=199)
    counts[[0, 11, 198]] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = rng.integers(0, 199, size=indptr[-1]).astype(np.int32)
    indices[:6] = 5  # duplicate edges into one destination
    rows = rng.integers(0, 256, size=(199, 4097), dtype=np.uint8)
    return indptr, indices, rows


def decode(codes):
    return codes.float() / 255


def oracle(layer, indptr, indices, rows, targets):
    block, src = full_block(indptr, indices, targets)
    with torch.no_grad():
        return layer(block, decode(torch.from_numpy(rows[src])))


def tiled(layer, graph, targets, grid, memory):
    """The tiled pass of `layer`, over its parts where it projects first (nn/inference.py's choice)."""
    indptr, indices, rows = graph
    own_cols = None
    with torch.no_grad():
        if projects_first(layer, rows.shape[1]):
            own, message = layer.parts(decode(torch.from_numpy(rows)))
            rows, own_cols = torch.cat([own, message], 1).numpy(), own.shape[1]
        parts = list(mean_layer_outputs(layer, indptr, indices, rows, decode if own_cols is None else None, targets,
                                        grid, memory, layer.d_out, own_cols=own_cols))
    starts = [s for s, _ in parts]
    assert starts == list(range(0, len(targets), grid))
    return torch.cat([y for _, y in parts]) if parts else torch.empty(0, layer.d_out)


@pytest.mark.parametrize("kind", [SAGELayer, GCNLayer])
@pytest.mark.parametrize("targets", [np.arange(199), np.array([5]), np.array([11]), np.arange(3, 199, 7),
                                     np.array([], dtype=np.int64)], ids=["all", "one", "no-edges", "some", "none"])
@pytest.mark.parametrize("memory", [200_000, 16 << 20], ids=["a-block-a-step", "one-block"])
@pytest.mark.parametrize("d_out", [4100, 5], ids=["sums-the-input", "projects-first"])
def test_tiled_outputs_equal_the_full_block(graph, kind, targets, memory, d_out):
    torch.manual_seed(0)
    layer = kind(4097, d_out)
    assert projects_first(layer, 4097) == (d_out < 4097)
    assert piece_rows(memory, 4097) < 199  # the input read in several pieces
    cuts = blocks(np.diff(graph[0])[targets], 7, memory, 4097 if d_out > 4097 else d_out, d_out)
    assert len(cuts) - 1 == (0 if targets.size == 0 else 1 if memory > 1e6 else -(-targets.size // 7))
    got = tiled(layer, graph, targets, 7, memory)
    assert got.shape == (targets.size, d_out)
    if targets.size:
        torch.testing.assert_close(got, oracle(layer, *graph, targets), rtol=1e-5, atol=1e-4)


def test_from_a_grid_point_the_bytes_are_a_whole_runs(graph):
    torch.manual_seed(1)
    layer = SAGELayer(4097, 3)
    whole = tiled(layer, graph, np.arange(199), 8, 300_000)
    rest = tiled(layer, graph, np.arange(64, 199), 8, 300_000)
    assert torch.equal(whole[64:], rest)


def test_a_blocks_sums_are_gone_before_the_next_blocks_are_taken(graph, monkeypatch):
    import weakref

    from diskgnn.nn import tiled_sum

    alive, real = [], tiled_sum._block_sums

    def tracked(*args):
        assert all(ref() is None for ref in alive)  # else two blocks' sums: twice the memory the blocks were cut to
        sums = real(*args)
        alive.append(weakref.ref(sums))
        return sums

    monkeypatch.setattr(tiled_sum, "_block_sums", tracked)
    tiled(SAGELayer(4097, 4100), graph, np.arange(199), 7, 200_000)
    assert len(alive) > 2


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    from conftest import small_dataset_at

    return small_dataset_at(tmp_path_factory.mktemp("tiled"))


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_layerwise_tiles_mean_layers_only_and_agrees_with_gathering(small_dataset, tmp_path, kind):
    ds = small_dataset
    torch.manual_seed(0)
    model = GNN(kind, ds.feature_dim, 16, ds.num_classes, 3, 0.5).eval()
    every = np.arange(ds.num_nodes)
    lw = LayerWise(model, ds, tmp_path / "lw", memory=4096)
    assert [lw._plan(i, every, 50) for i in range(3)] == [None] * 3 if kind == "gat" else ["tiled", "tiled", "parts"]
    assert LayerWise(model, ds, tmp_path / "lw2")._plan(0, every, 50) is None  # no memory to tile in
    seeds = np.r_[np.arange(0, 199, 3), 198]
    gathered = full_neighbour_logits(model, ds, seeds, tmp_path / "g", batch_size=20)
    tiled_ = full_neighbour_logits(model, ds, seeds, tmp_path / "t", batch_size=20, memory=4096)
    torch.testing.assert_close(tiled_, gathered, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["sage", "gcn"])
def test_a_narrower_layer_reads_the_parts_the_layer_below_wrote(small_dataset, tmp_path, kind):
    """hidden 32 -> 8 -> 3 classes: layer 1 (32 -> 8) and layer 2 (8 -> 3) run on their parts, written by the
    layer below in place of its outputs; the hidden layers are never stored; the logits are the in-memory ones."""
    ds = small_dataset
    torch.manual_seed(1)
    model = GNN(kind, ds.feature_dim, 32, ds.num_classes, 3, 0.5).eval()
    model.layers[1] = type(model.layers[1])(32, 8)
    model.layers[2] = type(model.layers[2])(8, ds.num_classes)
    every = np.arange(ds.num_nodes)
    lw = LayerWise(model, ds, tmp_path / "lw", memory=1 << 20)
    assert [lw._plan(i, every, 50) for i in range(3)] == ["tiled", "parts", "parts"]
    with torch.no_grad():
        got = torch.cat([rows for _, rows in lw.outputs(every, 3, 50)])
    assert sorted(p.name for p in (tmp_path / "lw").glob("*.npy")) == ["parts-1.npy", "parts-2.npy"]
    torch.testing.assert_close(got, in_memory(model, ds), rtol=1e-4, atol=1e-5)


def in_memory(model, ds) -> torch.Tensor:
    """The oracle: every layer over the whole graph as one block, the features in memory."""
    block, _ = full_block(ds.indptr, ds.indices, np.arange(ds.num_nodes))
    h = torch.from_numpy(np.array(ds.features, dtype=np.float32))
    with torch.no_grad():
        for i in range(len(model.layers)):
            h = model.layer(i, block, h)
    return h


def test_receptive_fields_are_the_targets_and_their_in_neighbours(small_dataset):
    indptr, indices = np.asarray(small_dataset.indptr), np.asarray(small_dataset.indices)
    sets = receptive_fields(indptr, indices, np.array([7, 7, 3]), 3, 10**9)
    want = {3, 7}
    for j in (3, 2, 1, 0):
        assert sets[j].tolist() == sorted(want)
        want |= {int(s) for d in want for s in indices[indptr[d]: indptr[d + 1]]}
    assert sets[2].size < sets[1].size
    capped = receptive_fields(indptr, indices, np.array([3, 7]), 3, sets[2].size)  # sets[1] is over `most`
    assert capped[2].tolist() == sets[2].tolist() and capped[1] is None and capped[0] is None
    assert receptive_fields(indptr, indices, np.arange(199), 2, 99) == [None] * 3
    assert [s.size for s in receptive_fields(indptr, indices, np.array([], dtype=np.int64), 2, 99)] == [0, 0, 0]


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("memory", [None, 4096], ids=["gathered", "tiled"])
@pytest.mark.parametrize("nodes", [[5], [11], [7, 7, 3], [198, 0, 150, 3]],
                         ids=["one", "no-in-edges", "duplicates", "unsorted"])
def test_a_few_targets_compute_the_layers_below_over_their_receptive_fields(small_dataset, tmp_path, kind, memory,
                                                                            nodes):
    ds = small_dataset
    torch.manual_seed(2)
    model = GNN(kind, ds.feature_dim, 16, ds.num_classes, 2, 0.5).eval()
    nodes = np.array(nodes)
    lw = LayerWise(model, ds, tmp_path / "lw", memory=memory)
    with torch.no_grad():
        got = torch.cat([rows for _, rows in lw.outputs(nodes, 2, 2)])
    field = receptive_fields(ds.indptr, ds.indices, nodes, 2, ds.num_nodes // 2)[1]
    assert 0 < field.size < ds.num_nodes // 2
    assert [np.load(path, mmap_mode="r").shape[0] for path in lw.kept] == [field.size]  # its rows alone
    torch.testing.assert_close(got, in_memory(model, ds)[nodes], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("memory", [None, 4096], ids=["gathered", "tiled"])
@pytest.mark.parametrize("nodes", ["all", "few"])
def test_a_layer_cut_midway_goes_on_from_its_last_record_to_the_same_bytes(small_dataset, tmp_path, monkeypatch,
                                                                            memory, nodes):
    """A layer's file written through data/resumable.py's Output: cut after 7 chunks (a record after each), a rerun
    writes its first chunk at the record, and every file and output equal an uncut run's, byte for byte."""
    from diskgnn import defaults
    from diskgnn.data.resumable import Output

    ds = small_dataset
    torch.manual_seed(3)
    model = GNN("sage", ds.feature_dim, 16, ds.num_classes, 3, 0.5).eval()
    targets = np.arange(ds.num_nodes) if nodes == "all" else np.array([0, 5, 40, 41, 198])

    def run(where):
        lw = LayerWise(model, ds, where, chunk_nodes=16, memory=memory)
        with torch.no_grad():
            out = torch.cat([rows for _, rows in lw.outputs(targets, 3, 16)])
        return out, {p.name: p.read_bytes() for p in lw.kept}

    whole, files = run(tmp_path / "whole")
    assert len(files) == 2
    monkeypatch.setattr(defaults, "INFER_RECORD_S", 0.0)
    real, starts = Output.write, []

    def cut_after_7(self, start, rows):
        if len(starts) == 7:
            raise KeyboardInterrupt
        starts.append(start)
        real(self, start, rows)

    monkeypatch.setattr(Output, "write", cut_after_7)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut")
    cut_at = starts[-1] + 16
    starts.clear()
    monkeypatch.setattr(Output, "write", lambda self, start, rows: (starts.append(start), real(self, start, rows)))
    again, again_files = run(tmp_path / "cut")
    assert starts[0] == cut_at and 0 < cut_at  # the first layer went on from its record
    assert torch.equal(again, whole) and again_files == files
