"""`python -m diskgnn.infer` (diskgnn-infer): see diskgnn/infer/command.py and `--help`."""

import sys

from ..errors import run_cli


def cli() -> int:
    return run_cli("infer", "diskgnn.infer.command")


if __name__ == "__main__":
    sys.exit(cli())
