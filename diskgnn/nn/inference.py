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
codes, decoded on the device). A finished layer's file is kept with its
checksum and the model's, so an interrupted run (diskgnn.infer) takes it up
again rather than computing it twice. With a stored whole-graph HAG
(loading/graph_hag.py) the layers over every node take its chunks (their size
is the HAG's) and sum through each chunk's HAG where it pays, on the CPU. Given a `memory` to tile in, a mean
layer (SAGE, GCN) whose gathers would read more than passes over its input takes the tiled pass instead
(nn/tiled_sum.py): its neighbour sums a block of destinations at a time, the input read forwards. A layer
narrower than its input runs on its parts (its own rows' share and its messages, `parts-<i>.f32`), which the
layer below writes in place of its outputs: the wide hidden layer between them is never stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import xxhash

from .. import defaults
from ..arrays import read_rows
from ..data.features import FeatureSource, feature_source
from ..data.files import write_atomic
from ..data.format import Dataset
from ..loading.blocks import full_block
from .tiled_sum import is_mean_layer, mean_layer_outputs, passes, projects_first

PAGE = 4096  # what a gathered row costs at least: the page its fault reads


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


def rows_checksum(rows, chunk_rows: int = 1 << 16) -> str:
    """xxh3-128 of an array's rows in order (little-endian C order), read a chunk of rows at a time: a .npy map's
    or a zarr array's alike."""
    hashed, dtype = xxhash.xxh3_128(), np.dtype(rows.dtype).newbyteorder("<")
    for s in range(0, rows.shape[0], chunk_rows):
        hashed.update(np.ascontiguousarray(rows[s: s + chunk_rows], dtype=dtype).tobytes())
    return hashed.hexdigest()


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

    def _layer(self, i: int, block, h, decode, src) -> torch.Tensor:
        return self.model.layer(i, block.to(self.device), decode(read_rows(h, src).to(self.device))).float().cpu()

    def _width(self, i: int) -> int:
        """Columns of layer i's input, decoded."""
        return self.source.dim if i == 0 else self.model.layers[i - 1].d_out

    def _plan(self, i: int, targets: np.ndarray, grid: int) -> str | None:
        """How layer i runs over sorted unique `targets`: "parts" (tiled over its parts), "tiled" (over its input)
        or None (gathering each chunk's neighbour rows): tiled where it is a mean layer, there is a memory to tile
        in and no HAG, and its passes read fewer bytes than the targets' in-edges gathered a page each."""
        layer, n = self.model.layers[i], self.ds.num_nodes
        if self.memory is None or self.hag is not None or not is_mean_layer(layer) or targets.size == 0:
            return None
        indptr, width = self.ds.indptr, self._width(i)
        degrees = np.asarray(indptr[targets + 1]) - np.asarray(indptr[targets])
        row_bytes = self.source.row_bytes if i == 0 else 4 * width
        gathered = int(degrees.sum()) * max(row_bytes, PAGE)
        read = {"tiled": passes(degrees, grid, self.memory, width, layer.d_out) * n * row_bytes}
        if projects_first(layer, width):  # the parts made in one pass over the input (for layer 0, the features)
            read["parts"] = (n * row_bytes if i == 0 else 0) + n * 4 * self._parts_width(i) * passes(
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

    def _tiled_outputs(self, i: int, h, decode, targets: np.ndarray, grid: int, on_parts: bool):
        own_cols = None
        if on_parts:
            own_cols = h.shape[1] - self.model.layers[i].d_out
        return mean_layer_outputs(lambda block, x: self.model.layer(i, block, x), self.ds.indptr, self.ds.indices,
                                  h, decode, targets, grid, self.memory, self.model.layers[i].d_out, self.device,
                                  own_cols)

    def inputs(self, k: int, say=None, parts: bool = False):
        """(rows, decode) that layer k reads: the stored features for k = 0, else layer k - 1's outputs for every
        node, or (`parts`) layer k's parts of them; layers 0 .. k - 1 computed (or taken up from a kept file whose
        checksum and model match). A layer below k whose plan is "parts" reads its parts, which the layer
        below it wrote in place of its outputs."""
        every = np.arange(self.ds.num_nodes, dtype=np.int64)
        plans = [self._plan(i, every, self.chunk_nodes) for i in range(k)] + ["parts" if parts else None]
        h, decode = self.source.rows, self.source.decode_torch
        if plans[0] == "parts":
            h = self._kept("parts-0", lambda path: self._write(path, self._mapped(h, decode, self._parts(0))), say)
            decode = _as_is
        for i in range(k):
            name, then = (f"parts-{i + 1}", self._parts(i + 1)) if plans[i + 1] == "parts" else (f"layer-{i}", None)
            chunks = self._chunks(i, h, decode, plans[i])
            h = self._kept(name, lambda path: self._write(path, chunks if then is None else
                                                          ((lo, then(y)) for lo, y in chunks)), say)
            decode = _as_is
        return h, decode

    def _kept(self, name: str, make, say=None) -> np.ndarray:
        """The rows of `name`.f32 in the workdir: taken up where a kept file's checksum and identity match, else
        made (`make(path)` -> its rows' checksum) and kept."""
        path = self.dir / f"{name}.f32"
        meta_path = path.with_suffix(".json")
        expect = {**self.identity, "file": name}
        if meta_path.exists() and path.exists():
            meta = json.loads(meta_path.read_text())
            same = {key: meta.get(key) for key in expect} == expect
            if same and rows_checksum(np.load(path, mmap_mode="r")) == meta["checksum"]:
                if say is not None:
                    say(f"infer: {name} taken up from {path} (checksum checked)")
                self.kept.append(path)
                return np.load(path, mmap_mode="r")
        meta_path.unlink(missing_ok=True)
        checksum = make(path)
        write_atomic(meta_path, (json.dumps({**expect, "checksum": checksum}) + "\n").encode())
        self.kept.append(path)
        if say is not None:
            say(f"infer: {name} done over {self.ds.num_nodes:,} nodes")
        return np.load(path, mmap_mode="r")

    def _write(self, path: Path, chunks) -> str:
        """(first node, rows) chunks covering every node, in order, into `path`; their checksum (hashed as they
        are written, in row order: what rows_checksum reads back)."""
        tmp = path.with_name(path.name + ".partial")
        out, hashed = None, xxhash.xxh3_128()
        for lo, y in chunks:
            if out is None:
                out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(self.ds.num_nodes, y.shape[1]))
            out[lo: lo + len(y)] = y = y.numpy()
            hashed.update(np.ascontiguousarray(y, dtype="<f4").tobytes())
        out.flush()
        del out
        tmp.replace(path)
        return hashed.hexdigest()

    def _mapped(self, h, decode, fn):
        """(first node, fn(rows)) over every stored row, read forwards a chunk at a time."""
        for lo in range(0, self.ds.num_nodes, self.chunk_nodes):
            yield lo, fn(decode(torch.from_numpy(np.array(h[lo: lo + self.chunk_nodes]))).float())

    def _chunks(self, i: int, h, decode, plan: str | None):
        """(first node, outputs) of layer i over every node, in order, as `plan` says (parts: h is its parts)."""
        if plan is not None:
            every = np.arange(self.ds.num_nodes, dtype=np.int64)
            yield from self._tiled_outputs(i, h, decode, every, self.chunk_nodes, plan == "parts")
            return
        for c, (lo, hi) in enumerate(zip(self.bounds[:-1], self.bounds[1:])):
            block, src = full_block(self.ds.indptr, self.ds.indices, np.arange(lo, hi))
            if self.hag is not None:
                block.hag = self.hag[c]
            yield lo, self._layer(i, block, h, decode, src)

    def outputs(self, nodes: np.ndarray, k: int, batch_size: int, start: int = 0, say=None):
        """(first row, layer k - 1's outputs) for nodes[start:] (the model's own outputs for k = its layers),
        `batch_size` nodes at a time (duplicates allowed) and split further where their in-edges exceed the
        chunk's, as float32 CPU tensors. Row i's value depends on the batches only through where they start:
        from the same `start` (a multiple of `batch_size`), a rerun computes the same bytes."""
        nodes = np.asarray(nodes, dtype=np.int64)
        rest = nodes[start:]
        plan = self._plan(k - 1, rest, batch_size) if np.all(rest[1:] > rest[:-1]) else None
        h, decode = self.inputs(k - 1, say, parts=plan == "parts")
        if plan is not None:
            for s, rows in self._tiled_outputs(k - 1, h, decode, rest, batch_size, plan == "parts"):
                yield start + s, rows
            return
        indptr = self.ds.indptr
        for s in range(start, nodes.size, batch_size):
            batch = nodes[s: s + batch_size]
            cuts = chunk_bounds(np.r_[0, np.cumsum(indptr[batch + 1] - indptr[batch])], batch.size,
                                self.chunk_edges)
            for a, b in zip(cuts[:-1], cuts[1:]):
                unique, back = np.unique(batch[a:b], return_inverse=True)
                block, src = full_block(indptr, self.ds.indices, unique)
                yield s + a, self._layer(k - 1, block, h, decode, src)[torch.from_numpy(back.reshape(-1))]

    def remove(self) -> None:
        """Deletes the layers' files."""
        for path in self.kept:
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)
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
    try:
        parts = [rows for _, rows in lw.outputs(nodes, len(model.layers), batch_size)]
        return torch.cat(parts) if parts else torch.empty(0)
    finally:
        lw.remove()
