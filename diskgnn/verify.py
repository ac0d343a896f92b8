"""`python -m diskgnn.verify DIR`: every checksum and invariant of a dataset. The command lives in
diskgnn.data.verify."""

import sys

from .errors import run_cli


def cli() -> int:
    return run_cli("verify", "diskgnn.data.verify")


if __name__ == "__main__":
    sys.exit(cli())
