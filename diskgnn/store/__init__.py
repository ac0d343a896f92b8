"""The feature store: each batch's input rows from a chain of tiers, fastest first, counted per tier.

`tiers` defines the chain's links: the memory tiers the placement filled
(device, pinned host), the rows a segment of batches shares (page cache), and
the batch's own pack region read with O_DIRECT, which ends the chain;
`store` walks it for each batch in three steps the pipeline spreads over its
threads (start the reads, assemble on the host, copy and decode on the device).
"""
