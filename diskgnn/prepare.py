"""`python -m diskgnn.prepare SOURCE --out DIR`: any supported input -> a diskgnn dataset. The command lives in
diskgnn.data.prepare."""

import sys

from .errors import run_cli


def cli() -> int:
    return run_cli("prepare", "diskgnn.data.prepare")


if __name__ == "__main__":
    sys.exit(cli())
