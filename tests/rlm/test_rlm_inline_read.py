"""The RLM's inline remote read: a sequential reader whose bytes were read ahead into memory is
answered on the caller's thread (no reader-pool task), with the same bytes, accounting and
boundaries as the pool path; when the bytes are not in memory yet it answers None at once and the
pool path takes over. Real segments and a real LocalTieredStorage, no mocks."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import wait

import pytest
from helpers import Logs
from prometheus_client import REGISTRY

from tieredlog.records.batch import iter_headers
from tieredlog.records.record import build_batch
from tieredlog.rlm.quota import RLMQuotaManager


class _Env:
    """A partition whose rolled segments are all remote, the RLM over it and the pool's tasks."""

    def __init__(self, plog, rlm, remote_bytes, seg_bounds):
        self.lg, self.rlm, self.remote_bytes, self.seg_bounds = plog, rlm, remote_bytes, seg_bounds
        self.tp = plog.topic_partition
        self.topic = self.tp[0]
        self.tasks: list = []  # (fn, future) of every reader-pool submission
        self.short_answers = 0  # answers that stopped before max_bytes at the end of a ranged read
        pool = rlm.reader_pool
        submit = pool.submit

        def recording(fn, *args):
            fut = submit(fn, *args)
            self.tasks.append((fn, fut))
            return fut

        pool.submit = recording

    def pool_reads(self) -> int:
        """Fetches served by a reader-pool task (read-ahead and segment set-ups not counted)."""
        return sum(fn == self.rlm._read for fn, _ in self.tasks)

    def settle(self) -> None:
        """Wait for every pool task so far, and those they queued (read-ahead has landed)."""
        seen = 0
        while seen < len(self.tasks):
            batch = [f for _, f in self.tasks[seen:]]
            seen += len(batch)
            wait(batch)

    def slow_read(self, offset: int, max_bytes: int, min_one: bool = True) -> bytes:
        """The pool path alone (what read_async did before the inline path)."""
        tip = self.rlm._tip(self.tp, self.lg)
        return self.rlm.reader_pool.submit(self.rlm._read, tip, self.lg, offset, max_bytes, min_one).result(10)

    def metric(self, name: str) -> float:
        return REGISTRY.get_sample_value(f"kafka_server_brokertopicmetrics_{name}_total", {"topic": self.topic}) or 0.0


@pytest.fixture
def env(tmp_path):
    from tieredlog.log.config import LogConfig
    from tieredlog.log.unified_log import UnifiedLog
    from tieredlog.rlm.config import RemoteLogManagerConfig
    from tieredlog.rlm.manager import RemoteLogManager
    from tieredlog.rlm.partition_state import PartitionState
    from tieredlog.rlm.pool import TaskContext
    from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
    from tieredlog.rsm.local import LocalTieredStorage

    cfg = LogConfig(segment_bytes=24 * 1024, index_interval_bytes=256, remote_storage_enable=True, retention_ms=-1,
                    local_retention_bytes=1, file_delete_delay_ms=0, message_timestamp_after_max_ms=1 << 62,
                    message_timestamp_before_max_ms=1 << 62)
    topic = f"inl{uuid.uuid4().hex[:8]}"  # its own metric labels
    plog = UnifiedLog(tmp_path / "logs" / f"{topic}-0", cfg, topic_id=uuid.uuid4())
    for i in range(300):
        off = plog.log_end_offset
        n = 40 if i == 77 else 1 + i % 4  # batch 77 is far larger than the fetch sizes used below
        recs = [(b"k%d" % (off + j), b"value-%d-" % (off + j) * 8, [], 1_000_000 + off + j) for j in range(n)]
        plog.append_as_leader(build_batch(recs), 0)
    plog.update_high_watermark(plog.log_end_offset)
    originals = {s.base_offset: s.log_path.read_bytes() for s in plog.segments}
    rsm = LocalTieredStorage(tmp_path / "remote")
    rsm.configure({"broker.id": 0})
    cfg = RemoteLogManagerConfig(log_dirs=(str(tmp_path / "logs"),), reader_threads=2, reader_max_pending_tasks=32)
    rlm = RemoteLogManager(cfg, Logs(plog), rsm, InMemoryRemoteLogMetadataManager())
    rlm.start()
    rlm.copy_task(PartitionState(plog.topic_partition, rlm._tip(plog.topic_partition, plog))).run(TaskContext())
    plog.delete_old_segments()
    start = plog.local_log_start_offset
    remote = [v for k, v in sorted(originals.items()) if k < start]
    assert len(remote) >= 3  # several remote segments: the reader crosses segment boundaries
    bounds, pos = [], 0
    for seg in remote:
        bounds.append((pos, pos + len(seg)))
        pos += len(seg)
    rlm.read_path.chunk_min = 4 * 1024
    rlm.read_path.chunk_grown = 8 * 1024
    try:
        yield _Env(plog, rlm, b"".join(remote), bounds)
    finally:
        rlm.shutdown()


