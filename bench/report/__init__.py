"""The report of `make bench`: bench.suite's JSON rendered into a generated section of docs/benchmarks.md and
PNG plots.

The section sits between two marker lines and is replaced whole on every
render; the rest of the file (the hand-written notes on single benchmarks)
is left as it is. A file without the markers gets the section at its end.
Every figure and table names the machine, the I/O backend and the versions.

`markdown` writes the section (`render`), from `tables` and the plots `figures`
draws; `python -m bench.report` (__main__) renders a saved suite again.
"""
