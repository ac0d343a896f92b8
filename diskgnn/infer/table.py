"""An --embeddings run's learned table in diskgnn.infer: written out as it is (`--output table`), or read beside the
features as the model's input (its other outputs), as training read it (train/run.py `inputs`).

The table is updated in place and checkpointed by generation (store/embeddings.py, store/journal.py): it holds
the values of its last checkpoint, plus the writes of an interval a kill cut short, which the journal would undo
on --resume. The model's outputs are exact only with the checkpoint of the table's generation and no such
writes: anything else is refused in one line rather than inferred from weights and values that never met.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..arrays import read_rows
from ..data.features import AsFloat32, FeatureSource
from ..data.resumable import Output, nodes_named
from ..errors import DiskgnnError
from ..store.journal import UndoJournal


def open_table(directory: Path, rows: int) -> tuple[np.memmap, dict, Path]:
    """(the table's records [`rows`, values then optimizer state] mapped read-only, its table.json, its path)."""
    table = directory / "table.bin"
    meta_path = table.with_name("table.json")
    if not meta_path.is_file():
        raise DiskgnnError(f"{meta_path}: missing: the run's embedding table is gone")
    meta = json.loads(meta_path.read_text())
    if meta.get("num_nodes") != rows:
        raise DiskgnnError(f"{table}: a table of {meta.get('num_nodes')} rows, the dataset has {rows:,} nodes")
    records = np.memmap(table, dtype=np.float32, mode="r", shape=(rows, meta["row_bytes"] // 4))
    return records, meta, table


def write_table(ds, workdir: Path, nodes: np.ndarray, out: Path, spec: str, batch_size: int) -> dict:
    """The learned values of `nodes` (selected by `spec`), from the table as last flushed."""
    records, meta, table = open_table(workdir / "embeddings", ds.num_nodes)
    identity = {"table": f"{table.with_name('table.json')} generation of {table.stat().st_mtime_ns}",
                "output": "table", "nodes": nodes_named(spec, nodes)}
    result = Output(out, (nodes.size, meta["dim"]), np.float32, identity, batch_size)
    for s in range(result.rows_done, nodes.size, batch_size):
        result.write(s, read_rows(records, nodes[s: s + batch_size])[:, : meta["dim"]].numpy())
    return result.commit({"workdir": str(workdir), "dataset": str(ds.path),
                          "dataset_checksum": ds.manifest.get("manifest_checksum"), "table": str(table)})


class JoinedRows:
    """Read-only rows of a run's model input: each node's decoded feature row, then its learned values. Indexed as
    an array is (a slice, or ids), as layer-wise inference reads its input."""

    def __init__(self, features: FeatureSource, records: np.memmap, dim: int):
        self.features, self.records, self.dim = features, records, dim
        self.shape, self.dtype = (records.shape[0], features.dim + dim), np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index) -> np.ndarray:
        values = np.asarray(self.records[index], dtype=np.float32)[..., : self.dim]
        if not self.features.dim:
            return values
        rows = self.features.decode_torch(torch.from_numpy(np.asarray(self.features.rows[index]))).numpy()
        return np.concatenate([rows, values], axis=-1)


def joined_source(features: FeatureSource, workdir: Path, ds, state: dict, checkpoint: Path) -> FeatureSource:
    """The model's input of an --embeddings run, where the table and the checkpoint belong together (see the
    module's docstring)."""
    want = (state.get("embeddings") or {}).get("generation", 0)
    records, meta, table = checked_table(workdir / "embeddings", ds.num_nodes, want, checkpoint)
    name = f"{features.name}+table(generation {want}, {table.stat().st_mtime_ns})"
    return FeatureSource(name, table, JoinedRows(features, records, meta["dim"]), AsFloat32(), features.checksum,
                         features.dim + meta["dim"])


def type_tables(workdir: Path, ds, cfg, state: dict, checkpoint: Path) -> dict[str, tuple[np.memmap, int]]:
    """A typed run's learned values per type (WORKDIR/embeddings/<type>/: every type's under --embeddings, the
    featureless types' under --featureless table), each table checked to belong with the checkpoint as a plain
    run's --embeddings table is."""
    saved = state.get("embeddings") or {}
    out = {}
    for t in ds.schema.types:
        if cfg.embeddings or (cfg.featureless == "table" and not t.feature_dim):
            want = (saved.get(t.name) or {}).get("generation", 0)
            records, meta, _ = checked_table(workdir / "embeddings" / t.name, t.count, want, checkpoint)
            out[t.name] = records, meta["dim"]
    return out


def checked_table(directory: Path, rows: int, want: int, checkpoint: Path) -> tuple[np.memmap, dict, Path]:
    """open_table's, where the table holds no values written after the checkpoint of generation `want`."""
    records, meta, table = open_table(directory, rows)
    journal = UndoJournal(table.with_name("journal.bin"), meta["row_bytes"])
    try:
        past = next(iter(journal.entries(want)), None) is not None
    except DiskgnnError:  # the journal undoes to a newer generation: the table moved on from this checkpoint
        past = True
    if past:
        raise DiskgnnError(f"{table}: holds values written after the checkpoint {checkpoint} (generation {want}) "
                           "saw them: infer with the run's last checkpoint (--checkpoint last) of a run that "
                           "finished, or --resume the run to a checkpoint first")
    return records, meta, table
