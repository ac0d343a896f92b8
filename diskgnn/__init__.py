"""diskgnn: out-of-core GNN training (offline sampling, batched packing, io_uring reads).

Importing the package is cheap and has no side effects: torch and the native
extension are loaded only by the modules that need them.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "native_info", "open_dataset", "open_features", "prepare", "verify"]


def native_info() -> dict:
    """What the native extension was built with and what this kernel allows."""
    from . import _native

    reason = _native.io_uring_unavailable_reason()
    return {
        "io_uring_compiled": _native.io_uring_compiled(),
        "io_uring_usable": reason == "",
        "io_uring_reason": reason or None,
    }


def __getattr__(name):
    # Lazy re-exports keep `import diskgnn` light (prepare must not pull in torch).
    if name == "open_dataset":
        from .format import open_dataset

        return open_dataset
    if name == "prepare":
        from .prepare import prepare

        return prepare
    if name == "verify":
        from .verify import verify

        return verify
    if name == "open_features":
        from .reader import open_features

        return open_features
    raise AttributeError(f"module 'diskgnn' has no attribute {name!r}")
