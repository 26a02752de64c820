"""Remote cleaning of a compacted partition's remote tier (tieredlog.rlm.remote_cleaner): a real UnifiedLog
tiered by the copy task into a LocalTieredStorage, cleaned remotely, and read back through the
RemoteLogManager's read path. Key-level equivalence with a replay of the uncompacted log."""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from pathlib import Path
from typing import BinaryIO, Iterator

import pytest
from helpers import Logs

from tieredlog.log.cleaner.cleaner import Cleaner
from tieredlog.log.cleaner.throttler import Throttler
from tieredlog.log.config import LogConfig
from tieredlog.log.unified_log import AppendOrigin, UnifiedLog
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import build_batch, build_control_batch, iter_batches_records
from tieredlog.rlm.config import RemoteLogManagerConfig
from tieredlog.rlm.manager import RemoteLogManager
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext
from tieredlog.rlm.remote_cleaner import RemoteCleaner, RLMRemoteCleaningTask, plan_remote_clean, served_segments
from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
from tieredlog.rsm.api import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from tieredlog.rsm.cleaner_offset import RemoteCleanerOffsetStore
from tieredlog.rsm.listing import ListableRemoteStorageManager
from tieredlog.rsm.local import LocalTieredStorage
from tieredlog.rsm.testing import RemoteCleanerOffsetStoreConformance

T0 = time.time_ns() // 1_000_000
ABORT, COMMIT = 0, 1
TXN_PID = 7


def workload(plog: UnifiedLog, seed: int) -> None:
    """Updates and deletes of 40 keys from an idempotent-less producer, and one transactional producer
    whose transactions commit or abort at random."""
    rnd = random.Random(seed)
    seq = 0
    for i in range(500):
        if i % 100 == 99:
            recs = [(b"k%d" % rnd.randrange(40), b"txn-%d-%d" % (i, j), [], T0) for j in range(2)]
            plog.append_as_leader(build_batch(recs, producer_id=TXN_PID, producer_epoch=0, base_sequence=seq,
                                              is_transactional=True), 0)
            seq += len(recs)
            plog.append_as_leader(build_control_batch(rnd.choice((ABORT, COMMIT)), TXN_PID, 0, 0, T0), 0,
                                  origin=AppendOrigin.COORDINATOR)
        else:
            recs = [(b"k%d" % rnd.randrange(40), None if rnd.random() < 0.1 else b"v-%d-%d" % (i, j) * 4, [], T0)
                    for j in range(1 + i % 3)]
            plog.append_as_leader(build_batch(recs), 0)
    plog.append_as_leader(build_batch([(b"last", b"x", [], T0)]), 0)  # the active segment's record
    plog.update_high_watermark(plog.log_end_offset)


def committed_view(data: bytes) -> tuple[dict[bytes, bytes | None], list[int], int]:
    """What a read_committed consumer from offset 0 ends with (key -> latest value, None a tombstone),
    the offsets of all records in the log, and how many records of aborted transactions it holds."""
    pending: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
    visible: list[tuple[int, bytes, bytes | None]] = []
    aborted = 0
    for h, recs in iter_batches_records(data):
        if h.is_control:
            kept = pending.pop(h.producer_id, [])
            if recs and recs[0].key is not None and recs[0].key[3] == COMMIT:
                visible += kept
            else:
                aborted += len(kept)
        elif h.is_transactional:
            pending.setdefault(h.producer_id, []).extend((r.offset, r.key, r.value) for r in recs)
        else:
            visible += [(r.offset, r.key, r.value) for r in recs]
    assert not any(pending.values()), "transactional records without their marker"
    visible.sort()
    view: dict[bytes, bytes | None] = {}
    for _, k, v in visible:
        view[k] = v  # tombstones too: they stay for delete.retention.ms
    offsets = [o for h, recs in iter_batches_records(data) if not h.is_control for o in (r.offset for r in recs)]
    return view, offsets, aborted