def _check_chunk(env: _Env, at: int, chunk: bytes, offset: int, max_bytes: int) -> int:
    """Whole batches holding ``offset``, within max_bytes (or one batch), inside one segment, the
    bytes at ``at`` of the remote log; returns the next offset."""
    hdrs = [h for _, h in iter_headers(chunk)]
    assert hdrs and sum(h.size for h in hdrs) == len(chunk)
    assert hdrs[0].base_offset <= offset <= hdrs[0].last_offset
    assert len(chunk) <= max_bytes or len(hdrs) == 1
    assert env.remote_bytes[at:at + len(chunk)] == chunk
    assert any(a <= at and at + len(chunk) <= b for a, b in env.seg_bounds), "crossed a segment boundary"
    # every whole batch of the segment that fits, or fewer where the stream's bytes end (the next
    # ranged read is not joined to them): counted, and bounded by the reads in the tests below
    seg_end = next(b for a, b in env.seg_bounds if a <= at < b)
    fit = 0
    for _, h in iter_headers(env.remote_bytes[at:seg_end]):
        if fit and fit + h.size > max_bytes:
            break
        fit += h.size
    assert len(chunk) <= fit
    env.short_answers += len(chunk) < fit
    return hdrs[-1].next_offset


def test_sequential_reader_is_served_inline_once_read_ahead_has_landed(env):
    rlm = env.rlm
    offset = at = 0
    answers = []
    while offset < env.lg.local_log_start_offset:
        env.settle()
        chunk = rlm.try_read_cached(env.tp, offset, 700)
        answers.append(chunk is not None)
        if chunk is None:
            chunk = rlm.read(env.tp, offset, 700, timeout=10)
        offset = _check_chunk(env, at, chunk, offset, 700)
        at += len(chunk)
    assert at == len(env.remote_bytes)
    # only the very first fetch went through the pool: every later one, across every segment
    # boundary, found its bytes read ahead and was answered on this thread
    assert answers[0] is False and all(answers[1:]) and len(answers) > 3 * len(env.seg_bounds)
    assert env.pool_reads() == 1
    assert rlm.read_path.inline_hits == len(answers) - 1
    # the read-ahead kept going from the inline answers (more ranged reads than the first fetch's)
    ranged_reads = sum(fn == rlm.read_path.fetch_range for fn, _ in env.tasks)
    assert ranged_reads > len(env.seg_bounds)
    # an answer stops short only where a ranged read's bytes end: at most once per read
    assert env.short_answers <= ranged_reads + 1


@pytest.mark.parametrize("max_bytes", [300, 1000, 5000])
def test_inline_answers_are_byte_identical_to_the_pool_path(env, max_bytes):
    rlm = env.rlm

    def catch_up(read) -> list[bytes]:
        out, offset = [], 0
        while offset < env.lg.local_log_start_offset:
            env.settle()
            chunk = read(offset)
            out.append(chunk)
            *_, (_, h) = iter_headers(chunk)
            offset = h.next_offset
        return out

    slow = catch_up(lambda off: env.slow_read(off, max_bytes))
    assert rlm.read_path.inline_hits == 0
    rlm.read_path.prefetch.clear()
    fast = catch_up(lambda off: rlm.read_async(env.tp, off, max_bytes).result(10))
    assert rlm.read_path.inline_hits == len(fast) - 1  # read_async answered inline after the first
    assert fast == slow
    assert b"".join(fast) == env.remote_bytes


def test_inline_keeps_min_one_message_rules_and_accounting(env):
    rlm = env.rlm
    batches = list(iter_headers(env.remote_bytes))
    big_pos, big = next((p, h) for p, h in batches if h.records_count == 40)
    assert big.size > 1000
    offset, at = 0, 0
    while offset < big.base_offset:  # read sequentially up to the big batch with small fetches
        env.settle()
        chunk = rlm.read(env.tp, offset, 400, timeout=10)
        offset = _check_chunk(env, at, chunk, offset, 400)
        at += len(chunk)
    assert offset == big.base_offset and at == big_pos
    env.settle()
    reads_before = env.pool_reads()
    requests, nbytes = env.metric("remotefetchrequests"), env.metric("remotefetchbytes")
    # without min one message a batch larger than the fetch gives nothing, and the reader stays there
    assert rlm.try_read_cached(env.tp, offset, 1000, min_one_message=False) == b""
    # with it, the whole batch though it is larger than the fetch
    assert rlm.try_read_cached(env.tp, offset, 1000) == env.remote_bytes[big_pos:big_pos + big.size]
    assert env.pool_reads() == reads_before
    assert env.metric("remotefetchrequests") == requests + 2
    assert env.metric("remotefetchbytes") == nbytes + big.size

    # the fetch quota counts inline bytes, and a throttled fetch is not answered inline
    clock = [100.0]
    rlm.fetch_quota = RLMQuotaManager(1000, window_size_seconds=1, clock=lambda: clock[0])
    env.settle()
    chunk = rlm.try_read_cached(env.tp, big.next_offset, 2000)
    assert chunk is not None and len(chunk) > 1000
    assert rlm.fetch_quota.throttle_time_ms() > 0
    assert rlm.try_read_cached(env.tp, _check_chunk(env, big_pos + big.size, chunk, big.next_offset, 2000), 2000) is None
    assert rlm.read_async(env.tp, big.next_offset, 2000).result(10) == b""  # read_async answers: empty, throttled


