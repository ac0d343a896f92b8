"""Checkpoints of a run: best.pt and last.pt in the workdir, each written temp-then-rename and checked on load."""

from __future__ import annotations

from pathlib import Path

import torch
import xxhash

from ..errors import DiskgnnError


class Checkpoints:
    """best.pt and last.pt in a directory, each with an XXH3-64 sidecar checked on load."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def save(self, name: str, state: dict) -> None:
        path = self.dir / f"{name}.pt"
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        digest = xxhash.xxh3_64_hexdigest(tmp.read_bytes())
        tmp.replace(path)
        sidecar = path.with_name(path.name + ".xxh3")
        sidecar.with_name(sidecar.name + ".tmp").write_text(digest + "\n")
        sidecar.with_name(sidecar.name + ".tmp").replace(sidecar)

    def load(self, name: str) -> dict:
        path = self.dir / f"{name}.pt"
        sidecar = path.with_name(path.name + ".xxh3")
        if not path.exists() or not sidecar.exists():
            raise DiskgnnError(f"{path}: no checkpoint to resume from (run without --resume first)")
        if xxhash.xxh3_64_hexdigest(path.read_bytes()) != sidecar.read_text().strip():
            raise DiskgnnError(f"{path}: fails its checksum (the checkpoint is corrupted)")
        return torch.load(path, map_location="cpu", weights_only=False)
