"""User-facing errors and the CLI wrapper that prints them as one line.

Exit status: 0 done, 1 a data or environment error (a file missing, corrupted
or unreadable, a full disk), 2 a usage error (a flag, config key or value given
wrong), 130 interrupted.
"""

import argparse
import difflib
import importlib
import os
import signal
import sys
import threading


class DiskgnnError(Exception):
    """An error caused by the user's data or environment, not by a bug.

    The message is complete on its own: it names the file and what is wrong.
    Command-line entry points print it as one line and exit with `exit_status`,
    without a traceback.
    """

    exit_status = 1


class UsageError(DiskgnnError):
    """A flag, config key or option value given wrong; the message names it."""

    exit_status = 2


def closest(word: str, choices) -> str:
    """' (did you mean X?)' for the closest of `choices`, or '' when none is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line (a UsageError), like every other error of the commands; run as a
    console script (diskgnn-train), usage names the script rather than `python -m`."""

    def __init__(self, *args, **kwargs):
        script = os.path.basename(sys.argv[0]) if sys.argv else ""
        if script.startswith("diskgnn-"):
            kwargs["prog"] = script
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(message)


def os_error_line(e: OSError) -> str:
    """An OSError as '<file>: <what failed>' (the native reader's errors carry the offset in strerror)."""
    where = e.filename if e.filename is not None else ""
    what = e.strerror or str(e)
    return f"{where}: {what}" if where else what


_interrupted = False


def _in_finalizer(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _on_sigint(signum, frame):
    global _interrupted
    _interrupted = True
    # Raised inside a finalizer (ours or a library's, even on its first line), the interrupt would print
    # "Exception ignored" with a traceback and be dropped; there it is only recorded, and the next
    # raise_if_interrupted (every step of the long loops) raises it.
    if not _in_finalizer(frame):
        raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    """Raises KeyboardInterrupt if Ctrl-C was pressed since the command started.

    The handler does not raise inside a finalizer (any ``__del__``, ours or a
    library's), where Python would print "Exception ignored" and drop it. Loops
    that run for long call this at each step so that such a Ctrl-C still stops
    the command.
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
        return e.exit_status
    except OSError as e:  # the environment refused a file operation no check foresaw: still one line
        print(f"{command}: error: {os_error_line(e)}", file=sys.stderr)
        return 1
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
