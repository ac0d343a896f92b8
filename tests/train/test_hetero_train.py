"""Training on heterogeneous graphs: the models against PyG and a dense oracle, the trainer end to end (learning,
multi-label, bf16, R-GCN, hashed rows, resume after kill -9), and what it refuses."""

import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import kill_once_checkpointed, run_module, small_hetero, whole_graph_batch, write_hetero_npy


@pytest.fixture(scope="module")
def hds(tmp_path_factory):
    return small_hetero(tmp_path_factory.mktemp("ht"), learnable=True)


def test_sage_equals_pyg_to_hetero(hds):
    pytest.importorskip("torch_geometric", reason="the PyG oracle needs torch_geometric (the test extra)")
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import SAGEConv, to_hetero

    from diskgnn.data.format import open_dataset
    from diskgnn.nn.hetero import HeteroGNN

    ds = open_dataset(hds, typed=True)
    s = ds.schema
    torch.manual_seed(0)
    ours = HeteroGNN(s, "sage", 8, 3, 2, 0.5).eval()
    data = HeteroData()
    for t in s.types:
        data[t.name].x = (torch.from_numpy(np.array(ds.type_features(t.name))) if t.feature_dim
                          else ours.embeddings[t.name].weight.detach())
    for i, r in enumerate(s.relations):
        indptr, indices = ds.csc(i)
        dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        data[r.src, r.name, r.dst].edge_index = torch.from_numpy(np.stack([np.asarray(indices, np.int64), dst]))

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = SAGEConv((-1, -1), 8), SAGEConv((-1, -1), 3)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    ref = to_hetero(Two(), data.metadata(), aggr="sum")
    with torch.no_grad():
        ref(data.x_dict, data.edge_index_dict)  # sizes the lazy layers
        for li, conv in enumerate(("c1", "c2")):
            for ri, r in enumerate(s.relations):
                mod = getattr(ref, conv)["__".join(r.key)]
                mod.lin_l.weight.copy_(ours.layers[li].neigh[ri].weight)
                mod.lin_l.bias.copy_(ours.layers[li].neigh[ri].bias)
                mod.lin_r.weight.copy_(ours.layers[li].root[ri].weight)
        want = ref(data.x_dict, data.edge_index_dict)["paper"]
        got = ours(*whole_graph_batch(ds))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_rgcn_equals_dense_oracle(hds):
    from diskgnn.data.format import open_dataset
    from diskgnn.nn.hetero import HeteroGNN

    ds = open_dataset(hds, typed=True)
    s = ds.schema
    torch.manual_seed(1)
    model = HeteroGNN(s, "rgcn", 8, 3, 2, 0.5, bases=2).eval()
    with torch.no_grad():
        h = {}
        for t in s.types:  # inputs projected to the hidden width
            x = (torch.from_numpy(np.array(ds.type_features(t.name))) if t.feature_dim
                 else model.embeddings[t.name].weight)
            h[t.name] = model.project[t.name](x) if t.feature_dim else x
        for li, layer in enumerate(model.layers):
            w = torch.einsum("rb,bio->rio", layer.coeff, layer.bases)
            out = {}
            for ri, r in enumerate(s.relations):
                indptr, indices = ds.csc(ri)
                a = torch.zeros(s.type(r.dst).count, s.type(r.src).count)
                dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
                a[dst, np.asarray(indices, np.int64)] = 1
                mean = (a / a.sum(1, keepdim=True).clamp(min=1)) @ h[r.src]
                out[r.dst] = out.get(r.dst, 0) + mean @ w[ri]
            h = {t: v + layer.root(h[t]) for t, v in out.items()}
            if li == 0:
                h = {t: v.relu() for t, v in h.items()}
        got = model(*whole_graph_batch(ds))
    torch.testing.assert_close(got, h["paper"], rtol=1e-4, atol=1e-4)


