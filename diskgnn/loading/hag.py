"""HAG for sampled blocks: the native greedy search (native/hag.h), the cost model that decides per block whether
its HAG runs, and what it saved.

A block's neighbour sums read every edge's source row once (E rows); through
a HAG they read each aggregation node's two inputs once and the rewritten
lists (E' + 2A rows). The cost model is that count: a block runs its HAG
where it saves at least defaults.HAG_MIN_SAVING of the rows (`auto`) or any
(`on`). Capacity: a quarter of the block's destinations (the paper's |V|/4).
HAG applies to sums and means (sage, gcn), not to GAT's per-edge weights.
Under `auto` a pass whose first defaults.HAG_PROBE_BATCHES batches had no
block that paid stops searching: uniform neighbour sampling on a random
graph draws almost no shared pairs (W1), and the search would cost without
return.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from .. import defaults

MODES = ("off", "auto", "on")


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
    """The HAG of a TensorBlock (native, GIL released) and its row counts: (hag, rows plain, rows with it)."""
    from .. import _native

    hag = _native.hag_search(block.indptr.numpy(), block.indices.numpy(), block.num_src,
                             max(1, block.num_dst // 4), 2, defaults.HAG_MAX_DEPTH, defaults.HAG_MAX_DEGREE)
    return hag, int(block.indices.numel()), hag.num_edges + 2 * hag.num_agg


class HagBuilder:
    """Attaches a HAG to the blocks of a pass's batches where the cost model says it pays (one thread)."""

    def __init__(self, mode: str):
        if mode not in MODES:
            raise ValueError(f"hag mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.stats = HagStats()

    def attach(self, blocks: list) -> list:
        s = self.stats
        if self.mode == "off" or s.stopped:
            return blocks
        start = time.perf_counter()
        for block in blocks:
            hag, plain, through = search(block)
            pays = through < plain * (1 - defaults.HAG_MIN_SAVING) if self.mode == "auto" else through < plain
            s.blocks += 1
            s.rows_plain += plain
            s.rows_hag += through if pays else plain
            if pays:
                block.hag = hag
                s.used += 1
        s.batches += 1
        s.search_s += time.perf_counter() - start
        if self.mode == "auto" and s.batches >= defaults.HAG_PROBE_BATCHES and not s.used:
            s.stopped = True
        return blocks
