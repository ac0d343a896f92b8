"""The embedding table against a dense in-memory one (the oracle), and rolled back after real kill -9s and a
full disk in the middle of its write-back: the resumed updates end with the uninterrupted table, bit for bit."""

import errno
import os
import signal

import numpy as np
import pytest
import torch

from diskgnn.errors import DiskgnnError
from diskgnn.store import embeddings as emb_mod
from diskgnn.offline.partitions import partition_rows
from diskgnn.store.embeddings import EmbeddingTable
from diskgnn.store.records import GAP_ROWS, adagrad, coalesced, init_rows

LR = 0.05


def batches(n: int, steps: int, seed: int, dim: int):
    """(unique ids, gradient) per step: some empty, some of one row, many overlapping."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(steps):
        size = [0, 1, n][s % 3] if s < 3 else int(rng.integers(0, n + 1))
        ids = rng.permutation(n)[:size].astype(np.int64)
        out.append((ids, torch.from_numpy(rng.standard_normal((ids.size, dim), np.float32))))
    return out


def oracle(n: int, dim: int, seed: int, work) -> np.ndarray:
    table = torch.from_numpy(init_rows(seed, 0, n, dim))
    for ids, grad in work:
        rows = table[torch.from_numpy(ids)].clone()
        adagrad(rows, grad, LR)
        table[torch.from_numpy(ids)] = rows
    return table.numpy()


def stored(table: EmbeddingTable) -> np.ndarray:
    return np.fromfile(table.path, np.float32).reshape(table.num_nodes, -1)


def train(table: EmbeddingTable, work, checkpoint_every: int = 0, start: int = 0):
    for s, (ids, grad) in enumerate(work[start:], start):
        table.step(ids, table.gather(ids), grad)
        if checkpoint_every and (s + 1) % checkpoint_every == 0:
            table.flush()
            table.committed((s + 1) // checkpoint_every)


@pytest.mark.parametrize("n,dim,hot", [(1, 3, 0), (1, 3, 1), (199, 4, 0), (199, 4, 50), (64, 1024, 7)])
def test_updates_match_a_dense_table(tmp_path, n, dim, hot):
    """dim 1024: rows of 4100 bytes, across page boundaries."""
    work = batches(n, 12, seed=n + dim, dim=dim)
    table = EmbeddingTable(tmp_path / "e", n, dim, seed=3, lr=LR, create=True, init_bytes=4096 * 3)
    table.place(np.arange(0, n, max(1, n // max(1, hot)))[:hot])
    train(table, work)
    expect = oracle(n, dim, 3, work)
    everything = table.gather(np.arange(n)).numpy()
    assert np.array_equal(everything, expect)  # served: hot, queued and disk rows alike
    table.flush()
    assert np.array_equal(stored(table), expect)  # and all of it on disk after a flush
    table.close()


def test_coalesced_fills_short_gaps_whose_ids_run_on_and_nothing_else():
    """Against a loop over neighbouring dirty positions: a gap is filled where it is under GAP_ROWS and the ids run
    on across it (a buffer block's rows), never across a jump in ids (the next block, hot rows elsewhere)."""
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 199, 4097):
        ids = np.arange(n, dtype=np.int64) + 10
        if n > 100:
            ids[n // 2:] += 5  # a jump: two blocks holding partitions that are not neighbours
        dirty = np.sort(rng.choice(n, size=min(n, max(0, n // 9)), replace=False)) if n else np.zeros(0, np.int64)
        want = set(dirty.tolist())
        for a, b in zip(dirty[:-1].tolist(), dirty[1:].tolist()):
            if 1 < b - a <= GAP_ROWS and ids[b] - ids[a] == b - a:
                want.update(range(a + 1, b))
        got = coalesced(dirty, ids)
        assert got.tolist() == sorted(want), n
    assert coalesced(np.array([3, 3 + GAP_ROWS + 1]), np.arange(40)).tolist() == [3, 3 + GAP_ROWS + 1]
    assert coalesced(np.array([3, 3 + GAP_ROWS]), np.arange(40)).tolist() == list(range(3, 4 + GAP_ROWS))


def test_init_is_the_same_whatever_the_write_size(tmp_path):
    a = EmbeddingTable(tmp_path / "a", 70_000, 2, seed=5, lr=LR, create=True, init_bytes=12 * 999)
    b = EmbeddingTable(tmp_path / "b", 70_000, 2, seed=5, lr=LR, create=True)
    assert np.array_equal(stored(a), stored(b))
    assert np.array_equal(stored(a)[65_530:65_540], init_rows(5, 65_530, 10, 2))
    a.close(), b.close()


def partitioned_batches(n: int, parts: int, capacity: int, steps: int, seed: int, dim: int):
    """(held partitions, unique ids among their rows, gradient) per step: a state kept for a few steps, then
    another; some batches empty or of one row."""
    rng = np.random.default_rng(seed)
    rows = partition_rows(n, parts)
    out, held = [], tuple(range(min(parts, capacity)))
    for s in range(steps):
        if s % 3 == 2:
            held = tuple(sorted(rng.permutation(parts)[:capacity].tolist()))
        pool = np.concatenate([np.arange(p * rows, min(n, (p + 1) * rows)) for p in held])
        ids = rng.permutation(pool)[: [0, 1, pool.size][s % 3] if s < 3 else int(rng.integers(0, pool.size + 1))]
        out.append((held, ids.astype(np.int64), torch.from_numpy(rng.standard_normal((ids.size, dim), np.float32))))
    return out


def train_partitioned(table: EmbeddingTable, work, checkpoint_every: int = 0, start: int = 0):
    for s, (held, ids, grad) in enumerate(work[start:], start):
        table.hold(held)
        table.step(ids, table.gather(ids), grad)
        if checkpoint_every and (s + 1) % checkpoint_every == 0:
            table.flush()
            table.committed((s + 1) // checkpoint_every)


@pytest.mark.parametrize("n,dim,parts,capacity", [(1, 3, 1, 1), (199, 4, 8, 3), (199, 4, 64, 5), (64, 1024, 4, 2)])
def test_a_partition_buffer_matches_a_dense_table(tmp_path, n, dim, parts, capacity):
    """199 rows in 8 partitions: the last one short; in 64: the last ones empty; rows of 4100 bytes."""
    work = partitioned_batches(n, parts, capacity, 15, seed=n + parts, dim=dim)
    table = EmbeddingTable(tmp_path / "e", n, dim, seed=3, lr=LR, create=True, init_bytes=4096 * 3)
    table.use_partitions(partition_rows(n, parts), capacity)
    train_partitioned(table, work)
    expect = oracle(n, dim, 3, [(ids, grad) for _, ids, grad in work])
    assert np.array_equal(table.gather(np.arange(n)).numpy(), expect)  # buffered rows and written-back ones
    if parts > capacity:
        assert table.stats["partitions_read"] > capacity and table.stats["partitions_written"] > 0
    table.flush()
    assert np.array_equal(stored(table), expect)
    table.close()


def killed_child(directory, n, dim, work, every, die_after_writes: int, generation=0, create=True, start=0,
                 partitions=None):
    """Trains in a forked process that SIGKILLs itself halfway through its `die_after_writes`-th write to the
    table (a torn row on disk); returns how it ended. `partitions`: (rows, capacity) of a partition buffer."""
    pid = os.fork()
    if pid == 0:
        try:
            writes = [0]
            real = os.pwrite

            def pwrite(fd, data, offset):
                writes[0] += 1
                if writes[0] == die_after_writes:
                    real(fd, bytes(data)[: max(1, len(data) // 2 + 1)], offset)
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(fd, data, offset)
            emb_mod.os.pwrite = pwrite
            table = EmbeddingTable(directory, n, dim, seed=1, lr=LR, create=create, generation=generation)
            if partitions:
                table.use_partitions(*partitions)
                train_partitioned(table, work, every, start)
            else:
                table.place(np.arange(0, n, 9))
                train(table, work, every, start)
            table.flush()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize("die_after", [1, 5, 23, 61])
def test_kill_during_write_back_then_resume_ends_bit_identical(tmp_path, die_after):
    n, dim, every = 199, 5, 4
    work = batches(n, 20, seed=die_after, dim=dim)
    assert killed_child(tmp_path / "e", n, dim, work, every, die_after), "the child was not killed: too few writes"
    # The child committed checkpoints 1..k; a real run reads k from last.pt: here, every one is tried in turn
    # by a fresh copy would be slow, so find it from the journal's header (what last.pt would say).
    gen = int.from_bytes((tmp_path / "e" / "journal.bin").read_bytes()[8:16], "little")
    table = EmbeddingTable(tmp_path / "e", n, dim, seed=1, lr=LR, create=False, generation=gen)
    assert np.array_equal(stored(table), oracle(n, dim, 1, work[: gen * every])), "not rolled back to the checkpoint"
    table.place(np.arange(0, n, 9))
    train(table, work, every, start=gen * every)
    table.flush()
    assert np.array_equal(stored(table), oracle(n, dim, 1, work))
    table.close()


@pytest.mark.parametrize("die_after", [1, 4, 8, 12])
def test_kill_during_a_partition_write_back_then_resume_ends_bit_identical(tmp_path, die_after):
    n, dim, every, parts, capacity = 199, 5, 4, 6, 2
    work = partitioned_batches(n, parts, capacity, 24, seed=die_after, dim=dim)
    layout = (partition_rows(n, parts), capacity)
    assert killed_child(tmp_path / "e", n, dim, work, every, die_after, partitions=layout), "too few writes"
    gen = int.from_bytes((tmp_path / "e" / "journal.bin").read_bytes()[8:16], "little")
    table = EmbeddingTable(tmp_path / "e", n, dim, seed=1, lr=LR, create=False, generation=gen)
    plain = [(ids, grad) for _, ids, grad in work]
    assert np.array_equal(stored(table), oracle(n, dim, 1, plain[: gen * every])), "not rolled back"
    table.use_partitions(*layout)
    train_partitioned(table, work, every, start=gen * every)
    table.flush()
    assert np.array_equal(stored(table), oracle(n, dim, 1, plain))
    table.close()


def test_a_full_disk_in_the_journal_stops_in_one_line_and_resume_recovers(tmp_path, monkeypatch):
    n, dim, every = 199, 5, 4
    work = batches(n, 16, seed=7, dim=dim)
    table = EmbeddingTable(tmp_path / "e", n, dim, seed=1, lr=LR, create=True)
    table.place(np.arange(0, n, 9))
    real = table.journal.append
    calls = [0]

    def append(ids, rows):
        calls[0] += 1
        if calls[0] == 6:  # a journal entry half written, then the disk is full
            table.journal._f.write(b"\x07" * 100)
            raise DiskgnnError(f"{table.journal.path}: {os.strerror(errno.ENOSPC)}")
        real(ids, rows)
    monkeypatch.setattr(table.journal, "append", append)
    with pytest.raises(DiskgnnError, match="journal.bin: No space left on device"):
        train(table, work, every)
        table.flush()
    gen = table.generation
    table.close()
    table = EmbeddingTable(tmp_path / "e", n, dim, seed=1, lr=LR, create=False, generation=gen)
    assert np.array_equal(stored(table), oracle(n, dim, 1, work[: gen * every]))
    table.place(np.arange(0, n, 9))
    train(table, work, every, start=gen * every)
    table.flush()
    assert np.array_equal(stored(table), oracle(n, dim, 1, work))
    table.close()


def test_a_stale_journal_is_dropped_and_a_newer_one_refused(tmp_path):
    n, dim = 50, 3
    work = batches(n, 6, seed=2, dim=dim)
    table = EmbeddingTable(tmp_path / "e", n, dim, seed=1, lr=LR, create=True)
    train(table, work[:3])
    table.flush()
    table.committed(1)  # journal now undoes to 1
    table.close()
    # resuming from checkpoint 2 (saved, but the crash came before the journal restarted): nothing to undo
    again = EmbeddingTable(tmp_path / "e", n, dim, seed=1, lr=LR, create=False, generation=2)
    assert np.array_equal(stored(again), oracle(n, dim, 1, work[:3]))
    again.close()
    with pytest.raises(DiskgnnError, match="newer than the one resumed from"):
        EmbeddingTable(tmp_path / "e", n, dim, seed=1, lr=LR, create=False, generation=1)
    with pytest.raises(DiskgnnError, match="not 50 x 4"):
        EmbeddingTable(tmp_path / "e", n, 4, seed=1, lr=LR, create=False, generation=2)


@pytest.mark.parametrize("n,dim,hot", [(1, 3, 0), (199, 4, 0), (199, 4, 60)])
def test_adam_rows_match_torch_sparse_adam(tmp_path, n, dim, hot):
    """--embedding-optimizer adam against torch.optim.SparseAdam on an nn.Embedding(sparse=True) fed the same
    gradients: the same values and moments, bit for bit, wherever the rows were served from (empty batches
    count as steps in both)."""
    work = batches(n, 12, seed=n + dim + hot, dim=dim)
    table = EmbeddingTable(tmp_path / "e", n, dim, seed=3, lr=LR, create=True, optimizer="adam")
    table.place(np.arange(0, n, max(1, n // max(1, hot)))[:hot])
    train(table, work)
    reference = torch.nn.Embedding(n, dim, sparse=True)
    reference.weight.data = torch.from_numpy(init_rows(3, 0, n, dim, 2 * dim)[:, :dim].copy())
    opt = torch.optim.SparseAdam(reference.parameters(), lr=LR)
    for ids, grad in work:
        reference.weight.grad = torch.sparse_coo_tensor(torch.from_numpy(ids)[None], grad, (n, dim),
                                                        check_invariants=True)
        opt.step()
    table.flush()
    got = stored(table)
    assert got.shape == (n, 3 * dim) and table.steps == len(work)
    assert torch.equal(torch.from_numpy(got[:, :dim]), reference.weight.data)
    state = opt.state[reference.weight]
    assert torch.equal(torch.from_numpy(got[:, dim: 2 * dim]), state["exp_avg"])
    assert torch.equal(torch.from_numpy(got[:, 2 * dim:]), state["exp_avg_sq"])
    table.close()
    with pytest.raises(DiskgnnError, match="adam\\), not 199 x 4 \\(seed 3, adagrad\\)|adam\\), not 1 x 3"):
        EmbeddingTable(tmp_path / "e", n, dim, seed=3, lr=LR, create=False, generation=0)
