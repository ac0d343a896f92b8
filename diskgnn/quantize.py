"""`python -m diskgnn.quantize DIR --spec SPEC`: adds quantized feature variants to a dataset. The command lives
in diskgnn.data.quantize.cli."""

import sys

from .errors import run_cli


def cli() -> int:
    return run_cli("quantize", "diskgnn.data.quantize.cli")


if __name__ == "__main__":
    sys.exit(cli())
