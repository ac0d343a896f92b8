"""The built-in synthetic dataset that `python -m diskgnn.train` trains on when given no --data."""

from __future__ import annotations

from pathlib import Path

from .. import defaults
from ..errors import DiskgnnError
from .format import read_manifest
from .prepare import prepare
from .sources import open_source

# W2's graph (power-law degrees, communities, weak features) at a quarter of its size, so that the demo's
# accuracy climbs over its epochs; 1 GiB of features, more than the default host cache.
DEFAULT_SYNTHETIC = dict(structure="powerlaw", nodes=2_000_000, feat_dim=128, avg_degree=10, classes=16, seed=0)
DEFAULT_SPLITS = (0.1, 0.05, 0.05)


def default_dataset(progress: bool, path: Path | None = None) -> Path:
    """The built-in synthetic dataset at `path` (default $DISKGNN_HOME/synthetic-default), prepared on
    first use (and again if its recipe changed)."""
    path = Path(path) if path is not None else defaults.home() / "synthetic-default"
    expected = open_source("synthetic", synthetic=DEFAULT_SYNTHETIC).name
    try:
        producer = read_manifest(path)["producer"]
        if producer["source"] == expected and producer["options"]["split"].startswith(
                "ratios " + ",".join(f"{r:g}" for r in DEFAULT_SPLITS)):
            return path
    except (DiskgnnError, KeyError):
        pass
    print(f"train: preparing the built-in synthetic dataset in {path} (once)", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return prepare("synthetic", path, undirected=True, split_ratios=DEFAULT_SPLITS, memory_budget="1GiB",
                   overwrite=True, synthetic=DEFAULT_SYNTHETIC, progress=progress, report=True)
