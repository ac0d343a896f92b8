"""Reader benchmark: random row gathers and range reads from a cold page cache, against fio.

Measures diskgnn.reader's backends (io_uring, pread, mmap) on one file of
--size bytes: uniform random gathers of 512 B and 4 KiB rows, and reads of
random aligned 1/4/16 MiB ranges. fio, run on the same file with O_DIRECT and
io_uring, gives the device's limits: 4 KiB random reads at the reader's queue
depth, and sequential reads at each range size with as many bytes in flight
as the reader keeps (queue_depth x 1 MiB requests). Each fio job reads as many
bytes as the measurement it is compared with, right before it, so that both
see the same state of a shared VM's disk; every run starts with an idle disk
and an empty page cache, and the median of --repeat runs is reported.

    python -m bench.reader --size 2GiB --out bench/results/reader.json
    python -m bench.reader --size 8MiB --smoke      # seconds; for the test suite
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

import diskgnn
from diskgnn.io.reader import FileReader
from diskgnn.units import format_size, parse_size

from .harness.common import REPO, drop_caches, fio, machine_info, wait_for_idle_disk
from .harness.output import RESULTS, finish

BACKENDS = ("io_uring", "pread", "mmap")
REQUEST_BYTES = 1 << 20  # the reader's default max_request_bytes
TARGETS = {"gather_4k_vs_fio_randread": 0.9, "range_vs_fio_seq": 0.9, "gather_512_vs_mmap": 5.0}


def ensure_file(path: Path, size: int) -> str:
    """A file of `size` bytes whose 8-byte words hold their own offsets (so reads can be checked)."""
    if path.is_file() and path.stat().st_size == size and size >= 8:
        with open(path, "rb") as f:
            f.seek(size - 8)
            if int.from_bytes(f.read(8), "little") == size - 8:
                return "reused"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    chunk = 64 << 20
    with open(tmp, "wb") as f:
        for start in range(0, size, chunk):
            np.arange(start, min(size, start + chunk) // 8 * 8, 8, dtype="<u8").tofile(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return "created"


def check_rows(out: np.ndarray, ids: np.ndarray, row_bytes: int) -> None:
    words = out.reshape(len(ids), row_bytes).view("<u8")
    starts = ids * row_bytes
    if not (np.array_equal(words[:, 0], starts) and np.array_equal(words[:, -1], starts + row_bytes - 8)):
        raise SystemExit("bench.reader: a gather returned wrong data")


def check_ranges(out: np.ndarray, ranges: np.ndarray) -> None:
    for off, length, dst in ranges:
        first = int(out[dst:dst + 8].view("<u8")[0])
        last = int(out[dst + length - 8:dst + length].view("<u8")[0])
        if first != off or last != off + length - 8:
            raise SystemExit("bench.reader: a range read returned wrong data")


def aligned_empty(nbytes: int) -> np.ndarray:
    """Block-aligned, already-faulted memory: a reused staging buffer, as in training."""
    raw = np.empty(nbytes + 4096, np.uint8)
    skip = -raw.ctypes.data % 4096
    out = raw[skip:skip + nbytes]
    out.fill(255)
    return out


class Cache:
    """Drops the page cache before each run and remembers whether it could."""

    def __init__(self, allow_warm: bool, device: str | None):
        self.allow_warm = allow_warm
        self.device = device
        self.failure = None

    def drop(self) -> None:
        # mmap's readahead outlives the gather that caused it: let it finish first.
        wait_for_idle_disk(self.device)
        why = drop_caches()
        if why is None:
            return
        if not self.allow_warm:
            raise SystemExit(f"bench.reader: {why}. Run as root, or pass --allow-warm-cache (or --smoke) "
                             "to measure anyway.")
        if self.failure is None:
            print(f"\n!!! WARNING: {why}\n!!! mmap numbers below are NOT cold-cache numbers\n")
        self.failure = why


def run_fio(path, rw: str, block: int, iodepth: int, size: int, io_bytes: int) -> dict:
    """fio with O_DIRECT and io_uring reading as many bytes as the measurement it is compared with."""
    args = [f"--name={rw}", f"--filename={path}", "--readonly", f"--rw={rw}", f"--bs={block}", "--direct=1",
            "--ioengine=io_uring", f"--iodepth={iodepth}", f"--size={size}", f"--io_size={io_bytes}",
            "--norandommap", "--randrepeat=0"]
    try:
        job = fio(args)
    except subprocess.CalledProcessError as e:
        return {"error": (e.stderr or e.stdout or "").strip()[-300:], "args": args}
    read = job["read"]
    return {"iops": read["iops"], "MBps": read["bw_bytes"] / 1e6, "mean_latency_us": read["lat_ns"]["mean"] / 1e3}


class Bench:
    """Runs the measurements and collects their results."""

    def __init__(self, path, size, queue_depth, repeat, cache, use_fio):
        self.path, self.size, self.qd, self.repeat, self.cache, self.use_fio = (
            path, size, queue_depth, repeat, cache, use_fio)
        self.results = []

    def timed(self, backend, run) -> tuple[float, int] | str:
        """Seconds and reads issued by one cold run, or why the backend cannot run here."""
        self.cache.drop()
        try:
            reader = FileReader(self.path, backend, queue_depth=self.qd)
        except (OSError, RuntimeError) as e:
            return str(e)
        with reader:
            t0 = time.perf_counter()
            run(reader)
            seconds = time.perf_counter() - t0
            return seconds, reader.stats()["reads"]

    def measure(self, entry: dict, out: np.ndarray, run, check, fio_job=None) -> None:
        """Runs each backend `repeat` times (each round after its fio reference), keeping medians.

        `out` is refilled with 0xff (no offset the data file holds) before each run, so
        `check` sees only what that run wrote.
        """
        per_backend = {b: [] for b in BACKENDS}
        fio_runs = []
        for _ in range(self.repeat):
            if fio_job and self.use_fio:
                self.cache.drop()
                fio_runs.append(run_fio(self.path, *fio_job))
            for backend in BACKENDS:
                out.fill(255)
                per_backend[backend].append(self.timed(backend, run))
                if not isinstance(per_backend[backend][-1], str):
                    check()
        for backend, runs in per_backend.items():
            r = dict(entry, backend=backend)
            if isinstance(runs[0], str):
                r["skipped"] = runs[0]
            else:
                r["runs_s"] = [s for s, _ in runs]
                r["seconds"] = statistics.median(r["runs_s"])
                r["reads"] = None if backend == "mmap" else runs[0][1]
                r["MBps"] = entry["bytes"] / r["seconds"] / 1e6
                if "rows" in entry:
                    r["rows_per_s"] = entry["rows"] / r["seconds"]
                if r["reads"] is not None:
                    r["reads_per_s"] = r["reads"] / r["seconds"]
            self.results.append(r)
        if fio_runs:
            ok = [f for f in fio_runs if "error" not in f]
            entry_fio = {"runs": fio_runs, "rw": fio_job[0], "block_bytes": fio_job[1], "iodepth": fio_job[2]}
            if ok:
                entry_fio["iops"] = statistics.median(f["iops"] for f in ok)
                entry_fio["MBps"] = statistics.median(f["MBps"] for f in ok)
            self.results.append(dict(entry, backend="fio", fio=entry_fio))

    def gather(self, ids: np.ndarray, row_bytes: int) -> None:
        out = aligned_empty(len(ids) * row_bytes)
        fio_job = ("randread", 4096, self.qd, self.size, len(ids) * 4096) if row_bytes == 4096 else None
        self.measure({"kind": "gather", "row_bytes": row_bytes, "rows": len(ids), "bytes": len(ids) * row_bytes}, out,
                     lambda reader: reader.gather_rows(ids, row_bytes, out=out),
                     lambda: check_rows(out, ids, row_bytes), fio_job)

    def ranges(self, ranges: np.ndarray) -> None:
        count, size = len(ranges), int(ranges[0, 1])
        out = aligned_empty(count * size)
        # fio keeps as many bytes in flight as the reader: queue_depth requests of 1 MiB.
        fio_job = ("read", size, max(1, self.qd * REQUEST_BYTES // size), self.size, count * size)
        self.measure({"kind": "ranges", "range_bytes": size, "ranges": count, "bytes": count * size}, out,
                     lambda reader: reader.read_ranges(ranges, out), lambda: check_ranges(out, ranges), fio_job)


def find(results, **match):
    for r in results:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def ratio(a, b):
    return a / b if a and b else None


def compute_ratios(results, rows_list) -> dict:
    ratios = {"gather_4k_vs_fio_randread": {}, "gather_4k_reads_vs_fio_randread": {}, "range_vs_fio_seq": {},
              "gather_512_vs_mmap": {}}
    for rows in rows_list:
        io4 = find(results, kind="gather", backend="io_uring", row_bytes=4096, rows=rows) or {}
        fio4 = (find(results, kind="gather", backend="fio", row_bytes=4096, rows=rows) or {}).get("fio", {})
        ratios["gather_4k_vs_fio_randread"][str(rows)] = ratio(io4.get("rows_per_s"), fio4.get("iops"))
        ratios["gather_4k_reads_vs_fio_randread"][str(rows)] = ratio(io4.get("reads_per_s"), fio4.get("iops"))
        io512 = find(results, kind="gather", backend="io_uring", row_bytes=512, rows=rows) or {}
        mm512 = find(results, kind="gather", backend="mmap", row_bytes=512, rows=rows) or {}
        ratios["gather_512_vs_mmap"][str(rows)] = ratio(io512.get("rows_per_s"), mm512.get("rows_per_s"))
    for r in results:
        if r["kind"] == "ranges" and r["backend"] == "io_uring":
            f = (find(results, kind="ranges", backend="fio", range_bytes=r["range_bytes"]) or {}).get("fio", {})
            ratios["range_vs_fio_seq"][format_size(r["range_bytes"])] = ratio(r.get("MBps"), f.get("MBps"))
    return ratios


def print_table(results) -> None:
    print(f"\n{'backend':<9} {'measurement (median)':<24} {'seconds':>8} {'rate':>16} {'MB/s':>8} {'reads issued':>20}")
    for r in results:
        what = (f"gather {r['rows']} x {r['row_bytes']} B" if r["kind"] == "gather"
                else f"ranges {r['ranges']} x {format_size(r['range_bytes'])}")
        if r["backend"] == "fio":
            f = r["fio"]
            if "iops" not in f:
                print(f"{'fio':<9} {what:<24} failed: {f['runs'][0].get('error')}")
            else:
                print(f"{'fio':<9} {what:<24} {'':>8} {f['iops']:>11,.0f} IOPS {f['MBps']:>8.1f} "
                      f"{f['rw']} {format_size(f['block_bytes'])} QD{f['iodepth']:>3}")
        elif "skipped" in r:
            print(f"{r['backend']:<9} {what:<24} skipped: {r['skipped']}")
        else:
            rate = f"{r['rows_per_s']:,.0f} rows/s" if "rows_per_s" in r else ""
            reads = f"{r['reads']:,} ({r['reads_per_s']:,.0f}/s)" if r.get("reads") is not None else ""
            print(f"{r['backend']:<9} {what:<24} {r['seconds']:>8.2f} {rate:>16} {r['MBps']:>8.1f} {reads:>20}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.reader", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="2GiB", help="size of the file read (default 2GiB)")
    ap.add_argument("--file", help="data file (created or reused; default bench/results/reader-data-SIZE.bin)")
    ap.add_argument("--out", default=str(RESULTS / "reader.json"))
    ap.add_argument("--queue-depth", type=int, default=64)
    ap.add_argument("--rows", default="16384,65536", help="rows per gather measurement, comma-separated")
    ap.add_argument("--row-bytes", default="4096,512")
    ap.add_argument("--range-sizes", default="1MiB,4MiB,16MiB")
    ap.add_argument("--range-total", default="1GiB", help="bytes read per range measurement")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is reported")
    ap.add_argument("--no-fio", action="store_true")
    ap.add_argument("--allow-warm-cache", action="store_true", help="go on when the page cache cannot be dropped")
    ap.add_argument("--smoke", action="store_true", help="tiny counts and one run each, for the test suite")
    args = ap.parse_args(argv)
    size = parse_size(args.size)
    if args.smoke:
        args.rows, args.repeat, args.allow_warm_cache = "2000", 1, True
    path = Path(args.file or RESULTS / f"reader-data-{size}.bin")
    rows_list = [int(x) for x in args.rows.split(",")]
    rng = np.random.default_rng(0)

    info = machine_info(path.parent if path.parent.exists() else REPO)
    print(f"machine: {info['summary']}")
    t0 = time.perf_counter()
    how = ensure_file(path, size)
    print(f"file:    {path} ({format_size(size)}, {how} in {time.perf_counter() - t0:.1f} s)")

    with FileReader(path) as auto:
        auto_backend = {"backend": auto.backend, "direct": auto.direct, "fallback_reason": auto.fallback_reason}
    if auto_backend["backend"] == "io_uring":
        print("backend: auto -> io_uring with O_DIRECT")
    else:
        print(f"\n!!! backend: auto -> {auto_backend['backend'].upper()}, NOT io_uring: "
              f"{auto_backend['fallback_reason']}\n")

    cache = Cache(args.allow_warm_cache, info["disk"].get("device"))
    use_fio = not args.no_fio and shutil.which("fio") is not None
    bench = Bench(path, size, args.queue_depth, args.repeat, cache, use_fio)
    for row_bytes in (parse_size(x) for x in args.row_bytes.split(",")):
        for rows in rows_list:
            bench.gather(rng.integers(0, size // row_bytes, rows), row_bytes)
    total = min(parse_size(args.range_total), size)
    for range_bytes in (parse_size(x) for x in args.range_sizes.split(",")):
        count = total // range_bytes
        if count:
            slots = rng.permutation(size // range_bytes)[:count]
            bench.ranges(np.stack([slots * range_bytes, np.full(count, range_bytes),
                                   np.arange(count) * range_bytes], axis=1))

    ratios = compute_ratios(bench.results, rows_list)
    print_table(bench.results)
    print("\nratios (target):")
    for name, values in ratios.items():
        target = TARGETS.get(name)
        for key, value in values.items():
            shown = "n/a" if value is None else f"{value:.2f}"
            mark = "" if value is None or target is None else ("  ok" if value >= target else "  BELOW TARGET")
            print(f"  {name}[{key}] = {shown}" + (f" (target >= {target}){mark}" if target else ""))
    if cache.failure:
        print(f"\n!!! WARNING: {cache.failure}")

    result = {
        "benchmark": "reader",
        "machine": info,
        "config": {"file": str(path), "size_bytes": size, "queue_depth": args.queue_depth, "rows": rows_list,
                   "row_bytes": args.row_bytes, "range_sizes": args.range_sizes, "range_total_bytes": total,
                   "repeat": args.repeat, "smoke": args.smoke, "max_request_bytes": REQUEST_BYTES},
        "native": diskgnn.native_info(),
        "auto_backend": auto_backend,
        "cache": {"dropped": cache.failure is None,
                  "note": cache.failure or "page cache dropped before each run"},
        "fio_used": use_fio,
        "results": bench.results,
        "ratios": ratios,
        "targets": TARGETS,
    }
    return finish(result, args.out)


if __name__ == "__main__":
    main()
