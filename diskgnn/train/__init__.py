"""Training: `python -m diskgnn.train` plans, samples, packs and trains a GNN out of core.

The run: the configuration (`config`: defaults < --config FILE.yaml < flags)
-> the feature rows (--features: features.bin or a stored quantized variant)
-> the `plan` (what --memory-budget holds: working set, reads in flight, tier
sizes, page cache, packer memory; impossible settings refused) -> epoch 0
sampled and its hottest rows placed in the memory tiers -> per epoch, the
pipeline (sample -> read -> assemble -> copy -> train step) while the next
epoch is sampled and packed in the background (`run`) -> evaluation ->
`checkpoints` (best and last) -> summary.json. With no arguments it trains on
the built-in synthetic dataset, prepared once under $DISKGNN_HOME.
"""
