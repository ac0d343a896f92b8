"""diskgnn: out-of-core GNN training (offline sampling, batched packing, io_uring reads).

Importing the package is cheap and has no side effects: torch and the native
extension are loaded only by the modules that need them.
"""

from .build import __version__, native_info

__all__ = ["Loader", "__version__", "native_info", "open_dataset", "open_features", "prepare", "verify"]


def __getattr__(name):
    # Lazy re-exports keep `import diskgnn` light (prepare must not pull in torch).
    if name == "open_dataset":
        from .data.format import open_dataset

        return open_dataset
    if name == "prepare":
        from .data.prepare import prepare

        return prepare
    if name == "verify":
        from .data.verify import verify

        return verify
    if name == "Loader":
        from .train.loader import Loader

        return Loader
    if name == "open_features":
        from .io.reader import open_features

        return open_features
    raise AttributeError(f"module 'diskgnn' has no attribute {name!r}")
