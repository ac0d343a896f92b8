"""The benchmarks: each study a module run as `python -m bench NAME` (or `python -m bench.NAME`), on the real
code paths, writing JSON under bench/results/ and, asked to, its section of docs/benchmarks.md or docs/accuracy.md.

`harness/` holds what the studies share (the machine, W1, capped runs, `finish`, plots, the reference and naive
loops) and imports no study; `peers/` runs the other systems (PyG, DGL/GraphBolt, MariusGNN, Ginex); the
accuracy studies live in `accuracy/`, and `report/` renders `bench.suite`'s session (`make bench`).
"""
