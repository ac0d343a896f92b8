"""`python -m diskgnn.train`: see diskgnn/train/__init__.py and `--help`."""

import sys

from ..errors import run_cli


def main(argv=None) -> None:
    from .options import resolve
    from .loop import train

    train(resolve(argv))


def cli() -> int:
    from ..distributed.group import exit_rank

    return exit_rank(run_cli("train", main))


if __name__ == "__main__":
    sys.exit(cli())