def relation_oracle(kind, conv, a, h_src, h_dst, same):
    """One relation's GCN or GAT output by dense algebra: `a` [dst, src] the edge counts; a relation with one type
    at both ends maps the destination's own row (its self-loop) with the sources' map, else with lin_dst."""
    lin_dst = conv.lin.weight if same else conv.lin_dst.weight
    if kind == "gcn":
        scale = 1 / (a.sum(1, keepdim=True) + 1)
        return (a @ (h_src @ conv.lin.weight.T) + h_dst @ lin_dst.T) * scale + conv.lin.bias
    heads, d = conv.heads, conv.d_head
    z, zd = (h_src @ conv.lin.weight.T).view(-1, heads, d), (h_dst @ lin_dst.T).view(-1, heads, d)
    a_src, a_dst = (z * conv.att_src).sum(-1), (zd * conv.att_dst).sum(-1)  # [n, heads]
    logits = F.leaky_relu(a_src[None] + a_dst[:, None], 0.2)  # [dst, src, heads]
    own = F.leaky_relu((zd * conv.att_src).sum(-1) + a_dst, 0.2)  # the self-loop's
    peak = torch.maximum(torch.where(a[..., None] > 0, logits, -torch.inf).amax(1), own)
    w, w_own = a[..., None] * torch.exp(logits - peak[:, None]), torch.exp(own - peak)
    out = (torch.einsum("dsh,shk->dhk", w, z) + w_own[..., None] * zd) / (w.sum(1) + w_own)[..., None]
    return (out.reshape(out.shape[0], -1) if conv.concat else out.mean(1)) + conv.bias


@pytest.mark.parametrize("kind", ["gcn", "gat"])
def test_gcn_and_gat_per_relation_equal_a_dense_oracle(hds, kind):
    """--model gcn|gat on a typed graph: one layer per relation (GCNLayer or GATLayer where the relation's ends are
    one type, RelationGCN or RelationGAT where they differ) summed into the type, against dense algebra over the
    whole graph."""
    from diskgnn.data.format import open_dataset
    from diskgnn.nn.hetero import HeteroGNN
    from diskgnn.nn.models import GATLayer, GCNLayer

    ds = open_dataset(hds, typed=True)
    s = ds.schema
    torch.manual_seed(2)
    model = HeteroGNN(s, kind, 8, 3, 2, 0.5, heads=2).eval()
    plain = GCNLayer if kind == "gcn" else GATLayer
    assert all((type(c) is plain) == (r.src == r.dst) for r, c in zip(s.relations, model.layers[0].convs))
    with torch.no_grad():
        h = {t.name: (torch.from_numpy(np.array(ds.type_features(t.name))) if t.feature_dim
                      else model.embeddings[t.name].weight) for t in s.types}
        for li, layer in enumerate(model.layers):
            out = {}
            for ri, r in enumerate(s.relations):
                indptr, indices = ds.csc(ri)
                a = torch.zeros(s.type(r.dst).count, s.type(r.src).count)
                dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
                a.index_put_((torch.from_numpy(dst), torch.from_numpy(np.asarray(indices, np.int64))),
                             torch.ones(dst.size), accumulate=True)
                y = relation_oracle(kind, layer.convs[ri], a, h[r.src], h[r.dst], r.src == r.dst)
                out[r.dst] = out.get(r.dst, 0) + y
            h = {t: v.relu() for t, v in out.items()} if li == 0 else out
        got = model(*whole_graph_batch(ds))
    assert got.shape == (s.type("paper").count, 3)
    torch.testing.assert_close(got, h["paper"], rtol=1e-4, atol=1e-4)


def train(data, workdir, *extra):
    proc = run_module("diskgnn.train", "--data", data, "--workdir", workdir, "--no-progress", "--hidden", "16",
                      "--batch-size", "23", "--memory-budget", "1GiB", *extra)
    assert proc.returncode == 0, proc.stderr
    import json

    return json.loads((workdir / "summary.json").read_text()), proc.stdout