@pytest.mark.parametrize("max_bytes", [500, 1000])
def test_inline_read_never_waits_for_a_read_ahead_in_flight(env, max_bytes):
    rlm = env.rlm
    rsm = rlm.rsm
    fetch = rsm.fetch_log_segment
    gate = threading.Event()
    caller = threading.current_thread()
    io_on_caller: list = []

    def gated(md, start, end=None):
        if threading.current_thread() is caller:
            io_on_caller.append(start)
        if start > 0:  # every read ahead of the first segment's first read waits for the gate
            gate.wait()
        return fetch(md, start, end)

    rsm.fetch_log_segment = gated
    try:
        first = rlm.read(env.tp, 0, 500, timeout=10)  # the first 4 KiB land; the read-ahead waits
        offset = _check_chunk(env, 0, first, 0, 500)
        at = len(first)
        results: list = []
        failures: list = []

        def inline_until_miss():
            nonlocal offset, at
            try:
                while (chunk := rlm.try_read_cached(env.tp, offset, max_bytes)) is not None:
                    results.append(chunk)
                    offset = _check_chunk(env, at, chunk, offset, max_bytes)
                    at += len(chunk)
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)

        t = threading.Thread(target=inline_until_miss)
        caller = t
        t.start()
        t.join(60)  # a deadlock guard only: waiting on the gated read would never end
        assert not t.is_alive(), "the inline read waited for a read in flight"
        if failures:
            raise failures[0]
        assert results and at <= 4 * 1024  # served what had landed, then None rather than waiting
        assert rlm.read_path.inline_misses >= 1

        caller = threading.current_thread()
        fut = rlm.read_async(env.tp, offset, max_bytes)  # the pool path takes over ...
        assert not fut.done()
        gate.set()
        chunk = fut.result(10)  # ... and goes on from the same stream, byte for byte
        offset = _check_chunk(env, at, chunk, offset, max_bytes)
        at += len(chunk)
        while offset < env.lg.local_log_start_offset:
            chunk = rlm.read(env.tp, offset, 500, timeout=10)
            offset = _check_chunk(env, at, chunk, offset, 500)
            at += len(chunk)
        assert at == len(env.remote_bytes)
        assert io_on_caller == []  # no remote read ever ran on a caller's thread
    finally:
        gate.set()
        rsm.fetch_log_segment = fetch


def test_answers_are_views_of_the_ranged_reads_and_only_a_cut_batch_is_copied(env):
    """A ranged read that ends inside a batch is not joined to the next one: that one batch is copied
    and answered alone, and every other answer is a slice of a read as it came from the store."""
    rlm = env.rlm
    fetch_range = rlm.read_path.fetch_range
    reads: list[bytes] = []

    def recording(md, start, end):
        got = fetch_range(md, start, end)
        reads.append(got)
        return got

    rlm.read_path.fetch_range = recording
    offset = at = copied = 0
    answers = 0
    while offset < env.lg.local_log_start_offset:
        env.settle()
        chunk = rlm.try_read_cached(env.tp, offset, 700)
        if chunk is None:
            chunk = rlm.read_async(env.tp, offset, 700).result(10)  # (read() hands out a copy)
        buffer = chunk.obj if isinstance(chunk, memoryview) else chunk
        if not any(buffer is r for r in reads):
            # not a view of a read: the batch a read boundary cut, alone
            assert len(list(iter_headers(chunk))) == 1, f"the answer at offset {offset} is a joined copy"
            copied += 1
        offset = _check_chunk(env, at, chunk, offset, 700)
        at += len(chunk)
        answers += 1
    assert at == len(env.remote_bytes) and answers > len(reads) > len(env.seg_bounds)
    assert 0 < copied <= len(reads)  # the small reads here cut batches often; at most one per read
