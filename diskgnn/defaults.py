"""Every tunable default of diskgnn, in one place.

Each knob can be overridden for a process by the environment variable
`DISKGNN_<NAME>` (docs/defaults.md lists them all, and a test keeps that page
in step with this module). Sizes take units (`DISKGNN_PACK_MEMORY=512MiB`).
The native library has no defaults of its own: the Python side passes every
value below to it. Algorithm constants that decide what is written to disk
(a quantizer's block size, a file format's alignment) are not knobs: they
stay beside the code whose output they fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import DiskgnnError, UsageError
from .units import parse_size


@dataclass(frozen=True)
class Knob:
    name: str
    default: object
    value: object
    kind: str  # int | size | budget (a size kept as written) | float | bool
    help: str

    @property
    def env(self) -> str:
        return "DISKGNN_" + self.name


KNOBS: dict[str, Knob] = {}


def _parse(env: str, text: str, kind: str):
    try:
        if kind == "size":
            return parse_size(text)
        if kind == "budget":
            parse_size(text)
            return text
        if kind == "int":
            value = int(text)
            if value < 0:
                raise ValueError
            return value
        if kind == "float":
            value = float(text)
            if value <= 0:
                raise ValueError
            return value
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError
    except (ValueError, DiskgnnError):
        what = {"size": "a size such as 512MiB", "budget": "a size such as 2GiB", "int": "a whole number >= 0",
                "float": "a positive number", "bool": "true or false"}[kind]
        raise UsageError(f"{env}={text!r}: expected {what}") from None


def _knob(name: str, default, kind: str, help: str):
    env = "DISKGNN_" + name
    text = os.environ.get(env)
    value = default if text is None or text == "" else _parse(env, text, kind)
    KNOBS[name] = Knob(name, default, value, kind, help)
    return value


def home() -> Path:
    """Where the built-in dataset, runs and caches go: $DISKGNN_HOME, default ~/.cache/diskgnn.
    Read at each call, unlike the knobs below, so that one process can point it elsewhere."""
    return Path(os.environ.get("DISKGNN_HOME") or "~/.cache/diskgnn").expanduser()


# -- memory budgets ----------------------------------------------------------------------------
MEMORY_BUDGET = _knob("MEMORY_BUDGET", "2GiB", "budget",
                      "--memory-budget of prepare, quantize and train when not given")
TRAIN_BASE_RSS = _knob("TRAIN_BASE_RSS", 450 << 20, "size",
                       "train's plan: Python, torch and the extension before any data")
PREPARE_BASE_RSS = _knob("PREPARE_BASE_RSS", 96 << 20, "size",
                         "prepare and quantize: the interpreter, numpy and open files before any chunk")
MIN_PREPARE_BUDGET = _knob("MIN_PREPARE_BUDGET", 160 << 20, "size",
                           "the smallest --memory-budget prepare and quantize accept")

# -- training pipeline -------------------------------------------------------------------------
READ_DEPTH = _knob("READ_DEPTH", 4, "int",
                   "batches whose reads are in flight, unless --read-depth or the budget says fewer")
# The largest batches of W2's epochs at 1,024 seeds differ by 0.1 % (34,207-34,231 rows); slabs grow past it anyway.
MEASURED_ROWS_HEADROOM = _knob("MEASURED_ROWS_HEADROOM", 1.1, "float",
                               "train's plan, made again once epoch 0 is sampled: a batch's input rows at most, as a "
                               "multiple of epoch 0's largest batch (0: keep the bound from the fanouts)")
PIPELINE_POLL_S = _knob("PIPELINE_POLL_S", 0.05, "float",
                        "how often a pipeline thread blocked on a queue checks for a stop (seconds)")
AGGREGATE_THREADS = _knob("AGGREGATE_THREADS", 0, "int",
                          "threads of the native neighbour sums (0: as many as torch uses)")
HAG_MIN_SAVING = _knob("HAG_MIN_SAVING", 0.1, "float",
                       "--hag auto: a block runs its HAG only where the cost model predicts at least this share "
                       "less time")
# Measured by `python -m bench.hag` (docs/benchmarks.md, "HAG"), in units of one mean row read of a plain sum.
HAG_SAVED_ROW_COST = _knob("HAG_SAVED_ROW_COST", -0.18, "float",
                           "HAG cost model: the time a HAG saves per row read it removes (negative here: the reads it "
                           "removes are of the most shared rows, already in cache, and its lists run slower per entry)")
HAG_NODE_COST = _knob("HAG_NODE_COST", 5.75, "float",
                      "HAG cost model: one aggregation node (its two reads, its write, its level's pass)")
HAG_GRAPH_CHUNK = _knob("HAG_GRAPH_CHUNK", 16384, "int",
                        "destinations per block of a whole graph's stored HAG (and of --eval full through it)")
HAG_MAX_DEGREE = _knob("HAG_MAX_DEGREE", 256, "int",
                       "HAG search: destinations with more sources keep their lists (their pairs would dominate)")
HAG_MAX_DEPTH = _knob("HAG_MAX_DEPTH", 10, "int", "HAG search: levels of aggregation nodes at most")
HAG_PROBE_BATCHES = _knob("HAG_PROBE_BATCHES", 20, "int",
                          "--hag auto: batches searched before a pass that saves too little stops searching")
ONEDNN_CACHE = _knob("ONEDNN_CACHE", 16, "int",
                     "bf16 on a CPU: oneDNN primitives kept (ONEDNN_PRIMITIVE_CACHE_CAPACITY, unless set); oneDNN's "
                     "1024 kept one set per batch shape, 0.14 GiB more over 300 W1 batches")
INFERENCE_CHUNK = _knob("INFERENCE_CHUNK", 4096, "int",
                        "destination nodes per block in layer-wise full-neighbour inference")
INFER_RECORD_S = _knob("INFER_RECORD_S", 5.0, "float",
                       "diskgnn.infer: how often its progress (the rows on disk) is synced and recorded; a rerun "
                       "after a kill recomputes at most this long")

# -- the GPU path --------------------------------------------------------------------------------
CUDA_BASE_RSS = _knob("CUDA_BASE_RSS", 128 << 20, "size",
                      "train's plan with CUDA: the CUDA context's host memory beside TRAIN_BASE_RSS; set, it "
                      "replaces the measurement at start-up, which it otherwise floors (128 MiB: bench.gpu's on an "
                      "H200)")
DEVICE_FILL_CHUNK = _knob("DEVICE_FILL_CHUNK", 16 << 20, "size",
                          "each of the two pinned buffers the device tier is filled through")
ZERO_COPY_CALIBRATION_ROWS = _knob("ZERO_COPY_CALIBRATION_ROWS", 40960, "int",
                                   "--zero-copy auto: rows gathered each way by the start-up calibration")
ZERO_COPY_MARGIN = _knob("ZERO_COPY_MARGIN", 1.05, "float",
                         "--zero-copy auto: zero copy is taken where it measured at least this many times "
                         "the CPU gather's speed")
GRAPH_BUCKET_GROWTH = _knob("GRAPH_BUCKET_GROWTH", 1.1, "float",
                            "--cuda-graphs: a batch that does not fit the captured step's shapes grows them to "
                            "this many times its own (a new capture)")
GRAPH_WARMUP = _knob("GRAPH_WARMUP", 2, "int",
                     "--cuda-graphs: batches of a new bucket trained eagerly before the step is captured")

# -- the native reader (io_uring / pread) ----------------------------------------------------------
QUEUE_DEPTH = _knob("QUEUE_DEPTH", 64, "int",
                    "reads in flight per io_uring ring, or pread threads; each holds a bounce buffer of "
                    "MAX_REQUEST_BYTES")
NUM_RINGS = _knob("NUM_RINGS", 1, "int", "io_uring rings, each with its own worker thread")
SUBMIT_BATCH = _knob("SUBMIT_BATCH", 4, "int", "io_uring reads handed to the kernel together")
MAX_REQUEST_BYTES = _knob("MAX_REQUEST_BYTES", 1 << 20, "size",
                          "largest single read (a multiple of 4 KiB); rows in adjoining blocks merge up to it")
MAX_GAP_BYTES = _knob("MAX_GAP_BYTES", 0, "size", "unneeded bytes a read may span to merge two reads")
REGISTER_BUFFERS = _knob("REGISTER_BUFFERS", True, "bool",
                         "register bounce buffers and the file with io_uring (skipped where the kernel refuses)")

# -- offline sampling and packing ----------------------------------------------------------------
SAMPLE_GROUP = _knob("SAMPLE_GROUP", 32, "int",
                     "batches handed to the native sampler at once (two groups in memory: one sampled, one written)")
PACK_MEMORY = _knob("PACK_MEMORY", 256 << 20, "size",
                    "the packer's chunk and staging buffers: train's share for them where its budget has room for "
                    "more than the least, and pack_epoch's when not given")
MIN_PACK_MEMORY = _knob("MIN_PACK_MEMORY", 64 << 20, "size",
                        "the packer's buffers where the budget has no room for PACK_MEMORY (smaller writes)")
MAX_PACK_MEMORY = _knob("MAX_PACK_MEMORY", 2 << 30, "size",
                        "the packer's buffers at most, where the budget leaves page cache unused")
# The packer's plan: per packed row, its node id (int64, what the native packer reads) and its position
# in its batch (int32). Not a knob: it is what pack.py holds.
PACK_PLAN_BYTES_PER_ROW = 12
# The disk check's headroom over `copies` x epoch 0's samples and packs: later epochs' packs differ from
# epoch 0's (+0.4 % on W1), and checkpoints and logs share the workdir. A W1 run whose plan needed
# 29.2 GiB of 29.6 free ran out of space writing its checkpoint.
DISK_HEADROOM = 1.05
PACK_CHUNK_BYTES = _knob("PACK_CHUNK_BYTES", 64 << 20, "size",
                         "largest chunk of the feature file the packer reads at once")
PACK_MAX_WRITE_BYTES = _knob("PACK_MAX_WRITE_BYTES", 4 << 20, "size",
                             "largest staging buffer of the packer, i.e. its largest single write")
PACK_WRITE_DEPTH = _knob("PACK_WRITE_DEPTH", 8, "int", "the packer's writer threads (writes in flight)")
PACK_MAX_THREADS = _knob("PACK_MAX_THREADS", 8, "int",
                         "the packer's gather threads at most, when --threads is not given (default: the cores)")

# -- reading and checking files ---------------------------------------------------------------
READ_CHUNK_BYTES = _knob("READ_CHUNK_BYTES", 16 << 20, "size",
                         "buffer of every front-to-back file read (checksums, topology read-ahead)")
VERIFY_CHUNK_BYTES = _knob("VERIFY_CHUNK_BYTES", 64 << 20, "size",
                           "rows per block when verify streams a file through its checks")
VERIFY_ON_OPEN_BYTES = _knob("VERIFY_ON_OPEN_BYTES", 64 << 20, "size",
                             "dataset files at most this large are checksummed at every open; larger ones by verify")


def aggregate_threads() -> int:
    if AGGREGATE_THREADS:
        return AGGREGATE_THREADS
    import torch

    return max(1, torch.get_num_threads())
