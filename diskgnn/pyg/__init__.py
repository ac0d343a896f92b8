"""PyTorch Geometric on diskgnn's out-of-core store (the optional extra `diskgnn[pyg]`: torch_geometric only).

Keep the PyG model and training loop; swap the data side:

    from torch_geometric.loader import NodeLoader
    from diskgnn.pyg import DiskgnnFeatureStore, DiskgnnGraphStore, DiskgnnSampler

    fs, gs = DiskgnnFeatureStore("data/w1"), DiskgnnGraphStore("data/w1")
    loader = NodeLoader((fs, gs), node_sampler=DiskgnnSampler("data/w1", fanouts=[10, 5]),
                        input_nodes=train_ids, batch_size=1024, shuffle=True)
    for data in loader:   # Data(x, y, edge_index, n_id, batch_size, ...), seeds first, as NeighborLoader's
        out = model(data.x, data.edge_index)[:data.batch_size]

Edge batches for link prediction: `LinkLoader((fs, gs), link_sampler=DiskgnnSampler(...),
edge_label_index=(None, edges), neg_sampling=...)`, as LinkNeighborLoader's.
Or, faster (offline samples, packs and the pipeline of diskgnn.train):
`for data in DiskgnnLoader("data/w1", fanouts=[10, 5], memory_budget="2GiB")`.

Heterogeneous datasets go through the same three, with typed keys (PyG's hetero models unchanged) and
`input_nodes=(type, ids)`: HeteroData, x per featured type, edge_index per relation.

Modules: `stores` (FeatureStore, GraphStore), `sampler` (BaseSampler), `loader` (DiskgnnLoader); a diskgnn
batch laid out as PyG's subgraph is diskgnn/loading/subgraph.py's.
A PyG Data becomes a diskgnn dataset with `diskgnn.prepare(data, out)`.
"""

from __future__ import annotations

try:
    import torch_geometric  # noqa: F401
except ImportError as e:  # the extra is optional: say what to install
    raise ImportError("diskgnn.pyg needs torch_geometric: pip install 'diskgnn[pyg]' (torch_geometric only; "
                      "pyg-lib, torch-sparse and torch-scatter are not needed)") from e

from ..loading.subgraph import to_pyg
from .loader import DiskgnnLoader
from .sampler import DiskgnnSampler
from .stores import DiskgnnFeatureStore, DiskgnnGraphStore

__all__ = ["DiskgnnFeatureStore", "DiskgnnGraphStore", "DiskgnnLoader", "DiskgnnSampler", "to_pyg"]
