"""Heterogeneous inputs, read streaming: the HGB text layout and the npy directory layout (docs/format.md).

A source says what it holds (`types`, `relations`, `target`, `num_classes`, `multilabel`) and yields it in
chunks, ids local to their type: `feature_blocks` ((type, rows) in id order per type), `edge_blocks`
((relation index, source ids, destination ids)), `label_blocks` ((first id, labels)) and `splits` (given, or
None). Everything wrong with the input is one line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...errors import DiskgnnError
from ..sources.base import NpyArray, require
from ..schema import NodeType, Relation, checked_name

HGB_FILES = ("node.dat", "link.dat", "label.dat", "info.dat")


def is_hgb(path: Path) -> bool:
    return path.is_dir() and all((path / f).is_file() for f in HGB_FILES)


def is_npy_hetero(path: Path) -> bool:
    return path.is_dir() and (path / "nodes").is_dir() and (path / "relations").is_dir()


def _hgb_type_id(value):
    """A link type's end in info.dat as a node type id (None if it is not an integer). HGB's datasets differ: ACM
    gives them as integers (0), others (DBLP, IMDB, Freebase) as strings ("0"), like the type table's keys."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _ranges_check(ids: np.ndarray, count: int, what: str, where: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= count):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise DiskgnnError(f"{where}: {what} id {bad} out of range [0, {count})")


