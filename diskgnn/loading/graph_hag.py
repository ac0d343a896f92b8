"""A whole graph's HAG, searched once per dataset and kept beside it, for layer-wise full-neighbour inference.

Inference (diskgnn/nn/inference.py) runs every layer but the last over every
node, one chunk of defaults.HAG_GRAPH_CHUNK destinations at a time; the
chunk's block is the same in every layer and every evaluation, so its HAG is
searched once and stored: `<dataset>/hag/graph-c<chunk>.hag` holds one record
per chunk (loading/hag.py's encoding), `graph-c<chunk>.json` their offsets,
checksums and row counts (docs/format.md, "Graph HAG files"). The search
streams chunk by chunk in `threads` threads: memory is a few chunks' blocks,
whatever the graph's size. A dataset directory that cannot be written keeps
the file in the run's workdir instead.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .. import defaults
from ..data.files import RecordFile, RecordLog, guard_io, temp_path, write_index_tmp
from ..data.format import Dataset
from ..errors import DiskgnnError
from .blocks import full_block
from .hag import decode, encode, may_pay, model_allows, pays, search

GRAPH_HAG_FORMAT = "diskgnn-graph-hag"
GRAPH_HAG_VERSION = 1


def _params(chunk: int) -> dict:
    return {"chunk": chunk, "capacity": "destinations // 4", "max_degree": defaults.HAG_MAX_DEGREE,
            "max_depth": defaults.HAG_MAX_DEPTH}


def build(ds: Dataset, path: Path, chunk: int, threads: int) -> dict:
    """Searches every chunk's HAG and writes the file and its index (temporary names, renamed, index last)."""
    bounds = list(range(0, ds.num_nodes, chunk)) + [ds.num_nodes]
    indptr, indices = ds.indptr, ds.indices
    tmp = temp_path(path)
    meta = {"format": GRAPH_HAG_FORMAT, "format_version": GRAPH_HAG_VERSION,
            "dataset": ds.manifest["manifest_checksum"], **_params(chunk), "bounds": bounds,
            "plain_rows": [], "hag_edges": [], "agg_nodes": []}
    log = RecordLog()
    start = time.perf_counter()

    def one(c: int):
        block, _ = full_block(indptr, indices, np.arange(bounds[c], bounds[c + 1]))
        hag, plain, _ = search(block)
        counts = (plain, hag.num_edges, hag.num_agg)
        return counts, encode([hag if pays("on", *counts) else None])

    def write_all() -> None:
        with open(tmp, "wb") as f, ThreadPoolExecutor(threads, thread_name_prefix="diskgnn-graph-hag") as pool:
            # map keeps the chunks' order and holds at most `threads` blocks at once beyond the one written
            for counts, rec in pool.map(one, range(len(bounds) - 1)):
                for key, value in zip(("plain_rows", "hag_edges", "agg_nodes"), counts):
                    meta[key].append(value)
                log.write(f, rec)
            f.flush()
            os.fsync(f.fileno())

    try:
        guard_io(path, lambda: path.parent.mkdir(parents=True, exist_ok=True))
        guard_io(path, write_all)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    meta.update(search_s=time.perf_counter() - start, offsets=log.offsets, checksums=log.checksums,
                file_bytes=log.offsets[-1])
    index = write_index_tmp(path.with_suffix(".json"), meta)
    os.replace(tmp, path)
    os.replace(index, path.with_suffix(".json"))
    return meta


class GraphHag(RecordFile):
    """A dataset's stored whole-graph HAG: chunk c's (checked on read) where `mode` says it pays, else None."""

    what = "chunk"

    def __init__(self, path: Path, ds: Dataset, mode: str):
        super().__init__(path, GRAPH_HAG_FORMAT, GRAPH_HAG_VERSION)
        if self.meta["dataset"] != ds.manifest["manifest_checksum"]:
            raise DiskgnnError(f"{self.path}: searched for another version of {ds.path}")
        m = self.meta
        self.mode, self.bounds = mode, m["bounds"]
        self.used = [pays(mode, *counts) for counts in zip(m["plain_rows"], m["hag_edges"], m["agg_nodes"])]

    def __getitem__(self, c: int):
        return decode(self.record(c))[0] if self.used[c] else None

    def stats(self) -> dict:
        """What running it saves: chunks through a HAG and rows summed, per layer over the whole graph."""
        m, used = self.meta, self.used
        through = [e + 2 * a if u else p for p, e, a, u in zip(m["plain_rows"], m["hag_edges"], m["agg_nodes"], used)]
        return {"chunks": len(self), "used": sum(used), "rows_plain": sum(m["plain_rows"]), "rows_hag": sum(through),
                "agg_nodes": sum(a for a, u in zip(m["agg_nodes"], used) if u), "search_s": m["search_s"],
                "path": str(self.path)}


def graph_hag(ds: Dataset, mode: str, *, fallback_dir: Path, chunk: int | None = None,
              threads: int | None = None, say=print) -> GraphHag | None:
    """The dataset's whole-graph HAG, searched now unless a valid one of these parameters is stored (beside the
    dataset, or in `fallback_dir` where the dataset's directory cannot be written); None where, by the cost
    model, no chunk's HAG could pay (may_pay on the first chunk: nothing is searched)."""
    chunk = chunk or defaults.HAG_GRAPH_CHUNK
    if not (model_allows(mode) and may_pay(mode, full_block(ds.indptr, ds.indices,
                                                            np.arange(min(chunk, ds.num_nodes)))[0])):
        say(f"hag: --hag {mode}: by the cost model no HAG of this graph's chunks could be faster (a removed row read "
            f"saves {defaults.HAG_SAVED_ROW_COST:g} of a mean one's time, an aggregation node costs "
            f"{defaults.HAG_NODE_COST:g}): inference sums plainly, nothing searched")
        return None
    name = f"graph-c{chunk}.hag"
    candidates = [Path(ds.path) / "hag" / name, Path(fallback_dir) / "hag" / name]
    for path in candidates:
        try:
            found = GraphHag(path, ds, mode)
        except DiskgnnError:
            continue
        if {k: found.meta.get(k) for k in _params(chunk)} == _params(chunk):
            return found
    for i, path in enumerate(candidates):
        say(f"hag: searching the whole graph's HAG ({ds.num_nodes:,} nodes, chunks of {chunk:,}) into {path}")
        try:
            meta = build(ds, path, chunk, threads or os.cpu_count() or 1)
        except DiskgnnError as e:
            if i == len(candidates) - 1:
                raise
            say(f"hag: {e}; trying {candidates[i + 1]}")
            continue
        found = GraphHag(path, ds, mode)
        st = found.stats()
        say(f"hag: searched in {meta['search_s']:.1f} s: {sum(meta['agg_nodes']):,} aggregation nodes; under --hag "
            f"{mode} {st['used']} of {st['chunks']} chunks run theirs, "
            f"{1 - st['rows_hag'] / max(1, st['rows_plain']):.1%} fewer rows summed")
        return found
