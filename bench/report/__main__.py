"""Renders bench.suite's JSON into the report: a generated section of docs/benchmarks.md and PNG plots.

    python -m bench.report bench/results/suite/suite.json [--markdown docs/benchmarks.md] [--plots docs/bench]

bench.suite renders the report itself; this renders a saved suite again (see bench/report/__init__.py).
"""

import argparse

from ..harness.common import REPO
from ..harness.output import BENCHMARKS_MD
from .markdown import render


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", help="bench.suite's suite.json")
    ap.add_argument("--markdown", default=str(BENCHMARKS_MD))
    ap.add_argument("--plots", default=str(REPO / "docs" / "bench"))
    args = ap.parse_args(argv)
    render(args.suite, args.markdown, args.plots)


if __name__ == "__main__":
    main()
