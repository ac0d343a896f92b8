"""`python -m bench [NAME ...]`: runs benchmarks by name (default: all), each writing JSON to bench/results/.

`make bench` runs `python -m bench.suite` instead: the report, in one session."""

import importlib
import sys

BENCHMARKS = ["prepare", "reader", "offline", "epoch", "scaling", "quantized", "accuracy", "faults", "budget"]


def main(argv=None) -> None:
    names = (argv if argv is not None else sys.argv[1:]) or ["all"]
    if names == ["all"]:
        names = BENCHMARKS
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"bench: unknown benchmark(s) {unknown}; choose from {BENCHMARKS} or all")
    for name in names:
        print(f"=== bench.{name}")
        importlib.import_module(f"bench.{name}").main([])


if __name__ == "__main__":
    main()
