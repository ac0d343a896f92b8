"""Training on heterogeneous graphs (typed nodes and relations): run.py (checks, plan, epochs, step, evaluation)
and loop.py (epochs, checkpoints, --resume, summary); `python -m diskgnn.train --data DIR` comes here when DIR
is a heterogeneous dataset."""
