"""A typed graph's plan: the budget split as the plain plan splits it, with the host tier ranked over node types.

`TypedPlan.made` decides what a typed run reads from its plan before any work (the device, the precision, the
step, the reads in flight); once epoch 0 is sampled, `refined` splits --memory-budget from it: the base, the model
with its optimizer state (learned featureless rows included), the labels, the working set of epoch 0's largest
batch (raw rows, their float32 copies, the step's activations, times the batches in flight: the most that leave
the relations' topology its page cache), the packer, the out-of-core tables' own memory (train/tables.py), the
topology's page cache, and the rest to the host tier (half under --host-cache auto):
typed feature rows and the tables' hot rows, ranked together by epoch 0's reads per byte (placement.densest). The
disk the epochs' and eval sets' files take at once is checked as the plain plan checks it.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field

import numpy as np

from .. import defaults
from ..errors import DiskgnnError
from ..offline.placement import densest
from ..offline.sample import topology_bytes
from ..target.graphed import StepChoice
from ..units import format_size
from .modes import Precision
from .plan import disk_copies, resolve_device, resolve_precision


def _hop_text(schema, hop) -> str:
    if len(set(hop)) == 1:
        return f"{hop[0]} per relation"
    return ",".join(f"{r.name}={f}" for r, f in zip(schema.relations, hop) if f)


@dataclass(frozen=True)
class TypedPlan:
    """What a typed run reads of its plan: as a Plan's, and (`sizes`, refined) the budget's split, summary.json's
    "plan"; `held`: the host tier's rows per type (featured types' and tables'), as refined placed them."""

    device: str
    precision: Precision
    budget: int
    read_depth: int = defaults.READ_DEPTH
    pack_memory: int = defaults.PACK_MEMORY
    step: StepChoice = StepChoice(False, "step: eager (a typed run's step is not captured)")
    recent_batches: int = 0
    topology_read_ahead = False  # each relation's topology is sampled as mapped
    embedding_buffer = None
    sizes: dict = field(default_factory=dict)
    held: dict = field(default_factory=dict)

    @classmethod
    def made(cls, cfg) -> "TypedPlan":
        device = resolve_device(cfg.device)  # as a plain run's plan resolves them
        return cls(device, resolve_precision(cfg, device), cfg.budget_bytes,  # as parsed once, by the config
                   read_depth=cfg.read_depth or defaults.READ_DEPTH, recent_batches=cfg.recent_window)

    @staticmethod
    def schema_line(cfg, ds, fanouts) -> str:
        s = ds.schema
        return (f"plan: heterogeneous {ds.path.name}: " + ", ".join(
            f"{t.name} {t.count:,}" + (f" ({t.feature_dim}-d)" if t.feature_dim else f" ({cfg.featureless})")
            for t in s.types) + f"; {len(s.relations)} relations, {ds.num_edges:,} edges; target {s.target}, "
            f"{s.num_classes} classes{' (multi-label)' if s.multilabel else ''}; {cfg.model} x {len(fanouts)} "
            f"layers, fanouts per hop " + " / ".join(_hop_text(s, hop) for hop in fanouts))

    def refined(self, loader, model) -> "TypedPlan":
        """Planned from epoch 0's batches (`loader.epochs`, sampled) and `model`'s parameters; refused in one line
        where the budget or the disk cannot hold the run."""
        cfg, s, epoch0, tables, features = loader.cfg, loader.ds.schema, loader.epochs.samples0, loader.tables, \
            loader.source
        base = defaults.TRAIN_BASE_RSS + (defaults.CUDA_BASE_RSS if self.device == "cuda" else 0)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        model_bytes = params * (4 if self.device == "cpu" else 0)  # weights, gradients, Adam's two moments
        tabled = {t.name for t in tables.types}
        # epoch 0's reads per row: the featured types' as the offline epochs counted them, the tables' here
        counts = {**loader.epochs.counts0, **{f"{t} table": np.zeros(s.type(t).count, np.int32) for t in tabled}}
        table_rows = dict.fromkeys(tabled, 0)
        rows_max = step_max = 0
        for batch in epoch0:
            rows = step = 0
            for t, ty in enumerate(s.types):
                ids = batch.type_nodes[t]
                if ty.feature_dim:
                    # as read (stored or code rows), and as float32
                    rows += ids.size * (features.sources[ty.name].row_bytes + 4 * ty.feature_dim)
                if ty.name in tabled:
                    counts[f"{ty.name} table"][ids] += 1  # a batch's nodes of a type are distinct
                    table_rows[ty.name] = max(table_rows[ty.name], ids.size)
                    rows += ids.size * (tables.row_bytes + 8 * tables.dim)  # records, values and gradient
                step += int(batch.counts[:, t].sum()) * cfg.hidden * 4 * 8  # activations and their gradients
            edges = sum(int(blk.indices.size) for hop in batch.hops for blk in hop if blk is not None)
            if cfg.model == "gat":  # a message per edge, its weighted copy and their gradients
                step += edges * cfg.hidden * 4 * 4
            rows += edges * 40  # its block tensors
            rows_max, step_max = max(rows_max, rows), max(step_max, step)
        window = cfg.recent_window
        reads = {name: int(c.sum()) for name, c in counts.items()}
        feature_reads = [reads[n] for n in features.sources]
        # the packer's plan holds at most an epoch's reads of one type (types are packed one at a time)
        plan_rows = defaults.PACK_PLAN_BYTES_PER_ROW * max(feature_reads, default=0) * defaults.DISK_HEADROOM
        if window:  # and, for the recent-rows tier, the batch and position each of the type's nodes was last read
            plan_rows += 8 * max((t.count for t in s.types if t.feature_dim), default=0)
        # an --embedding-cache of their own holds the tables' hot rows apart from the host tier
        own = cfg.embedding_cache_bytes if tables.types else None
        table_bytes = tables.memory(table_rows) + (own or 0)
        fixed = base + model_bytes + loader.labels.nbytes + int(plan_rows) + table_bytes
        # Each relation's topology is sampled as mapped, so the page cache must keep it (MAG17M's 1.7 GiB under a
        # 4 GiB cap: 140-150 s of sampling in 3 epochs through page faults, 31 s kept): the deepest reads
        # (--read-depth, or READ_DEPTH down to 1) that leave it room, else the deepest that fit.
        topology = topology_bytes(loader.ds)
        fits = []
        for depth in [cfg.read_depth] if cfg.read_depth else range(defaults.READ_DEPTH, 0, -1):
            # the batches in flight hold their rows and blocks, the recent-rows tiers the last window's; one step
            # at a time holds its activations
            working = rows_max * (depth + 2 + window) + step_max
            left = self.budget - fixed - working
            pack_memory = defaults.PACK_MEMORY if left - defaults.PACK_MEMORY >= 0 else defaults.MIN_PACK_MEMORY
            left -= pack_memory if feature_reads else 0
            fits.append((depth, working, pack_memory, left))
            if left >= topology:
                break
        depth, working, pack_memory, left = fits[-1] if fits[-1][3] >= topology else fits[0]
        if left < 0:
            raise DiskgnnError(
                f"--memory-budget {cfg.memory_budget}: the run needs about {format_size(self.budget - left)} (base "
                f"{format_size(base)}, model and optimizer {format_size(model_bytes)}, working set "
                f"{format_size(working)}: {depth + 2} batches of epoch 0's largest in flight; the packer "
                f"{format_size(pack_memory + plan_rows)}"
                + (f"; the tables {format_size(table_bytes)}" if table_bytes else "") + "): raise it, or lower "
                "--batch-size or --fanouts" + (", or learn featureless types' rows out of core (--featureless "
                                               "table) or hash them (hashed)" if cfg.featureless == "learned" and
                                               any(not t.feature_dim for t in s.types) else ""))
        cached = topology if left >= topology else 0  # the page cache's first share
        tier = (left - cached) // 2 if cfg.host_cache_bytes is None else min(left, cfg.host_cache_bytes)
        if cfg.sampling_mode.online:
            tier = 0  # the baseline: no rows placed from a known future, every one read by id
        costs = {name: src.row_bytes + 8 for name, src in features.sources.items()}  # a row and its id
        table_costs = tables.held_row_bytes()
        # one host tier, the feature rows and the tables' ranked together, or the tables' in a cache of their own
        shares = [({**costs, **table_costs}, tier)] if own is None else [(costs, tier), (table_costs, own)]
        held = {n: ids for c, size in shares for n, ids in densest({n: counts[n] for n in c}, c, size).items()}
        costs.update(table_costs)
        hits = {name: int(counts[name][ids].sum()) for name, ids in held.items()}
        blowup = cfg.max_blowup if cfg.max_blowup is not None else float("inf")  # each type's packs capped
        stored = {name: src.row_bytes for name, src in features.sources.items()}
        pack_bytes = int(sum(min((reads[n] - hits.get(n, 0)) * b + 4096 * len(epoch0), blowup * s.type(n).count * b)
                             for n, b in stored.items()))
        copies = disk_copies(cfg, *(loader.ds.split(n).size for n in ("train", "val", "test")), cfg.batch_size)
        disk = int(copies * (pack_bytes + epoch0.meta["file_bytes"]) * defaults.DISK_HEADROOM) + tables.disk()
        free = shutil.disk_usage(loader.workdir).free + loader.held_on_disk()
        if disk > free:
            raise DiskgnnError(
                f"{loader.workdir}: needs ~{format_size(disk)} of disk for samples and packs ({copies:.2f} epochs' "
                f"at once) and tables, {format_size(free)} free (use --workdir elsewhere, raise --host-cache or "
                "--memory-budget, or lower --eval-max-batches)")
        placed = {name: int(ids.size) for name, ids in held.items()}
        sizes = {"budget_bytes": self.budget, "base_bytes": base, "model_bytes": model_bytes,
                 "working_set_bytes": working, "pack_memory_bytes": pack_memory + int(plan_rows),
                 "recent_batches": window, "table_memory_bytes": table_bytes,
                 "host_tier_bytes": sum(ids.size * costs[n] for n, ids in held.items()), "host_tier_rows": placed,
                 "expected_hit_rate": {n: hits.get(n, 0) / max(1, reads[n]) for n in reads},
                 "read_depth": depth, "topology_bytes": topology, "topology_cached": bool(cached),
                 "page_cache_bytes": left - tier,
                 "packs_bytes_per_epoch": pack_bytes, "disk_needed": disk, "disk_free": free,
                 "backend": features.backend_name}
        loader.say(f"plan: --memory-budget {format_size(self.budget)}: base {format_size(base)}, model and "
                   f"optimizer {format_size(model_bytes)}, working set {format_size(working)} with reads of {depth} "
                   f"batches in flight, topology {format_size(topology)} " + ("in the page cache" if cached else
                                                                    "sampled through page faults") + ", host tier "
                   f"{format_size(sizes['host_tier_bytes'])} ("
                   + ", ".join(f"{n} {placed.get(n, 0):,} rows, "
                               f"{hits.get(n, 0) / max(1, reads[n]):.0%} of epoch 0's reads" for n in reads)
                   + f"), packer {format_size(pack_memory + plan_rows)}"
                   + (f", tables {format_size(table_bytes)} besides their hot rows" if table_bytes else "")
                   + f"; disk {format_size(disk)} at once ({format_size(pack_bytes)} of packs an epoch), "
                   f"{format_size(free)} free; reader {features.backend_name}")
        return dataclasses.replace(self, read_depth=depth, pack_memory=pack_memory, sizes=sizes, held=held)
