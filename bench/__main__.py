"""`python -m bench [NAME ...]`: runs benchmarks by name (default: all), each writing JSON to bench/results/.

`python -m bench NAME --option ...` runs one benchmark with its options (`python -m bench faults --trials 3`);
`make bench` runs `python -m bench.suite` instead: the report, in one session."""

import importlib
import sys

BENCHMARKS = ["prepare", "reader", "offline", "epoch", "scaling", "quantized", "dependent", "distributed", "hag", "step",
              "accuracy", "faults", "budget", "pyg", "gpu", "hetero", "link", "infer"]
# `all`: those that run on any machine (gpu needs a CUDA device; pyg's accuracy study its own venv; hetero writes
# 26 GB of features; link trains two systems for hours; infer prepares W2)
ALL = BENCHMARKS[: BENCHMARKS.index("pyg")]


def module(name: str):
    """The module whose main(argv) runs benchmark `name`: bench.NAME, or a package's cli (bench.accuracy.cli)."""
    found = importlib.import_module(f"bench.{name}")
    return importlib.import_module(f"bench.{name}.cli") if hasattr(found, "__path__") else found


def main(argv=None) -> None:
    argv = list(argv if argv is not None else sys.argv[1:])
    first_option = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    names, options = argv[:first_option] or ["all"], argv[first_option:]
    if names == ["all"]:
        names = ALL
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"bench: unknown benchmark(s) {unknown}; choose from {BENCHMARKS} or all")
    if options and len(names) > 1:
        raise SystemExit(f"bench: options ({' '.join(options)}) go with one benchmark, not {len(names)}")
    for name in names:
        print(f"=== bench.{name}")
        module(name).main(options)


if __name__ == "__main__":
    main()
