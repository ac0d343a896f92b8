"""Layer-wise full-neighbour inference: every layer over every node, one chunk of nodes at a time.

Sampled evaluation estimates each node's output from a few neighbours;
layer-wise inference computes it exactly, with all neighbours, at the cost of
one pass per layer over the graph. Layer l's outputs for all nodes go to a
memory-mapped file in the workdir before layer l + 1 reads them, so memory
stays at one chunk's rows whatever the graph's size; the last layer asked for
is computed for the requested nodes only. A chunk holds at most `chunk_nodes`
nodes and (where given) `chunk_edges` in-edges, so a budget bounds it on a
power-law graph too (a node with more in-edges is a chunk alone). The first
layer reads the stored rows of the run's FeatureSource (a quantized variant's
codes, decoded on the device). A layer's file is written as diskgnn.infer's
output is (data/resumable.py): kept with its checksum and the model's, so an
interrupted run takes a finished layer up again, and a layer cut midway goes
on from its last recorded chunk. With a stored whole-graph HAG
(loading/graph_hag.py) the layers over every node take its chunks (their size
is the HAG's) and sum through each chunk's HAG where it pays, on the CPU. Given a `memory` to tile in, a mean
layer (SAGE, GCN) whose gathers would read more than passes over its input takes the tiled pass instead
(nn/tiled_sum.py): its neighbour sums a block of destinations at a time, the input read forwards. A layer
narrower than its input runs on its parts (its own rows' share and its messages, `parts-<i>.npy`), which the
layer below writes in place of its outputs: the wide hidden layer between them is never stored. For a few
targets (an evaluation's seeds, `--nodes test`) each layer below runs over only the nodes the targets' outputs
reach down to (`receptive_fields`), its file holding their rows alone, while that is under half the graph.
"""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np
import torch
import xxhash

from .. import defaults
from ..arrays import read_rows
from ..data.features import FeatureSource, feature_source
from ..data.format import Dataset, random_map
from ..data.resumable import Output, finished, ids_checksum, side
from ..loading.blocks import full_block, neighbour_lists
from .tiled_sum import every_node, in_degrees, is_mean_layer, mean_layer_outputs, passes, positions, projects_first

PAGE = 4096  # what a gathered row costs at least: the page its fault reads
# what a page read by a fault at random costs in bytes read in order: on this project's VM 15.3 k faults a second
# (63 MB/s of pages, MADV_RANDOM) against 438 MB/s through the same map in order
RANDOM_PAGE_COST = 8


def _as_is(rows):
    """The decoder of float32 model values (layer outputs, parts): none."""
    return rows


def model_checksum(model) -> str:
    """A hash of the model's weights, in state_dict order: which model a kept layer file came from."""
    h = xxhash.xxh3_128()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def chunk_bounds(indptr: np.ndarray, chunk_nodes: int, chunk_edges: int | None = None) -> list[int]:
    """Node ranges [b[i], b[i+1]) of at most `chunk_nodes` nodes and, where given, `chunk_edges` in-edges
    (a node with more is a range alone)."""
    n = len(indptr) - 1
    if chunk_edges is None:
        return list(range(0, n, chunk_nodes)) + [n]
    bounds, lo = [0], 0
    while lo < n:
        # the most nodes from lo whose in-edges fit, at least one
        fit = int(np.searchsorted(indptr, indptr[lo] + chunk_edges, side="right")) - 1 - lo
        lo = min(n, lo + max(1, min(chunk_nodes, fit)))
        bounds.append(lo)
    return bounds


def receptive_fields(indptr: np.ndarray, indices: np.ndarray, targets: np.ndarray, k: int,
                     most: int) -> list[np.ndarray | None]:
    """sets[j] for j = 0 .. k, sorted: the nodes whose layer j - 1 outputs (j = 0: stored rows) the outputs of
    layer k - 1 for `targets` depend on: sets[k] the targets, sets[j] sets[j + 1] and their in-neighbours. None
    for a set of more than `most` nodes and every set below it: every node."""
    sets = [None if targets.size > most else np.unique(targets)]
    for _ in range(k):
        above = sets[-1]
        if above is None or above.size > most:
            sets.append(None)
            continue
        reached = np.zeros(len(indptr) - 1, dtype=bool)
        reached[above] = True
        for a in range(0, above.size, 1 << 18):  # a slice's in-edges at a time
            reached[neighbour_lists(indptr, indices, above[a: a + (1 << 18)])[1]] = True
        below = np.flatnonzero(reached)
        sets.append(None if below.size > most else below)
    return sets[::-1]


