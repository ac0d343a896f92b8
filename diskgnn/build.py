"""What this diskgnn is: its version, and what its native extension was built with and may use here."""

__version__ = "0.1.0"


def native_info() -> dict:
    """What the native extension was built with and what this kernel allows."""
    from . import _native

    reason = _native.io_uring_unavailable_reason()
    return {
        "io_uring_compiled": _native.io_uring_compiled(),
        "io_uring_usable": reason == "",
        "io_uring_reason": reason or None,
    }