def test_trains_and_learns(hds, tmp_path):
    summary, out = train(hds, tmp_path / "w", "--epochs", "10", "--lr", "0.005", "--fanouts",
                         "cites=5,writes=3,tags=2/4")
    assert summary["heterogeneous"] and summary["test_acc"] > 0.6, out  # 3 classes: chance is a third
    assert "plan: heterogeneous" in out and "reader " in out
    assert summary["features"]["paper"]["rows"] > 0 and summary["offline"]["pack_bytes_written"] > 0
    left = {f.name.split(".")[0] for f in (tmp_path / "w" / "epochs").glob("epoch-*")}
    assert left == {"epoch-00009"}  # each epoch's files deleted once the next one trains, as a plain run's
    summary, _ = train(hds, tmp_path / "r", "--epochs", "2", "--model", "rgcn", "--bases", "2", "--featureless",
                       "hashed", "--precision", "bf16", "--eval", "full")
    assert summary["precision"] == "bf16" and 0 <= summary["test_acc"] <= 1


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_gcn_and_gat_per_relation_learn(hds, tmp_path, model):
    summary, out = train(hds, tmp_path / "w", "--epochs", "10", "--lr", "0.005", "--fanouts", "4,4", "--model", model)
    assert summary["test_acc"] > 0.6, out  # 3 classes: chance is a third


def test_multilabel(tmp_path):
    rng = np.random.default_rng(0)
    labels = (rng.random((60, 4)) < 0.4).astype(np.int64)
    labels[:5] = -1
    x = rng.standard_normal((60, 6)).astype(np.float32)
    edges = rng.integers(0, 9, (200, 2)) % [9, 60]
    src = write_hetero_npy(tmp_path / "src", {"m": 60, "k": 9}, {"m": 6}, {("k", "of", "m"): edges}, "m", labels)
    np.save(src / "nodes" / "m" / "features.npy", x + labels.clip(0).repeat(2, 1)[:, :6])
    from diskgnn.data.hetero.prepare import prepare_hetero

    data = prepare_hetero(src, tmp_path / "ds", add_reverse=True, split_ratios=(0.6, 0.2, 0.2))
    summary, out = train(data, tmp_path / "w", "--epochs", "3", "--fanouts", "4,4")
    assert {"val_micro_f1", "test_micro_f1", "test_macro_f1"} <= set(summary) and "val micro_f1" in out
    for output in ("logits", "predictions"):  # diskgnn.infer: a multi-label prediction is a 0/1 row of classes
        run_module("diskgnn.infer", "--workdir", tmp_path / "w", "--out", tmp_path / f"{output}.npy", "--output",
                   output, "--no-progress", check=True)
    logits, predictions = np.load(tmp_path / "logits.npy"), np.load(tmp_path / "predictions.npy")
    assert predictions.shape == logits.shape == (60, 4)
    assert np.array_equal(predictions, (logits > 0).astype(np.int32)) and 0 < predictions.mean() < 1


def test_table_rows_out_of_core_equal_in_memory(hds, tmp_path):
    """--featureless table: the authors' rows learned in the out-of-core store train to the same losses whether
    the host tier holds none of them (every row read and written back through the file) or all of them; and the
    model learns."""
    args = ("--epochs", "3", "--lr", "0.005", "--fanouts", "4,4", "--featureless", "table", "--dropout", "0")
    cold, out = train(hds, tmp_path / "cold", *args, "--host-cache", "0")
    hot, _ = train(hds, tmp_path / "hot", *args, "--host-cache", "64MiB")
    assert cold["embeddings"]["author"]["hot_rows"] == 0 and cold["embeddings"]["author"]["rows_disk"] > 0
    assert hot["embeddings"]["author"]["hot_rows"] > 0 and "author table" in out
    assert cold["embeddings"]["author"]["bytes_written"] > 0
    np.testing.assert_allclose(cold["train_loss"], hot["train_loss"], rtol=1e-5)
    assert cold["train_loss"][-1] < cold["train_loss"][0] and cold["test_acc"] == hot["test_acc"] > 0.6


