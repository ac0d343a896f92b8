"""GNN models over sampled blocks, in plain PyTorch: GraphSAGE (mean), GCN and GAT.

A model runs one layer per block, from the input nodes' hop to the seeds'
(`blocks[::-1]` of a sampled batch). Each layer computes only its block's
destination nodes, which are the first `num_dst` of its source nodes, so the
input layer never touches the outer hop's rows beyond gathering them for
aggregation (the saving MariusGNN's DENSE representation makes over
computing every layer on every sampled node).

The same layers run on full-neighbour blocks (`full_block`): layer-wise
inference and the in-memory reference trainer use them, so sampled and
full-neighbour models share every line of arithmetic.

GCN here normalises by the destination's degree with a self-loop (DGL's
`norm="right"`): mean over N(i) ∪ {i}. It needs no degree but the sampled
one, which keeps blocks self-contained; with k of d neighbours sampled the
node's own row weighs 1/(k+1) instead of 1/(d+1), a bias that cost Coauthor
CS about 0.3 points against full neighbours (docs/accuracy.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..loading.blocks import TensorBlock
from .dropout import Dropout, ReseededDropout

MODELS = ("sage", "gcn", "gat")


class SAGELayer(nn.Module):
    MEAN_OF_NEIGHBOURS = True  # its neighbours enter only through block.mean_neighbours (nn/tiled_sum.py)

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.d_out = d_out
        self.self_lin = nn.Linear(d_in, d_out)
        self.neigh_lin = nn.Linear(d_in, d_out, bias=False)

    def forward(self, block: TensorBlock, h: torch.Tensor) -> torch.Tensor:
        # Aggregate before transforming: the neighbour sum runs on d_in columns
        # and the linear map on num_dst rows only.
        if block.projected:  # sums of parts(h)'s messages, taken already (nn/tiled_sum.py)
            return block.pre + block.mean_neighbours(block.pre)
        mean = block.mean_neighbours(h)
        return self.self_lin(h[: block.num_dst]) + self.neigh_lin(mean)

    def parts(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per node, what its own row adds to its output and its message: the linear map its neighbours' mean
        takes (no bias, so it commutes with the mean), for a block whose sums are of the messages (`projected`:
        fewer columns to sum where d_out < d_in)."""
        return self.self_lin(h), self.neigh_lin(h)


