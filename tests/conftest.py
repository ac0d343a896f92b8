"""Shared fixtures: small graphs written in each input layout, the real datasets in ../shared."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"


def shared_dataset(name: str) -> Path:
    """Path of a real dataset in ../shared/datasets, or skip the test saying why."""
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the real datasets live in ../shared/datasets beside the repo)")
    return path


def oracle_csc(n, src, dst, undirected=False, self_loops=False, drop_self_loops=False):
    """CSC built the obvious way: a set of (src, dst) pairs sorted by (dst, src)."""
    pairs = set(zip(np.asarray(src).tolist(), np.asarray(dst).tolist()))
    if undirected:
        pairs |= {(d, s) for s, d in pairs}
    if drop_self_loops and not self_loops:
        pairs = {(s, d) for s, d in pairs if s != d}
    if self_loops:
        pairs |= {(v, v) for v in range(n)}
    ordered = sorted(pairs, key=lambda p: (p[1], p[0]))
    indices = np.array([s for s, _ in ordered], dtype=np.int64)
    counts = np.bincount(np.array([d for _, d in ordered], dtype=np.int64), minlength=n)
    return np.concatenate([[0], np.cumsum(counts)]), indices


def edge_list(n: int, e: int, loops: int, seed: int = 0):
    """(n, src, dst, indptr, indices): `e` random edges, the first `loops` of them self-loops, and their CSC with
    every edge kept (duplicates too: each is a positive of its own)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    src[:loops] = dst[:loops]
    order = np.lexsort((src, dst))
    indptr = np.r_[0, np.cumsum(np.bincount(dst[order], minlength=n))]
    return n, src, dst, indptr, src[order].astype(np.int32)


def random_graph(n=199, e=1500, d=7, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        src=rng.integers(0, n, e), dst=rng.integers(0, n, e),
        feat=rng.standard_normal((n, d)).astype(np.float32),
        labels=rng.integers(0, classes, n),
    )


