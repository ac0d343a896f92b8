"""Train/val/test node splits: checking given ones, drawing new ones, streaming.

Drawn splits use only labeled nodes (label >= 0) and are deterministic for a
seed: every block of BLOCK nodes draws from its own random stream.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from ..errors import DiskgnnError
from .format import SPLITS

BLOCK = 1 << 16
LabelBlocks = Callable[[], Iterator[tuple[int, np.ndarray]]]  # yields (first node id, labels)


def _priority(seed: int, block: int, n: int) -> np.ndarray:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 7, block]))).random(n)


def check_given(splits: dict[str, np.ndarray], num_nodes: int, label_at: Callable, source: str) -> None:
    """Ids in range, unique, disjoint across splits, labeled; train not empty."""
    seen = 0
    for name in SPLITS:
        ids = splits[name]
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise DiskgnnError(f"{source}: {name} split has node id {bad}, out of range [0, {num_nodes})")
        if np.unique(ids).size != ids.size:
            raise DiskgnnError(f"{source}: {name} split lists a node more than once")
        if ids.size and (label_at(ids) < 0).any():
            raise DiskgnnError(f"{source}: {name} split contains unlabeled nodes")
        seen += ids.size
    if np.unique(np.concatenate([splits[s] for s in SPLITS])).size != seen:
        raise DiskgnnError(f"{source}: train, val and test splits overlap")
    if splits["train"].size == 0:
        raise DiskgnnError(f"{source}: no train nodes")


def ratio_split(label_blocks: LabelBlocks, ratios: tuple[float, float, float], seed: int,
                writers: dict) -> None:
    """Each labeled node goes to train/val/test with the given probabilities."""
    t, v = ratios[0], ratios[0] + ratios[1]
    for first, labels in label_blocks():
        p = _priority(seed, first // BLOCK, labels.size)
        ids = np.arange(first, first + labels.size, dtype=np.int64)
        labeled = labels >= 0
        writers["train"].write(ids[labeled & (p < t)])
        writers["val"].write(ids[labeled & (p >= t) & (p < v)])
        writers["test"].write(ids[labeled & (p >= v) & (p < v + ratios[2])])


def per_class_split(label_blocks: LabelBlocks, num_classes: int, per_class: tuple[int, int], seed: int,
                    writers: dict) -> list[int]:
    """`per_class[0]` train and `per_class[1]` val nodes drawn from each class; the rest test.

    Returns the classes that had fewer nodes than asked for.
    """
    want = per_class[0] + per_class[1]
    best_p = np.full((num_classes, want), np.inf)
    best_id = np.full((num_classes, want), -1, dtype=np.int64)
    for first, labels in label_blocks():
        p = _priority(seed, first // BLOCK, labels.size)
        for c in np.unique(labels[labels >= 0]):
            mine = np.flatnonzero(labels == c)
            cand_p = np.concatenate([best_p[c], p[mine]])
            cand_id = np.concatenate([best_id[c], first + mine])
            keep = np.argsort(cand_p, kind="stable")[:want]
            best_p[c], best_id[c] = cand_p[keep], cand_id[keep]
    short = [int(c) for c in range(num_classes) if (best_id[c] < 0).any()]
    train = best_id[:, : per_class[0]].ravel()
    val = best_id[:, per_class[0]:].ravel()
    chosen = np.sort(np.concatenate([train, val]))
    writers["train"].write(np.sort(train[train >= 0]))
    writers["val"].write(np.sort(val[val >= 0]))
    for first, labels in label_blocks():
        ids = np.arange(first, first + labels.size, dtype=np.int64)
        rest = ids[(labels >= 0) & ~np.isin(ids, chosen)]
        writers["test"].write(rest)
    return short
