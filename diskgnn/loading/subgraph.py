"""A sampled batch as one subgraph, the layout PyTorch Geometric uses: nodes seeds first, edges hop by hop.

diskgnn's blocks sample every destination of a layer, the seeds included, in
each block (DGL's layout: block h's destinations are the nodes of hops < h + 1).
PyG's NeighborLoader samples each node once, at the hop after the one that
reached it, and its models run every layer over one edge_index. `hop_edges`
keeps, of block h, the edges into the nodes hop h newly reached, so that the
union is PyG's subgraph: seeds' neighbours from the seeds' block, their
neighbours' from the next, and so on; `num_sampled_nodes` and
`num_sampled_edges` count them per hop as NeighborLoader's do (for
`trim_to_layer`). Nodes that only a seed's later-hop edges reached stay in
`node` without edges (they were read; they change nothing). torch_geometric
is imported only by `to_pyg` (diskgnn/pyg/ is the seam built on this).
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import DiskgnnError


def hop_edges(batch) -> tuple[np.ndarray, np.ndarray, list[int], list[int]]:
    """(row, col, num_sampled_nodes, num_sampled_edges) of a sampled Batch in local ids (= positions in
    batch.nodes): row the neighbour, col the node that aggregates it, hop by hop."""
    rows, cols, nodes, edges = [], [], [batch.num_seeds], []
    first = 0  # the nodes hop h newly reached start here
    for block in batch.blocks:
        indptr = np.asarray(block.indptr, dtype=np.int64)
        lo, hi = indptr[first], indptr[block.num_dst]
        counts = np.diff(indptr[first: block.num_dst + 1])
        rows.append(np.asarray(block.indices[lo:hi], dtype=np.int64))
        cols.append(np.repeat(np.arange(first, block.num_dst, dtype=np.int64), counts))
        edges.append(int(hi - lo))
        nodes.append(block.num_src - block.num_dst)
        first = block.num_dst
    if not batch.blocks:
        return np.empty(0, np.int64), np.empty(0, np.int64), nodes, edges
    return np.concatenate(rows), np.concatenate(cols), nodes, edges


def to_pyg(mb, labels: np.ndarray | None = None):
    """A MiniBatch (diskgnn.Loader's) as a torch_geometric Data laid out as NeighborLoader's: `x` and `y` for
    every node (`n_id`, seeds first), `edge_index` (neighbour -> node), `batch_size` seeds,
    `num_sampled_nodes` and `num_sampled_edges` per hop. `labels`: every node's (default: the loader's)."""
    from torch_geometric.data import Data

    if mb.share is not None:
        raise DiskgnnError("to_pyg: a cooperative batch is one rank's share of a global batch; PyG models "
                           "train on whole batches (use --distributed independent)")
    labels = mb.label_source if labels is None else labels
    batch = mb.batch
    row, col, num_nodes, num_edges = hop_edges(batch)
    device = mb.x.device
    n_id = torch.from_numpy(np.array(batch.nodes, dtype=np.int64))  # the record is read-only
    y = torch.from_numpy(np.asarray(labels[batch.nodes], dtype=np.int64))
    return Data(x=mb.x, y=y.to(device), edge_index=torch.from_numpy(np.stack([row, col])).to(device),
                n_id=n_id, batch_size=int(batch.num_seeds), num_sampled_nodes=num_nodes,
                num_sampled_edges=num_edges)
