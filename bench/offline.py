"""Offline phase benchmark: sample and pack one epoch, against the disk's sequential bandwidth.

    python -m bench.offline --data DATASET_DIR        # W1: prepare synthetic --nodes 8000000 ...
    python -m bench.offline --smoke                   # tiny, for the test suite

Samples one epoch (fanouts 10,5, batch 1024 by default) with the native
sampler, reports expected hit rates and disk blow-up for memory-tier budgets
of 5, 10 and 30 % of the feature bytes, then packs the epoch with the
--pack-cache fraction cached, from a cold page cache, and compares the bytes
packing moved (features read + packs written) per second with fio's
sequential write bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from diskgnn.data.format import open_dataset
from diskgnn.offline.pack import pack_epoch, plan
from diskgnn.offline.placement import access_counts, place
from diskgnn.offline.sample import sample_epoch
from diskgnn.units import format_size

from .harness.common import disk_seq_write_bandwidth, drop_caches, machine_info
from .harness.output import add_output_args, finish
from .harness.workload import add_data_arg, dataset_or_w1



def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.offline", description=__doc__.split("\n\n")[0])
    add_data_arg(ap)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--cache-fractions", default="0.05,0.1,0.3")
    ap.add_argument("--pack-cache", type=float, default=0.1, help="cached fraction of feature bytes when packing")
    ap.add_argument("--max-blowup", type=float, help="cap on packed rows / num_nodes (segment sharing)")
    add_output_args(ap, "offline")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    args.data = dataset_or_w1(args.data, work, args.smoke)
    ds = open_dataset(args.data)
    info = machine_info(work)
    print(f"machine: {info['summary']}")
    disk = disk_seq_write_bandwidth(work, (64 << 20) if args.smoke else (2 << 30))
    fanouts = [int(f) for f in args.fanouts.split(",")]
    feature_bytes = ds.num_nodes * ds.row_bytes

    cold_note = drop_caches()
    if cold_note:
        print(f"WARNING: {cold_note}")
    t0 = time.perf_counter()
    sf = sample_epoch(ds, work / "epoch-00000.samples", fanouts=fanouts, batch_size=args.batch_size, seed=0,
                      epoch=0)
    sample_s = time.perf_counter() - t0
    counts = access_counts([sf], ds.num_nodes)
    accesses = int(counts.sum())
    print(f"sampled {len(sf)} batches ({accesses} feature rows) in {sample_s:.1f} s "
          f"({accesses / sample_s:,.0f} rows/s)")

    tiers = []
    for frac in [float(x) for x in args.cache_fractions.split(",")]:
        placement = place(counts, ds.row_bytes, [("host", int(frac * feature_bytes))])
        packed = plan(sf, placement, ds.num_nodes).packed_rows
        tiers.append({"cache_fraction": frac, "expected_hit_rate": placement.expected_hit_rates[0],
                      "packed_rows": packed, "blowup": packed / ds.num_nodes})
        print(f"cache {frac:4.0%} of features: expected hit rate {tiers[-1]['expected_hit_rate']:.1%}, "
              f"disk blow-up {tiers[-1]['blowup']:.2f} x")

    placement = place(counts, ds.row_bytes, [("host", int(args.pack_cache * feature_bytes))])
    cold_note = drop_caches() or cold_note
    t0 = time.perf_counter()
    packs = pack_epoch(ds, sf, placement, work / "epoch-00000.packs", max_blowup=args.max_blowup)
    pack_s = time.perf_counter() - t0
    written = int(packs.offsets[-1])
    moved = feature_bytes + written
    result = {
        "benchmark": "offline", "machine": info, "dataset": str(args.data), "nodes": ds.num_nodes,
        "edges": ds.num_edges, "feature_bytes": feature_bytes, "fanouts": fanouts, "batch_size": args.batch_size,
        "batches": len(sf), "feature_rows_accessed": accesses, "sample_s": sample_s,
        "sample_rows_per_s": accesses / sample_s, "tiers": tiers, "pack_cache_fraction": args.pack_cache,
        "pack_s": pack_s, "max_blowup": args.max_blowup, "segment_batches": packs.meta["segment_batches"], "pack_bytes_written": written, "pack_rows": packs.meta["packed_rows"],
        "pack_blowup": packs.meta["blowup"], "pack_rows_per_s": packs.meta["packed_rows"] / pack_s,
        "pack_MBps_moved": moved / pack_s / 1e6, "disk": disk,
        "pack_over_disk_seq_write": moved / pack_s / 1e6 / disk["MBps"],
        "cold_cache": cold_note is None, "cold_cache_note": cold_note,
    }
    print(f"packed {packs.meta['packed_rows']:,} rows ({format_size(written)}, blow-up "
          f"{packs.meta['blowup']:.2f} x) in {pack_s:.1f} s: read {format_size(feature_bytes)} + wrote "
          f"{format_size(written)} = {result['pack_MBps_moved']:.0f} MB/s; disk sequential write "
          f"{disk['MBps']:.0f} MB/s ({disk['tool']}): ratio {result['pack_over_disk_seq_write']:.2f}")
    finish(result, args.out)
    for p in work.glob("epoch-00000.*"):
        p.unlink()
    return result


if __name__ == "__main__":
    main()
