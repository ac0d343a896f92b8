"""Heterogeneous graphs on disk: typed nodes (own id ranges, own features or none) and relations, each its own
CSC (docs/format.md, "Heterogeneous datasets"): the schema, the format, the inputs, prepare and verify."""
