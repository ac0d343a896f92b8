"""The plan as a reader sees it: the lines a run prints and summary.json's "plan" (plan.py holds the numbers), and
summary.json's data side (`data_summary`)."""

from __future__ import annotations

from .. import defaults
from ..data.quantize import fidelity
from ..target import target_for
from ..units import format_size


def plan_lines(plan) -> list[str]:
    """The plan as the run prints it, before sampling (the placement's line comes from placed_line)."""
    smaller = plan.raw_row_bytes / max(1, plan.row_bytes)  # a featureless dataset's: 0 / 0, said so below
    out = [
        f"plan: dataset {plan.dataset}: {plan.num_nodes:,} nodes, {plan.num_edges:,} edges, features "
        f"{plan.feature_dim} x {plan.feature_dtype} = {format_size(plan.num_nodes * plan.raw_row_bytes)}; "
        "splits " + ", ".join(f"{s} {n:,}" for s, n in plan.splits.items()),
        f"plan: --features {plan.features}: {plan.row_bytes:,} B rows"
        + (f" ({smaller:.1f}x smaller than features.bin)" if smaller not in (0, 1) else "")
        + (f", {format_size(plan.feature_bytes)} in {plan.features_file}; packs, caches and reads move these "
           "rows, decoded on the training device" if plan.row_bytes else ": no features, nothing to pack or read"),
        *([f"plan: --features {plan.features} fidelity {fidelity.summary(plan.features_fidelity)}"]
          if plan.features_fidelity else []),
        f"plan: memory budget {plan.budget_text}: {_memory_text(plan)}; device {plan.device}; {plan.workload}",
    ]
    if plan.embedding_dim:
        parts, held = plan.embedding_buffer or (0, 0)
        out.append(f"plan: --embeddings {plan.embedding_dim}: a table of {plan.num_nodes:,} rows of values and "
                   f"optimizer state = {format_size(plan.embedding_table)} on disk in the workdir; "
                   + (f"{format_size(plan.embedding_host)} of it in memory (the rows epoch 0 reads most), the rest "
                      "read per batch and written back in id order behind an undo journal" if not parts else
                      f"{parts} partitions of {format_size(plan.embedding_table // parts)}, {held} in memory at "
                      f"once ({format_size(plan.embedding_host)}), each read and written back whole (behind an undo "
                      "journal) as the epoch's buffer states turn; a batch's edges, negatives and neighbours are "
                      "among them"))
    if target_for(plan.device).device_tier:
        out.append(f"plan: {plan.host_gather.line}")
        out.append(f"plan: {plan.step.line}")
    if plan.sampling.online:
        out.append("plan: online sampling: no placement (future accesses unknown); every row is read from "
                   f"{plan.features_file}")
    else:
        out.append(f"plan: topology {format_size(plan.topology_bytes)}: "
                   + ("read ahead into the page cache before each sampling pass" if plan.topology_read_ahead
                      else "sampled through page faults (the budget leaves "
                           f"{format_size(max(0, plan.page_cache))} of page cache)")
                   + f"; packer buffers {format_size(plan.pack_memory)}")
    return out

def _memory_text(plan) -> str:
    return (f"working set ~{format_size(plan.working_set)} with reads of {plan.read_depth} batches in flight"
            + (f" and packer buffers from {format_size(plan.pack_floor)} (the defaults, {defaults.READ_DEPTH} "
               f"and {format_size(defaults.PACK_MEMORY)}, do not fit)" if plan.squeezed else "")
            + ", " + ", ".join(f"{name} cache {format_size(b)} ({b // max(1, plan.row_bytes):,} rows)"
                               for name, b in plan.tiers.items()))

def measured_line(plan, bound: int, most: int) -> str:
    """measured()'s plan, against the `bound` on a batch's input rows it was planned with before."""
    return (f"plan: epoch 0's batches read {most:,} input rows at most (the bound: {bound:,}); sized for "
            f"{plan.batch_rows:,}: {_memory_text(plan)}; packer buffers {format_size(plan.pack_memory)}")

def placed_line(plan, workdir) -> str:
    rates = plan.expected_hit_rates
    return ("plan: " + (f"no feature rows to read, {plan.input_rows_per_batch:,.0f} nodes per batch" if not
                        plan.row_bytes else "expected hit rates " + ", ".join(
                            f"{n} {r:.1%}" + (f" ({plan.tier_rows_placed[n]:,} rows)" if n in plan.tier_rows_placed
                                              else f" (the last {plan.recent_batches} batches' rows)")
                            for n, r in rates.items())
                        + f", packs {1 - sum(rates.values()):.1%} of {plan.input_rows_per_batch:,.0f} rows per "
                          "batch")
            + "; samples "
            f"{format_size(plan.samples_bytes_per_epoch)} and "
            f"packs ~{format_size(plan.packs_bytes_per_epoch)} per epoch; {format_size(plan.disk_needed)} on "
            f"disk at once, {format_size(plan.disk_free)} free in {workdir}")

