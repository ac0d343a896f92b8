"""An OGB node-property-prediction directory as downloaded, without the ogb package.

CSV layout (products, arxiv, proteins): raw/edge.csv.gz ("src,dst" per line),
raw/node-feat.csv.gz, raw/node-label.csv.gz, raw/num-node-list.csv.gz,
raw/num-edge-list.csv.gz; binary layout (papers100M): raw/data.npz
(edge_index 2 x E, node_feat N x D, num_nodes_list) and raw/node-label.npz
(node_label, NaN = unlabeled). Splits: split/<name>/{train,valid,test}.csv.gz.
Edges are stored once per pair in OGB; pass --undirected as OGB's loaders do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import DiskgnnError
from .base import Source, npz_member, open_text, require, text_rows
from .npy import edge_index_chunks


def _single_int(path: Path) -> int:
    with open_text(path) as f:
        values = [int(float(x)) for x in f.read().replace(",", " ").split()]
    if not values:
        raise DiskgnnError(f"{path}: empty")
    return sum(values)


def _labels_from_float(block: np.ndarray) -> np.ndarray:
    block = np.asarray(block, dtype=np.float64).reshape(-1)
    return np.where(np.isnan(block), -1, block).astype(np.int64)


class OgbSource(Source):
    def __init__(self, directory: Path, split_name: str | None = None):
        directory = Path(directory)
        self.dir = directory
        raw = directory / "raw"
        self.binary = (raw / "data.npz").exists()
        if self.binary:
            self.data = raw / "data.npz"
            self.edge_index = npz_member(self.data, "edge_index")
            self.feat = npz_member(self.data, "node_feat")
            self.label = npz_member(require(raw / "node-label.npz", "labels of a binary OGB dataset"), "node_label")
            n, d = self.feat.shape
            feat_dtype = self.feat.dtype
            e = self.edge_index.shape[1]
        else:
            require(raw / "edge.csv.gz", "OGB edge list (or raw/data.npz for papers100M)")
            n = _single_int(require(raw / "num-node-list.csv.gz", "OGB node count"))
            e = _single_int(raw / "num-edge-list.csv.gz") if (raw / "num-edge-list.csv.gz").exists() else 0
            with open_text(require(raw / "node-feat.csv.gz", "OGB node features")) as f:
                d = len(f.readline().split(","))
            feat_dtype = np.dtype(np.float32)
            require(raw / "node-label.csv.gz", "OGB node labels")
        self.split_dir = self._pick_split(directory / "split", split_name)
        super().__init__(name=str(directory), num_nodes=n, feature_dim=d, feature_dtype=feat_dtype,
                         edge_count_hint=e)

    @staticmethod
    def _pick_split(split_root: Path, name: str | None) -> Path | None:
        if name is not None:
            return require(split_root / name, f"split {name!r}")
        names = sorted(p.name for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
        if len(names) > 1:
            raise DiskgnnError(f"{split_root}: several splits {names}; choose one with --ogb-split")
        return split_root / names[0] if names else None

    def edges(self, max_edges):
        if self.binary:
            yield from edge_index_chunks(self.edge_index, max_edges)
            return
        for block in text_rows(self.dir / "raw" / "edge.csv.gz", 2, np.int64, max_edges):
            yield block[:, 0], block[:, 1]

    def features(self, max_rows):
        if self.binary:
            yield from self.feat.rows(max_rows)
            return
        yield from text_rows(self.dir / "raw" / "node-feat.csv.gz", self.feature_dim, np.float32, max_rows)

    def labels(self, max_rows):
        if self.binary:
            for block in self.label.rows(max_rows):
                yield _labels_from_float(block)
            return
        for block in text_rows(self.dir / "raw" / "node-label.csv.gz", None, np.float64, max_rows):
            if block.shape[1] != 1:
                raise DiskgnnError(f"{self.dir / 'raw' / 'node-label.csv.gz'}: multi-column labels "
                                   f"(multi-task datasets such as ogbn-proteins) are not supported")
            yield _labels_from_float(block)

    def splits(self):
        if self.split_dir is None:
            return None
        out = {}
        for name, fname in (("train", "train"), ("val", "valid"), ("test", "test")):
            path = require(self.split_dir / f"{fname}.csv.gz", f"{name} split")
            out[name] = np.concatenate([b[:, 0] for b in text_rows(path, 1, np.int64, 1 << 20)]
                                       or [np.empty(0, dtype=np.int64)])
        return out