class HgbSource:
    """HGB's text layout (node.dat, link.dat, label.dat, label.dat.test, info.dat): global ids, one contiguous
    block a type; features a comma list in node.dat's last field (or none for the whole type); label.dat holds
    train and val (drawn here, `val_share` of it, seeded), label.dat.test the test labels."""

    def __init__(self, path: Path, val_share: float = 0.2, seed: int = 0):
        self.path, self.name = path, str(path)
        self.val_share, self.seed = val_share, seed
        info_path = path / "info.dat"
        try:
            info = json.loads(info_path.read_text())
            type_names = {int(k): v for k, v in info["node.dat"]["node type"].items()}
            links = {int(k): v for k, v in info["link.dat"]["link type"].items()}
            label_types = info["label.dat"]["node type"]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise DiskgnnError(f"{info_path}: not HGB's info.dat ({type(e).__name__}: {e})") from None
        self._type_ids = sorted(type_names)
        self._offsets, counts, dims = self._scan_nodes(type_names)
        self.types = tuple(NodeType(checked_name(type_names[t], "node type", str(info_path)), counts[t], dims[t])
                           for t in self._type_ids)
        rels = []
        for k in sorted(links):
            v = links[k]
            ends = [_hgb_type_id(v.get(end)) for end in ("start", "end")]
            for end, t in zip(("start", "end"), ends):
                if t not in type_names:
                    raise DiskgnnError(f"{info_path}: link type {k} ({v.get('meaning')}) names node type "
                                       f"{v.get(end)!r}, not one of {sorted(type_names)}")
            name = str(v.get("meaning") or f"link{k}").replace("->", "-").replace(" ", "_")
            rels.append(Relation(type_names[ends[0]], checked_name(name, "relation", str(info_path)),
                                 type_names[ends[1]]))
        self.relations = tuple(rels)
        self._link_ids = sorted(links)
        if len(label_types) != 1:
            raise DiskgnnError(f"{info_path}: labels on {len(label_types)} node types; one target type is supported")
        (tkey, classes), = label_types.items()
        self._target_id = int(tkey)
        if self._target_id not in type_names:
            raise DiskgnnError(f"{info_path}: labels on node type {tkey}, which node.dat does not have")
        self.target = type_names[self._target_id]
        self.num_classes = len(classes)
        self._labels, self._given = self._read_labels()

    def _node_lines(self):
        path = self.path / "node.dat"
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 3:
                    raise DiskgnnError(f"{path}: line {lineno}: {len(parts)} tab-separated fields, expected at "
                                       "least 3 (id, name, type[, features])")
                try:
                    node = int(parts[0])
                    if len(parts) >= 4 and parts[-2].strip().lstrip("-").isdigit():
                        yield lineno, node, int(parts[-2]), parts[-1]
                    else:
                        yield lineno, node, int(parts[-1]), None
                except ValueError:
                    raise DiskgnnError(f"{path}: line {lineno}: the id or type is not an integer") from None

    def _scan_nodes(self, type_names):
        """One pass over node.dat: every type one block of consecutive ids, and its feature width."""
        path = self.path / "node.dat"
        offsets, counts, dims, order = {}, {t: 0 for t in type_names}, {}, []
        for lineno, node, t, feats in self._node_lines():
            if t not in type_names:
                raise DiskgnnError(f"{path}: line {lineno}: node type {t} is not in info.dat ({sorted(type_names)})")
            if node != sum(counts.values()):
                raise DiskgnnError(f"{path}: line {lineno}: node id {node}, expected {sum(counts.values())} "
                                   "(ids are consecutive from 0)")
            if t not in offsets:
                offsets[t] = node
                order.append(t)
                dims[t] = 0 if feats is None else feats.count(",") + 1
            elif order[-1] != t:
                raise DiskgnnError(f"{path}: line {lineno}: type {t}'s nodes are not one block of ids")
            d = 0 if feats is None else feats.count(",") + 1
            if d != dims[t]:
                raise DiskgnnError(f"{path}: line {lineno}: {d} feature values, but type {type_names[t]}'s "
                                   f"first node has {dims[t]}")
            counts[t] += 1
        if order != sorted(order):
            raise DiskgnnError(f"{path}: node types appear in the order {order}; HGB numbers them in id order")
        return offsets, counts, dims

    def feature_blocks(self, max_rows: int):
        rows, current = [], None
        names = {t: nt.name for t, nt in zip(self._type_ids, self.types)}
        for _, _, t, feats in self._node_lines():
            if feats is None:
                continue
            if (t != current or len(rows) >= max_rows) and rows:
                yield names[current], np.fromstring(",".join(rows), dtype=np.float32, sep=",").reshape(len(rows), -1)
                rows = []
            current = t
            rows.append(feats)
        if rows:
            yield names[current], np.fromstring(",".join(rows), dtype=np.float32, sep=",").reshape(len(rows), -1)

    def edge_count(self, relation: int) -> int:
        return 0  # unknown before link.dat is read: the sort splits what turns out large

    def edge_blocks(self, max_edges: int, relation: int):
        """Relation `relation`'s edges (one pass over link.dat, which mixes them)."""
        path = self.path / "link.dat"
        position = {k: i for i, k in enumerate(self._link_ids)}
        tid = {nt.name: t for t, nt in zip(self._type_ids, self.types)}
        count = {nt.name: nt.count for nt in self.types}
        with open(path) as f:
            first_line = 1
            while True:
                lines = f.readlines(max(1, max_edges) * 24)
                if not lines:
                    break
                try:
                    a = np.loadtxt(lines, dtype=np.float64, delimiter="\t", ndmin=2, usecols=(0, 1, 2))
                except ValueError as e:
                    raise DiskgnnError(f"{path}: near line {first_line}: not 'src<TAB>dst<TAB>type<TAB>weight' "
                                       f"({e})") from None
                src, dst, kind = a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2].astype(np.int64)
                for k in np.unique(kind):
                    if int(k) not in position:
                        raise DiskgnnError(f"{path}: near line {first_line}: link type {int(k)} is not in info.dat")
                    if position[int(k)] != relation:
                        continue
                    r = self.relations[position[int(k)]]
                    sel = kind == k
                    s = src[sel] - self._offsets[tid[r.src]]
                    d = dst[sel] - self._offsets[tid[r.dst]]
                    where = f"{path}: near line {first_line}: relation {r.name}"
                    _ranges_check(s, count[r.src], f"source ({r.src}; global id - {self._offsets[tid[r.src]]})",
                                  where)
                    _ranges_check(d, count[r.dst], f"destination ({r.dst}; global id - "
                                  f"{self._offsets[tid[r.dst]]})", where)
                    yield position[int(k)], s, d
                first_line += len(lines)

    def _label_file(self, name: str):
        path = self.path / name
        ids, classes = [], []
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 4:
                    raise DiskgnnError(f"{path}: line {lineno}: expected id, name, type, class")
                try:
                    node, t = int(parts[0]), int(parts[-2])
                    cls = [int(c) for c in parts[-1].split(",")]
                except ValueError:
                    raise DiskgnnError(f"{path}: line {lineno}: id, type or class is not an integer") from None
                target = self.type_of(self.target)
                local = node - self._offsets[self._target_id]
                if t != self._target_id or not 0 <= local < target.count:
                    raise DiskgnnError(f"{path}: line {lineno}: node {node} is not a {self.target} node (the target "
                                       f"type, ids {self._offsets[self._target_id]}.."
                                       f"{self._offsets[self._target_id] + target.count - 1}): labels go on the "
                                       "target type only")
                if min(cls) < 0 or max(cls) >= self.num_classes:
                    raise DiskgnnError(f"{path}: line {lineno}: class {parts[-1]} out of range "
                                       f"[0, {self.num_classes})")
                ids.append(local)
                classes.append(cls)
        return np.asarray(ids, dtype=np.int64), classes

    def _read_labels(self):
        train_ids, train_cls = self._label_file("label.dat")
        has_test = (self.path / "label.dat.test").is_file()
        test_ids, test_cls = self._label_file("label.dat.test") if has_test else (np.zeros(0, np.int64), [])
        self.multilabel = any(len(c) > 1 for c in train_cls + test_cls)
        n = self.type_of(self.target).count
        if self.multilabel:
            labels = np.full((n, self.num_classes), -1, dtype=np.int8)
            for ids, cls in ((train_ids, train_cls), (test_ids, test_cls)):
                labels[ids] = 0
                for i, c in zip(ids, cls):
                    labels[i, c] = 1
        else:
            labels = np.full(n, -1, dtype=np.int32)
            for ids, cls in ((train_ids, train_cls), (test_ids, test_cls)):
                labels[ids] = [c[0] for c in cls]
        order = np.random.default_rng(self.seed).permutation(train_ids.size)
        n_val = int(round(self.val_share * train_ids.size))
        given = {"train": np.sort(train_ids[order[n_val:]]), "val": np.sort(train_ids[order[:n_val]]),
                 "test": np.sort(test_ids)}
        return labels, given

    def type_of(self, name: str) -> NodeType:
        return next(t for t in self.types if t.name == name)

    def label_blocks(self, max_rows: int):
        for first in range(0, self._labels.shape[0], max_rows):
            yield first, self._labels[first:first + max_rows]

    def splits(self):
        return self._given


