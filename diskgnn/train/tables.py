"""The rows a run learns in tables out of core, the embedding store (store/embeddings.py), journaled so that
--resume rolls them back to the checkpoint; both kinds behind one interface the Run calls (open, inputs, step,
flush, committed, at_best, summary, close):

- `NodeTable` (`--embeddings N`): N learned values per node beside its features, in WORKDIR/embeddings/, the rows
  epoch 0 reads most held in memory as the plan sizes them (or, partitioned, MariusGNN's buffer).
- `TypeTables` (a typed graph's): each featureless node type's rows in its own table under `--featureless table`,
  `hidden` values a row; or, under `--embeddings N`, every type's N learned values a node, beside its features
  (as its rows where it has none); WORKDIR/embeddings/<type>/, its hot rows placed by the typed plan beside the
  feature rows (or in their own `--embedding-cache`).

Per batch, in the training thread (after the step before has stored its rows): `inputs` gathers the batch's
records and hands their values to the model as leaves beside (or as) its rows; after the backward pass `step`
applies their gradient and stores them. Each table keeps its optimizer state (--embedding-optimizer,
--embedding-lr) in its records. Under --distributed independent each rank keeps a copy of every table in its own
workdir, made from the same seed, and steps every rank's rows with their gradients averaged over the ranks (as DDP
averages the model's): the copies stay equal, bit for bit, and the ranks learn one table.
"""

from __future__ import annotations

import numpy as np
import torch

from ..offline.partitions import partition_rows
from ..offline.placement import hottest_first
from ..store.embeddings import EmbeddingTable, working_bytes
from ..store.records import row_bytes


