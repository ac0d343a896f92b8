"""User-facing errors and the CLI wrapper that prints them as one line."""

import importlib
import signal
import sys
import threading


class DiskgnnError(Exception):
    """An error caused by the user's input or environment, not by a bug.

    The message is complete on its own: it names the file and what is wrong.
    Command-line entry points print it as one line and exit non-zero,
    without a traceback.
    """


_interrupted = False


def _on_sigint(signum, frame):
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    """Raises KeyboardInterrupt if Ctrl-C was pressed since the command started.

    Python raises the interrupt in whatever code the main thread runs, and a
    finalizer (any ``__del__``, ours or a library's) that it lands in prints
    "Exception ignored" and drops it. Loops that run for long call this at
    each step so that such a Ctrl-C still stops the command.
    """
    if _interrupted:
        raise KeyboardInterrupt


def run_cli(command: str, main, argv=None) -> int:
    """Runs ``main(argv)`` and turns user errors into a one-line message.

    ``main`` may be a module's name: its ``main`` is imported inside, so that an
    error met on import (a bad DISKGNN_* setting) is reported as one line too.
    """
    global _interrupted
    _interrupted = False
    own_handler = (threading.current_thread() is threading.main_thread()
                   and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if own_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        if isinstance(main, str):
            main = importlib.import_module(main).main
        main(argv)
    except DiskgnnError as e:
        print(f"{command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    finally:
        # The record belongs to this command: left set, it would stop the next
        # pipeline in this process (a test run, a notebook) that was never interrupted.
        _interrupted = False
        if own_handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return 0
