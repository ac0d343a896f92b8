"""A heterogeneous graph's schema: its node types (each its own id range, feature file or none) and its
relations (source type, name, destination type), as the manifest records them (docs/format.md).

Names become file names and flag keys (`--fanouts writes=10,cites=5`), so they are kept to letters, digits,
`_` and `-`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import DiskgnnError, UsageError

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")


def checked_name(name: str, what: str, where: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise DiskgnnError(f"{where}: {what} name {name!r} is not 1-64 letters, digits, '_' or '-'")
    return name


@dataclass(frozen=True)
class NodeType:
    name: str
    count: int
    feature_dim: int = 0  # 0: the type has no features (served by embeddings or a projection)
    feature_dtype: str = "float32"

    @property
    def row_bytes(self) -> int:
        return self.feature_dim * np.dtype(self.feature_dtype).itemsize


@dataclass(frozen=True)
class Relation:
    src: str
    name: str
    dst: str
    num_edges: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.src, self.name, self.dst)


@dataclass(frozen=True)
class Schema:
    types: tuple[NodeType, ...]
    relations: tuple[Relation, ...]
    target: str
    num_classes: int
    multilabel: bool = False

    def __post_init__(self):
        names = [t.name for t in self.types]
        if len(set(names)) != len(names):
            raise DiskgnnError(f"node types {names}: a name appears twice")
        rels = [r.name for r in self.relations]
        if len(set(rels)) != len(rels):
            raise DiskgnnError(f"relations {rels}: a name appears twice")
        for r in self.relations:
            for end in (r.src, r.dst):
                if end not in names:
                    raise DiskgnnError(f"relation {r.name}: names node type {end!r}, not one of {names}")
        if self.target not in names:
            raise DiskgnnError(f"target type {self.target!r} is not one of {names}")

    def type(self, name: str) -> NodeType:
        return next(t for t in self.types if t.name == name)

    def type_index(self, name: str) -> int:
        return [t.name for t in self.types].index(name)

    def to_dict(self) -> dict:
        return {
            "node_types": [dict(name=t.name, count=t.count, feature_dim=t.feature_dim,
                                feature_dtype=t.feature_dtype) for t in self.types],
            "relations": [dict(src=r.src, name=r.name, dst=r.dst, num_edges=r.num_edges) for r in self.relations],
            "target": self.target, "num_classes": self.num_classes, "multilabel": self.multilabel,
        }

    @staticmethod
    def from_dict(m: dict) -> "Schema":
        return Schema(tuple(NodeType(**t) for t in m["node_types"]), tuple(Relation(**r) for r in m["relations"]),
                      m["target"], m["num_classes"], m["multilabel"])

    def hops(self, layers: int) -> list[set[str]]:
        """hops[h]: the node types a model's hop h reaches (hop 0: the target), so that relations whose
        destination is never reached need no sampling."""
        reach = [{self.target}]
        for _ in range(layers):
            reach.append(reach[-1] | {r.src for r in self.relations if r.dst in reach[-1]})
        return reach


def relation_fanouts(spec, schema: Schema, flag: str = "--fanouts") -> list[list[int]]:
    """Per hop, per relation (schema order), the neighbours each destination samples.

    `spec` is a list of layer entries, seeds outwards: an int (every relation; -1 all) or a string
    `writes=10,cites=5` (relations not named take 0: not followed at that hop). A comma list of ints
    ("10,5") is one int per layer.
    """
    if isinstance(spec, str):
        spec = [s for s in spec.split("/")] if "=" in spec else spec.split(",")
    names = [r.name for r in schema.relations]
    out = []
    for layer in spec:
        if isinstance(layer, (int, np.integer)) or (isinstance(layer, str) and "=" not in layer):
            try:
                f = int(layer)
            except ValueError:
                raise UsageError(f"{flag}: {layer!r} is not an integer or a list of relation=count") from None
            if f < -1 or f == 0:
                raise UsageError(f"{flag}: {f} neighbours: use a positive count, or -1 for all")
            out.append([f] * len(names))
            continue
        counts = [0] * len(names)
        for item in layer.split(","):
            name, _, value = item.partition("=")
            if name not in names:
                raise UsageError(f"{flag}: {name!r} is not a relation of this graph ({', '.join(names)})")
            try:
                counts[names.index(name)] = int(value)
            except ValueError:
                raise UsageError(f"{flag}: {item!r}: the count is not an integer") from None
            if counts[names.index(name)] < -1:
                raise UsageError(f"{flag}: {item!r}: use a count >= 0, or -1 for all")
        out.append(counts)
    if not out:
        raise UsageError(f"{flag}: no layers")
    return out
