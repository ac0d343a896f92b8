"""Cooperative minibatching: P ranks train one global batch of P x B seeds, each vertex fetched and computed once.

Every vertex has one owning rank (`owners`). Every rank samples the same
global batch offline (the same seed, the same sample file), so each knows
which rows every other rank will need and no ids are exchanged at run time:
`exchange_plan` turns a global batch into this rank's share of it. For each
layer, input layer first, a rank computes the destinations it owns, from
sources it holds (the rows it owns: its features, read from its own packs,
at the input layer; its own outputs of the layer below above it) and from
sources other ranks hold, which one all-to-all per layer delivers; backward
sends their gradients back the same way (`AllToAll`). The rows a rank reads
are only those it owns (`OwnedRows`, the view its packer, placement and
store see), so each distinct input vertex of a step leaves disk once across
all ranks. The loss of a rank's seeds is divided by the global batch's seed
count and gradients are summed over the ranks, so P ranks compute the loss
and the gradients of one process training the P x B batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..loading.blocks import TensorBlock
from ..offline.batches import Batch, SampleView

OWNERS = ("hash", "range")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def owners(ids: np.ndarray, world: int, scheme: str, num_nodes: int) -> np.ndarray:
    """The owning rank of each id. hash: a multiplicative hash of the id, so that rows of any id order spread
    evenly; range: contiguous id ranges, which keep neighbours together where ids follow the graph's locality."""
    ids = np.asarray(ids, dtype=np.int64)
    if scheme == "range":
        return (ids * world // max(1, num_nodes)).astype(np.int32)
    mixed = (ids.astype(np.uint64) * _GOLDEN) >> np.uint64(33)
    return (mixed % np.uint64(world)).astype(np.int32)


class OwnedRows(SampleView):
    """A sample file as one rank of a cooperative run reads it: each batch's input nodes are the ones this rank
    owns, in the batch's order. The packer, the placement and the feature store see only these."""

    def __init__(self, samples, rank: int, world: int, scheme: str, num_nodes: int):
        super().__init__(samples)
        self.rank, self.world, self.scheme, self.num_nodes = rank, world, scheme, num_nodes

    def view(self, batch: Batch) -> Batch:
        mine = owners(batch.nodes, self.world, self.scheme, self.num_nodes) == self.rank
        return Batch.one_type(batch.index, batch.nodes[mine], [], 0)


@dataclass
class LayerExchange:
    """One layer of a rank's share: what it sends, what it receives and the block it computes."""

    send: torch.Tensor  # int64: rows of the held matrix to send, grouped by destination rank
    send_counts: list[int]
    recv_counts: list[int]
    gather: torch.Tensor  # int64: each local source's row in cat([held, received])
    block: TensorBlock  # the owned destinations over the local sources (owned destinations first)
    dst_ids: np.ndarray  # global ids of the owned destinations: the layer's output rows


@dataclass
class Share:
    """A rank's share of a global batch: its layers, and which of its last layer's rows are seeds."""

    layers: list[LayerExchange]
    seed_ids: np.ndarray  # global ids of this rank's seeds, the rows of its logits
    num_seeds: int  # the global batch's seeds: the loss's denominator
    input_ids: np.ndarray  # the input rows this rank holds (reads), in the batch's order

    def to(self, device, blocks: list[TensorBlock]) -> "Share":
        """The share on `device`, with its blocks already moved there."""
        layers = [LayerExchange(layer.send.to(device, non_blocking=True), layer.send_counts, layer.recv_counts,
                                layer.gather.to(device, non_blocking=True), block, layer.dst_ids)
                  for layer, block in zip(self.layers, blocks)]
        return Share(layers, self.seed_ids, self.num_seeds, self.input_ids)


def exchange_plan(batch: Batch, owner: np.ndarray, rank: int, world: int) -> Share:
    """This rank's share of the global batch `batch`, where `owner[i]` owns batch.nodes[i]."""
    layers = []
    for gb in batch.blocks[::-1]:  # input layer first; its sources are positions [0, num_src) of the batch
        indptr = np.asarray(gb.indptr, dtype=np.int64)
        indices = np.asarray(gb.indices, dtype=np.int64)
        src_owner = owner[: gb.num_src]
        edge_owner = np.repeat(owner[: gb.num_dst], np.diff(indptr))
        # every rank's needs (its destinations and their sampled sources), known to all from the shared sample
        need = [np.union1d(np.flatnonzero(owner[: gb.num_dst] == q), indices[edge_owner == q]) for q in range(world)]
        held = np.flatnonzero(src_owner == rank)
        sends = [np.empty(0, np.int64) if q == rank else need[q][src_owner[need[q]] == rank] for q in range(world)]
        recvs = [np.empty(0, np.int64) if q == rank else need[rank][src_owner[need[rank]] == q] for q in range(world)]
        received = np.concatenate(recvs)
        row_of = np.full(gb.num_src, -1, np.int64)
        row_of[held] = np.arange(held.size)
        row_of[received] = held.size + np.arange(received.size)
        own_dst = np.flatnonzero(owner[: gb.num_dst] == rank)
        local = np.concatenate([own_dst, np.setdiff1d(need[rank], own_dst, assume_unique=True)])
        local_of = np.full(gb.num_src, -1, np.int64)
        local_of[local] = np.arange(local.size)
        local_ptr = np.concatenate([[0], np.cumsum(np.diff(indptr)[own_dst])])
        block = TensorBlock.from_csc(local_ptr, local_of[indices[edge_owner == rank]], own_dst.size, local.size)
        layers.append(LayerExchange(
            send=torch.from_numpy(np.searchsorted(held, np.concatenate(sends))),
            send_counts=[int(s.size) for s in sends], recv_counts=[int(r.size) for r in recvs],
            gather=torch.from_numpy(row_of[local]), block=block, dst_ids=batch.nodes[own_dst]))
    seeds = np.flatnonzero(owner[: batch.num_seeds] == rank)
    return Share(layers, batch.nodes[seeds], batch.num_seeds, batch.nodes[owner == rank])


class AllToAll(torch.autograd.Function):
    """Rows to every rank by counts; backward returns each row's gradient to the rank that sent it."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, send_counts: list[int], recv_counts: list[int]) -> torch.Tensor:
        ctx.counts = send_counts, recv_counts
        out = rows.new_empty((sum(recv_counts),) + tuple(rows.shape[1:]))
        torch.distributed.all_to_all_single(out, rows.contiguous(), recv_counts, send_counts)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        send_counts, recv_counts = ctx.counts
        out = grad.new_empty((sum(send_counts),) + tuple(grad.shape[1:]))
        torch.distributed.all_to_all_single(out, grad.contiguous(), send_counts, recv_counts)
        return out, None, None


def forward(model, share: Share, x: torch.Tensor, salt: tuple | None = None) -> tuple[torch.Tensor, int]:
    """The logits of this rank's seeds, from the input rows it holds (`x`, rows of share.input_ids), and the
    bytes this rank sends for them: each layer's rows forward, and their gradients back above the input layer
    (the input rows need none). `salt`: the global batch's, to key dropout's masks by node as one process would
    (None: each rank's own stream)."""
    keyed = salt is not None
    h = model.input_dropout(x, (salt, share.input_ids) if keyed else None)
    sent = 0
    for i, layer in enumerate(share.layers):
        rows = h[layer.send].float()  # bf16 under autocast: sent as float32, which every backend reduces
        sent += rows.numel() * rows.element_size() * (1 if i == 0 else 2)
        received = AllToAll.apply(rows, layer.send_counts, layer.recv_counts).to(h.dtype)
        h = model.layer(i, layer.block, torch.cat([h, received])[layer.gather],
                        (salt, layer.dst_ids) if keyed else None)
    return h, sent


def loss(logits: torch.Tensor, labels: torch.Tensor, share: Share) -> torch.Tensor:
    """This rank's part of the global batch's mean loss: summed over the ranks, the mean over all its seeds."""
    return F.cross_entropy(logits, labels, reduction="sum") / max(1, share.num_seeds)


def sum_gradients(model) -> None:
    """Every parameter's gradient summed over the ranks, in one flat all-reduce."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset: offset + n].view_as(p).clone()
        offset += n
