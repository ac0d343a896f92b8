import json

import numpy as np
import pytest

from diskgnn.data.files import ALIGN
from diskgnn.data.format import FILE_NAMES, MANIFEST, open_dataset
from diskgnn.data.prepare import prepare
from diskgnn.data.verify import verify
from diskgnn.errors import DiskgnnError
from diskgnn.units import format_size, parse_size

from conftest import random_graph, run_module, write_npy_dir


@pytest.fixture
def dataset(tmp_path):
    src = write_npy_dir(tmp_path / "src", random_graph())
    return prepare(src, tmp_path / "ds", progress=False, edge_split=(0.8, 0.1, 0.1))  # every kind of file


def test_parse_size():
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("8GiB") == 8 << 30
    assert parse_size("2GB") == 2_000_000_000
    assert parse_size("4096") == 4096
    assert parse_size("1.5G") == 3 << 29
    with pytest.raises(DiskgnnError):
        parse_size("lots")
    assert format_size(3 << 29) == "1.5 GiB"


def test_files_are_aligned_and_described(dataset):
    m = json.loads((dataset / MANIFEST).read_text())
    assert set(m["files"]) == set(FILE_NAMES)
    for entry in m["files"].values():
        size = (dataset / entry["name"]).stat().st_size
        assert size == entry["file_bytes"] and size % ALIGN == 0
        assert entry["bytes"] == int(np.prod(entry["shape"])) * np.dtype(entry["dtype"]).itemsize
    ds = open_dataset(dataset)
    assert ds.indices.dtype == np.int32 and ds.indptr.dtype == np.int64
    assert ds.features.shape == (199, 7) and ds.row_bytes == 28
    assert not list(dataset.parent.glob(".ds.tmp-*"))


@pytest.mark.parametrize("kind", list(FILE_NAMES))
def test_verify_catches_a_flipped_byte_in_every_file(dataset, kind):
    path = dataset / FILE_NAMES[kind]
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x40
    path.write_bytes(bytes(data))
    problems = verify(dataset)
    assert any(FILE_NAMES[kind] in p and "checksum" in p for p in problems), problems
    with pytest.raises(DiskgnnError, match=FILE_NAMES[kind]):
        open_dataset(dataset)  # small files are checksummed on open
    proc = run_module("diskgnn.verify", dataset)
    assert proc.returncode != 0 and FILE_NAMES[kind] in proc.stderr and "Traceback" not in proc.stderr


def test_manifest_tampering_and_truncation_are_caught(dataset):
    mpath = dataset / MANIFEST
    m = json.loads(mpath.read_text())
    m["num_nodes"] += 1
    mpath.write_text(json.dumps(m))
    with pytest.raises(DiskgnnError, match="manifest.json: checksum mismatch"):
        open_dataset(dataset)


def test_truncated_file_is_caught_on_open(dataset):
    path = dataset / "features.bin"
    path.write_bytes(path.read_bytes()[:-ALIGN])
    with pytest.raises(DiskgnnError, match="features.bin: .* bytes, the manifest says"):
        open_dataset(dataset)


def test_verify_checks_invariants_behind_valid_checksums(dataset):
    # Corrupt the data but recompute checksums: the invariant checks must still see it.
    from diskgnn.data.files import file_checksum, manifest_checksum

    ind = np.fromfile(dataset / "indices.bin", dtype=np.int32)
    ind[5] = 10_000
    ind.tofile(dataset / "indices.bin")
    m = json.loads((dataset / MANIFEST).read_text())
    m["files"]["indices"]["checksum"] = "xxh3_128:" + file_checksum(dataset / "indices.bin")
    m["manifest_checksum"] = manifest_checksum(m)
    (dataset / MANIFEST).write_text(json.dumps(m))
    assert any("indices.bin: node id out of range" in p for p in verify(dataset))


def test_overwrite_replaces_atomically(tmp_path):
    src = write_npy_dir(tmp_path / "src", random_graph())
    out = prepare(src, tmp_path / "ds", progress=False)
    with pytest.raises(DiskgnnError, match="already exists"):
        prepare(src, out, progress=False)
    prepare(src, out, overwrite=True, undirected=True, progress=False)
    assert open_dataset(out).manifest["producer"]["options"]["undirected"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "src"]


