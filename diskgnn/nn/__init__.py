"""The models: GraphSAGE, GCN and GAT layers over sampled blocks, and layer-wise full-neighbour inference.

`models` holds the layers, the `GNN` that stacks them (with its own seeded
dropout) and `activation_bytes`, the bound on a step's temporaries that the
training plan counts; `inference` runs a trained model layer by layer over
every node with all neighbours, intermediates in memory-mapped files.
"""
