"""A PyTorch Geometric `Data` object held by the caller (`diskgnn.prepare(data, out)`).

x [N, F], y [N] (or [N, 1]; -1 or absent rows unlabeled), edge_index [2, E]
(src -> dst: dst aggregates src, PyG's flow), and train_mask/val_mask/
test_mask (or train_idx/val_idx/test_idx) where given. Tensors on any
device; each chunk is converted on its own, so prepare's memory stays the
chunks' whatever the Data's size (what the Data itself holds is the caller's).
"""

from __future__ import annotations

import numpy as np

from ...errors import DiskgnnError
from .base import Source

SPLITS = ("train", "val", "test")


def is_pyg_data(obj) -> bool:
    return hasattr(obj, "edge_index") and hasattr(obj, "x") and not isinstance(obj, (str, bytes))


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


class PygSource(Source):
    def __init__(self, data):
        name = f"{type(data).__name__} (PyG)"
        if getattr(data, "x", None) is None or data.x.dim() != 2:
            raise DiskgnnError(f"{name}: needs node features x of shape [num_nodes, num_features]")
        if getattr(data, "edge_index", None) is None or data.edge_index.dim() != 2 or data.edge_index.shape[0] != 2:
            raise DiskgnnError(f"{name}: needs edge_index of shape [2, num_edges]")
        y = getattr(data, "y", None)
        n, d = int(data.x.shape[0]), int(data.x.shape[1])
        if y is None:
            raise DiskgnnError(f"{name}: needs labels y (diskgnn trains node classifiers)")
        if y.dim() == 2 and y.shape[1] == 1:
            y = y.view(-1)
        if y.dim() != 1 or y.shape[0] != n:
            raise DiskgnnError(f"{name}: y has shape {tuple(y.shape)}; expected [{n}] class ids (multi-label "
                               "targets are not supported)")
        if y.is_floating_point():
            raise DiskgnnError(f"{name}: y is {y.dtype}; expected integer class ids")
        super().__init__(name=name, num_nodes=n, feature_dim=d,
                         feature_dtype=np.dtype(str(data.x.dtype).replace("torch.", "")),
                         edge_count_hint=int(data.edge_index.shape[1]))
        self.data, self.y = data, y

    def edges(self, max_edges):
        ei = self.data.edge_index
        for s in range(0, ei.shape[1], max(1, max_edges)):
            block = _numpy(ei[:, s: s + max_edges]).astype(np.int64, copy=False)
            yield block[0], block[1]

    def features(self, max_rows):
        x = self.data.x
        for s in range(0, self.num_nodes, max(1, max_rows)):
            yield _numpy(x[s: s + max_rows])

    def labels(self, max_rows):
        for s in range(0, self.num_nodes, max(1, max_rows)):
            yield _numpy(self.y[s: s + max_rows]).astype(np.int64)

    def splits(self):
        out = {}
        for split in SPLITS:
            mask, idx = getattr(self.data, f"{split}_mask", None), getattr(self.data, f"{split}_idx", None)
            if mask is not None:
                if mask.dim() != 1:
                    raise DiskgnnError(f"{self.name}: {split}_mask has shape {tuple(mask.shape)}; expected "
                                       f"[{self.num_nodes}] (one split; pass data with one column chosen)")
                out[split] = np.flatnonzero(_numpy(mask)).astype(np.int64)
            elif idx is not None:
                out[split] = _numpy(idx).astype(np.int64).reshape(-1)
        if not out:
            return None
        missing = [s for s in SPLITS if s not in out]
        if missing:
            raise DiskgnnError(f"{self.name}: has {', '.join(f'{s}_mask' for s in out)} but not "
                               f"{', '.join(f'{s}_mask' for s in missing)}: give all three or none (then a split "
                               "is drawn)")
        return out
