"""The machine under a benchmark: its banner, page-cache dropping, the disk's limits, CPU and GPU busy time."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def block_device(path: Path) -> str | None:
    """Name of the block device (e.g. vda) holding `path`, from /proc/self/mountinfo."""
    try:
        dev = os.stat(path).st_dev
        major, minor = os.major(dev), os.minor(dev)
        name = Path(f"/sys/dev/block/{major}:{minor}").resolve().name
        return name if Path(f"/sys/block/{name}").exists() else name
    except OSError:
        return None


def _sysfs_block(path: Path) -> Path:
    """The sysfs directory of the block device holding `path` (a partition's own, with its `stat`)."""
    dev = os.stat(path).st_dev
    return Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve()


def bytes_read_from(path: Path) -> int:
    """Bytes the block device holding `path` has read since boot (its stat's sectors read, 512 bytes each): the
    difference across a run measures a peer that counts none itself, where nothing else reads the device."""
    return int((_sysfs_block(path) / "stat").read_text().split()[2]) * 512


@contextlib.contextmanager
def read_ahead_kb(path: Path, kb: int):
    """The disk under `path` reading `kb` KiB ahead for the block, as a peer's instructions set it (Ginex's
    README: 0), restored after; root only."""
    block = _sysfs_block(path)
    knob = next(q / "queue" / "read_ahead_kb" for q in (block, block.parent) if (q / "queue").is_dir())
    before = knob.read_text().strip()
    knob.write_text(f"{kb}\n")
    try:
        yield int(before)
    finally:
        knob.write_text(f"{before}\n")


def machine_info(path: Path) -> dict:
    """Cores, RAM, kernel, and the disk under `path` (model, read_ahead_kb, scheduler)."""
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    dev = block_device(path)
    disk = {"device": dev}
    if dev:
        base = Path(f"/sys/block/{dev}")
        for key, rel in (("model", "device/model"), ("read_ahead_kb", "queue/read_ahead_kb"),
                         ("rotational", "queue/rotational"), ("scheduler", "queue/scheduler")):
            try:
                disk[key] = (base / rel).read_text().strip()
            except OSError:
                pass
    info = {
        "cores": os.cpu_count(),
        "ram_bytes": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "disk": disk,
    }
    info["summary"] = (f"{info['cores']} cores, {mem / 2**30:.1f} GiB RAM, kernel {info['kernel']}, "
                       f"disk {dev or '?'} {disk.get('model', '')} (read_ahead_kb {disk.get('read_ahead_kb', '?')})")
    return info


def drop_caches() -> str | None:
    """Drops the page cache. Returns None on success, else why it could not (to report loudly)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return None
    except OSError as e:
        return f"cannot drop the page cache ({e.strerror}): cold-cache numbers are NOT cold"


def fio(args: list[str]) -> dict | None:
    """Runs fio with JSON output; None when fio is not installed."""
    if shutil.which("fio") is None:
        return None
    out = subprocess.run(["fio", "--output-format=json", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]


def disk_seq_write_bandwidth(directory: Path, size_bytes: int, block: str = "1M", iodepth: int = 16) -> dict:
    """Sequential O_DIRECT write bandwidth of the disk under `directory`: fio, else dd."""
    path = Path(directory) / ".bench-seqwrite.tmp"
    try:
        job = fio(["--name=seqwrite", f"--filename={path}", "--rw=write", f"--bs={block}", f"--size={size_bytes}",
                   "--direct=1", "--ioengine=libaio", f"--iodepth={iodepth}", "--end_fsync=1"])
        if job is not None:
            return {"tool": "fio", "MBps": job["write"]["bw_bytes"] / 1e6, "block": block, "iodepth": iodepth}
        count = max(1, size_bytes >> 20)
        t0 = time.perf_counter()
        subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={count}", "oflag=direct",
                        "conv=fsync"], capture_output=True, check=True)
        return {"tool": "dd", "MBps": (count << 20) / (time.perf_counter() - t0) / 1e6, "block": "1M",
                "iodepth": 1}
    finally:
        path.unlink(missing_ok=True)


def wait_for_idle_disk(device: str | None, timeout_s: float = 10.0) -> None:
    """Waits until the disk has no requests in flight (/sys/block/DEV/inflight).

    Page-cache readahead goes on after the reads that started it return; a
    measurement started meanwhile would share the disk with it.
    """
    if not device:
        return
    path = Path(f"/sys/block/{device}/inflight")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if sum(map(int, path.read_text().split())) == 0:
                return
        except (OSError, ValueError):
            return
        time.sleep(0.01)


def disk_read_bytes() -> int:
    """Bytes this process made the kernel read from storage (page faults and readahead included)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))