def test_staged_directory_appears_only_on_commit(tmp_path):
    from diskgnn.data.files import StagedDirectory

    out = tmp_path / "out"
    with StagedDirectory(out) as st:
        st.path("a/b.txt").write_text("x")
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no commit: nothing left at all
    with pytest.raises(RuntimeError):
        with StagedDirectory(out) as st:
            st.path("b.txt").write_text("x")
            raise RuntimeError("half-way")
    assert list(tmp_path.iterdir()) == []
    (out / "old").mkdir(parents=True)
    with pytest.raises(DiskgnnError, match="already exists"):
        StagedDirectory(out)
    with StagedDirectory(out, overwrite=True) as st:
        st.path("new/c.txt").write_text("y")
        st.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (out / "new" / "c.txt").read_text() == "y" and not (out / "old").exists()


def test_random_access_turns_read_ahead_off_for_the_map(tmp_path):
    """random_access marks a memory map MADV_RANDOM (the kernel shows it as VmFlags "rr" in /proc/self/smaps),
    through views of it too, and leaves arrays that are not maps alone."""
    from diskgnn.data.format import random_access

    path = tmp_path / "a.bin"
    np.arange(1 << 16, dtype=np.int64).tofile(path)

    def flags(a) -> set:
        start = a.__array_interface__["data"][0] & ~0xFFF
        lines = open("/proc/self/smaps").read().splitlines()
        for i, line in enumerate(lines):
            lo, hi = (int(x, 16) for x in line.split()[0].split("-")) if "-" in line.split()[0] else (0, 0)
            if lo <= start < hi:
                return set(next(v for v in lines[i + 1:] if v.startswith("VmFlags:")).split()[1:])
        raise AssertionError("mapping not found")

    plain = np.memmap(path, np.int64, "r")
    advised = np.memmap(path, np.int64, "r")
    view = random_access(advised[10:20])
    assert view[0] == 10 and "rr" in flags(advised) and "rr" not in flags(plain)
    assert random_access(np.zeros(3)).sum() == 0


def test_random_map_is_a_second_map_of_the_same_rows(tmp_path):
    from diskgnn.data.format import random_map

    path = tmp_path / "rows.npy"
    np.save(path, np.arange(4097 * 3, dtype=np.float32).reshape(3, 4097))
    rows = np.load(path, mmap_mode="r")
    again = random_map(rows)
    assert again is not rows and isinstance(again, np.memmap) and np.array_equal(again, rows)
    plain = np.ones((2, 2))
    view = rows[1:]
    assert random_map(plain) is plain and random_map(view) is view  # not a whole file's map: itself


def test_every_dataset_has_node_types_and_relations(dataset, tmp_path):
    """A homogeneous dataset is the one-type, one-relation case of the typed reader, over its own files (opened as
    written, nothing prepared again); a typed one opens through the same class where a reader takes types."""
    from diskgnn.data.format import ONE_RELATION, ONE_TYPE

    from conftest import small_hetero

    ds = open_dataset(dataset)
    s = ds.schema
    assert not ds.typed and [t.name for t in s.types] == [ONE_TYPE] and s.target == ONE_TYPE
    assert [(r.src, r.name, r.dst, r.num_edges) for r in s.relations] == [(ONE_TYPE, ONE_RELATION, ONE_TYPE,
                                                                             ds.num_edges)]
    assert (s.types[0].count, s.types[0].feature_dim, s.num_classes) == (ds.num_nodes, ds.feature_dim, ds.num_classes)
    assert s.types[0].row_bytes == ds.row_bytes
    for got, want in zip(ds.csc(0), (ds.indptr, ds.indices)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ds.type_features(ONE_TYPE), ds.features)
    assert open_dataset(dataset, typed=True).schema == s

    typed = small_hetero(tmp_path / "typed")
    with pytest.raises(DiskgnnError, match="a heterogeneous dataset; this command reads homogeneous ones"):
        open_dataset(typed)
    hds = open_dataset(typed, typed=True)
    assert hds.typed and hds.schema.target == "paper" and hds.type_features("author") is None
    assert hds.num_edges == sum(int(hds.csc(r)[1].size) for r in range(len(hds.schema.relations)))
    assert hds.type_features("term").shape == (7, 4097)