def test_embeddings_for_every_type_out_of_core(hds, tmp_path):
    """--embeddings 4 on a typed graph: 4 learned values a node of every type, beside the papers' and terms'
    features and as the authors' rows, in the embedding store per type; the same losses with every table row read
    from its file (--embedding-cache 0, the host tier for the feature rows), all held in their own cache, or
    ranked with the feature rows in one host tier; and the model learns."""
    args = ("--epochs", "3", "--lr", "0.005", "--fanouts", "4,4", "--embeddings", "4", "--dropout", "0")
    cold, out = train(hds, tmp_path / "cold", *args, "--embedding-cache", "0")
    own, _ = train(hds, tmp_path / "own", *args, "--embedding-cache", "1MiB", "--host-cache", "0")
    shared, _ = train(hds, tmp_path / "shared", *args, "--host-cache", "64MiB")
    for name in ("paper", "author", "term"):
        assert cold["embeddings"][name]["hot_rows"] == 0 and cold["embeddings"][name]["bytes_written"] > 0
        # every row epoch 0 reads (but the few it does not)
        assert own["embeddings"][name]["hot_rows"] >= 0.9 * {"paper": 199, "author": 41, "term": 7}[name]
    assert cold["plan"]["host_tier_rows"]["paper"] > 0 and own["plan"]["host_tier_rows"]["paper"] == 0
    assert shared["plan"]["host_tier_rows"]["author table"] > 30 and "paper table" in out
    np.testing.assert_allclose(cold["train_loss"], own["train_loss"], rtol=1e-5)
    np.testing.assert_allclose(cold["train_loss"], shared["train_loss"], rtol=1e-5)
    assert cold["train_loss"][-1] < cold["train_loss"][0] and cold["test_acc"] == own["test_acc"] > 0.6


@pytest.mark.parametrize("featureless", ["learned", "table"])
def test_resume_after_kill_is_exact(hds, tmp_path, featureless):
    args = ["--data", hds, "--no-progress", "--hidden", "16", "--batch-size", "7", "--epochs", "2",
            "--checkpoint-every", "3", "--memory-budget", "1GiB", "--featureless", featureless, "--host-cache", "0"]
    whole, _ = train(hds, tmp_path / "a", *args[2:])
    work = tmp_path / "b"
    argv = [sys.executable, "-m", "diskgnn.train", *map(str, args), "--workdir", str(work)]
    at, proc = kill_once_checkpointed(argv, work, batches_per_epoch=15, target=17)
    assert at is not None and proc.returncode == -9, "the run ended before it could be killed"
    resumed, out = train(hds, work, *args[2:], "--resume")
    assert resumed["resumed"] and "training goes on at epoch 1" in out
    assert resumed["train_loss"] == whole["train_loss"] and resumed["test_acc"] == whole["test_acc"]


def test_one_loop_validates_inside_epochs_and_keeps_world_and_dataset(hds, tmp_path):
    """A typed run goes through train/loop.py as a plain one: --val-every validates inside an epoch (the best
    validation's weights in best.pt), and last.pt names the world and the dataset a --resume is checked against."""
    from diskgnn.data.format import open_dataset
    from diskgnn.train.checkpoints import Checkpoints

    summary, out = train(hds, tmp_path / "w", "--epochs", "2", "--val-every", "2", "--fanouts", "4,4")
    inside = [v for v in summary["validations"] if v["batch"] is not None]
    assert [v["batch"] for v in inside] == [2, 4] * 2 and "epoch 0, batch 2 of 5: val acc" in out
    assert len(summary["validations"]) == 6 and summary["best_batch"] in (None, 2, 4)
    last = Checkpoints(tmp_path / "w" / "checkpoints").load("last")
    assert last["world"] == 1 and last["dataset"] == open_dataset(hds, typed=True).checksum
    assert Checkpoints(tmp_path / "w" / "checkpoints").load("best")["dataset"] == last["dataset"]


