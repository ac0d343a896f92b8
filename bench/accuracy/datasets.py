"""The accuracy studies' datasets: the four real graphs, a sparse variant and train's synthetic default, each
prepared once into the study's workdir by one recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from diskgnn.data.builtin import default_dataset
from diskgnn.data.format import read_manifest
from diskgnn.data.prepare import prepare
from diskgnn.errors import DiskgnnError

from ..harness.common import REPO

SHARED = REPO.parent / "shared" / "datasets"


@dataclass(frozen=True)
class Spec:
    source: str  # relative to the shared datasets directory
    split_per_class: tuple[int, int] | None  # None: the source's own split
    split_note: str
    epochs: int
    normalize_features: bool = False  # prepare --normalize-features: each row divided by its sum


# Planetoid sources carry the public split (prepare takes a source's split over a drawn one); the
# gnn-benchmark graphs have none, so 20 train and 30 val nodes per class are drawn (seed 0), the rest test.
DATASETS = {
    "cora": Spec("planetoid_cora", None, "Planetoid public split", 50),
    "citeseer": Spec("planetoid_citeseer", None, "Planetoid public split", 50),
    "amazon_computers": Spec("amazon_computers/amazon-computers.zip", (20, 30),
                             "20 train + 30 val per class, rest test (split seed 0)", 150),
    "coauthor_cs": Spec("coauthor_cs/coauthor-cs.zip", (20, 30),
                        "20 train + 30 val per class, rest test (split seed 0)", 30),
}
# Issue 20's sparse non-negative dataset for the quantized study: Coauthor CS's word counts (1 % non-zero)
# divided by each row's sum, the usual normalised bag-of-words (values in (0, 1], many distinct ones).
SPARSE = {
    "coauthor_cs_sum1": Spec("coauthor_cs/coauthor-cs.zip", (20, 30),
                             "as coauthor_cs, rows divided by their sums (prepare --normalize-features)", 30,
                             normalize_features=True),
}
# The dataset `python -m diskgnn.train` trains with no arguments (W2's power-law graph at 2M nodes: 64 communities,
# 128 weak class-correlated features, 16 classes, split 0.1/0.05/0.05 at random; until issue 37, W1's uniform graph), prepared by train's recipe into --workdir rather than
# into $DISKGNN_HOME, which other jobs on this machine use: storing variants rewrites a dataset's manifest.
SYNTHETIC = "synthetic"
SYNTHETIC_SPEC = Spec("synthetic", None, "ratios 0.1 / 0.05 / 0.05 (split seed 0)", 3)
# Its full epoch (196 batches of 1024 seeds, ~250,000 sampled rows each at fanouts 25,10) and its 100,000 val and
# test nodes would take most of an hour per run on two cores; each epoch is cut to its first batches and each
# evaluation to its first batches of seeds (ids in random order, so a random subset of the split).
SYNTHETIC_LIMITS = dict(max_batches=10, eval_max_batches=5)

# Epochs: enough to reach the reference's val plateau (seed 0, measured with 60 to 300 epochs): the
# Planetoid graphs fit their train nodes (loss ~0) by epoch 15 and plateau by 20-30; Amazon's val
# accuracy plateaus after 75 (GCN) to 100 (SAGE) epochs, Coauthor's after 5-12. Longer runs only move
# which plateau epoch has the best val accuracy, and would put Coauthor CS (6,805 dense features per
# row) alone past half an hour on two cores.
# Every graph is symmetrised (Amazon's adjacency is stored one way; the Planetoid dicts miss a few reverse
# edges) and loses its self-loops (CiteSeer has 124): GCN adds its own, and PyG drops them too.
PREPARE = dict(undirected=True, drop_self_loops=True, split_seed=0)


def dataset_spec(name: str) -> Spec:
    return SYNTHETIC_SPEC if name == SYNTHETIC else SPARSE[name] if name in SPARSE else DATASETS[name]


def prepared(name: str, shared: Path, cache: Path, edge_split: tuple | None = None) -> Path:
    """The dataset directory for `name`, prepared on first use (and again if its recipe changed); with
    `edge_split`, its link prediction variant (NAME-link: those shares of the edges held out, seed 0)."""
    if name == SYNTHETIC:
        return default_dataset(progress=False, path=cache / SYNTHETIC)
    spec = dataset_spec(name)
    out = cache / (f"{name}-link" if edge_split else name)
    split = "source" if spec.split_per_class is None else \
        f"per-class {spec.split_per_class[0]},{spec.split_per_class[1]} (seed {PREPARE['split_seed']})"
    try:
        manifest = read_manifest(out)
        options = manifest["producer"]["options"]
        if (options["split"], options["undirected"], options["drop_self_loops"],
                options.get("normalize_features", False), manifest.get("edge_split", {}).get("ratios")) == (
                split, PREPARE["undirected"], PREPARE["drop_self_loops"], spec.normalize_features,
                list(edge_split) if edge_split else None):
            return out
    except (DiskgnnError, KeyError):
        pass
    source = shared / spec.source
    if not source.exists():
        raise DiskgnnError(f"{source} is absent (the real datasets live in ../shared/datasets beside the repo)")
    cache.mkdir(parents=True, exist_ok=True)
    path = prepare(source, out, split_per_class=spec.split_per_class, overwrite=True, progress=False,
                   normalize_features=spec.normalize_features, edge_split=edge_split, **PREPARE)
    if read_manifest(path)["producer"]["options"]["split"] != split:
        raise DiskgnnError(f"{source}: prepared with split {read_manifest(path)['producer']['options']['split']!r}, "
                           f"expected {split!r}")
    return path


def schedule(name: str, epochs: int | None) -> tuple[int, dict]:
    """How long `name` trains: its epochs (its own, unless `epochs`) and the TrainConfig fields that cut them."""
    return epochs or dataset_spec(name).epochs, SYNTHETIC_LIMITS if name == SYNTHETIC else {}