def eval_line(cfg, sets: dict, chunk: int | None) -> str:
    """How the sampled evaluation's batches are made: kept whole, or streamed in chunks (offline/eval_sets.py)."""
    limit = "all" if cfg.eval_max_batches is None else f"the first {cfg.eval_max_batches:,}"
    sizes = ", ".join(f"{split} {s.total:,} batches" for split, s in sets.items()) or "no eval batches"
    how = ("sampled and packed once, kept for every evaluation" if chunk is None else
           f"sampled and packed {chunk:,} batches at a time at each evaluation (the next chunk meanwhile), each "
           "deleted once evaluated")
    return f"plan: evaluation ({limit} of each split's batches, --eval-max-batches): {sizes}; {how}"


def plan_dict(plan) -> dict:
    """summary.json's "plan"."""
    d = {"device": plan.device, "precision": plan.precision, "host_gather": plan.host_gather.line,
         "host_gather_calibration": plan.host_gather.measured, "step": plan.step.line,
         "features": plan.features, "row_bytes": plan.row_bytes, "feature_bytes": plan.feature_bytes,
         "memory_budget_bytes": plan.budget, "tier_budgets": dict(plan.tiers), "tier_rows": plan.tier_rows,
         "working_set_bytes": plan.working_set, "read_depth": plan.read_depth,
         "features_fidelity": plan.features_fidelity, "embedding_table_bytes": plan.embedding_table,
         "embedding_host_bytes": plan.embedding_host, "embedding_buffer": plan.embedding_buffer,
         "batch_rows": plan.batch_rows}
    if plan.sampling.ahead:
        d.update(topology_read_ahead=plan.topology_read_ahead, pack_memory_bytes=plan.pack_memory,
                 page_cache_bytes=plan.page_cache, expected_hit_rates=plan.expected_hit_rates,
                 recent_batches=plan.recent_batches, input_rows_per_batch=plan.input_rows_per_batch,
                 packs_bytes_per_epoch=plan.packs_bytes_per_epoch,
                 samples_bytes_per_epoch=plan.samples_bytes_per_epoch, disk_needed_bytes=plan.disk_needed)
    return d


def distributed_line(cfg, g, workdir) -> str:
    """How the ranks of a torchrun share the run (`g`: its Group)."""
    if cfg.distribution.cooperative:
        step = (f"each step trains one global batch of {g.world} x {cfg.batch_size} seeds, every vertex read and "
                f"computed by its owner ({cfg.owner} of its id) and exchanged all-to-all")
    else:
        step = (f"each step trains {g.world} batches of {cfg.batch_size} seeds, one per rank (the epoch's last "
                f"batches beyond a multiple of {g.world} are dropped)")
    return (f"plan: {g.describe()}: --memory-budget {cfg.memory_budget} is this process's (every rank "
            f"plans its own); {step}; evaluation sharded over the ranks; workdir {workdir}")

def hag_lines(cfg, mode: str) -> list[str]:
    """What --hag does in this run (`mode`: the HagBuilder's, off where its kernels cannot run)."""
    if cfg.hag_mode.off:
        return []
    if mode == "off":
        why = "gat weights every edge" if cfg.weighs_every_edge else "its kernels run on the CPU"
        return [f"plan: --hag {cfg.hag}: not used ({why})"]
    where = ("searched as each batch is sampled and stored with it" if cfg.sampling_mode.ahead
             and not cfg.distribution.cooperative else "searched as each batch is decoded")
    return [f"plan: --hag {cfg.hag}: each block's HAG {where}, run where it "
            + ("sums fewer rows" if cfg.hag_mode.on else f"is predicted at least {defaults.HAG_MIN_SAVING:.0%} "
               f"faster (a removed row read saves {defaults.HAG_SAVED_ROW_COST:g} of a mean one's time, an "
               f"aggregation node costs {defaults.HAG_NODE_COST:g}); searched only where its sources' most shared "
               f"pair could make one pay, and no more where the first {defaults.HAG_PROBE_BATCHES} batches had "
               "none")]


def data_summary(loader) -> dict:
    """The data side of summary.json: offline work, pipeline stages, tiers, rows, the plan (a typed run's: its
    budget's split, and per featured type its rows and bytes)."""
    times, epochs, plan = loader.stage_times, loader.epochs, loader.plan
    out = {
        "sample_s": epochs.sample_s if epochs else 0.0,
        "pack_s": epochs.pack_s if epochs else 0.0,
        "offline": dict(epochs.phases) if epochs else {},
        "stage_times_s": {name: {"busy_s": t.busy_s, "wait_s": t.wait_s, "items": t.items}
                          for name, t in times.items()},
        "bottleneck": max(times, key=lambda n: times[n].busy_s) if times else None,
        "tiers": loader.stats(),
        "rows_per_batch": loader.rows_per_batch(),
        "disk_bytes_read": loader.accounting["disk_bytes"],
        "memory_budget_bytes": plan.budget,
        "backend": loader.backend,
        "device": plan.device,
        "dataset": str(loader.data),
    }
    graph = loader.graph_hag() if loader.hag.mode != "off" and loader._graph_hag is not False else None
    out["hag"] = {**loader.hag.stats.to_dict(), **({"graph": graph.stats()} if graph else {})}
    if loader.typed:
        return {**out, "heterogeneous": True, "plan": plan.sizes, "features": loader.source.summary()}
    return {**out, "features": loader.source.name, "feature_row_bytes": loader.source.row_bytes,
            "host_gather": plan.host_gather.line, "plan": plan_dict(plan)}
