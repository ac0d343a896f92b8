"""The process group of a run that torchrun launched: who this process is, and the few collectives the trainer uses.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous (MASTER_ADDR,
MASTER_PORT); `join` opens the default group over gloo on a CPU or NCCL with
CUDA, with --dist-timeout as every collective's limit. A rank that dies
closes its connections and the others fail their next collective at once; a
rank that hangs fails them after the timeout: `lost` turns either into one
line naming this rank. A run started without torchrun is a group of one, on
which every collective here returns its input.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch

from ..errors import DiskgnnError, UsageError

MODES = ("none", "independent", "cooperative")
_joined = False  # whether this process joined a group (its exit then skips the interpreter's teardown)
_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Group:
    mode: str = "none"
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str = "none"
    node_rank: int = 0

    @property
    def leader(self) -> bool:
        """Rank 0 writes checkpoints and the summary and prints the plan and progress."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.mode != "none"

    def describe(self) -> str:
        return (f"distributed {self.mode}: rank {self.rank} of {self.world} (node {self.node_rank}, local rank "
                f"{self.local_rank}), {self.backend}")

    def sum(self, values: list[float]) -> list[float]:
        """`values` summed over the ranks (float64)."""
        if not self.active:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device="cuda" if self.backend == "nccl" else "cpu")
        torch.distributed.all_reduce(t)  # NCCL reduces device tensors only
        return t.tolist()

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank (a picklable object: a state dict, an error)."""
        if not self.active:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj) -> list:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.active:
            return [obj]
        out = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def close(self, finished: bool) -> None:
        """Leaves the group; after a finished run, once every rank has finished (no rank tears down its
        connections while another still uses them)."""
        if self.active and torch.distributed.is_initialized():
            if finished:
                torch.distributed.barrier()
            torch.distributed.destroy_process_group()


def join(mode: str, device: str, timeout_s: float) -> Group:
    """The run's group: one process for --distributed none, else the torchrun group, joined. `device`: --device
    as given; the transport is NCCL where it may run on a GPU (the plan decides the device itself, after)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if mode == "none":
        if world > 1:
            raise UsageError(f"--distributed none: torchrun started {world} processes (WORLD_SIZE={world}); pass "
                             "--distributed independent or cooperative")
        return Group()
    missing = [k for k in _ENV if k not in os.environ]
    if missing:
        raise UsageError(f"--distributed {mode}: start it with torchrun (the environment lacks "
                         f"{', '.join(missing)}), e.g. torchrun --nproc-per-node 2 -m diskgnn.train ...")
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    backend = "nccl" if device != "cpu" and torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local)
    global _joined
    try:
        torch.distributed.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        _joined = True
    except Exception as e:  # noqa: BLE001 - the rendezvous or the transport: one line, whatever raised it
        raise DiskgnnError(f"rank {rank}: cannot join the process group at {os.environ['MASTER_ADDR']}:"
                           f"{os.environ['MASTER_PORT']} ({_first_line(e)})") from None
    node = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")))
    return Group(mode, rank, world, local, backend, node)


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def is_group_failure(e: BaseException) -> bool:
    """Whether `e` is a collective that failed because another rank died, hung or closed its connection."""
    if isinstance(e, torch.distributed.DistError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and any(k in text for k in ("gloo", "Connection closed", "Timed out",
                                                                   "NCCL", "Connection reset"))


def lost(group: Group, e: BaseException) -> DiskgnnError:
    """The one line a rank ends with when the group failed under it."""
    return DiskgnnError(f"rank {group.rank} of {group.world}: the process group failed ({_first_line(e)}); another "
                        "rank died, was stopped or did not answer within --dist-timeout; every rank stops (restart "
                        "the group with --resume)")


def exit_rank(code: int) -> int:
    """Returns `code`; in a process that joined a group, first exits with it without the interpreter's teardown.

    Under load, a rank that left its gloo group cleanly still aborted now and then as the interpreter tore
    down ("terminate called without an active exception", no Python frame left: a C++ thread of the
    backend destroyed while joinable), which torchrun reports as the rank's failure after a finished run.
    Everything the run writes is flushed and renamed into place before this."""
    if _joined:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