def read_all(rlm: RemoteLogManager, plog: UnifiedLog) -> bytes:
    out = bytearray()
    offset = 0
    while offset < plog.local_log_start_offset:
        chunk = rlm.read(plog.topic_partition, offset, 64 * 1024, timeout=10)
        hdrs = [h for _, h in iter_headers(chunk)]
        # never an answer of nothing but empty batches (librdkafka gives up after ten): a segment whose
        # records were all superseded is read on into the next
        assert any(h.records_count for h in hdrs) or hdrs[-1].next_offset >= plog.local_log_start_offset
        out += chunk
        offset = hdrs[-1].next_offset
    for seg in plog.segments:
        out += seg.read_bytes(0, seg.size)
    return bytes(out)


class Crash(Exception):
    pass


class CrashingRLMM(InMemoryRemoteLogMetadataManager):
    """The in-memory RLMM, stopping the writer at the n-th transition to ``crash_at``: the metadata then
    holds what a broker killed at that point would have written."""

    def __init__(self) -> None:
        super().__init__()
        self.crash_at: RemoteLogSegmentState | None = None
        self.after = 0

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        if update.state == self.crash_at:
            if self.after == 0:
                raise Crash(update.state.name)
            self.after -= 1
        super().update_remote_log_segment_metadata(update)


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[tuple[UnifiedLog, RemoteLogManager, PartitionState, bytes]]:
    cfg = LogConfig().with_overrides({
        "segment.bytes": "4096", "remote.storage.enable": "true", "retention.ms": "-1",
        "local.retention.bytes": "1", "file.delete.delay.ms": "0",
        "message.timestamp.after.max.ms": str(1 << 62), "message.timestamp.before.max.ms": str(1 << 62)})
    plog = UnifiedLog(tmp_path / "logs" / "c-0", cfg, topic_id=uuid.uuid4())
    workload(plog, seed=30)
    whole = b"".join(s.read_bytes(0, s.size) for s in plog.segments)
    rsm = LocalTieredStorage(tmp_path / "remote")
    rsm.configure({"broker.id": 0})
    rlm = RemoteLogManager(RemoteLogManagerConfig(log_dirs=(str(tmp_path / "logs"),), reader_threads=2),
                           Logs(plog), rsm, CrashingRLMM())
    rlm.start()
    state = PartitionState(plog.topic_partition, rlm._tip(plog.topic_partition, plog))
    rlm.copy_task(state).run(TaskContext())
    plog.delete_old_segments()
    assert plog.local_log_start_offset > 0 and len(plog.segments) <= 2  # nearly all of it is remote
    try:
        yield plog, rlm, state, whole
    finally:
        rlm.shutdown()


def covers_as_coarser(after: list[RemoteLogSegmentMetadata], before: list[RemoteLogSegmentMetadata]) -> bool:
    """``after`` covers exactly ``before``'s offsets, without gap or overlap, each of its segments a run of
    whole segments of ``before`` (a merge never splits a segment)."""
    bounds = {(m.start_offset, m.end_offset) for m in before}
    starts, ends = {s for s, _ in bounds}, {e for _, e in bounds}
    ranges = [(m.start_offset, m.end_offset) for m in after]
    return (ranges[0][0] == before[0].start_offset and ranges[-1][1] == before[-1].end_offset
            and all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))
            and all(s in starts and e in ends for s, e in ranges))


def remote_bytes(rlm: RemoteLogManager, state: PartitionState) -> int:
    return sum(m.segment_size_in_bytes for m in rlm.lifecycle.segments(state.tip))


