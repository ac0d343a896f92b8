"""HAG for sampled blocks and whole graphs: the native greedy search (native/hag.h), the cost model that decides
per block whether its HAG runs, the bytes a HAG is stored as, and what it saved.

A block's neighbour sums read every edge's source row once (E rows). Through
a HAG they read the rewritten lists (E' entries, some naming aggregation
nodes) and compute each of its A aggregation nodes once. The cost model, in
units of one mean row read of the plain sum:

    plain = E        through the HAG = E - s * (E - E') + a * A

s (defaults.HAG_SAVED_ROW_COST) is the time saved per removed read and a
(defaults.HAG_NODE_COST) what a node costs, both measured by bench.hag on
this machine: s = -0.18, a = 5.75. s is not 1, and not even positive: the
reads a HAG removes are of the sources shared most, rows still in cache,
while the aggregation rows that replace them are colder. `auto` runs a HAG where it is
predicted at least defaults.HAG_MIN_SAVING cheaper, `on` wherever it sums
fewer rows (E' + 2A < E). Capacity: a quarter of the block's destinations
(the paper's |V|/4). HAG applies to sums and means (sage, gcn), not to GAT's
per-edge weights.

`auto` decides before it searches, from the cost model's inputs: an
aggregation node shared by k destinations changes the time by a - s * k, so
no HAG of a block pays unless some pair of its sources is shared by more
than a / s destinations (never, where s <= 0, as measured here). `may_pay`
bounds the saving from the pair counts of a sample of the block's
destinations; a block that cannot pay is not searched, a run whose first
batch's blocks cannot is not searched again, and a pass whose first
defaults.HAG_PROBE_BATCHES batches had no block that paid stops searching.

Offline (diskgnn/offline/sample.py) each batch's HAGs are searched as it is
sampled and stored after its record; online they are searched in the
pipeline's sample stage. Stored form (docs/format.md): little-endian int64,
a header [blocks, then per block: present, num_src, frozen, agg nodes,
levels, destinations, list entries], then each present block's inputs,
level bounds, indptr and indices.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

from .. import defaults

MODES = ("off", "auto", "on")
_FIELDS = 7  # header entries per block


@dataclass
class HagStats:
    batches: int = 0  # batches whose blocks were searched
    blocks: int = 0  # blocks searched
    used: int = 0  # blocks that ran their HAG
    rows_plain: int = 0  # rows the searched blocks' sums read without HAG
    rows_hag: int = 0  # rows they read as they ran (HAG where used)
    search_s: float = 0.0
    stopped: bool = False  # auto stopped searching after the probe

    def add(self, other: "HagStats") -> None:
        for key in ("batches", "blocks", "used", "rows_plain", "rows_hag", "search_s"):
            setattr(self, key, getattr(self, key) + getattr(other, key))
        self.stopped = self.stopped or other.stopped

    def to_dict(self) -> dict:
        return {**asdict(self), "saving": 1 - self.rows_hag / self.rows_plain if self.rows_plain else 0.0}


def search(block):
    """The HAG of a block (TensorBlock or a sampled Block; native, GIL released) and its row counts:
    (hag, rows plain, rows with it)."""
    from .. import _native

    indptr, indices = (np.asarray(t, dtype=np.int64) for t in (block.indptr, block.indices))
    hag = _native.hag_search(indptr, indices, block.num_src, max(1, block.num_dst // 4), 2, defaults.HAG_MAX_DEPTH,
                             defaults.HAG_MAX_DEGREE)
    return hag, int(indices.size), hag.num_edges + 2 * hag.num_agg


def shared_by(block, sample: int = 512, seed: int = 0) -> float:
    """An estimate of the most destinations any pair of the block's sources is shared by: the most among a sample
    of up to `sample` destinations with 2 to HAG_MAX_DEGREE sources (the search's), scaled to all of them."""
    indptr = np.asarray(block.indptr, dtype=np.int64)
    indices = np.asarray(block.indices, dtype=np.int64)
    deg = np.diff(indptr)
    eligible = np.flatnonzero((deg >= 2) & (deg <= defaults.HAG_MAX_DEGREE))
    if eligible.size == 0:
        return 0.0
    picked = eligible if eligible.size <= sample else np.random.default_rng(seed).choice(eligible, sample, False)
    keys = []
    for d in picked.tolist():
        src = np.unique(indices[indptr[d]: indptr[d + 1]])
        i, j = np.triu_indices(src.size, 1)
        keys.append(src[i] * block.num_src + src[j])
    _, counts = np.unique(np.concatenate(keys), return_counts=True)
    return float(counts.max()) * eligible.size / picked.size if counts.size else 0.0


def model_allows(mode: str) -> bool:
    """Whether any HAG could run under `mode` at all: not under `auto` where a removed read saves nothing (s <= 0)
    and every aggregation node only adds time."""
    return mode == "on" or (mode == "auto" and defaults.HAG_SAVED_ROW_COST > 0)


def may_pay(mode: str, block) -> bool:
    """Whether any HAG of `block` could run under `mode`, before searching it: `on` wherever it may sum fewer rows;
    `auto` where the best case, a quarter of its destinations as aggregation nodes each shared by as many
    destinations as the most shared pair (shared_by), is predicted at least HAG_MIN_SAVING faster."""
    if not model_allows(mode):
        return False
    if mode == "on":
        return True
    s, a = defaults.HAG_SAVED_ROW_COST, defaults.HAG_NODE_COST
    best = max(1, block.num_dst // 4) * (s * shared_by(block) - a)
    return best >= defaults.HAG_MIN_SAVING * int(np.asarray(block.indptr)[-1])


def predicted_cost(plain: int, edges: int, agg: int) -> float:
    """The cost model's time through a HAG of `edges` list entries and `agg` aggregation nodes, in mean plain row
    reads (the plain sum: `plain`)."""
    return plain - defaults.HAG_SAVED_ROW_COST * (plain - edges) + defaults.HAG_NODE_COST * agg


def pays(mode: str, plain: int, edges: int, agg: int) -> bool:
    """Whether a block runs its HAG: `on` wherever it sums fewer rows, `auto` where the model says it is faster."""
    if mode == "on":
        return edges + 2 * agg < plain
    return mode == "auto" and predicted_cost(plain, edges, agg) < plain * (1 - defaults.HAG_MIN_SAVING)


def encode(hags: list) -> bytes:
    """A batch's HAGs (None where a block runs plain) as stored after its sample record."""
    head = [len(hags)]
    arrays = []
    for h in hags:
        if h is None:
            head += [0] * _FIELDS
            continue
        parts = (h.inputs, h.level_bounds, h.indptr, h.indices)
        head += [1, h.num_src, h.frozen, h.num_agg, len(h.level_bounds) - 1, len(h.indptr) - 1, h.num_edges]
        arrays += parts
    return b"".join(np.asarray(a, dtype="<i8").tobytes() for a in [np.asarray(head, dtype="<i8"), *arrays])


def decode(buf) -> list:
    """encode's bytes back: one HAG (or None) per block, each checked (native hag_check) before use."""
    from .. import _native

    words = np.frombuffer(buf, dtype="<i8")
    if words.size < 1 or words.size < 1 + _FIELDS * int(words[0]):
        raise ValueError("HAG record: header truncated")
    n = int(words[0])
    head = words[1: 1 + _FIELDS * n].reshape(n, _FIELDS)
    off, hags = 1 + _FIELDS * n, []
    for present, num_src, frozen, agg, levels, dst, edges in head.tolist():
        if not present:
            hags.append(None)
            continue
        sizes = (2 * agg, levels + 1, dst + 1, edges)
        if min(sizes) < 0 or off + sum(sizes) > words.size:
            raise ValueError("HAG record: arrays truncated")
        parts = []
        for size in sizes:
            parts.append(words[off: off + size])
            off += size
        hags.append(_native.hag_from_arrays(num_src, frozen, *parts))
    if off != words.size:
        raise ValueError("HAG record: trailing bytes")
    return hags


class HagBuilder:
    """Searches blocks' HAGs and keeps the ones the cost model says pay: attached to a pass's blocks (online) or
    encoded beside a batch's sample record (offline, from the sampling threads)."""

    def __init__(self, mode: str):
        if mode not in MODES:
            raise ValueError(f"hag mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.stats = HagStats()
        self._lock = threading.Lock()
        self._layers = None  # per block of a batch, whether it may pay (may_pay on the first batch's blocks)

    @property
    def active(self) -> bool:
        return self.mode != "off" and not self.stats.stopped

    def choose(self, blocks: list) -> list:
        """Each block's HAG where it pays, else None; counted in `stats`."""
        if not self.active:
            return [None] * len(blocks)
        with self._lock:
            if self._layers is None:
                self._layers = [b is not None and may_pay(self.mode, b) for b in blocks]
                if not any(self._layers):
                    self.stats.stopped = True
            layers = self._layers
        s = HagStats(batches=1)
        start = time.perf_counter()
        chosen = []
        for block, may in zip(blocks, layers):
            hag, use = None, False
            if may:
                hag, plain, through = search(block)
                use = pays(self.mode, plain, hag.num_edges, hag.num_agg)
                s.blocks += 1
                s.used += use
                s.rows_plain += plain
                s.rows_hag += through if use else plain
            chosen.append(hag if use else None)
        s.search_s = time.perf_counter() - start
        with self._lock:
            self.stats.add(s)
            if self.mode == "auto" and self.stats.batches >= defaults.HAG_PROBE_BATCHES and not self.stats.used:
                self.stats.stopped = True
        return chosen

    def attach(self, blocks: list) -> list:
        """Each of a MiniBatch's blocks (the model's order) given its HAG where it pays."""
        set_hags(blocks, self.choose(record_order(blocks[::-1])))
        return blocks

    def encode(self, batch) -> bytes:
        """A sampled batch's HAGs (in its blocks' order) as stored after its record."""
        return encode(self.choose(record_order(batch.hops)))


def record_order(hops: list) -> list:
    """A batch's blocks in the order of its stored HAGs: hop 0 first, a typed hop's every relation in turn (None
    where the hop does not follow it)."""
    return [b for hop in hops for b in (hop if isinstance(hop, list) else [hop])]


def set_hags(blocks: list, hags: list) -> None:
    """A MiniBatch's blocks (the model's order, a typed hop's a list per relation) given `hags` (record order)."""
    for block, hag in zip(record_order(blocks[::-1]), hags):
        if block is not None:
            block.hag = hag