def test_online_sampling_trains_as_offline_and_replay_reuses_epoch_0(hds, tmp_path):
    """--sampling online samples each typed batch as the pass reaches it (its rows by id, no tier placed), with the
    stream key the offline sampler gives it: the same batches, so the same losses and test accuracy as sampling
    ahead; --sampling replay trains epoch 0's batches again, in a new order each epoch."""
    args = ("--epochs", "2", "--fanouts", "cites=3,writes=2/tags=2,cites=2", "--dropout", "0")
    ahead, _ = train(hds, tmp_path / "ahead", *args)
    online, _ = train(hds, tmp_path / "online", *args, "--sampling", "online")
    assert online["train_loss"] == ahead["train_loss"] and online["test_acc"] == ahead["test_acc"]
    assert online["features"]["paper"]["hits"] == 0 and online["features"]["paper"]["bytes_read"] > 0
    assert online["offline"]["pack_bytes_written"] == 0
    replay, _ = train(hds, tmp_path / "replay", *args, "--sampling", "replay")
    assert replay["train_loss"][0] == ahead["train_loss"][0] and replay["train_loss"][1] != ahead["train_loss"][1]
    assert not list((tmp_path / "replay" / "epochs").glob("epoch-00001*"))  # epoch 1 is epoch 0's files


def test_labor_per_relation_and_the_recent_rows_tier(hds, tmp_path):
    """--sampler labor on a typed graph (per relation): with batch dependency the recent-rows tier of each type
    changes where rows come from, never their values (the same losses with it and without it, fewer rows from
    disk with it); online sampling sees the same LABOR batches; and the model learns."""
    args = ("--epochs", "3", "--lr", "0.005", "--fanouts", "4,4", "--dropout", "0", "--sampler", "labor",
            "--layer-dependency", "--batch-dependency", "8", "--host-cache", "0")
    kept, _ = train(hds, tmp_path / "k", *args)
    packed, _ = train(hds, tmp_path / "p", *args, "--recent-batches", "0")
    online, _ = train(hds, tmp_path / "o", *args, "--sampling", "online")
    assert kept["plan"]["recent_batches"] == 1 and packed["plan"]["recent_batches"] == 0
    paper = kept["features"]["paper"]
    assert paper["tiers"]["recent"] > 0 and "recent" not in packed["features"]["paper"]["tiers"]
    assert kept["train_loss"] == packed["train_loss"] and kept["test_acc"] == packed["test_acc"]
    assert paper["tiers"]["disk"] < packed["features"]["paper"]["tiers"]["disk"]  # rows the packs hold
    np.testing.assert_allclose(online["train_loss"], kept["train_loss"], rtol=1e-5)
    assert online["val_acc"] == kept["val_acc"] and kept["test_acc"] > 0.6  # chance: a third


def test_hags_per_relation_train_as_plain_sums(hds, tmp_path):
    """--hag on on a typed graph (every neighbour: shared pairs exist): each relation's blocks run through their
    HAGs, stored with the batches (offline) or found as each batch is decoded (online), R-GCN's as RGraphSAGE's, and
    training ends where --hag off does, up to float reassociation."""
    args = ("--epochs", "2", "--fanouts=-1,-1", "--dropout", "0")
    for model in ("sage", "rgcn"):
        off, _ = train(hds, tmp_path / f"off-{model}", *args, "--model", model)
        on, out = train(hds, tmp_path / f"on-{model}", *args, "--model", model, "--hag", "on")
        online, _ = train(hds, tmp_path / f"online-{model}", *args, "--model", model, "--hag", "on", "--sampling",
                          "online")
        assert "plan: --hag on: each block's HAG searched as each batch is sampled" in out and off["hag"]["blocks"] == 0
        for run in (on, online):
            assert run["hag"]["used"] > 0 and run["train_loss"] == pytest.approx(off["train_loss"], rel=1e-4)
            assert run["test_acc"] == pytest.approx(off["test_acc"], abs=0.02)