class NpyDirSource:
    """The npy directory layout::

        DIR/nodes/<type>/features.npy      [count, dim] (optional: a type without it has no features)
        DIR/nodes/<type>/num_nodes.txt     the count, where the type has no features.npy
        DIR/nodes/<target>/labels.npy      int [count] (-1: unlabeled), or multi-label 0/1 [count, classes]
        DIR/nodes/<target>/{train,val,test}_idx.npy   optional: the split (else drawn by ratios)
        DIR/relations/<src>__<name>__<dst>/edges.npy  int [E, 2] (source, destination), ids local to each type

    The target type is the one with labels.npy.
    """

    def __init__(self, path: Path):
        self.path, self.name = path, str(path)
        types, self._features = [], {}
        for d in sorted(p for p in (path / "nodes").iterdir() if p.is_dir()):
            name = checked_name(d.name, "node type", str(d))
            feats = d / "features.npy"
            if feats.is_file():
                arr = NpyArray(feats)
                if len(arr.shape) != 2:
                    raise DiskgnnError(f"{feats}: shape {arr.shape}, expected [num_nodes, dim]")
                self._features[name] = arr
                count, dim, dtype = arr.shape[0], arr.shape[1], arr.dtype.name
                counted = d / "num_nodes.txt"
                if counted.is_file() and int(counted.read_text().strip() or -1) != count:
                    raise DiskgnnError(f"{counted}: says {counted.read_text().strip()} nodes, features.npy has "
                                       f"{count} rows")
            else:
                counted = require(d / "num_nodes.txt", f"node type {name} (it has no features.npy)")
                try:
                    count = int(counted.read_text().strip())
                except ValueError:
                    raise DiskgnnError(f"{counted}: not an integer") from None
                dim, dtype = 0, "float32"
            types.append(NodeType(name, count, dim, dtype if dtype in ("float32", "float16") else "float32"))
        if not types:
            raise DiskgnnError(f"{path / 'nodes'}: no node type folders")
        self.types = tuple(types)
        names = [t.name for t in types]
        rels, self._edges = [], []
        for d in sorted(p for p in (path / "relations").iterdir() if p.is_dir()):
            parts = d.name.split("__")
            if len(parts) != 3:
                raise DiskgnnError(f"{d}: relation folders are named <src>__<name>__<dst>")
            for end in (parts[0], parts[2]):
                if end not in names:
                    raise DiskgnnError(f"{d}: names node type {end!r}, not one of {names}")
            rels.append(Relation(parts[0], checked_name(parts[1], "relation", str(d)), parts[2]))
            edges = NpyArray(require(d / "edges.npy", f"relation {parts[1]}"))
            if len(edges.shape) != 2 or edges.shape[1] != 2 or not np.issubdtype(edges.dtype, np.integer):
                raise DiskgnnError(f"{d / 'edges.npy'}: shape {edges.shape} {edges.dtype}, expected integer [E, 2]")
            self._edges.append(edges)
        if not rels:
            raise DiskgnnError(f"{path / 'relations'}: no relation folders")
        self.relations = tuple(rels)
        labelled = [t for t in names if (path / "nodes" / t / "labels.npy").is_file()]
        if len(labelled) != 1:
            raise DiskgnnError(f"{path / 'nodes'}: labels.npy in {len(labelled)} node types ({labelled}); exactly "
                               "one (the target) has labels")
        self.target = labelled[0]
        self._labels = NpyArray(path / "nodes" / self.target / "labels.npy")
        count = self.type_of(self.target).count
        if self._labels.shape[0] != count or len(self._labels.shape) not in (1, 2):
            raise DiskgnnError(f"{self._labels.path}: shape {self._labels.shape}, expected [{count}] or "
                               f"[{count}, classes]")
        self.multilabel = len(self._labels.shape) == 2
        self.num_classes = int(self._labels.shape[1]) if self.multilabel else 0
        if not self.multilabel:  # the class count: one streaming pass (checked again as the labels are written)
            for _, block in self.label_blocks(1 << 20):
                self.num_classes = max(self.num_classes, int(block.max(initial=-1)) + 1)
        for name in names:
            if name != self.target and any((path / "nodes" / name / f"{s}_idx.npy").exists()
                                           for s in ("train", "val", "test")):
                raise DiskgnnError(f"{path / 'nodes' / name}: a split on a node type without labels")

    def type_of(self, name: str) -> NodeType:
        return next(t for t in self.types if t.name == name)

    def feature_blocks(self, max_rows: int):
        for name, arr in self._features.items():
            for block in arr.rows(max_rows):
                yield name, block

    def edge_count(self, relation: int) -> int:
        return self._edges[relation].shape[0]

    def edge_blocks(self, max_edges: int, relation: int):
        r, arr = self.relations[relation], self._edges[relation]
        for e in arr.rows(max_edges):
            e = e.astype(np.int64)
            where = f"{arr.path}: relation {r.name}"
            _ranges_check(e[:, 0], self.type_of(r.src).count, f"source ({r.src})", where)
            _ranges_check(e[:, 1], self.type_of(r.dst).count, f"destination ({r.dst})", where)
            yield relation, e[:, 0], e[:, 1]

    def label_blocks(self, max_rows: int):
        first = 0
        for block in self._labels.rows(max_rows):
            if self.multilabel and not np.isin(block, (-1, 0, 1)).all():
                raise DiskgnnError(f"{self._labels.path}: multi-label rows hold 0 or 1 (a row of -1: unlabeled)")
            if not self.multilabel and block.size and block.min() < -1:
                raise DiskgnnError(f"{self._labels.path}: label {int(block.min())} (use -1 for unlabeled nodes)")
            yield first, block.astype(np.int8 if self.multilabel else np.int32)
            first += block.shape[0]

    def splits(self):
        d = self.path / "nodes" / self.target
        present = [(d / f"{s}_idx.npy").is_file() for s in ("train", "val", "test")]
        if not any(present):
            return None
        if not all(present):
            raise DiskgnnError(f"{d}: has some of train_idx.npy, val_idx.npy, test_idx.npy; give all three or none")
        return {s: NpyArray(d / f"{s}_idx.npy").load().astype(np.int64) for s in ("train", "val", "test")}


def open_hetero_source(path, fmt: str, val_share: float = 0.2, seed: int = 0):
    path = Path(path)
    if fmt == "hgb" or (fmt == "auto" and is_hgb(path)):
        for f in HGB_FILES:
            require(path / f, "HGB layout")
        return HgbSource(path, val_share, seed)
    if fmt in ("npy-hetero", "auto") and is_npy_hetero(path):
        return NpyDirSource(path)
    raise DiskgnnError(f"{path}: neither HGB's text layout ({', '.join(HGB_FILES)}) nor an npy hetero directory "
                       "(nodes/<type>/, relations/<src>__<name>__<dst>/)")
