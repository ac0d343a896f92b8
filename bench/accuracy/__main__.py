"""`python -m bench.accuracy`: see bench/accuracy/__init__.py and --help."""

from .cli import main

main()
