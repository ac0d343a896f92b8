"""`python -m diskgnn.infer`: a trained run's model over its graph, every selected node's outputs written out of
core (command.py: the command; output.py: the array written and taken up again; nn/inference.py: the layers)."""
