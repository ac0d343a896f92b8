"""User-facing errors and the CLI wrapper that prints them as one line."""

import sys


class DiskgnnError(Exception):
    """An error caused by the user's input or environment, not by a bug.

    The message is complete on its own: it names the file and what is wrong.
    Command-line entry points print it as one line and exit non-zero,
    without a traceback.
    """


def run_cli(command: str, main, argv=None) -> int:
    """Runs ``main(argv)`` and turns user errors into a one-line message."""
    try:
        main(argv)
    except DiskgnnError as e:
        print(f"{command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    return 0