class GCNLayer(nn.Module):
    MEAN_OF_NEIGHBOURS = True

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.d_out = d_out
        self.lin = nn.Linear(d_in, d_out)

    def forward(self, block: TensorBlock, h: torch.Tensor) -> torch.Tensor:
        mean = block.mean_neighbours(h, self_loop=True)
        return mean + self.lin.bias if block.projected else self.lin(mean)

    def parts(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As SAGELayer.parts: no own part (its row enters as a self-loop's message); the map without its bias,
        which the mean leaves as it is."""
        return h.new_zeros((h.shape[0], 0)), F.linear(h, self.lin.weight)


class GATLayer(nn.Module):
    """Multi-head attention over N(i) ∪ {i}; heads concatenated (or averaged for the output layer)."""

    def __init__(self, d_in: int, d_out: int, heads: int, concat: bool):
        super().__init__()
        self.heads, self.concat = heads, concat
        self.d_head = d_out // heads if concat else d_out
        self.d_out = heads * self.d_head if concat else self.d_head
        self.lin = nn.Linear(d_in, self.heads * self.d_head, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, self.d_head))
        self.att_dst = nn.Parameter(torch.empty(heads, self.d_head))
        self.bias = nn.Parameter(torch.zeros(heads * self.d_head if concat else self.d_head))
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, block: TensorBlock, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(h.device.type, enabled=False):
            return self._attend(block, h.float())

    def _attend(self, block: TensorBlock, h: torch.Tensor) -> torch.Tensor:
        # Always float32, bf16 autocast or not: bf16 projections moved the attention weights' gradients by a
        # quarter (their sums over edges cancel), and GAT's step, its edge work, ran no faster in bf16 on W1.
        return self.attend(block, self.lin(h).view(-1, self.heads, self.d_head))

    def attend(self, block: TensorBlock, z: torch.Tensor, z_dst: torch.Tensor | None = None,
               first_self: int = 0) -> torch.Tensor:
        """Attention over N(i) ∪ {i} from the messages' projected rows `z` (the sources', the destinations' own
        from row `first_self` on) and the destinations' `z_dst` (default: z's first rows; a typed relation's two
        ends differ: its RelationGAT). The plain layer's ops stay in their order: autograd sums z's gradients in
        it."""
        nd = block.num_dst
        a_src = (z * self.att_src).sum(-1)  # [rows of z, heads]
        a_dst = ((z[:nd] if z_dst is None else z_dst) * self.att_dst).sum(-1)
        self_loops = torch.arange(nd, device=z.device)
        src = torch.cat([block.indices, self_loops + first_self if first_self else self_loops])
        dst = torch.cat([block.dst, self_loops])
        logits = F.leaky_relu(a_src[src] + a_dst[dst], 0.2)
        peak = logits.new_full((nd, self.heads), float("-inf"))
        peak = peak.scatter_reduce(0, dst.unsqueeze(1).expand_as(logits), logits, "amax", include_self=True)
        weight = torch.exp(logits - peak[dst])
        norm = weight.new_zeros((nd, self.heads)).index_add_(0, dst, weight)
        alpha = weight / norm[dst]
        out = z.new_zeros((nd, self.heads, self.d_head)).index_add_(0, dst, z[src] * alpha.unsqueeze(-1))
        out = out.reshape(nd, -1) if self.concat else out.mean(1)
        return out + self.bias


class RelationGCN(GCNLayer):
    """GCN over a typed relation whose two ends differ (in type, so in width): the mean over N_r(i) ∪ {i} of the
    sources' rows mapped by W and the destination's own by its own map W_dst, plus the bias; where the ends are
    one type, W_dst is W and this is GCNLayer, which such a relation uses."""

    def __init__(self, d_src: int, d_dst: int, d_out: int):
        super().__init__(d_src, d_out)
        self.lin_dst = nn.Linear(d_dst, d_out, bias=False)

    def forward(self, block: TensorBlock, h: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        scale = block.inv_deg_self.unsqueeze(1).to(h.dtype)
        return self.lin(block.sum_neighbours(h) * scale) + self.lin_dst(h_dst[: block.num_dst]) * scale


class RelationGAT(GATLayer):
    """GAT over a typed relation whose two ends differ: the sources' messages projected by `lin`, the
    destination's own (its self-loop) and its attention query by `lin_dst`; one type at both ends is GATLayer."""

    def __init__(self, d_src: int, d_dst: int, d_out: int, heads: int, concat: bool):
        super().__init__(d_src, d_out, heads, concat)
        self.lin_dst = nn.Linear(d_dst, self.heads * self.d_head, bias=False)

    def forward(self, block: TensorBlock, h: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        with torch.autocast(h.device.type, enabled=False):
            z = self.lin(h.float()).view(-1, self.heads, self.d_head)
            z_dst = self.lin_dst(h_dst[: block.num_dst].float()).view(-1, self.heads, self.d_head)
            return self.attend(block, torch.cat([z, z_dst]), z_dst, z.shape[0])


def layer_dims(d_in: int, hidden: int, classes: int, layers: int) -> list[int]:
    """Each layer's input width, then the last one's output: [d_in, hidden, ..., classes]."""
    return [d_in] + [hidden] * (layers - 1) + [classes]


def activation_bytes(model: str, layers: list[tuple[int, int, int]], dims: list[int], heads: int,
                     precision: str = "fp32") -> int:
    """Bound on one training step's temporaries and their gradients in the layers above, given each
    layer's (source rows, destination rows, edges), input layer first, and its widths (layer_dims).

    Measured on W1's batches (44k input rows, hidden 256): sage 95 MiB, gat 364 MiB, against 153 and
    686 MiB here at the batch's bound (63k rows), before the headroom below. Under bf16 on a CPU (sage and
    gcn; gat stays fp32) the step's own tensors are smaller, but oneDNN keeps primitives and scratchpads for
    the shapes it met: with its cache capped (ONEDNN_CACHE), 300 W1 batches took 276 MiB more than fp32, 1.4x
    the fp32 bound; bf16 counts 2.5x the fp32 bound."""
    if precision == "bf16" and model != "gat":
        return 5 * activation_bytes(model, layers, dims, heads) // 2
    total = 0
    for (n_src, n_dst, edges), d_in, d_out in zip(layers, dims, dims[1:]):
        if model == "gat":
            # the projection of every source row, a message per edge (self-loops included) and its
            # weighted copy, per-edge attention scalars per head; backward doubles them
            messages = edges + n_dst
            total += 3 * (n_src + 2 * messages) * d_out + 8 * messages * heads
        else:
            # on destination rows only: the neighbour mean (d_in), two linear maps, their sum, ReLU and
            # dropout (d_out each); backward doubles them
            total += 2 * n_dst * (d_in + 6 * d_out)
    if model == "gat":
        total += 2 * layers[0][0] * dims[0]  # GAT's dropout on the input rows
    # Headroom: the allocator's heap grows over batches of different shapes (and autograd's saved tensors for
    # GAT's softmax vary): 40 batches of a 20k-node graph peaked up to 31 % above the sums above, sage up to
    # 25 % (tests/train/test_plan.py).
    total += total // 2
    return 4 * total


class GNN(ReseededDropout, nn.Module):
    """`layers` graph layers with ReLU and dropout between them; logits out."""

    def __init__(self, kind: str, d_in: int, hidden: int, classes: int, layers: int, dropout: float,
                 heads: int = 4):
        super().__init__()
        if kind not in MODELS:
            raise ValueError(f"model {kind!r}: expected one of {', '.join(MODELS)}")
        if kind == "gat" and hidden % heads:
            raise ValueError(f"gat: hidden size {hidden} must be a multiple of {heads} heads")
        dims = layer_dims(d_in, hidden, classes, layers)
        self.kind = kind
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList()
        for i in range(layers):
            last = i == layers - 1
            if kind == "sage":
                self.layers.append(SAGELayer(dims[i], dims[i + 1]))
            elif kind == "gcn":
                self.layers.append(GCNLayer(dims[i], dims[i + 1]))
            else:
                self.layers.append(GATLayer(dims[i], dims[i + 1], 1 if last else heads, concat=not last))

    def layer(self, i: int, block: TensorBlock, h: torch.Tensor, nodes: tuple | None = None) -> torch.Tensor:
        """Layer i alone (layer-wise inference runs the layers one at a time over all nodes). `nodes`: (the
        batch's salt, the node ids of the layer's output rows), to key dropout's masks by node (nn/dropout.py)."""
        h = self.layers[i](block, h)
        if i < len(self.layers) - 1:
            h = self.dropout(h, relu=True, rows=None if nodes is None else ((*nodes[0], i), nodes[1]),
                             kernels=block.kernels)
        return h

    def input_dropout(self, x: torch.Tensor, nodes: tuple | None = None, kernels=None) -> torch.Tensor:
        """GAT's dropout of the input rows (`nodes`: the batch's salt and the rows' node ids); the others' is none."""
        if self.kind != "gat":
            return x
        return self.dropout(x, rows=None if nodes is None else ((*nodes[0], len(self.layers)), nodes[1]),
                            kernels=kernels)

    def forward(self, blocks: list[TensorBlock], x: torch.Tensor, nodes: tuple | None = None) -> torch.Tensor:
        """Logits of the last block's destinations. `nodes`: (the batch's salt, a tuple of ints; the node ids of
        x's rows): dropout masks keyed by node, the same however the batch is split (None: the stream's)."""
        if len(blocks) != len(self.layers):
            raise ValueError(f"{len(blocks)} blocks for a {len(self.layers)}-layer model")
        h = self.input_dropout(x, nodes, blocks[0].kernels if blocks else None)
        for i, block in enumerate(blocks):
            # a block's destinations are the first rows of its sources: layer i's outputs are x's first rows
            h = self.layer(i, block, h, None if nodes is None else (nodes[0], nodes[1][: block.num_dst]))
        return h
