"""Adapters for the systems the DiskGNN paper compares with (MariusGNN, Ginex).

Each peer module has `export(data, out, ...)`, which writes a diskgnn dataset in
the layout that peer reads (streamed in chunks, built in a temporary directory
and renamed into place), and `run(out, ...)`, which trains the peer on that
export under a cgroup memory cap when the peer is installed and otherwise
returns a row saying why it did not run. `python -m bench.peers.export` is the
command line; docs/peers.md describes the layouts and what was checked upstream.
"""
