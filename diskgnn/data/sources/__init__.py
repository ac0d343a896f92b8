"""Input sources for `diskgnn.prepare`, one module per kind, and format detection.

Each source (`npy`, `ogb`, `csv`, `gnnbench`, `planetoid`, `synthetic`, and `pyg`: a
PyG Data passed to prepare() from Python) yields
labels, splits, feature rows and edges in chunks through the `Source`
interface of `base`, so prepare streams any of them with bounded memory.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import DiskgnnError, UsageError

FORMATS = ("auto", "npy", "ogb", "csv", "gnnbench", "planetoid", "zarr", "synthetic", "hgb", "npy-hetero")
HETERO_FORMATS = ("hgb", "npy-hetero")  # heterogeneous inputs: data/hetero/


def detect_format(path: Path) -> str:
    """Guesses the kind of a source from the files present."""
    if path.is_file():
        if path.suffix in (".npz", ".zip"):
            return "gnnbench"
        raise DiskgnnError(f"{path}: unknown format (a file that is not .npz or .zip; pass --format)")
    if not path.is_dir():
        raise DiskgnnError(f"{path}: no such file or directory")
    if (path / "raw" / "edge.csv.gz").exists() or (path / "raw" / "data.npz").exists():
        return "ogb"
    if any(path.glob("ind.*.graph")):
        return "planetoid"
    from .csv import find_edge_file

    if find_edge_file(path) is not None:
        return "csv"
    if (path / "edge_index.npy").exists() or (path / "indptr.npy").exists():
        return "zarr" if (path / "feat.zarr").exists() and not (path / "feat.npy").exists() else "npy"
    raise DiskgnnError(f"{path}: unknown format: no edge_index.npy, indptr.npy, edges.csv, OGB raw/ "
                       f"or Planetoid ind.* files (see docs/format.md, or pass --format)")


def open_source(source, fmt: str = "auto", *, ogb_split: str | None = None, synthetic: dict | None = None):
    """Opens SOURCE as the given format (or the detected one); a PyG Data object is a source too."""
    from .pyg import PygSource, is_pyg_data

    if is_pyg_data(source):
        return PygSource(source)
    if source == "synthetic" or fmt == "synthetic":
        return synthetic_source(**(synthetic or {}))
    path = Path(source)
    if not path.exists():
        raise DiskgnnError(f"{path}: no such file or directory")
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt in ("npy", "zarr"):
        from .npy import NpySource

        return NpySource(path)
    if fmt == "csv":
        from .csv import CsvSource

        return CsvSource(path)
    if fmt == "ogb":
        from .ogb import OgbSource

        return OgbSource(path, ogb_split)
    if fmt == "gnnbench":
        from .gnnbench import GnnBenchSource

        return GnnBenchSource(path)
    if fmt == "planetoid":
        from .planetoid import PlanetoidSource

        return PlanetoidSource(path)
    raise DiskgnnError(f"{source}: unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def synthetic_source(structure: str = "uniform", **options):
    """The generator `structure` names, with `options` (flags not given are None or absent: the structure's
    defaults apply)."""
    from .synthetic import STRUCTURES, UniformSource

    options = {k: v for k, v in options.items() if v is not None}
    if structure == "uniform":
        for key in ("communities", "label_noise", "degree_exponent"):
            if key in options:
                raise UsageError(f"synthetic: --{key.replace('_', '-')} is a setting of --structure powerlaw, "
                                 f"not uniform")
        return UniformSource(**options)
    if structure == "powerlaw":
        from .powerlaw import PowerLawSource

        return PowerLawSource(**options)
    raise UsageError(f"synthetic: --structure {structure!r}: choose from {', '.join(STRUCTURES)}")