def write_npy_dir(path: Path, g: dict, edge_layout="2xE", splits=None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if edge_layout == "2xE":
        np.save(path / "edge_index.npy", np.stack([g["src"], g["dst"]]))
    elif edge_layout == "Ex2":
        np.save(path / "edge_index.npy", np.stack([g["src"], g["dst"]], axis=1))
    else:
        n = len(g["labels"])
        order = np.lexsort((g["src"], g["dst"]))
        np.save(path / "indptr.npy", np.concatenate([[0], np.cumsum(np.bincount(g["dst"], minlength=n))]))
        np.save(path / "indices.npy", g["src"][order])
    np.save(path / "feat.npy", g["feat"])
    np.save(path / "labels.npy", g["labels"])
    for name, ids in (splits or {}).items():
        np.save(path / f"{name}_idx.npy", np.asarray(ids))
    return path


def small_dataset_at(tmp: Path):
    """A prepared 199-node random graph (900 edges, 9 features, 3 classes; node 11 without in-edges) under tmp."""
    from diskgnn.data.format import open_dataset
    from diskgnn.data.prepare import prepare

    g = random_graph(n=199, e=900, d=9, classes=3, seed=4)
    g["dst"][g["dst"] == 11] = 12
    src = write_npy_dir(tmp / "src", g, splits={"train": np.arange(0, 199, 2), "val": np.arange(1, 199, 4),
                                                "test": np.arange(3, 199, 4)})
    return open_dataset(prepare(src, tmp / "ds", progress=False))



def write_hetero_npy(path, counts, dims, relations, target, labels, splits=None):
    """counts/dims per type; relations: {(src, name, dst): edges [E, 2]}."""
    for t, n in counts.items():
        d = path / "nodes" / t
        d.mkdir(parents=True)
        if dims.get(t):
            np.save(d / "features.npy", np.random.default_rng(len(t)).standard_normal((n, dims[t])).astype(np.float32))
        else:
            (d / "num_nodes.txt").write_text(f"{n}\n")
    np.save(path / "nodes" / target / "labels.npy", labels)
    for (s, name, t), e in relations.items():
        d = path / "relations" / f"{s}__{name}__{t}"
        d.mkdir(parents=True)
        np.save(d / "edges.npy", np.asarray(e, dtype=np.int64))
    for s, ids in (splits or {}).items():
        np.save(path / "nodes" / target / f"{s}_idx.npy", np.asarray(ids, dtype=np.int64))
    return path


def small_hetero(tmp: Path, seed: int = 0, learnable: bool = False):
    """An npy hetero directory prepared: papers (199, 12-d features, 3 classes) cite papers; authors (1 node and
    then 40; no features) write papers; terms (7, 4097-d) tag papers; reverses added. `learnable`: a paper's
    class shows in its features and its authors' papers share it."""
    from diskgnn.data.hetero.prepare import prepare_hetero

    rng = np.random.default_rng(seed)
    n = 199
    labels = rng.integers(0, 3, n)
    cites = rng.integers(0, n, (900, 2))
    if learnable:
        cites = cites[labels[cites[:, 0]] == labels[cites[:, 1]]]
    writes = np.stack([rng.integers(0, 40, 500), rng.integers(0, n, 500)], 1)
    tags = np.stack([rng.integers(0, 7, 300), rng.integers(0, n, 300)], 1)
    src = write_hetero_npy(tmp / "hsrc", {"paper": n, "author": 40, "term": 7}, {"paper": 12, "term": 4097},
                           {("paper", "cites", "paper"): cites, ("author", "writes", "paper"): writes,
                            ("term", "tags", "paper"): tags}, "paper", labels,
                           splits={"train": np.arange(0, n, 2), "val": np.arange(1, n, 4), "test": np.arange(3, n, 4)})
    if learnable:  # the class in a paper's features; the terms' 4097 random values kept small beside it
        x = np.load(src / "nodes" / "paper" / "features.npy")
        x[np.arange(n), labels] += 3.0
        np.save(src / "nodes" / "paper" / "features.npy", x)
        np.save(src / "nodes" / "term" / "features.npy", np.load(src / "nodes" / "term" / "features.npy") * 0.05)
    return prepare_hetero(src, tmp / "hds", add_reverse=True, memory_budget="512MiB")


def whole_graph_batch(ds):
    """Every paper as a seed, every neighbour over two hops: one batch that is the whole graph's forward."""
    import torch

    from diskgnn.data.schema import relation_fanouts
    from diskgnn.loading.blocks import TensorBlock
    from diskgnn.offline.sample import open_graph, sample_batch

    seeds = np.arange(ds.schema.type("paper").count)
    b = sample_batch(open_graph(ds), seeds, key=0, fanouts=relation_fanouts("-1,-1", ds.schema), seed=0, threads=1)
    blocks = [[TensorBlock.from_csc(k.indptr, k.indices, k.num_dst, k.num_src) for k in hop] for hop in b.hops[::-1]]
    nodes = {t.name: b.type_nodes[i] for i, t in enumerate(ds.schema.types)}
    x = {t.name: torch.from_numpy(np.array(ds.type_features(t.name))[nodes[t.name]]) for t in ds.schema.types
         if t.feature_dim}
    return blocks, x, nodes


def make_dataset(tmp, n, dim, dtype=np.float32):
    """A prepared dataset of n nodes with dim-wide feature rows of `dtype` (the store's tests' and the GPU's)."""
    from diskgnn.data.format import open_dataset
    from diskgnn.data.prepare import prepare

    g = random_graph(n=n, e=4 * n, d=dim, seed=n)
    g["feat"] = (g["feat"] * 100).astype(dtype)
    g["dst"][g["dst"] == 5] = 6  # node 5: no in-edges (a degree-0 seed when it is in the train set)
    train = np.arange(0, n, 3)
    src = write_npy_dir(tmp / "src", g, splits={"train": train})
    return open_dataset(prepare(src, tmp / "ds", progress=False, feature_dtype=np.dtype(dtype).name))


def every_tier(tmp, nodes, dim, dtype):
    """A dataset whose batches use every tier of the chain: (dataset, sample file, access counts, placement with a
    device and a host tier, the packs' path; LABOR with batch dependency, so that rows recur in the next batches,
    packed with a recent-rows window of 2 and shared segments)."""
    from diskgnn.offline.pack import pack_epoch
    from diskgnn.offline.placement import access_counts, place
    from diskgnn.offline.sample import Sampler, sample_epoch

    ds = make_dataset(tmp, nodes, dim, dtype)
    sf = sample_epoch(ds, tmp / "e.samples", fanouts=[3, 2], batch_size=4, seed=0, epoch=0,
                      sampler=Sampler("labor", layer_dependency=True, batch_dependency=16))
    counts = access_counts([sf], ds.num_nodes)
    placement = place(counts, ds.row_bytes, [("device", 4 * ds.row_bytes), ("host", 5 * ds.row_bytes)])
    return ds, sf, counts, placement, pack_epoch(ds, sf, placement, tmp / "e.packs", recent=2, max_blowup=1.2).path


# (nodes, feature dim, dtype): rows of 28 B, 4097 B and 1 B.
CASES = [(199, 7, np.float32), (97, 4097, np.int8), (60, 1, np.uint8)]


def kill_once_checkpointed(argv, workdir: Path, batches_per_epoch: int, target: int, delay_s: float = 0.0):
    """Starts diskgnn.train `argv` and SIGKILLs it `delay_s` after its last.pt first stands at batch `target` or
    past it (epochs x batches_per_epoch + next batch); returns that position, None if it ended first, and the
    stopped process."""
    import signal
    import time

    from diskgnn.errors import DiskgnnError
    from diskgnn.train.checkpoints import Checkpoints

    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while proc.poll() is None:
            try:
                state = Checkpoints(workdir / "checkpoints").load("last")
            except DiskgnnError:
                state = None  # caught between the write and the rename of a first checkpoint: not possible, but
            if state is not None:
                at = state["position"]["epoch"] * batches_per_epoch + state["position"]["next_batch"]
                if at >= target:
                    time.sleep(delay_s)
                    proc.send_signal(signal.SIGKILL)
                    return at, proc
            time.sleep(0.001)
        return None, proc
    finally:
        proc.wait()


def run_module(module: str, *args, check=False):
    """Runs `python -m module args` and returns the CompletedProcess."""
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def train_data(tmp_path_factory):
    """A small learnable dataset (features carry the label) that the trainer's tests share."""
    from diskgnn.data.prepare import prepare

    tmp = tmp_path_factory.mktemp("train")
    g = random_graph(n=600, e=4000, d=16, classes=4, seed=1)
    g["feat"][np.arange(600), g["labels"]] += 3.0
    src = write_npy_dir(tmp / "src", g, splits={"train": np.arange(0, 600, 3), "val": np.arange(1, 600, 6),
                                                "test": np.arange(2, 600, 6)})
    return prepare(src, tmp / "ds", progress=False)


@pytest.fixture(scope="session")
def link_data(tmp_path_factory):
    """A small power-law graph with an edge split (0.7 / 0.15 / 0.15) for the link prediction tests."""
    from diskgnn.data.prepare import prepare

    return prepare("synthetic", tmp_path_factory.mktemp("link") / "ds", undirected=True, progress=False,
                   synthetic=dict(structure="powerlaw", nodes=199, feat_dim=8, avg_degree=6, classes=2, seed=0),
                   edge_split=(0.7, 0.15, 0.15))


def train_config(data, workdir, **kw):
    """A TrainConfig for train_data: tiny batches, a host cache of a few rows, no progress bar, on the CPU (the
    tests' tier counts and bit-for-bit comparisons are the CPU path's; tests/cuda trains on a GPU)."""
    from diskgnn.train.config import TrainConfig

    base = dict(data=str(data), workdir=str(workdir), fanouts="4,3", batch_size=47, hidden=16, epochs=2,
                lr=0.02, progress=False, memory_budget="2GiB", host_cache="8KiB", device="cpu")
    base.update(kw)
    return TrainConfig(**base)