def test_remote_cleaning_keeps_the_committed_view_and_shrinks_the_remote_tier(tiered, tmp_path: Path) -> None:
    plog, rlm, state, whole = tiered
    expected, all_offsets, aborted = committed_view(whole)
    assert committed_view(read_all(rlm, plog))[0] == expected and aborted > 0
    served = served_segments(rlm.lifecycle, plog, state)
    before = remote_bytes(rlm, state)
    plan = plan_remote_clean(served, 0, 0, 1 << 62, 0.5, T0)
    assert plan is not None and plan.dirty == served
    cleaner = RemoteCleaner(rlm.lifecycle, Cleaner(0, 1 << 20), tmp_path / "scratch", 0, 128)
    stats = cleaner.clean(state, plog, plan, lambda: False)
    assert stats.segments_replaced > 0 and stats.end_offset == served[-1].end_offset + 1

    after = served_segments(rlm.lifecycle, plog, state)
    # the same offsets, one copy each, the small cleaned segments merged within segment.bytes, and every
    # retired copy gone from the metadata and the store
    assert covers_as_coarser(after, served) and len(after) < len(served) and stats.segments_written == len(after)
    assert all(m.segment_size_in_bytes <= plog.config.segment_bytes for m in after)
    listed = rlm.lifecycle.segments(state.tip)
    assert all(m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in listed) and len(listed) == len(after)
    assert remote_bytes(rlm, state) < before / 2
    data = read_all(rlm, plog)
    view, offsets, aborted_after = committed_view(data)
    assert view == expected
    assert aborted_after == 0  # aborted transactions' records are gone, as the local cleaner drops them
    assert offsets == sorted(set(offsets)) and len(offsets) < len(all_offsets) / 2  # strictly increasing
    # nothing is due again until new dirty bytes arrive
    assert plan_remote_clean(after, stats.end_offset, 0, 1 << 62, 0.5, T0) is None


