"""`--featureless table`: each featureless node type's rows learned in an embedding table out of core, the
`--embeddings` store (store/embeddings.py) once per type in WORKDIR/embeddings/<type>/: `hidden` values a row
with their optimizer state (--embedding-optimizer, --embedding-lr), the rows epoch 0 reads most held in memory as
the plan places them, the rest read and written back through the table's file, journaled so that --resume rolls
each table back to the checkpoint.

Per batch, in the training thread (after the step before has stored its rows): `inputs` gathers every table
type's records of the batch's nodes and hands their values to the model as leaves beside the features; after the
backward pass `step` applies each type's gradient to its records and stores them.
"""

from __future__ import annotations

import numpy as np

from ...store.embeddings import EmbeddingTable, working_bytes
from ...store.records import row_bytes


class HeteroTables:
    """The tables of a run's featureless types (none unless --featureless table)."""

    def __init__(self, cfg, schema, workdir):
        self.cfg, self.dir = cfg, workdir / "embeddings"
        self.types = [t for t in schema.types if not t.feature_dim] if cfg.featureless == "table" else []
        self.dim = cfg.hidden
        self.tables: dict[str, EmbeddingTable] = {}

    @property
    def row_bytes(self) -> int:
        return row_bytes(self.dim, self.cfg.embedding_optimizer)

    def held_row_bytes(self) -> dict[str, int]:
        """What a hot row costs in memory, per type: its record, its id and its dirty flag."""
        return {t.name: self.row_bytes + 9 for t in self.types}

    def memory(self, batch_rows: dict[str, int]) -> int:
        """The tables' memory besides their hot rows (`batch_rows[type]`: a batch's rows of it at most)."""
        return sum(working_bytes(t.count, self.dim, self.cfg.embedding_optimizer, batch_rows.get(t.name, 0))
                   for t in self.types)

    def disk(self) -> int:
        """Each table's file and, at worst, its undo journal of every row."""
        return 2 * sum(t.count * self.row_bytes for t in self.types)

    def open(self, resumed: dict | None, hot: dict[str, np.ndarray]) -> int:
        """Creates the tables (a fresh run) or rolls each back to the checkpoint's generation and steps
        (`resumed[type]`); holds `hot[type]`'s rows in memory. Returns the rows rolled back."""
        cfg, back = self.cfg, 0
        for i, t in enumerate(self.types):
            state = (resumed or {}).get(t.name)
            table = EmbeddingTable(self.dir / t.name, t.count, self.dim, seed=cfg.seed + 7919 * (i + 1),
                                   lr=cfg.embedding_lr, optimizer=cfg.embedding_optimizer, create=resumed is None,
                                   **(state or {}))
            table.place(hot.get(t.name, np.zeros(0, np.int64)))
            back += table.stats["rows_rolled_back"]
            self.tables[t.name] = table
        return back

    def inputs(self, x: dict, nodes: dict, device, train: bool) -> tuple[dict, dict]:
        """`x` with every table type's rows of the batch's `nodes`, and for a train step the (records, values)
        whose gradients `step` applies."""
        if not self.tables:
            return x, {}
        x, trained = dict(x), {}
        for name, table in self.tables.items():
            records = table.gather(nodes[name])
            values = records[:, : self.dim].detach().to(device).requires_grad_(train)
            x[name], trained[name] = values, (records, values)
        return x, trained

    def step(self, nodes: dict, trained: dict) -> None:
        for name, (records, values) in trained.items():
            if values.grad is not None:  # a type no layer reached this batch leaves its rows as they were
                self.tables[name].step(nodes[name], records, values.grad.float().cpu())

    def flush(self) -> dict:
        """Every table on disk as of the checkpoint about to be saved; returns what that checkpoint keeps."""
        for table in self.tables.values():
            table.flush()
        return {name: {"generation": t.generation + 1, "steps": t.steps} for name, t in self.tables.items()}

    def committed(self) -> None:
        for table in self.tables.values():
            table.committed(table.generation + 1)

    def stats(self) -> dict:
        return {name: {**t.stats, "table_bytes": t.table_bytes, "hot_rows": int(t.hot_ids.size)}
                for name, t in self.tables.items()}

    def close(self) -> None:
        for table in self.tables.values():
            table.close()
        self.tables.clear()

    def __bool__(self) -> bool:
        return bool(self.types)
