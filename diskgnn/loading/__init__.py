"""Batches on their way to the model: blocks as tensors, the stages that fill them, and the pipeline that runs them.

`blocks` turns a sampled batch (or the CSC, for full neighbours) into
`TensorBlock`s, whose neighbour sums run natively (`aggregate`); `loaders`
defines the stages of one pass (sample -> read -> assemble -> copy) for
offline-sampled batches served by the feature store, and for batches sampled
online; `pipeline` runs stages in threads joined by bounded queues and times
each; `subgraph` lays a batch out as one PyG subgraph (for diskgnn/pyg/).
This side never imports the models: they only consume what it yields.
"""