def test_dirty_ratio_and_compaction_lags_decide_when_a_round_runs(tiered) -> None:
    plog, rlm, state, _ = tiered
    served = served_segments(rlm.lifecycle, plog, state)
    half = served[len(served) // 2].start_offset
    # min.cleanable.dirty.ratio over the remote bytes
    assert plan_remote_clean(served, half, 0, 1 << 62, 0.99, T0) is None
    plan = plan_remote_clean(served, half, 0, 1 << 62, 0.1, T0)
    assert plan is not None and plan.dirty[0].end_offset >= half and plan.segments == served
    # min.compaction.lag.ms: nothing newer than the lag is cleanable
    assert plan_remote_clean(served, 0, 60_000, 1 << 62, 0.0, T0) is None
    # max.compaction.lag.ms: overdue dirty data is cleaned whatever the ratio
    overdue = plan_remote_clean(served, half, 0, 1, 0.99, T0 + 10)
    assert overdue is not None and overdue.needs_compaction_now


@pytest.mark.parametrize("crash_at", [RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                      RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                                      RemoteLogSegmentState.DELETE_SEGMENT_FINISHED])
def test_a_crash_mid_round_leaves_one_copy_per_offset_and_expiration_removes_the_orphan(
        tiered, tmp_path: Path, crash_at: RemoteLogSegmentState) -> None:
    plog, rlm, state, whole = tiered
    expected, _, _ = committed_view(whole)
    # replacements of a kilobyte at most: several of them, each merging a few cleaned segments
    plog.config = dataclasses.replace(plog.config, segment_bytes=1024)
    served = served_segments(rlm.lifecycle, plog, state)
    rlmm = rlm.lifecycle.rlmm
    assert isinstance(rlmm, CrashingRLMM)
    # the second replacement's FINISHED, or the third retirement of an old copy (inside a merge's)
    rlmm.crash_at, rlmm.after = crash_at, 1 if crash_at == RemoteLogSegmentState.COPY_SEGMENT_FINISHED else 2
    cleaner = RemoteCleaner(rlm.lifecycle, Cleaner(0, 1 << 20), tmp_path / "scratch", 0, 128)
    plan = plan_remote_clean(served, 0, 0, 1 << 62, 0.5, T0)
    assert plan is not None
    with pytest.raises(Crash):
        cleaner.clean(state, plog, plan, lambda: False)
    rlmm.crash_at = None
    now_served = served_segments(rlm.lifecycle, plog, state)
    leftovers = {m.remote_log_segment_id for m in rlm.lifecycle.segments(state.tip)} - \
        {m.remote_log_segment_id for m in now_served}
    # the replacement that never finished, or old copies not yet deleted (superseded, not served)
    assert leftovers and len(now_served) < len(served)
    # every offset is served from exactly one copy, and what is read is the same committed view
    assert covers_as_coarser(now_served, served)
    assert committed_view(read_all(rlm, plog))[0] == expected
    rlm.expiration_task(state).run(TaskContext())
    listed = rlm.lifecycle.segments(state.tip)
    assert [m.remote_log_segment_id for m in listed] == [m.remote_log_segment_id for m in now_served]
    assert all(m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in listed)
    stored = {p.name.split(".")[0] for p in (tmp_path / "remote").rglob("*.log")}
    assert len(stored) == len(now_served)  # the orphans' objects are gone from the store too
    assert committed_view(read_all(rlm, plog))[0] == expected


def test_the_task_cleans_when_due_and_then_waits_for_new_dirty_bytes(tiered, tmp_path: Path) -> None:
    plog, rlm, state, whole = tiered
    task = RLMRemoteCleaningTask(state, lambda: plog, rlm.lifecycle,
                                 RemoteCleaner(rlm.lifecycle, Cleaner(0, 1 << 20), tmp_path / "scratch", 0, 128),
                                 lambda: False)
    assert task.run(TaskContext()) is None  # not a compacted topic: nothing to do
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact")
    topic = plog.topic_partition.topic
    before = rlm.metrics.object_store.snapshot().get(topic, {})
    stats = task.run(TaskContext())
    assert stats is not None and stats.segments_replaced > 0
    used = {op: n - before.get(op, 0) for op, n in rlm.metrics.object_store.snapshot()[topic].items()}
    # a log GET per segment, a txn index GET where there is one, a snapshot and an epoch index per
    # replacement; five or six objects put per replacement and deleted per retired copy
    assert stats.segments_replaced > stats.segments_written  # merged
    assert used["GET"] >= stats.segments_read + 2 * stats.segments_written
    # and one PUT of the cleaner offset kept beside the tier (after one GET of it: none was kept)
    assert 5 * stats.segments_written <= used["PUT"] - 1 <= 6 * stats.segments_written
    assert 5 * stats.segments_replaced <= used["DELETE"] <= 6 * stats.segments_replaced
    clean_end = served_segments(rlm.lifecycle, plog, state)[-1].end_offset + 1
    assert state.remote_clean_offset == clean_end == rlm.lifecycle.read_cleaner_offset(state.tip)
    assert task.run(TaskContext()) is None  # clean: the dirty ratio is 0
    # a new leader (a fresh state, as after a failover or a restart) goes on from the kept offset
    fresh = PartitionState(state.tp, state.tip)
    again = RLMRemoteCleaningTask(fresh, lambda: plog, rlm.lifecycle,
                                  RemoteCleaner(rlm.lifecycle, Cleaner(0, 1 << 20), tmp_path / "scratch", 0, 128),
                                  lambda: False)
    assert again.run(TaskContext()) is None and fresh.remote_clean_offset == clean_end
    assert committed_view(read_all(rlm, plog))[0] == committed_view(whole)[0]


class _Unreadable(LocalTieredStorage):
    def read_cleaner_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        raise RemoteStorageException("connection refused")


def test_a_new_leader_reads_the_kept_cleaner_offset_and_waits_while_it_is_unreadable(tiered, tmp_path: Path) -> None:
    plog, rlm, state, whole = tiered
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact")
    end = served_segments(rlm.lifecycle, plog, state)[-1].end_offset + 1

    def task() -> RLMRemoteCleaningTask:
        return RLMRemoteCleaningTask(state, lambda: plog, rlm.lifecycle,
                                     RemoteCleaner(rlm.lifecycle, Cleaner(0, 1 << 20), tmp_path / "scratch", 0, 128),
                                     lambda: False)

    assert rlm.lifecycle.read_cleaner_offset(state.tip) is None  # nothing kept yet
    rlm.lifecycle.publish_cleaner_offset(state.tip, end + 1000)  # past the tier's end: lowered to it
    assert task().run(TaskContext()) is None and state.remote_clean_offset == end
    state.remote_clean_offset = state.published_clean_offset = None
    rsm = rlm.lifecycle.rsm
    rlm.lifecycle.rsm = _Unreadable(tmp_path / "remote")  # the store does not answer: no round without it
    assert task().run(TaskContext()) is None and state.remote_clean_offset is None
    rlm.lifecycle.rsm = rsm
    [path] = (tmp_path / "remote").rglob("cleaner-offset-checkpoint.json")
    path.write_bytes(b"not json")  # not a cleaner offset: the tier is cleaned from its start, and it replaced
    stats = task().run(TaskContext())
    assert stats is not None and stats.segments_replaced > 0 and rlm.lifecycle.read_cleaner_offset(state.tip) == end
    assert committed_view(read_all(rlm, plog))[0] == committed_view(whole)[0]


def test_a_key_map_smaller_than_the_dirty_part_cleans_round_by_round(tiered, tmp_path: Path) -> None:
    plog, rlm, state, whole = tiered
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    small = Cleaner(0, 24 * 32)  # 32 slots: fewer than the 40 keys, the map fills in the first segments
    task = RLMRemoteCleaningTask(state, lambda: plog, rlm.lifecycle,
                                 RemoteCleaner(rlm.lifecycle, small, tmp_path / "scratch", 0, 128), lambda: False)
    ends = []
    while (stats := task.run(TaskContext())) is not None:
        ends.append(stats.end_offset)
        assert len(ends) < 100
    assert len(ends) > 1 and ends == sorted(ends)  # each round goes on where the last one's map ended
    assert committed_view(read_all(rlm, plog))[0] == committed_view(whole)[0]


def test_total_retention_applies_to_compact_delete_only(tiered) -> None:
    plog, rlm, state, _ = tiered
    expiration = rlm.expiration_task(state)
    old = T0 + 10**9  # every segment's records are older than retention.ms=1 by then
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact", retention_ms=1, retention_bytes=1)
    assert expiration.plan(plog, now_ms=old) == ([], None)  # every key's latest value stays
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact,delete")
    doomed, log_start = expiration.plan(plog, now_ms=old)
    assert doomed and log_start is not None


class OwnLayoutStorage(RemoteStorageManager, RemoteCleanerOffsetStore):
    """A plugin without the listing contract (as one with a key layout of its own would be) that keeps the
    remote clean offset: segments through a LocalTieredStorage, the offset in a file named its own way."""

    def __init__(self, root: Path, segments: RemoteStorageManager | None = None) -> None:
        self.root = root
        if segments is None:
            segments = LocalTieredStorage(root / "segments")
            segments.configure({"broker.id": 0})
        self.segments = segments

    def copy_log_segment_data(self, remote_log_segment_metadata: RemoteLogSegmentMetadata,
                              log_segment_data: LogSegmentData) -> CustomMetadata | None:
        return self.segments.copy_log_segment_data(remote_log_segment_metadata, log_segment_data)

    def fetch_log_segment(self, remote_log_segment_metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        return self.segments.fetch_log_segment(remote_log_segment_metadata, start_position, end_position)

    def fetch_index(self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        return self.segments.fetch_index(remote_log_segment_metadata, index_type)

    def delete_log_segment_data(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        self.segments.delete_log_segment_data(remote_log_segment_metadata)

    def _offset_file(self, tp: TopicIdPartition) -> Path:
        return self.root / "clean-offsets" / f"{tp.topic_id.hex}.{tp.partition}"

    def write_cleaner_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        path = self._offset_file(topic_id_partition)
        if offset is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(offset))

    def read_cleaner_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        path = self._offset_file(topic_id_partition)
        return int(path.read_text()) if path.exists() else None


class TestOwnLayoutStorage(RemoteCleanerOffsetStoreConformance):
    def make_rsm(self, tmp_path: Path) -> RemoteStorageManager:
        return OwnLayoutStorage(tmp_path / "own")


def test_without_listing_a_new_leader_goes_on_from_the_kept_cleaner_offset(tiered, tmp_path: Path) -> None:
    """The clean offset's write and read are a contract of their own: a new leader of a partition tiered by
    an RSM that cannot list maps from where the last one left the tier clean, not from 0."""
    plog, rlm, state, whole = tiered
    own = OwnLayoutStorage(tmp_path / "own", rlm.lifecycle.rsm)  # over the segments already tiered
    rlm.lifecycle.rsm = own
    assert not isinstance(own, ListableRemoteStorageManager)
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact")

    def task(leader: PartitionState) -> RLMRemoteCleaningTask:
        return RLMRemoteCleaningTask(leader, lambda: plog, rlm.lifecycle,
                                     RemoteCleaner(rlm.lifecycle, Cleaner(0, 1 << 20), tmp_path / "scratch", 0, 128),
                                     lambda: False)

    stats = task(state).run(TaskContext())
    end = served_segments(rlm.lifecycle, plog, state)[-1].end_offset + 1
    assert stats is not None and stats.end_offset == end and own.read_cleaner_offset(state.tip) == end
    fresh = PartitionState(state.tp, state.tip)  # a new leader
    assert task(fresh).run(TaskContext()) is None and fresh.remote_clean_offset == end
    assert committed_view(read_all(rlm, plog))[0] == committed_view(whole)[0]


class _ManualClock:
    """A throttle clock that moves only when told (the waits the pool would make): every byte charged
    between two moves is owed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_throttled_round_waits_between_segments_off_its_thread(tiered, tmp_path: Path) -> None:
    """log.cleaner.io.max.bytes.per.second: the round stops after a segment while it owes the throttle, the
    run returns (its pool thread free) asking to run again when the wait is over, and goes on then; another
    partition's round meanwhile waits for the cleaner, as it would for a running round."""
    plog, rlm, state, whole = tiered
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact")
    clock = _ManualClock()
    throttler = Throttler(10_000, clock=clock, sleep=lambda s: pytest.fail("slept on its thread"),
                          defer_s=float("inf"))
    cleaner = RemoteCleaner(rlm.lifecycle, Cleaner(0, 1 << 20, throttler=throttler), tmp_path / "scratch", 0, 128)
    task = RLMRemoteCleaningTask(state, lambda: plog, rlm.lifecycle, cleaner, lambda: False)
    ctx = TaskContext()
    waits = []
    while (stats := task.run(ctx)) is None:
        assert ctx.run_again_in_s is not None and ctx.run_again_in_s >= 0.1
        waits.append(ctx.run_again_in_s)
        clock.now += ctx.run_again_in_s  # the pool runs the task again once the wait is over
        ctx.run_again_in_s = None
        other = PartitionState(state.tp, state.tip)
        assert cleaner.try_clean(other, plog, plan_remote_clean(served_segments(rlm.lifecycle, plog, state), 0, 0,
                                                                 1 << 62, 0.0, T0), lambda: False) is None
        assert len(waits) < 200
    assert len(waits) > 3 and stats.segments_written > 0
    assert throttler.throttled_s == pytest.approx(sum(waits))  # every wait off the thread
    assert state.remote_clean_offset == served_segments(rlm.lifecycle, plog, state)[-1].end_offset + 1
    assert committed_view(read_all(rlm, plog))[0] == committed_view(whole)[0]
    assert not any((tmp_path / "scratch").iterdir())


def test_a_round_waiting_for_the_throttle_is_dropped_once_its_leadership_is_gone(tiered, tmp_path: Path) -> None:
    plog, rlm, state, whole = tiered
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact")
    clock = _ManualClock()
    throttler = Throttler(100_000, clock=clock, defer_s=float("inf"))
    cleaner = RemoteCleaner(rlm.lifecycle, Cleaner(0, 1 << 20, throttler=throttler), tmp_path / "scratch", 0, 128)
    ctx = TaskContext()
    task = RLMRemoteCleaningTask(state, lambda: plog, rlm.lifecycle, cleaner, lambda: False)
    assert task.run(ctx) is None and ctx.run_again_in_s
    assert any((tmp_path / "scratch").iterdir())  # the round's fetched segments wait with it
    ctx.cancelled = True  # the partition's task is cancelled (leadership moved): it never resumes the round
    clock.now += 3600
    throttler.rate = 1e12
    fresh = PartitionState(state.tp, state.tip)  # led again later, or another partition: the cleaner is free
    again = RLMRemoteCleaningTask(fresh, lambda: plog, rlm.lifecycle, cleaner, lambda: False)
    stats = again.run(TaskContext())
    assert stats is not None and stats.end_offset == served_segments(rlm.lifecycle, plog, state)[-1].end_offset + 1
    assert committed_view(read_all(rlm, plog))[0] == committed_view(whole)[0]
    assert not any((tmp_path / "scratch").iterdir())