def test_max_blowup_caps_each_types_packs(hds, tmp_path):
    """--max-blowup on a typed graph: each featured type's packs hold at most that many times the type's rows
    (batches share segments), and the run trains to the same losses as uncapped packs."""
    import json

    args = ("--epochs", "1", "--fanouts=-1,-1", "--dropout", "0", "--host-cache", "0", "--batch-size", "7")
    free, _ = train(hds, tmp_path / "f", *args)
    capped, _ = train(hds, tmp_path / "c", *args, "--max-blowup", "1")
    for ty in ("paper", "term"):
        meta = json.loads((tmp_path / "c" / "epochs" / f"epoch-00000.{ty}.packs.json").read_text())
        loose = json.loads((tmp_path / "f" / "epochs" / f"epoch-00000.{ty}.packs.json").read_text())
        assert meta["max_blowup"] == 1 and meta["blowup"] <= 1 < loose["blowup"], (ty, meta["blowup"])
    assert capped["train_loss"] == free["train_loss"] and capped["test_acc"] == free["test_acc"]


def test_quantized_rows_per_type_train_and_read_fewer_bytes(tmp_path):
    """--features sq8 on a typed graph: each featured type's code rows are placed, packed and read, decoded per type
    (a quarter of the bytes the float32 rows take); `paper=sq8` quantizes the papers alone; the model learns from
    either; a variant a type lacks is one line."""
    from diskgnn.data.quantize.cli import quantize_dataset

    data = small_hetero(tmp_path, learnable=True)
    quantize_dataset(data, ["sq8"], memory_budget="512MiB")
    args = ("--epochs", "8", "--lr", "0.005", "--fanouts", "4,4", "--host-cache", "0")
    raw, _ = train(data, tmp_path / "raw", *args)
    sq8, out = train(data, tmp_path / "sq8", *args, "--features", "sq8")
    papers, _ = train(data, tmp_path / "p", *args, "--features", "paper=sq8")
    assert raw["features"]["term"]["rows"] == sq8["features"]["term"]["rows"] > 0  # the same batches
    for ty in ("paper", "term"):  # 4 KiB-padded pack regions: at most as many bytes, far fewer for 4097-d terms
        assert sq8["features"][ty]["bytes_read"] <= raw["features"][ty]["bytes_read"]
    assert sq8["features"]["term"]["bytes_read"] < raw["features"]["term"]["bytes_read"] / 3
    assert papers["features"]["term"]["bytes_read"] == raw["features"]["term"]["bytes_read"]
    assert sq8["test_acc"] > 0.6 and papers["test_acc"] > 0.6, out  # chance: a third
    proc = run_module("diskgnn.train", "--data", data, "--workdir", tmp_path / "w", "--features", "lin4")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "no quantized features paper/lin4" in lines[0]


@pytest.mark.parametrize("flags,match", [
    (["--model", "gat", "--heads", "3"], "--hidden 256: gat needs a multiple of --heads 3"),
    (["--features", "author=sq8"], "--features author=sq8: 'author=sq8' names no featured node type"),
    (["--fanouts", "nope=3"], "--fanouts: 'nope' is not a relation of this graph"),
    (["--embedding-cache", "1MiB"], "--embedding-cache 1MiB: the run learns no tables"),
    (["--memory-budget", "300MiB"], "--memory-budget 300MiB: the run needs about"),
])
def test_refusals_are_one_line(hds, tmp_path, flags, match):
    proc = run_module("diskgnn.train", "--data", hds, "--workdir", tmp_path / "w", "--no-progress", *flags)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and match in lines[0], proc.stderr


def test_homogeneous_refuses_hetero_options(train_data, tmp_path):
    """And an --embedding-cache with no table is refused on a plain graph as on a typed one."""
    for flags, match in ((["--fanouts", "a=1"], "counts per relation need a heterogeneous dataset"),
                         (["--model", "rgcn"], "--model rgcn: needs a heterogeneous dataset"),
                         (["--embedding-cache", "1MiB"], "--embedding-cache 1MiB: the run learns no tables "
                                                          "(--embeddings N)")):
        proc = run_module("diskgnn.train", "--data", train_data, "--workdir", tmp_path / "w", *flags)
        assert proc.returncode == 2 and match in proc.stderr, proc.stderr



