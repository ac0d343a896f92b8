"""Checkpoints of a run, and the state inside an epoch that makes a resumed run repeat an uninterrupted one.

best.pt and last.pt live in the workdir's checkpoints/. Each is one file:
magic, payload length, the payload (torch.save of the state), XXH3-64 of the
payload; it is written to a temporary sibling, fsynced and renamed over the
old one, so a kill or a full disk at any instant leaves the old checkpoint or
the new one, and a truncated or corrupted file is refused on load. last.pt is
written at every epoch end and, with --checkpoint-every, inside epochs: it
then holds the position in the epoch's batch order and the random streams,
and --resume continues at the next batch with the same weights, bit for bit
on the CPU, as a run that was never stopped.
"""

from __future__ import annotations

import io
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import xxhash

from ..data.files import guard_io, write_atomic
from ..errors import DiskgnnError

MAGIC = b"DGNNCKP1"
_HEAD = struct.Struct("<8sQ")
_TAIL = struct.Struct("<Q")
# The options whose change would make a resumed run differ from the run that wrote the checkpoint.
SAME_RUN = ("data", "model", "fanouts", "batch_size", "hidden", "heads", "dropout", "lr", "weight_decay", "seed",
            "sampling", "features", "max_batches", "sampler", "layer_dependency", "batch_dependency", "distributed",
            "owner", "precision", "embeddings", "embedding_lr")


@dataclass
class EpochState:
    """Where training stands inside an epoch: enough to go on from the next batch exactly."""

    epoch: int
    next_batch: int = 0  # position in the epoch's batch order
    loss_sum: float = 0.0  # sum over the batches so far of loss x seeds
    seen: int = 0
    elapsed_s: float = 0.0
    dropout_rng: dict | None = None  # the model's dropout stream at next_batch (None: fresh for the epoch)


class Checkpoints:
    """best.pt and last.pt in a directory, each with its checksum inside."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        guard_io(self.dir, lambda: self.dir.mkdir(parents=True, exist_ok=True))

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.pt"

    def save(self, name: str, state: dict) -> None:
        buf = io.BytesIO()
        torch.save(state, buf)
        payload = buf.getvalue()
        data = _HEAD.pack(MAGIC, len(payload)) + payload + _TAIL.pack(xxhash.xxh3_64_intdigest(payload))
        write_atomic(self.path(name), data)

    def load(self, name: str) -> dict | None:
        """The checkpoint, or None when there is none; a damaged one is refused with one line."""
        path = self.path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) < _HEAD.size + _TAIL.size or data[:8] != MAGIC:
            raise DiskgnnError(f"{path}: not a diskgnn checkpoint (or one from an older diskgnn); move it away or "
                               "start without --resume")
        _, length = _HEAD.unpack_from(data)
        payload = data[_HEAD.size:_HEAD.size + length]
        if len(data) != _HEAD.size + length + _TAIL.size:
            raise DiskgnnError(f"{path}: truncated ({len(data)} bytes, the header says "
                               f"{length + _HEAD.size + _TAIL.size})")
        if _TAIL.unpack_from(data, _HEAD.size + length)[0] != xxhash.xxh3_64_intdigest(payload):
            raise DiskgnnError(f"{path}: fails its checksum (the checkpoint is corrupted)")
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)


def training_state(model, optimizer, epoch_state: EpochState, history: dict, best: dict, config: dict,
                   accounting: dict) -> dict:
    """What last.pt holds: the weights, the optimizer, where in which epoch, the random streams, the history."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "position": asdict(epoch_state),
             "torch_rng": torch.get_rng_state(), "history": history, "best": best, "accounting": accounting,
             "config": {k: config[k] for k in SAME_RUN}}
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def check_same_run(path: Path, saved: dict, config: dict) -> None:
    """Refuses to resume under options that would make the run a different one."""
    for key in SAME_RUN:
        if key in saved and saved[key] != config[key]:
            raise DiskgnnError(f"{path}: written by a run with --{key.replace('_', '-')} {saved[key]}, not "
                               f"{config[key]}: resume with the same options, or use another --workdir")
