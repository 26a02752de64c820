"""Unit tests of the RLM's building blocks: quota, reader pool, scheduler, remote index cache,
lineage arithmetic. Real segments (LogSegment) and a real LocalTieredStorage, no mocks."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers import FakeClock
from rlm_harness import catch_up, tiered_log  # noqa: F401 - the fixture, shared

from tieredlog.formats.checkpoints import encode_leader_epoch_checkpoint
from tieredlog.formats.lineage import (
    highest_remote_offset,
    is_within_lineage,
    segment_leader_epochs,
)
from tieredlog.kafka_uuid import uuid_to_kafka_str
from tieredlog.log.segment import LogSegment
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import build_batch
from tieredlog.rlm.index_cache import DIR_NAME, RemoteIndexCache
from tieredlog.rlm.pool import FixedDelayScheduler, RemoteReaderPool, RemoteReaderQueueFullError
from tieredlog.rlm.quota import RLMQuotaManager
from tieredlog.rsm.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from tieredlog.rsm.local import LocalTieredStorage


# ---- quota ------------------------------------------------------------------------------------
def test_quota_throttles_until_tokens_refill():
    clock = FakeClock(100.0)
    q = RLMQuotaManager(1000, window_size_seconds=1, clock=clock)
    assert q.throttle_time_ms() == 0
    q.record(3000)  # 1000 burst available: 2000 bytes in debt
    assert q.throttle_time_ms() == pytest.approx(2000)
    clock.t += 1.5
    assert q.throttle_time_ms() == pytest.approx(500)
    clock.t += 0.5
    assert q.throttle_time_ms() == 0
    assert not q.is_quota_exceeded()


def test_quota_unlimited_by_default_and_dynamic_update():
    clock = FakeClock(100.0)
    q = RLMQuotaManager(clock=clock)
    q.record(10**12)
    assert q.throttle_time_ms() == 0
    q.update_quota(100)
    q.record(300)
    assert q.throttle_time_ms() == pytest.approx(2000)
    q.update_quota((1 << 63) - 1)
    assert q.throttle_time_ms() == 0


def test_quota_acquire_waits_then_records_and_stops_when_cancelled():
    # a frozen clock: the debt is repaid only when the test moves time on, so "it waited" is a fact
    # about the code, not about how fast this machine happens to be
    clock = FakeClock(100.0)
    q = RLMQuotaManager(1_000_000, window_size_seconds=0.01, clock=clock)  # 10 kB burst
    assert q.acquire(10_000)
    assert q.acquire(20_000)  # debt: 20 ms at 1 MB/s
    result: list = []
    waiter = threading.Thread(target=lambda: result.append(q.acquire(1)), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 30  # hang guard only
    while q.throttle_time_total_ms == 0:
        assert time.monotonic() < deadline, "acquire never started waiting"
        time.sleep(0.005)
    assert waiter.is_alive() and result == []  # still waiting: the debt is not repaid yet
    clock.t += 0.03  # more than the 20 ms the debt needs at 1 MB/s (an exact 0.02 is lost to float rounding)
    waiter.join(30)
    assert not waiter.is_alive() and result == [True]
    assert q.throttle_time_total_ms >= 20
    q.update_quota(1)
    q.record(10)
    assert q.acquire(1, cancelled=lambda: True) is False


# ---- reader pool ----------------------------------------------------------------------------------
def test_reader_pool_rejects_when_queue_full_and_runs_queued_work():
    gate = threading.Event()
    pool = RemoteReaderPool(threads=1, max_pending_tasks=2)
    try:
        started = threading.Event()

        def blocker():
            started.set()
            gate.wait(10)
            return "first"

        f1 = pool.submit(blocker)
        assert started.wait(5)
        f2 = pool.submit(lambda: 2)
        f3 = pool.submit(lambda: 3)
        assert pool.queue_size == 2
        with pytest.raises(RemoteReaderQueueFullError) as exc:
            pool.submit(lambda: 4)
        assert exc.value.retriable
        f3.cancel()  # a fetch that timed out before its turn is skipped
        gate.set()
        assert f1.result(5) == "first"
        assert f2.result(5) == 2
        assert f3.cancelled()
    finally:
        gate.set()
        pool.shutdown()


def test_reader_pool_reports_errors_through_the_future():
    pool = RemoteReaderPool(threads=2, max_pending_tasks=4)
    try:
        def boom():
            raise ValueError("remote down")

        with pytest.raises(ValueError, match="remote down"):
            pool.submit(boom).result(5)
        assert 0.0 <= pool.idle.sample() <= 1.0
    finally:
        pool.shutdown()


# ---- scheduler ------------------------------------------------------------------------------------
def test_scheduler_runs_with_fixed_delay_and_backs_off_on_failure():
    sched = FixedDelayScheduler("t", 2, backoff_ms=20, backoff_max_ms=40, jitter=0.0)
    try:
        runs: list[float] = []
        done = threading.Event()

        def flaky(ctx):
            runs.append(time.monotonic())
            if len(runs) < 3:
                raise RuntimeError("transient")
            done.set()

        sched.schedule("k", flaky, interval_ms=60_000)
        assert done.wait(5)
        assert len(runs) == 3  # retried twice after failures, well before the 60 s interval
        assert sched.backoff_s(1, 60) == pytest.approx(0.02)
        assert sched.backoff_s(5, 60) == pytest.approx(0.04)  # capped
        sched.cancel("k")
        assert not sched.is_scheduled("k")
    finally:
        sched.shutdown()


def test_a_run_can_ask_to_run_again_before_its_interval_and_frees_its_thread_meanwhile():
    """A run that stopped half way (the remote cleaner waiting for its throttle) returns with
    ``run_again_in_s``: it runs again then, not an interval later, and the one thread serves another task."""
    sched = FixedDelayScheduler("t", 1)
    try:
        runs: list[str] = []
        done = threading.Event()

        def stepping(ctx):
            runs.append("step")
            if runs.count("step") < 3:
                ctx.run_again_in_s = 0.05
            else:
                done.set()

        sched.schedule("other", lambda ctx: runs.append("other"), interval_ms=60_000)
        sched.schedule("k", stepping, interval_ms=60_000)
        assert done.wait(5)  # three runs, well before the 60 s interval
        assert runs.count("step") == 3 and "other" in runs
    finally:
        sched.shutdown()


def test_scheduler_never_runs_a_task_twice_at_once():
    sched = FixedDelayScheduler("t", 4)
    try:
        active = []
        peak = []
        lock = threading.Lock()
        count = [0]
        enough = threading.Event()

        def task(ctx):
            with lock:
                active.append(1)
                peak.append(len(active))
            time.sleep(0.01)
            with lock:
                active.pop()
                count[0] += 1
                if count[0] >= 5:
                    enough.set()

        sched.schedule("k", task, interval_ms=1)
        for _ in range(20):
            sched.run_now("k")
        assert enough.wait(5)
        assert max(peak) == 1
    finally:
        sched.shutdown()


# ---- remote index cache ---------------------------------------------------------------------------
def _write_segment(d: Path, base: int, batches: int, records_per_batch: int = 5) -> tuple[LogSegment, bytes]:
    seg = LogSegment(d, base, index_interval_bytes=256, active=True)
    offset = base
    out = bytearray()
    for _b in range(batches):
        recs = [(f"k{offset + i}".encode(), (b"v%d-" % (offset + i)) * 20, [], 1_000_000 + offset + i) for i in range(records_per_batch)]
        batch = build_batch(recs, base_offset=offset, partition_leader_epoch=0)
        headers = [h for _, h in iter_headers(batch)]
        seg.append(batch, headers)
        out += batch
        offset += records_per_batch
    seg.on_become_inactive()
    seg.flush()
    return seg, bytes(out)


def _copy(rsm: LocalTieredStorage, seg: LogSegment, tip: TopicIdPartition, tmp: Path) -> RemoteLogSegmentMetadata:
    snap = tmp / f"{seg.next_offset:020d}.snapshot"
    snap.write_bytes(b"snapshot")
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tip), seg.base_offset, seg.next_offset - 1, seg.largest_timestamp, 0,
        int(time.time() * 1000), seg.size, {0: seg.base_offset},
    )
    rsm.copy_log_segment_data(
        md,
        LogSegmentData(seg.log_path, seg.offset_index_path, seg.time_index_path, None, snap, encode_leader_epoch_checkpoint([(0, 0)])),
    )
    return md


@pytest.fixture
def remote(tmp_path):
    rsm = LocalTieredStorage(tmp_path / "remote")
    rsm.configure({"broker.id": 0})
    events = []
    rsm.add_listener(lambda e: events.append(e))
    return rsm, TopicIdPartition(uuid.uuid4(), "t", 0), events


def test_index_cache_matches_the_local_index_and_fetches_once(tmp_path, remote):
    rsm, tip, events = remote
    seg, data = _write_segment(tmp_path / "log", 0, batches=40)
    md = _copy(rsm, seg, tip, tmp_path)
    assert seg.offset_index.entries > 3  # the test needs a real index
    cache = RemoteIndexCache(rsm, tmp_path / "logdir", 1 << 20)
    for offset in (0, 7, 55, 123, 199):
        assert cache.lookup_offset_entry(md, offset) == seg.offset_index.lookup(offset)
    fetches = sorted(e.type for e in events if "INDEX" in e.type)
    # offset and time index fetched once; the missing txn index became an empty file
    assert fetches == ["FETCH_OFFSET_INDEX", "FETCH_TIMESTAMP_INDEX"]
    assert cache.misses == 1 and cache.hits == 4
    files = sorted(p.name for p in (tmp_path / "logdir" / DIR_NAME).iterdir())
    assert [f.split(".")[-1] for f in files] == ["index", "timeindex", "txnindex"]
    assert files[0].startswith("0_")
    # the byte position found is where the batch holding the offset (or an earlier one) starts
    pos = cache.lookup_offset(md, 123)
    hdrs = [(p, h) for p, h in iter_headers(data) if p >= pos]
    assert hdrs[0][1].base_offset <= 123


def test_index_cache_evicts_lru_and_deletes_files_and_survives_restart(tmp_path, remote):
    rsm, tip, _ = remote
    mds = []
    for i in range(3):
        seg, _ = _write_segment(tmp_path / f"log{i}", i * 1000, batches=30)
        mds.append(_copy(rsm, seg, tip, tmp_path))
    probe = RemoteIndexCache(rsm, tmp_path / "probe", 1 << 30)
    one = probe.get_entry(mds[0]).weight
    cache_dir = tmp_path / "logdir"
    cache = RemoteIndexCache(rsm, cache_dir, int(one * 2.5))
    cache.get_entry(mds[0])
    cache.get_entry(mds[1])
    cache.get_entry(mds[0])  # 0 is now the most recently used
    cache.get_entry(mds[2])  # evicts 1
    assert mds[1].remote_log_segment_id.id not in cache
    assert mds[0].remote_log_segment_id.id in cache and mds[2].remote_log_segment_id.id in cache
    names = {p.name.split(".")[0] for p in (cache_dir / DIR_NAME).iterdir()}
    assert names == {f"{m.start_offset}_{uuid_to_kafka_str(m.remote_log_segment_id.id)}" for m in (mds[0], mds[2])}
    assert cache.evictions == 1
    # leftovers of a crash: a temp file and an incomplete triple are removed at start-up
    (cache_dir / DIR_NAME / "5_garbage.index.tmp").write_bytes(b"x")
    (cache_dir / DIR_NAME / "7_AAAAAAAAAAAAAAAAAAAAAA.index").write_bytes(b"")
    reopened = RemoteIndexCache(rsm, cache_dir, int(one * 2.5))
    assert len(reopened) == 2 and reopened.size_bytes == cache.size_bytes
    assert sorted(p.name.split(".")[0] for p in (cache_dir / DIR_NAME).iterdir()) == sorted(
        n for n in names for _ in range(3)
    )
    reopened.get_entry(mds[0])
    assert reopened.hits == 1 and reopened.misses == 0


def test_index_cache_refetches_a_corrupt_file(tmp_path, remote):
    rsm, tip, _ = remote
    seg, _ = _write_segment(tmp_path / "log", 0, batches=30)
    md = _copy(rsm, seg, tip, tmp_path)
    cache = RemoteIndexCache(rsm, tmp_path / "logdir", 1 << 20)
    entry = cache.get_entry(md)
    path = entry.files[".index"]
    cache.close()
    path.write_bytes(path.read_bytes()[:-3])  # not a multiple of 8 bytes
    reopened = RemoteIndexCache(rsm, tmp_path / "logdir", 1 << 20)
    assert len(reopened) == 0  # dropped at start-up
    assert reopened.lookup_offset_entry(md, 100) == seg.offset_index.lookup(100)


def test_index_cache_single_loader_per_segment(tmp_path, remote):
    rsm, tip, events = remote
    seg, _ = _write_segment(tmp_path / "log", 0, batches=30)
    md = _copy(rsm, seg, tip, tmp_path)
    cache = RemoteIndexCache(rsm, tmp_path / "logdir", 1 << 20)
    n0 = len(events)
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.lookup_offset(md, 77))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 8
    assert len([e for e in events[n0:] if "INDEX" in e.type]) == 2


# ---- lineage ----------------------------------------------------------------------------------------
def test_segment_leader_epochs():
    entries = [(0, 0), (1, 10), (2, 10), (3, 25)]  # epoch 1 holds no records
    assert segment_leader_epochs(entries, 5, 20) == {0: 5, 2: 10}
    assert segment_leader_epochs(entries, 12, 30) == {2: 12, 3: 25}
    assert segment_leader_epochs(entries, 30, 40) == {3: 30}


def test_highest_remote_offset_walks_epochs_back_and_clips_to_local_epoch_end():
    entries = [(0, 0), (1, 10), (2, 20)]
    remote = {0: 14, 1: 17}  # epoch 0 data up to 14 was uploaded by a leader whose log diverged
    assert highest_remote_offset(entries, 30, remote.get) == (17, 1)
    assert highest_remote_offset(entries, 30, {0: 14}.get) == (9, 0)  # clipped to epoch 0's local end
    assert highest_remote_offset(entries, 30, {}.get) == (-1, -1)


def test_lineage_check_rejects_divergent_segments():
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)

    def md(start, end, epochs):
        return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end, 0, 0, 0, 1, epochs)

    lineage = [(0, 0), (2, 10), (3, 20)]
    assert is_within_lineage(md(0, 9, {0: 0}), lineage, 30)
    assert is_within_lineage(md(5, 14, {0: 5, 2: 10}), lineage, 30)
    assert not is_within_lineage(md(5, 14, {0: 5, 1: 10}), lineage, 30)  # epoch 1 lost in an unclean election
    assert not is_within_lineage(md(5, 12, {0: 5, 2: 11}), lineage, 30)  # epoch 2 began elsewhere
    assert not is_within_lineage(md(0, 12, {0: 0}), lineage, 30)  # epoch 0 ran past its local end
    assert not is_within_lineage(md(20, 35, {3: 20}), lineage, 30)  # beyond the log end


# ---- remote read path: sequential streams and read-ahead ------------------------------------------
def test_sequential_remote_reads_are_byte_identical_with_few_ranged_reads(tiered_log):
    plog, rlm, events, remote_bytes = tiered_log
    rlm.read_path.chunk_min = 8 * 1024
    reads_before = sum(e.type == "FETCH_SEGMENT" for e in events)
    out = catch_up(rlm, plog, 1000)
    assert out == remote_bytes
    segments = len(rlm.list_segments(rlm._tip(plog.topic_partition, plog)))
    ranged = sum(e.type == "FETCH_SEGMENT" for e in events) - reads_before
    # one ranged read per 8 KiB chunk (plus the big batch and each segment's first read),
    # not one per 1000-byte fetch
    assert ranged <= len(remote_bytes) // (8 * 1024) + 3 * segments
    assert len(remote_bytes) // 1000 > 2 * ranged
    # no offset index was needed: the catch-up starts at the first segment's start offset, and enters
    # every later segment at its start, through the stream set up (and read ahead) before it got there
    assert sum(e.type == "FETCH_OFFSET_INDEX" for e in events) == 0
    # a read inside a segment finds its position through the index (once: it is cached)
    first = rlm.list_segments(rlm._tip(plog.topic_partition, plog))[0]
    rlm.read_path.prefetch.clear()
    for offset in (first.start_offset + 3, first.start_offset + 5):
        hdrs = [h for _, h in iter_headers(rlm.read(plog.topic_partition, offset, 1000, timeout=10))]
        assert hdrs[0].base_offset <= offset <= hdrs[0].last_offset
    assert sum(e.type == "FETCH_OFFSET_INDEX" for e in events) == 1


def test_read_ahead_grows_to_large_ranged_reads_and_crosses_segments(tiered_log):
    plog, rlm, _, remote_bytes = tiered_log
    rlm.read_path.chunk_min = 1024
    rlm.read_path.chunk_grown = 8 * 1024
    rsm = rlm.rsm
    ranges: list = []
    fetch = rsm.fetch_log_segment

    def recording(md, start, end=None):
        ranges.append((md.start_offset, start, end + 1))
        return fetch(md, start, end)

    rsm.fetch_log_segment = recording
    assert catch_up(rlm, plog, 500) == remote_bytes
    by_segment: dict = {}
    for seg, start, end in ranges:
        by_segment.setdefault(seg, []).append((start, end))
    sizes_by_seg = {}
    for seg, rs in sorted(by_segment.items()):
        rs.sort()
        assert rs[0][0] == 0  # every segment is read from its start ...
        assert all(a[1] == b[0] for a, b in zip(rs, rs[1:]))  # ... in contiguous ranges, each byte once
        sizes_by_seg[seg] = [e - s for s, e in rs]
    first, *later = sorted(sizes_by_seg)
    # the first read is small (a quick first answer), then each read ahead doubles up to chunk_grown
    assert sizes_by_seg[first][:5] == [1024, 1024, 2048, 4096, 8192]
    for seg in sizes_by_seg:
        assert max(sizes_by_seg[seg][:-1], default=0) <= 8 * 1024  # a segment's tail may be up to 1.5x
        assert sizes_by_seg[seg][-1] <= 12 * 1024
    for seg in later:  # later segments start with the grown size: their first read was a read-ahead
        assert sizes_by_seg[seg][0] == min(8 * 1024, sizes_by_seg[seg][0] + sum(sizes_by_seg[seg][1:]))


@pytest.mark.rlm_config(read_ahead_max_bytes=10 * 1024)  # remote.log.reader.read.ahead.max.bytes
def test_read_ahead_memory_stays_within_its_budget(tiered_log):
    plog, rlm, _, remote_bytes = tiered_log
    rlm.read_path.chunk_min = 4 * 1024

    def check():
        assert rlm.read_path.prefetch.bytes_held <= 10 * 1024

    assert catch_up(rlm, plog, 700, check) == remote_bytes
    assert rlm.read_path.prefetch.hits > 0  # the sequential reader was served from its stream


@pytest.mark.rlm_config(read_ahead_max_bytes=0)  # no read-ahead at all
def test_without_read_ahead_every_fetch_reads_on_demand(tiered_log):
    plog, rlm, _, remote_bytes = tiered_log
    rlm.read_path.chunk_min = 4 * 1024

    def check():
        assert rlm.read_path.prefetch.bytes_held == 0

    assert catch_up(rlm, plog, 700, check) == remote_bytes


def test_remote_reads_out_of_order_and_oversized_first_batch(tiered_log):
    plog, rlm, _, remote_bytes = tiered_log
    rlm.read_path.chunk_min = 4 * 1024
    batches = [(p, h) for p, h in iter_headers(remote_bytes)]
    big_pos, big = next((p, h) for p, h in batches if h.records_count == 40)
    assert big.size > 1000
    # a fetch smaller than the batch still gets the whole batch (min one message) ...
    assert rlm.read(plog.topic_partition, big.base_offset + 3, 1000, timeout=10) == remote_bytes[big_pos:big_pos + big.size]
    # ... and nothing without min one message
    fut = rlm.read_async(plog.topic_partition, big.base_offset, 1000, min_one_message=False)
    assert fut.result(10) == b""
    # jumping back and forth between offsets gives the bytes at each offset
    for p, h in [batches[-1], batches[0], batches[len(batches) // 2], batches[1], batches[len(batches) // 3]]:
        chunk = rlm.read(plog.topic_partition, h.base_offset, 600, timeout=10)
        assert chunk and remote_bytes[p:p + len(chunk)] == chunk


def test_reader_pool_grows_at_once_and_shrinks_only_as_running_reads_finish():
    gate = threading.Event()
    pool = RemoteReaderPool(threads=1, max_pending_tasks=8)
    try:
        running = threading.Semaphore(0)

        def read(i):
            running.release()
            gate.wait(10)
            return i

        pool.resize(3)
        assert (pool.size, pool.live_threads) == (3, 3)
        futures = [pool.submit(read, i) for i in range(3)]
        for _ in range(3):
            assert running.acquire(timeout=5)  # three reads at once: the new threads took work
        pool.resize(1)
        assert (pool.size, pool.live_threads) == (1, 3)  # busy workers are not cut short
        gate.set()
        assert [f.result(5) for f in futures] == [0, 1, 2]
        deadline = time.monotonic() + 5
        while pool.live_threads > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.live_threads == 1
        assert pool.submit(lambda: "still serving").result(5) == "still serving"
    finally:
        gate.set()
        pool.shutdown()


def test_scheduler_resize_lets_a_running_task_finish():
    gate = threading.Event()
    sched = FixedDelayScheduler("resize", threads=2)
    try:
        started = threading.Event()
        finished = threading.Event()

        def task(ctx):
            started.set()
            gate.wait(10)
            finished.set()

        sched.schedule("t", task, 60_000)
        assert started.wait(5)
        sched.resize(1)
        sched.resize(4)
        assert sched.size == 4
        gate.set()
        assert finished.wait(5)
        deadline = time.monotonic() + 5
        while sched.live_threads != 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sched.live_threads == 4
    finally:
        gate.set()
        sched.shutdown()