def test_read_depth_is_the_typed_plans_and_its_working_sets(hds, tmp_path):
    """--read-depth holds on a typed graph as on a plain one: its batches in flight, which the plan sizes."""
    import diskgnn

    sizes = {}
    for depth in (1, 3):
        with diskgnn.Loader(hds, fanouts="4,4", batch_size=32, hidden=16, workdir=str(tmp_path / f"w{depth}"),
                            memory_budget="1GiB", read_depth=depth, log=None) as loader:
            assert loader.plan.read_depth == loader.read_depth == depth
            sizes[depth] = loader.plan.sizes["working_set_bytes"]
            assert sum(mb.num_seeds for mb in loader.epoch(0)) == 100
    assert sizes[3] > sizes[1]


def test_typed_plan_reads_fewer_batches_ahead_to_keep_the_topology_cached(hds, tmp_path, monkeypatch):
    """The relations are sampled as mapped: the plan takes the deepest reads that leave the page cache room for
    their topology (here made as large as the budget dictates), else the deepest that fit, the topology uncached."""
    import diskgnn
    from diskgnn.train import typed_plan

    def plan(topology, name, **kw):
        monkeypatch.setattr(typed_plan, "topology_bytes", lambda ds: topology)
        with diskgnn.Loader(hds, fanouts="4,4", batch_size=32, hidden=16, workdir=str(tmp_path / name),
                            memory_budget="1GiB", log=None, **kw) as loader:
            assert loader.read_depth == loader.plan.read_depth
            return loader.plan.sizes

    # with no topology to keep, what each depth leaves: the page cache's half of it
    left = {d: 2 * plan(0, f"d{d}", read_depth=d)["page_cache_bytes"] for d in (1, 4)}
    assert left[1] > left[4] > 0
    mid = plan((left[1] + left[4]) // 2, "mid")
    assert 1 <= mid["read_depth"] < 4 and mid["topology_cached"], mid
    assert mid["page_cache_bytes"] >= mid["topology_bytes"]
    huge = plan(10 * left[1], "huge")
    assert huge["read_depth"] == 4 and not huge["topology_cached"], huge
    assert plan(0, "none")["read_depth"] == 4


def test_loader_api_yields_hetero_batches(hds, tmp_path):
    """diskgnn.Loader on a heterogeneous dataset: its batches (the one MiniBatch, typed) drive one's own loop over
    diskgnn's hetero model."""
    import diskgnn
    from diskgnn.loading.loaders import MiniBatch
    from diskgnn.nn.hetero import HeteroGNN

    lines = []
    with diskgnn.Loader(hds, fanouts="4,4", batch_size=32, hidden=16, workdir=str(tmp_path / "w"),
                        memory_budget="1GiB", log=lines.append) as loader:
        assert any(line.startswith("plan: heterogeneous") for line in lines)
        model = HeteroGNN(loader.ds.schema, "sage", 16, 3, len(loader.fanouts), 0.0)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        seeds = 0
        for epoch in range(4):
            for mb in loader.epoch(epoch):
                assert isinstance(mb, MiniBatch) and set(mb.x) == {"paper", "term"} and len(mb.hops) == 2
                assert [b is None for b in mb.hops[0]] == [False] * 6  # --fanouts 4,4: every relation followed
                opt.zero_grad()
                F.cross_entropy(model(mb.blocks, mb.x, mb.rows), mb.labels).backward()
                opt.step()
                seeds += mb.num_seeds
        assert seeds == 4 * 100  # every train paper once an epoch
        model.eval()
        with torch.no_grad():
            right = sum(int((model(mb.blocks, mb.x, mb.rows).argmax(1) == mb.labels).sum())
                        for mb in loader.evaluation("test"))
        assert right / 49 > 0.6 and loader.summary()["features"]["paper"]["rows"] > 0
        tiers = loader.stats()  # the train passes' rows by tier, every featured type's together
        assert sum(t["hits"] for t in tiers.values()) > 0 and loader.trained["seeds"] == 4 * 100