class LayerWise:
    """A model's layers over a dataset's graph, every neighbour, a layer at a time (see the module's docstring).
    `workdir` holds the layers' files; `features`: the first layer's stored rows (default: features.bin);
    `hag`: the dataset's GraphHag (its kernels are the CPU's); `memory`: bytes a tiled pass may hold (None: no
    tiled passes)."""

    def __init__(self, model, ds: Dataset, workdir, *, device: str = "cpu", features: FeatureSource | None = None,
                 hag=None, chunk_nodes: int = defaults.INFERENCE_CHUNK, chunk_edges: int | None = None,
                 memory: int | None = None):
        self.model, self.ds, self.device, self.hag, self.memory = model, ds, device, hag, memory
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.source = features or feature_source(ds)
        self.chunk_nodes, self.chunk_edges = chunk_nodes, chunk_edges
        self.bounds = hag.bounds if hag is not None else chunk_bounds(ds.indptr, chunk_nodes, chunk_edges)
        self.identity = {"model": model_checksum(model), "features": self.source.name,
                         "dataset": ds.manifest.get("manifest_checksum"), "hag": hag is not None}
        self.kept: list[Path] = []
        self._gather_map: tuple = (None, None)  # (rows, their map for gathers) of the rows gathered last

    def _layer(self, i: int, block, h, decode, src, index) -> torch.Tensor:
        if self._gather_map[0] is not h:  # gathers read a page a row, not read_ahead_kb around each (data/format.py)
            self._gather_map = (h, random_map(h))
        rows = read_rows(self._gather_map[1], positions(index, src))
        return self.model.layer(i, block.to(self.device), decode(rows.to(self.device))).float().cpu()

    def _width(self, i: int) -> int:
        """Columns of layer i's input, decoded."""
        return self.source.dim if i == 0 else self.model.layers[i - 1].d_out

    def _plan(self, i: int, targets: np.ndarray | None, grid: int, index: np.ndarray | None = None) -> str | None:
        """How layer i runs over sorted unique `targets` (None: every node) reading its input's rows of the nodes
        `index` (None: every node's): "parts" (tiled over its parts), "tiled" (over its input) or None (gathering
        each chunk's neighbour rows): tiled where it is a mean layer, there is a memory to tile in and no HAG,
        and its passes cost less than the targets' in-edges gathered, a page each at random."""
        layer, n = self.model.layers[i], self.ds.num_nodes
        targets = every_node(n) if targets is None else targets
        if self.memory is None or self.hag is not None or not is_mean_layer(layer) or targets.size == 0:
            return None
        indptr, width = self.ds.indptr, self._width(i)
        degrees = in_degrees(indptr, targets)
        row_bytes = self.source.row_bytes if i == 0 else 4 * width
        rows_in = n if index is None else index.size
        gathered = int(degrees.sum()) * max(row_bytes, PAGE) * RANDOM_PAGE_COST
        # the stored features are read over their id range, a layer's file over the rows it holds
        read = {"tiled": passes(degrees, grid, self.memory, width, layer.d_out) * (n if i == 0 else rows_in)
                * row_bytes}
        if projects_first(layer, width):  # the parts made in one pass over the input (for layer 0, the features)
            read["parts"] = (rows_in * row_bytes if i == 0 else 0) + rows_in * 4 * self._parts_width(i) * passes(
                degrees, grid, self.memory, layer.d_out, layer.d_out)
        plan = min(read, key=read.get)
        return plan if read[plan] < gathered else None

    @torch.no_grad()
    def _parts_width(self, i: int) -> int:
        own, message = self.model.layers[i].parts(torch.zeros(1, self._width(i), device=self.device))
        return own.shape[1] + message.shape[1]

    def _parts(self, i: int):
        """Layer i's parts of input rows, as one float32 CPU array [rows, own | message]."""
        layer = self.model.layers[i]
        return lambda x: torch.cat(layer.parts(x.to(self.device)), 1).float().cpu()

    def _tiled_outputs(self, i: int, h, decode, targets: np.ndarray, grid: int, on_parts: bool, index):
        own_cols = None
        if on_parts:
            own_cols = h.shape[1] - self.model.layers[i].d_out
        return mean_layer_outputs(lambda block, x: self.model.layer(i, block, x), self.ds.indptr, self.ds.indices,
                                  h, decode, targets, grid, self.memory, self.model.layers[i].d_out, self.device,
                                  own_cols, index)

    def inputs(self, k: int, say=None, parts: bool = False, sets: list | None = None):
        """(rows, decode, index) that layer k reads: the stored features for k = 0, else layer k - 1's outputs,
        or (`parts`) layer k's parts of them, for the nodes `index` (sorted; None: every node), their rows in
        that order; layers 0 .. k - 1 computed (or taken up from a kept file whose checksum, model and nodes
        match). `sets`: receptive_fields' first k + 1 (default: every node). A layer below k whose plan is
        "parts" reads its parts, which the layer below it wrote in place of its outputs."""
        sets = sets or [None] * (k + 1)
        plans = [self._plan(i, sets[i + 1], self.chunk_nodes, sets[i]) for i in range(k)] + ["parts" if parts else None]
        h, decode, index = self.source.rows, self.source.decode_torch, None
        if plans[0] == "parts":
            fn = self._parts(0)
            h = self._kept("parts-0", sets[0], self._parts_width(0),
                           lambda start: self._mapped(h, decode, fn, sets[0], start), say)
            decode, index = _as_is, sets[0]
        for i in range(k):
            if plans[i + 1] == "parts":
                name, cols, then = f"parts-{i + 1}", self._parts_width(i + 1), self._parts(i + 1)
            else:
                name, cols, then = f"layer-{i}", self._width(i + 1), None

            def chunks(start, i=i, h=h, decode=decode, index=index, then=then):
                made = self._chunks(i, h, decode, plans[i], index, sets[i + 1], start)
                return made if then is None else ((lo, then(y)) for lo, y in made)
            h = self._kept(name, sets[i + 1], cols, chunks, say)
            decode, index = _as_is, sets[i + 1]
        return h, decode, index

    def _kept(self, name: str, nodes: np.ndarray | None, cols: int, chunks, say=None) -> np.ndarray:
        """The float32 rows of `name`.npy in the workdir, `cols` columns for `nodes` (None: every node): taken up
        where a finished file's identity (model, features, nodes) and checksum match, else written a chunk at a
        time from `chunks(start)` ((first row, rows) from a chunk's start at or before `start`), going on from
        the last recorded chunk of an interrupted one (data/resumable.py)."""
        path, shape = self.dir / f"{name}.npy", (self._rows(nodes), cols)
        identity = {**self.identity, "file": name, "nodes": "all" if nodes is None else ids_checksum(nodes)}
        rows = finished(path, shape, np.float32, identity)
        if rows is not None:
            if say is not None:
                say(f"infer: {name} taken up from {path} (checksum checked)")
        else:
            out = Output(path, shape, np.float32, identity, self.chunk_nodes)
            if out.rows_done and say is not None:
                say(f"infer: {name} goes on from row {out.rows_done:,} of {shape[0]:,}")
            for lo, y in chunks(out.rows_done):
                out.write(lo, y.numpy())
            out.commit({})
            rows = np.load(path, mmap_mode="r")
            if say is not None:
                say(f"infer: {name} done over {shape[0]:,} nodes")
        self.kept.append(path)
        return rows

    def _rows(self, nodes: np.ndarray | None) -> int:
        return self.ds.num_nodes if nodes is None else nodes.size

    def _mapped(self, h, decode, fn, nodes: np.ndarray | None, start: int = 0):
        """(first row, fn(rows)) over the stored rows of `nodes` (None: every node), read forwards a chunk at a
        time, from the chunk holding row `start`."""
        for lo in range(start - start % self.chunk_nodes, self._rows(nodes), self.chunk_nodes):
            rows = np.array(h[lo: lo + self.chunk_nodes]) if nodes is None else read_rows(
                h, nodes[lo: lo + self.chunk_nodes]).numpy()
            yield lo, fn(decode(torch.from_numpy(rows)).float())

    def _chunks(self, i: int, h, decode, plan: str | None, index, targets: np.ndarray | None, start: int = 0):
        """(first row, outputs) of layer i over sorted unique `targets` (None: every node), in order, as `plan`
        says (parts: h is its parts), reading h's rows of the nodes `index`; from the chunk holding row `start`,
        chunks cut as from row 0 (a rerun's bytes are the same)."""
        if plan is not None:
            targets = every_node(self.ds.num_nodes) if targets is None else targets
            first = start - start % self.chunk_nodes  # a grid point: nn/tiled_sum.py
            for s, y in self._tiled_outputs(i, h, decode, targets[first:], self.chunk_nodes, plan == "parts", index):
                yield first + s, y
        elif targets is not None:
            yield from self._gathered(i, h, decode, index, targets, self.chunk_nodes, start - start % self.chunk_nodes)
        else:
            for c in range(bisect.bisect_right(self.bounds, start) - 1, len(self.bounds) - 1):
                lo, hi = self.bounds[c], self.bounds[c + 1]
                block, src = full_block(self.ds.indptr, self.ds.indices, np.arange(lo, hi))
                if self.hag is not None:
                    block.hag = self.hag[c]
                yield lo, self._layer(i, block, h, decode, src, index)

    def _gathered(self, i: int, h, decode, index, nodes: np.ndarray, batch_size: int, start: int = 0):
        """(first row, outputs) of layer i for nodes[start:] (duplicates allowed), `batch_size` at a time and
        split further where their in-edges exceed a chunk's, each chunk's neighbour rows gathered."""
        indptr = self.ds.indptr
        for s in range(start, nodes.size, batch_size):
            batch = nodes[s: s + batch_size]
            cuts = chunk_bounds(np.r_[0, np.cumsum(indptr[batch + 1] - indptr[batch])], batch.size,
                                self.chunk_edges)
            for a, b in zip(cuts[:-1], cuts[1:]):
                unique, back = np.unique(batch[a:b], return_inverse=True)
                block, src = full_block(indptr, self.ds.indices, unique)
                yield s + a, self._layer(i, block, h, decode, src, index)[torch.from_numpy(back.reshape(-1))]

    def outputs(self, nodes: np.ndarray, k: int, batch_size: int, start: int = 0, say=None):
        """(first row, layer k - 1's outputs) for nodes[start:] (the model's own outputs for k = its layers),
        `batch_size` nodes at a time (duplicates allowed) and split further where their in-edges exceed the
        chunk's, as float32 CPU tensors. Row i's value depends on the batches only through where they start:
        from the same `start` (a multiple of `batch_size`), a rerun computes the same bytes."""
        nodes = np.asarray(nodes, dtype=np.int64)
        rest = nodes[start:]
        sets = [None] * (k + 1)
        if self.hag is None:  # a HAG's chunks are of every node; the sets of all `nodes`, so that a rerun's match
            sets = receptive_fields(self.ds.indptr, self.ds.indices, nodes, k, self.ds.num_nodes // 2)
        plan = self._plan(k - 1, rest, batch_size, sets[k - 1]) if np.all(rest[1:] > rest[:-1]) else None
        h, decode, index = self.inputs(k - 1, say, parts=plan == "parts", sets=sets[:k])
        if plan is not None:
            for s, rows in self._tiled_outputs(k - 1, h, decode, rest, batch_size, plan == "parts", index):
                yield start + s, rows
            return
        yield from self._gathered(k - 1, h, decode, index, nodes, batch_size, start)

    def remove(self) -> None:
        """Deletes the layers' files."""
        for path in self.kept:
            path.unlink(missing_ok=True)
            side(path, ".manifest.json").unlink(missing_ok=True)
        self.kept = []


@torch.no_grad()
def full_neighbour_logits(model, ds: Dataset, nodes: np.ndarray, workdir, *,
                          batch_size: int = defaults.INFERENCE_CHUNK,
                          device: str = "cpu", features: FeatureSource | None = None, hag=None,
                          memory: int | None = None) -> torch.Tensor:
    """The model's outputs for `nodes` with every neighbour of every layer (model in eval mode);
    `features`: the first layer's stored rows (default: features.bin); `hag`: the dataset's GraphHag; `memory`:
    what a tiled pass may hold (None: none)."""
    lw = LayerWise(model, ds, workdir, device=device, features=features, hag=hag,
                   chunk_nodes=max(batch_size, defaults.INFERENCE_CHUNK), memory=memory)
    unique, back = np.unique(np.asarray(nodes, dtype=np.int64), return_inverse=True)  # sorted: a tiled pass's
    try:
        parts = [rows for _, rows in lw.outputs(unique, len(model.layers), batch_size)]
        return torch.cat(parts)[torch.from_numpy(back.reshape(-1))] if parts else torch.empty(0)
    finally:
        lw.remove()
