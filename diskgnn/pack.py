"""Batched packing: each batch's cold feature rows written contiguously, in one sequential pass.

For every batch of a sample file, the input nodes that no memory tier holds
(the cold rows) are written into the batch's own region of a pack file, in
ascending node id, so that training reads one contiguous range per batch
instead of one random 4 KiB block per row. Packing never reads a row at
random: it scans the feature file front to back in large chunks and, for each
chunk, appends to every batch the rows of that chunk it needs (DiskGNN's
batched packing). Regions start on 4 KiB boundaries for O_DIRECT.

Files: `epoch-NNNNN.packs` (the regions) and `epoch-NNNNN.packs.json`: per
batch the region's byte offset, its row count, the positions of its rows in
the batch's node list (in `epoch-NNNNN.packs.pos`, int32) and an XXH3-64 of
the region's rows, checked when the region is read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from .errors import DiskgnnError
from .format import Dataset, manifest_checksum, padded
from .placement import Placement

PACKS_FORMAT = "diskgnn-packs"
PACKS_VERSION = 1


@dataclass
class PackPlan:
    """Where each batch's cold rows go: sorted ids, their positions in the batch, region offsets."""

    cold_ids: list[np.ndarray]
    cold_pos: list[np.ndarray]
    offsets: np.ndarray  # int64[num_batches + 1] region starts (4 KiB aligned), then the file end

    @property
    def packed_rows(self) -> int:
        return sum(ids.size for ids in self.cold_ids)


def plan(sample_file, placement: Placement, row_bytes: int) -> PackPlan:
    cold_ids, cold_pos, offsets = [], [], [0]
    for batch in sample_file:
        tier, _ = placement.locate(batch.nodes)
        pos = np.flatnonzero(tier < 0)
        order = np.argsort(batch.nodes[pos])
        cold_ids.append(batch.nodes[pos[order]])
        cold_pos.append(pos[order].astype(np.int32))
        offsets.append(offsets[-1] + padded(cold_ids[-1].size * row_bytes))
    return PackPlan(cold_ids, cold_pos, np.asarray(offsets, dtype=np.int64))


def pack_epoch(dataset: Dataset, sample_file, placement: Placement, out_path, *,
               chunk_bytes: int = 64 << 20) -> "PackFile":
    """Writes the packs of one sample file; returns them opened.

    Memory: one feature chunk plus the plan (12 bytes per packed row).
    """
    out_path = Path(out_path)
    row = dataset.row_bytes
    p = plan(sample_file, placement, row)
    chunk_rows = max(1, chunk_bytes // row)
    cursors = np.zeros(len(p.cold_ids), dtype=np.int64)
    hashers = [xxhash.xxh3_64() for _ in p.cold_ids]
    tmp = out_path.with_name(out_path.name + ".tmp")
    with open(dataset.features_path, "rb") as src, open(tmp, "wb") as dst:
        dst.truncate(int(p.offsets[-1]))
        fd = dst.fileno()
        for lo in range(0, dataset.num_nodes, chunk_rows):
            hi = min(dataset.num_nodes, lo + chunk_rows)
            chunk = np.fromfile(src, dtype=np.uint8, count=(hi - lo) * row).reshape(hi - lo, row)
            for b, ids in enumerate(p.cold_ids):
                start = cursors[b]
                end = int(np.searchsorted(ids, hi, side="left"))
                if end == start:
                    continue
                rows = np.ascontiguousarray(chunk[ids[start:end] - lo])
                os.pwrite(fd, rows, int(p.offsets[b] + start * row))
                hashers[b].update(rows)
                cursors[b] = end
        os.fsync(fd)
    pos_path = out_path.with_name(out_path.name + ".pos")
    positions = np.concatenate(p.cold_pos) if p.cold_pos else np.empty(0, np.int32)
    positions.tofile(pos_path.with_name(pos_path.name + ".tmp"))
    meta = {
        "format": PACKS_FORMAT, "format_version": PACKS_VERSION,
        "samples": sample_file.meta["manifest_checksum"], "row_bytes": row,
        "num_batches": len(p.cold_ids), "offsets": p.offsets.tolist(),
        "rows": [int(ids.size) for ids in p.cold_ids],
        "checksums": [h.hexdigest() for h in hashers],
        "positions_checksum": xxhash.xxh3_64_hexdigest(positions.tobytes()),
        "packed_rows": p.packed_rows, "blowup": p.packed_rows / dataset.num_nodes,
        "tiers": {name: int(ids.size) for name, ids in zip(placement.tier_names, placement.tier_ids)},
    }
    meta["manifest_checksum"] = manifest_checksum(meta)
    meta_tmp = out_path.with_name(out_path.name + ".json.tmp")
    meta_tmp.write_text(json.dumps(meta))
    os.replace(tmp, out_path)
    os.replace(pos_path.with_name(pos_path.name + ".tmp"), pos_path)
    os.replace(meta_tmp, out_path.with_name(out_path.name + ".json"))
    return PackFile(out_path)


class PackFile:
    """An epoch's packs: per batch, the region to read and where its rows go."""

    def __init__(self, path):
        self.path = Path(path)
        meta_path = self.path.with_name(self.path.name + ".json")
        try:
            self.meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise DiskgnnError(f"{meta_path}: cannot read pack index ({e})") from None
        if self.meta.get("format") != PACKS_FORMAT or self.meta.get("manifest_checksum") != manifest_checksum(self.meta):
            raise DiskgnnError(f"{meta_path}: not a valid {PACKS_FORMAT} index (wrong format or checksum)")
        self.offsets = np.asarray(self.meta["offsets"], dtype=np.int64)
        size = self.path.stat().st_size if self.path.exists() else -1
        if size != self.offsets[-1]:
            raise DiskgnnError(f"{self.path}: {size} bytes, the index says {int(self.offsets[-1])}")
        pos_path = self.path.with_name(self.path.name + ".pos")
        positions = np.fromfile(pos_path, dtype="<i4") if pos_path.exists() else None
        if positions is None or xxhash.xxh3_64_hexdigest(positions.tobytes()) != self.meta["positions_checksum"]:
            raise DiskgnnError(f"{pos_path}: missing or fails its checksum")
        self.rows = np.asarray(self.meta["rows"], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(self.rows)])
        self.positions = [positions[starts[b]: starts[b + 1]] for b in range(len(self.rows))]

    @property
    def row_bytes(self) -> int:
        return self.meta["row_bytes"]

    def region(self, b: int) -> tuple[int, int]:
        """Byte offset and length of batch b's rows."""
        return int(self.offsets[b]), int(self.rows[b]) * self.row_bytes

    def check(self, b: int, data) -> None:
        if xxhash.xxh3_64_hexdigest(data) != self.meta["checksums"][b]:
            raise DiskgnnError(f"{self.path}: batch {b}'s packed rows fail their checksum (file is corrupted)")

    def __len__(self) -> int:
        return len(self.rows)

