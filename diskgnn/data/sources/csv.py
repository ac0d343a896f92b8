"""A CSV edge list plus .npy features and labels.

The directory holds edges.csv (or edges.csv.gz / edges.tsv / edges.txt): one
"src,dst" pair per line (comma, tab or spaces), an optional header line and
'#' comments; feat.npy (or feat.zarr), labels.npy and optional split files as
in the npy layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import DiskgnnError
from .base import Source, open_text, text_rows
from .npy import FeatureLabelFiles, read_split_files

EDGE_FILES = ("edges.csv", "edges.csv.gz", "edges.tsv", "edges.tsv.gz", "edges.txt", "edges.txt.gz")


def find_edge_file(directory: Path) -> Path | None:
    for name in EDGE_FILES:
        if (directory / name).exists():
            return directory / name
    return None


def _sniff(path: Path) -> tuple[str | None, bool]:
    """Delimiter (None = whitespace) and whether the first line is a header."""
    with open_text(path) as f:
        first = ""
        for line in f:
            if line.strip() and not line.lstrip().startswith("#"):
                first = line.strip()
                break
    if not first:
        raise DiskgnnError(f"{path}: no edges (the file is empty)")
    delim = "," if "," in first else ("\t" if "\t" in first else None)
    fields = first.split(delim)
    try:
        [int(x) for x in fields]
        return delim, False
    except ValueError:
        return delim, True


class CsvSource(Source):
    def __init__(self, directory: Path):
        directory = Path(directory)
        self.dir = directory
        self.edge_file = find_edge_file(directory)
        if self.edge_file is None:
            raise DiskgnnError(f"{directory}: missing edge list (one of {', '.join(EDGE_FILES)})")
        self.delimiter, self.header = _sniff(self.edge_file)
        self.files = FeatureLabelFiles(directory)
        n, d = self.files.feat.shape
        # About 12 bytes of text per edge: a rough hint that only sizes sort buckets.
        hint = self.edge_file.stat().st_size // (4 if self.edge_file.suffix == ".gz" else 12)
        super().__init__(name=str(self.edge_file), num_nodes=n, feature_dim=d,
                         feature_dtype=self.files.feat.dtype, edge_count_hint=hint)

    def edges(self, max_edges):
        for block in text_rows(self.edge_file, 2, np.int64, max_edges, self.delimiter, self.header):
            yield block[:, 0], block[:, 1]

    def features(self, max_rows):
        return self.files.feat.rows(max_rows)

    def labels(self, max_rows):
        return self.files.labels.rows(max_rows)

    def splits(self):
        return read_split_files(self.dir)