def cpu_seconds() -> tuple[float, float]:
    """CPU time the whole machine has been busy, and that this process's finished children used."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK"), children.ru_utime + children.ru_stime


def wait_for_idle(timeout_s: float, window_s: float = 10.0, max_cores: float = 0.15) -> float:
    """Waits, at most timeout_s, for a window in which the machine is nearly idle; returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        busy0, _ = cpu_seconds()
        time.sleep(window_s)
        if (cpu_seconds()[0] - busy0) / window_s < max_cores:
            break
    return time.monotonic() - start


def disk_read_limits(path: Path, seconds: float = 10.0) -> dict:
    """The disk's read limits on an existing file: fio, O_DIRECT, random 4 KiB at QD64 and sequential 1 MiB
    at QD16, each for `seconds`; a row saying why where fio is missing or fails."""
    if shutil.which("fio") is None:
        return {"error": "fio is not installed (make bench-deps installs Debian's fio)"}
    size = Path(path).stat().st_size
    out = {"file": str(path), "file_bytes": size, "seconds": seconds}
    for name, rw, block, depth in (("random_4k", "randread", "4k", 64), ("sequential_1m", "read", "1M", 16)):
        drop_caches()
        args = [f"--name={name}", f"--filename={path}", "--readonly", f"--rw={rw}", f"--bs={block}",
                "--direct=1", "--ioengine=io_uring", f"--iodepth={depth}", f"--size={size}", "--time_based",
                f"--runtime={seconds:g}", "--norandommap", "--randrepeat=0"]
        try:
            job = fio(args)
        except subprocess.CalledProcessError as e:
            out[name] = {"error": (e.stderr or e.stdout or "").strip()[-300:]}
            continue
        out[name] = {"iops": job["read"]["iops"], "MBps": job["read"]["bw_bytes"] / 1e6, "block": block,
                     "iodepth": depth}
    return out


def parse_nvidia_smi(text: str) -> dict:
    """Mean and peak of `nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits`
    lines (first GPU of each sample; lines that are not two numbers are skipped)."""
    util, mem = [], []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and all(p.replace(".", "", 1).isdigit() for p in parts):
            util.append(float(parts[0]))
            mem.append(float(parts[1]))
    if not util:
        return {"error": "nvidia-smi gave no samples"}
    return {"samples": len(util), "mean_percent": sum(util) / len(util), "max_percent": max(util),
            "max_memory_mib": max(mem)}


class GpuUtilisation:
    """Samples GPU utilisation with nvidia-smi every 200 ms while the block runs; `.result` afterwards."""

    def __enter__(self):
        self.result = {"error": "nvidia-smi is not on PATH"}
        self.proc = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                          "--format=csv,noheader,nounits", "-lms", "200"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            out, _ = self.proc.communicate()
            self.result = parse_nvidia_smi(out)
        return False


def device_bytes(device: str | None) -> tuple[int, int]:
    """Bytes the disk has read and written since boot (/sys/block/DEV/stat: sectors of 512 bytes)."""
    if device is None:
        return 0, 0
    try:
        fields = Path(f"/sys/block/{device}/stat").read_text().split()
    except OSError:
        return 0, 0
    return int(fields[2]) * 512, int(fields[6]) * 512


class DiskCounter:
    """The disk's bytes read and written over a block (dirty pages synced at both ends)."""

    def __init__(self, device: str | None):
        self.device = device

    def __enter__(self):
        os.sync()
        self.start = device_bytes(self.device)
        return self

    def __exit__(self, *exc):
        os.sync()
        end = device_bytes(self.device)
        self.read, self.written = end[0] - self.start[0], end[1] - self.start[1]
