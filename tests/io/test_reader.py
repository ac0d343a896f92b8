"""diskgnn.reader against a numpy oracle, for every backend.

torch is imported inside the tests that need it: loaded at collection, it
would inflate the peak RSS that other tests measure on their child processes.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import diskgnn
from diskgnn.io.reader import FileReader, open_features

# pread-buffered is the pread backend through the page cache.
BACKENDS = ["io_uring", "pread", "pread-buffered", "mmap"]
NATIVE = ["io_uring", "pread", "pread-buffered"]


@pytest.fixture(scope="module")
def disk_dir():
    """A directory on a disk file system: /tmp may be tmpfs, where O_DIRECT is moot."""
    d = tempfile.mkdtemp(prefix="diskgnn-test-reader-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def open_reader(path, backend, **options):
    if backend == "io_uring":
        reason = diskgnn.native_info()["io_uring_reason"]
        if reason:
            pytest.skip(f"io_uring unavailable: {reason}")
        try:
            return FileReader(path, "io_uring", **options)
        except OSError as e:
            pytest.skip(f"io_uring needs O_DIRECT, which {path} does not support: {e}")
    if backend == "pread-buffered":
        return FileReader(path, "pread", direct=False, **options)
    return FileReader(path, backend, **options)


FILE_BYTES = 1000 * 4097 + 123  # does not end on a block


@pytest.fixture(scope="module")
def data_file(disk_dir):
    data = np.random.default_rng(0).integers(0, 256, FILE_BYTES, dtype=np.uint8)
    path = os.path.join(disk_dir, "rows.bin")
    data.tofile(path)
    return path, data


def oracle(data, ids, row_bytes, base=0):
    ids = np.asarray(ids, dtype=np.int64)
    return data[base + ids[:, None] * row_bytes + np.arange(row_bytes)].reshape(len(ids), row_bytes)


def num_rows_of(row_bytes, base=0):
    return (FILE_BYTES - base) // row_bytes


rng = np.random.default_rng(1)
GATHER_CASES = {
    "one_row": (4096, 0, [7]),
    "199_rows": (512, 0, rng.integers(0, num_rows_of(512), 199)),
    "4097_byte_rows": (4097, 0, rng.integers(0, num_rows_of(4097), 300)),
    "3_byte_rows": (3, 0, rng.integers(0, num_rows_of(3), 5000)),
    "duplicate_unsorted": (100, 0, [50, 3, 50, 2, 3, 1000, 0, 50]),
    "consecutive": (700, 0, list(range(40, 90))),
    "empty": (64, 0, []),
    "last_row_4097": (4097, 0, [num_rows_of(4097) - 1, 0]),
    "last_row_3": (3, 0, [num_rows_of(3) - 1]),
    "base_offset": (1000, 7, [0, num_rows_of(1000, 7) - 1, 5]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(GATHER_CASES))
def test_gather_rows_matches_numpy(data_file, backend, case):
    path, data = data_file
    row_bytes, base, ids = GATHER_CASES[case]
    with open_reader(path, backend) as r:
        got = r.gather_rows(ids, row_bytes, base)
    assert got.shape == (len(ids), row_bytes)
    np.testing.assert_array_equal(got, oracle(data, ids, row_bytes, base))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_into_given_outputs(data_file, backend):
    import torch

    path, data = data_file
    ids = [9, 1, 400, 9]
    with open_reader(path, backend) as r:
        out = torch.zeros((4, 250), dtype=torch.float32)  # 1000-byte rows seen as floats
        assert r.gather_rows(ids, 1000, out=out) is out
        np.testing.assert_array_equal(out.numpy().view(np.uint8), oracle(data, ids, 1000))
        big = np.full(5000, 7, np.uint8)  # larger than needed: the tail is left alone
        r.gather_rows(ids, 1000, out=big)
        np.testing.assert_array_equal(big[:4000].reshape(4, 1000), oracle(data, ids, 1000))
        assert (big[4000:] == 7).all()
        with pytest.raises(ValueError, match="contiguous"):
            r.gather_rows(ids, 1000, out=torch.zeros((250, 4), dtype=torch.float32).t())
        with pytest.raises(ValueError, match="output"):
            r.gather_rows(ids, 1000, out=np.zeros(3999, np.uint8))


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_batches_in_flight(data_file, backend):
    path, data = data_file
    batches = [np.random.default_rng(b).integers(0, num_rows_of(300), 500) for b in range(6)]
    with open_reader(path, backend) as r:
        handles = [r.gather_rows_async(ids, 300) for ids in batches]
        for ids, h in reversed(list(zip(batches, handles))):
            np.testing.assert_array_equal(h.wait(), oracle(data, ids, 300))
            assert h.done()


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_ranges(data_file, backend):
    path, data = data_file
    ranges = np.array([
        [0, 2 << 20, 0],                     # aligned, longer than one request
        [5, 3000, 2 << 20],                  # unaligned
        [FILE_BYTES - 10, 10, (2 << 20) + 3000],  # up to the last byte
        [8192, 0, 0],                        # empty
    ])
    out = np.zeros((2 << 20) + 3010, np.uint8)
    with open_reader(path, backend) as r:
        assert r.read_ranges(ranges, out) is out
    for off, length, dst in ranges:
        np.testing.assert_array_equal(out[dst:dst + length], data[off:off + length])


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_ids_name_the_file_and_id(data_file, backend):
    path, _ = data_file
    with open_reader(path, backend) as r:
        n = num_rows_of(512)
        with pytest.raises(IndexError, match=rf"{path}.*row id {n} "):
            r.gather_rows([0, n], 512)
        with pytest.raises(IndexError, match=rf"{path}.*row id -1 "):
            r.gather_rows([3, -1], 512)
        with pytest.raises(TypeError, match="integers"):
            r.gather_rows([1.5], 512)


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_shorter_than_expected(data_file, backend):
    path, _ = data_file
    with open_reader(path, backend) as r:
        expected_rows = num_rows_of(4097) + 5  # the file lacks the last rows
        with pytest.raises(EOFError, match=rf"{path}.*shorter than expected"):
            r.gather_rows([expected_rows - 1], 4097, num_rows=expected_rows)
        with pytest.raises(EOFError, match=path):
            r.read_ranges([[FILE_BYTES - 10, 11, 0]], np.zeros(11, np.uint8))


@pytest.mark.parametrize("backend", NATIVE)
def test_file_truncated_after_open(disk_dir, backend):
    path = os.path.join(disk_dir, f"truncated-{backend}.bin")
    data = np.random.default_rng(3).integers(0, 256, 50_000, dtype=np.uint8)
    data.tofile(path)
    with open_reader(path, backend) as r:
        os.truncate(path, 4096 + 10)
        with pytest.raises(EOFError, match=rf"{path}: file shorter than expected.* ends at byte 4106 "):
            r.gather_rows([300], 100)
        np.testing.assert_array_equal(r.gather_rows([40], 100), oracle(data, [40], 100))


@pytest.mark.parametrize("backend", NATIVE)
def test_reads_are_coalesced(data_file, backend):
    path, _ = data_file
    with open_reader(path, backend) as r:
        r.gather_rows(list(range(16)), 512)  # two touching blocks
        assert r.stats()["reads"] == 1
        r.gather_rows([0, 1000], 512)  # far apart: two reads, the gap is not read
        assert r.stats()["reads"] == 3


def test_missing_file_raises_oserror_with_errno():
    with pytest.raises(FileNotFoundError) as e:
        FileReader("/nonexistent/diskgnn.bin", "pread")
    assert e.value.filename == "/nonexistent/diskgnn.bin"


def test_closed_reader(data_file):
    path, _ = data_file
    r = FileReader(path, "pread")
    r.close()
    with pytest.raises(ValueError, match="closed"):
        r.gather_rows([0], 10)


def test_auto_prefers_io_uring_on_disk(data_file):
    path, _ = data_file
    with FileReader(path) as r:
        reason = diskgnn.native_info()["io_uring_reason"]
        if reason:
            assert r.backend == "pread" and reason in r.fallback_reason
        else:
            assert (r.backend, r.direct, r.fallback_reason) == ("io_uring", True, "")


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this machine")
def test_auto_falls_back_to_buffered_pread_on_tmpfs():
    fd, path = tempfile.mkstemp(dir="/dev/shm", prefix="diskgnn-test-")
    try:
        data = np.arange(10_000, dtype=np.uint8)
        os.write(fd, data.tobytes())
        with FileReader(path) as r:
            assert (r.backend, r.direct) == ("pread", False)
            assert "memory-backed" in r.fallback_reason
            np.testing.assert_array_equal(r.gather_rows([3, 1], 7), oracle(data, [3, 1], 7))
    finally:
        os.close(fd)
        os.unlink(path)


def test_unknown_backend(data_file):
    with pytest.raises(ValueError, match="unknown backend"):
        FileReader(data_file[0], "aio")


def test_kvikio_missing_is_a_clear_error(data_file):
    try:
        import kvikio  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match=r"diskgnn\[gpu\]"):
            FileReader(data_file[0], "kvikio")
    else:
        pytest.skip("kvikio is installed; see test_kvikio_reads_into_gpu_memory")


def test_kvikio_reads_into_gpu_memory(data_file):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("CUDA unavailable")
    pytest.importorskip("kvikio", reason="kvikio not installed (extra diskgnn[gpu])")
    path, data = data_file
    with FileReader(path, "kvikio") as r:
        ids = [5, 0, 5, num_rows_of(4097) - 1]
        got = r.gather_rows(ids, 4097)
        assert got.device.type == "cuda"
        np.testing.assert_array_equal(got.cpu().numpy(), oracle(data, ids, 4097))
        out = torch.zeros(3000, dtype=torch.uint8, device="cuda")
        r.read_ranges([[5, 3000, 0]], out)
        np.testing.assert_array_equal(out.cpu().numpy(), data[5:3005])


def test_import_diskgnn_does_not_import_torch():
    code = "import sys, diskgnn; diskgnn.native_info(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module", params=["float16", "uint8"])
def dataset(disk_dir, request):
    from diskgnn.data.format import DatasetBuilder

    dtype = np.dtype(request.param)
    feats = (np.random.default_rng(4).standard_normal((333, 37)) * 20).astype(dtype)  # 74- or 37-byte rows
    with DatasetBuilder(os.path.join(disk_dir, f"ds-{dtype}")) as b:
        w = b.writer("features", dtype, feats.shape[1:])
        w.write(feats)
        b.add("features", w.close())
        out = b.finish({"num_nodes": 333, "num_edges": 0, "feature_dim": 37, "feature_dtype": dtype.name})
    return out, feats


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
def test_open_features_gathers_tensors(dataset, backend):
    import torch

    path, feats = dataset
    if backend == "io_uring" and diskgnn.native_info()["io_uring_reason"]:
        pytest.skip(f"io_uring unavailable: {diskgnn.native_info()['io_uring_reason']}")
    options = {"direct": False} if backend == "pread-buffered" else {}
    dtype = torch.from_numpy(feats[:0]).dtype
    with open_features(path, backend.replace("-buffered", ""), queue_depth=8, **options) as f:
        assert (f.num_rows, f.row_bytes, f.dtype) == (333, 37 * feats.itemsize, dtype)
        assert f.backend != "auto"
        ids = torch.tensor([332, 0, 5, 5, 100])
        got = f.gather(ids)
        assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.shape == (5, 37)
        np.testing.assert_array_equal(got.numpy(), feats[ids.numpy()])
        out = torch.empty((2, 37), dtype=dtype)
        assert f.gather_async([1, 2], out=out).wait() is out
        np.testing.assert_array_equal(out.numpy(), feats[[1, 2]])
        with pytest.raises(ValueError, match="shape"):
            f.gather([1], out=out)
        with pytest.raises(IndexError, match="row id 333 "):
            f.gather([333])


def test_a_ctrl_c_inside_a_dropped_handles_wait_still_waits_and_prints_nothing(capsys):
    """A KeyboardInterrupt landing in ReadHandle.__del__ (the CLI's handler has recorded it already) would be
    printed as "Exception ignored" with a traceback; the handle waits on until the read is done instead."""
    from diskgnn.io.reader import ReadHandle

    class Ticket:
        calls = 0

        def wait(self):
            Ticket.calls += 1
            if Ticket.calls == 1:
                raise KeyboardInterrupt

    handle = ReadHandle(Ticket(), None)
    del handle
    assert Ticket.calls == 2
    assert "Exception ignored" not in capsys.readouterr().err


@pytest.mark.parametrize("backend", NATIVE)
def test_a_forked_child_lets_go_of_its_parents_reader(data_file, backend):
    """A child forked from a process with an open reader (a DataLoader worker whose garbage collector frees its
    parent's) closes its copy at once, though the engine's threads are not in it; the parent's still reads."""
    import multiprocessing

    path, data = data_file
    r = open_reader(path, backend)
    child = multiprocessing.get_context("fork").Process(target=r.close)
    child.start()
    child.join(60)
    stuck = child.is_alive()
    if stuck:
        child.kill()
    assert not stuck and child.exitcode == 0
    np.testing.assert_array_equal(r.gather_rows([3, 0], 4097), oracle(data, [3, 0], 4097))
    r.close()