class NodeTable:
    """--embeddings: the run's table of one row per node."""

    def __init__(self, cfg, loader):
        self.cfg, self.loader = cfg, loader
        self.table: EmbeddingTable | None = None

    def open(self, resumed: dict | None) -> None:
        """New (a fresh run) or rolled back to the checkpoint's `resumed` generation and steps, with the rows
        epoch 0 reads most held in memory as the plan sizes them."""
        cfg, loader = self.cfg, self.loader
        table = self.table = EmbeddingTable(loader.workdir / "embeddings", loader.ds.num_nodes, cfg.embeddings,
                                            seed=cfg.seed, lr=cfg.embedding_lr, optimizer=cfg.embedding_optimizer,
                                            create=resumed is None, **(resumed or {}))
        if table.stats["rows_rolled_back"]:
            loader.say(f"plan: --resume: {table.stats['rows_rolled_back']:,} embedding rows rolled back to the "
                       "checkpoint from the undo journal")
        counts = loader.epochs.take_counts0()
        if loader.plan.embedding_buffer:  # partitioned: the batches' buffer states fill it (inputs)
            table.use_partitions(partition_rows(loader.ds.num_nodes, loader.plan.embedding_buffer[0]),
                                 loader.plan.embedding_buffer[1])
        else:
            table.place(hottest_first(counts)[: loader.plan.embedding_host // table.row_bytes])

    def inputs(self, mb, train: bool):
        """The batch's features with its nodes' embedding values beside them; and for a train step the (records,
        values) whose gradient `step` applies."""
        if mb.link is not None and mb.link.partitions is not None:
            self.table.hold(mb.link.partitions)
        records = self.table.gather(mb.input_nodes)
        # a leaf over the records' own values (Adagrad updates them in place after the backward pass)
        values = records[:, : self.cfg.embeddings].detach().to(mb.x.device).requires_grad_(train)
        return (torch.cat([mb.x, values], 1) if mb.x.shape[1] else values), (records, values)

    def step(self, mb, trained) -> None:
        self.table.step(*every_rank(self.loader.group, self.table, mb.input_nodes, *trained))

    def flush(self) -> dict:
        """The table on disk as of the checkpoint about to be saved; what last.pt keeps of it."""
        self.table.flush()
        return {"generation": self.table.generation + 1, "steps": self.table.steps}

    def committed(self) -> None:
        self.table.committed(self.table.generation + 1)

    def at_best(self) -> dict:
        """What best.pt keeps: the generation the next last.pt commits (diskgnn.infer checks it)."""
        return {"embeddings": {"generation": self.table.generation + 1}}

    def summary(self) -> dict:
        """Rows served from memory, the write queue and disk; bytes read, written and journaled."""
        t = self.table
        return {"embeddings": {**t.stats, "table_bytes": t.table_bytes, "hot_rows": int((t.hot_ids >= 0).sum())}}

    def close(self) -> None:
        if self.table is not None:
            self.table.close()


class TypeTables:
    """A typed run's tables: every type's under --embeddings, else the featureless types' under --featureless table
    (none otherwise). The plan keys a type's table "<type> table" beside the type's feature rows."""

    def __init__(self, cfg, schema, workdir, group):
        self.cfg, self.dir, self.group = cfg, workdir / "embeddings", group
        if cfg.embeddings:
            self.types, self.dim = list(schema.types), cfg.embeddings
        else:
            self.types = [t for t in schema.types if not t.feature_dim] if cfg.featureless == "table" else []
            self.dim = cfg.hidden
        self.tables: dict[str, EmbeddingTable] = {}
        self.hot: dict[str, np.ndarray] = {}  # the rows the typed plan holds in memory (`hold`)
        self.say = print
        self._stats: dict = {}

    @property
    def row_bytes(self) -> int:
        return row_bytes(self.dim, self.cfg.embedding_optimizer)

    def held_row_bytes(self) -> dict[str, int]:
        """What a hot row costs in memory, per table: its record, its id and its dirty flag."""
        return {f"{t.name} table": self.row_bytes + 9 for t in self.types}

    def memory(self, batch_rows: dict[str, int]) -> int:
        """The tables' memory besides their hot rows (`batch_rows[type]`: a batch's rows of it at most)."""
        return sum(working_bytes(t.count, self.dim, self.cfg.embedding_optimizer,
                                 batch_rows.get(t.name, 0) * self.group.world) for t in self.types)

    def disk(self) -> int:
        """Each table's file and, at worst, its undo journal of every row."""
        return 2 * sum(t.count * self.row_bytes for t in self.types)

    def hold(self, hot: dict[str, np.ndarray], say) -> None:
        """The rows the plan holds in memory, per table ("<type> table"; placed as the tables open), and where
        lines go."""
        self.hot, self.say = hot, say

    def open(self, resumed: dict | None) -> None:
        """Creates the tables (a fresh run) or rolls each back to the checkpoint's generation and steps
        (`resumed[type]`); holds the plan's hot rows in memory."""
        cfg, back = self.cfg, 0
        for i, t in enumerate(self.types):
            state = (resumed or {}).get(t.name)
            table = EmbeddingTable(self.dir / t.name, t.count, self.dim, seed=cfg.seed + 7919 * (i + 1),
                                   lr=cfg.embedding_lr, optimizer=cfg.embedding_optimizer, create=resumed is None,
                                   **(state or {}))
            table.place(self.hot.get(f"{t.name} table", np.zeros(0, np.int64)))
            back += table.stats["rows_rolled_back"]
            self.tables[t.name] = table
        if back:
            self.say(f"plan: --resume: {back:,} table rows rolled back to the checkpoint from the undo journals")

    def inputs(self, mb, train: bool) -> tuple[dict, dict]:
        """The batch's rows with every table's rows of its nodes (beside a featured type's, or as a featureless
        type's), and for a train step the (records, values) whose gradients `step` applies."""
        x, trained, nodes = dict(mb.x), {}, mb.nodes
        device = mb.labels.device
        for name, table in self.tables.items():
            records = table.gather(nodes[name])
            values = records[:, : self.dim].detach().to(device).requires_grad_(train)
            x[name] = torch.cat([x[name], values], 1) if name in x else values
            trained[name] = records, values
        return x, trained

    def step(self, mb, trained: dict) -> None:
        nodes = mb.nodes
        for name, (records, values) in trained.items():
            step = every_rank(self.group, self.tables[name], nodes[name], records, values)
            if step is not None:  # a type no layer reached this batch (on any rank) leaves its rows as they were
                self.tables[name].step(*step)

    def flush(self) -> dict:
        """Every table on disk as of the checkpoint about to be saved; returns what that checkpoint keeps."""
        for table in self.tables.values():
            table.flush()
        return {name: {"generation": t.generation + 1, "steps": t.steps} for name, t in self.tables.items()}

    def committed(self) -> None:
        for table in self.tables.values():
            table.committed(table.generation + 1)

    def at_best(self) -> dict:
        return {}

    def summary(self) -> dict:
        """Per type: rows served from memory, the write queue and disk; bytes read, written and journaled."""
        return {"embeddings": self._stats or self._table_stats()}

    def _table_stats(self) -> dict:
        return {name: {**t.stats, "table_bytes": t.table_bytes, "hot_rows": int(t.hot_ids.size)}
                for name, t in self.tables.items()}

    def close(self) -> None:
        self._stats = self._stats or self._table_stats()  # the summary's, made before the tables close
        for table in self.tables.values():
            table.close()
        self.tables.clear()

    def __bool__(self) -> bool:
        return bool(self.types)


def every_rank(group, table: EmbeddingTable, ids: np.ndarray, records: torch.Tensor, values: torch.Tensor):
    """What a table steps (ids, their records, their values' gradient; None where no layer reached them): this
    rank's batch's rows, or under torchrun every rank's once each, their gradients summed in rank order (zeros
    where a rank's layers did not reach them) and divided by the ranks, their records gathered again (this rank's
    as it read them: nothing stepped them since)."""
    grad = None if values.grad is None else values.grad.float().cpu()
    if not group.active:
        return None if grad is None else (ids, records, grad)
    parts = group.gather((np.asarray(ids, np.int64), grad))
    if all(g is None for _, g in parts):
        return None
    rows, inverse = np.unique(np.concatenate([i for i, _ in parts]), return_inverse=True)
    grads = torch.cat([torch.zeros(i.size, table.dim) if g is None else g for i, g in parts])
    summed = torch.zeros(rows.size, table.dim).index_add_(0, torch.from_numpy(inverse.ravel()), grads)
    return rows, table.gather(rows), summed / group.world
