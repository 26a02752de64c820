"""RemoteLogManager against real parts: UnifiedLog in a tmp dir, LocalTieredStorage, the
in-memory RLMM. Tasks are run synchronously (TaskContext) so every assertion is deterministic."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from helpers import Logs

from tieredlog.errors import OffsetOutOfRangeError
from tieredlog.log.config import LogConfig
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import build_batch
from tieredlog.rlm import copier
from tieredlog.rlm.config import RemoteLogManagerConfig
from tieredlog.rlm.manager import RemoteLogManager
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pool import TaskContext
from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
from tieredlog.rsm.api import RemoteLogSegmentState, RemoteStorageException
from tieredlog.rsm.local import LocalTieredStorage

TP = TopicPartition("tiered", 0)


class FlakyStorage(LocalTieredStorage):
    def __init__(self, d):
        super().__init__(d)
        self.fail_copies = 0

    def copy_log_segment_data(self, md, data):
        if self.fail_copies:
            self.fail_copies -= 1
            # a partial upload exists when the failure strikes
            super().copy_log_segment_data(md, data)
            raise RemoteStorageException("injected copy failure")
        return super().copy_log_segment_data(md, data)


def make_log(d: Path, **cfg) -> UnifiedLog:
    base = dict(segment_bytes=2048, index_interval_bytes=128, remote_storage_enable=True, retention_ms=-1,
                local_retention_bytes=1, file_delete_delay_ms=0, message_timestamp_after_max_ms=1 << 62,
                message_timestamp_before_max_ms=1 << 62)
    base.update(cfg)
    return UnifiedLog(d / f"{TP.topic}-{TP.partition}", LogConfig(**base), topic_id=uuid.uuid4())


def produce(plog: UnifiedLog, n_batches: int, epoch: int = 0, ts0: int = 1_000_000) -> None:
    for _i in range(n_batches):
        off = plog.log_end_offset
        recs = [(b"k%d" % (off + j), b"value-%d-" % (off + j) * 10, [], ts0 + off + j) for j in range(3)]
        plog.append_as_leader(build_batch(recs), epoch)
    plog.update_high_watermark(plog.log_end_offset)


def segment_bytes(plog: UnifiedLog) -> dict[int, bytes]:
    return {s.base_offset: s.log_path.read_bytes() for s in plog.segments}


@pytest.fixture
def env(tmp_path):
    plog = make_log(tmp_path / "logs")
    rsm = FlakyStorage(tmp_path / "remote")
    rsm.configure({"broker.id": 1})
    events: list = []
    rsm.add_listener(events.append)
    rlmm = InMemoryRemoteLogMetadataManager()
    cfg = RemoteLogManagerConfig(log_dirs=(str(tmp_path / "logs"),), broker_id=1, task_interval_ms=3_600_000,
                                 reader_threads=4, reader_max_pending_tasks=8)
    rlm = RemoteLogManager(cfg, Logs(plog), rsm, rlmm)
    rlm.start()
    yield plog, rsm, rlmm, rlm, events
    rlm.shutdown()


def state_for(rlm: RemoteLogManager, plog: UnifiedLog) -> PartitionState:
    return PartitionState(plog.topic_partition, rlm._tip(plog.topic_partition, plog))


def finished(rlmm, tip):
    return [m for m in rlmm.list_remote_log_segments(tip) if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def test_candidates_exclude_active_segment_and_segments_above_lso(env):
    plog, rsm, rlmm, rlm, _ = env
    produce(plog, 60)
    segs = plog.segments
    assert len(segs) >= 4
    all_rolled = copier.candidate_segments(plog, 0, plog.last_stable_offset)
    assert [s.base_offset for s in all_rolled] == [s.base_offset for s in segs[:-1]]
    # an LSO inside the third segment: only the first two are entirely below it
    lso = segs[2].base_offset + 1
    assert [s.base_offset for s in copier.candidate_segments(plog, 0, lso)] == [segs[0].base_offset, segs[1].base_offset]
    # resume point past the first segment
    assert copier.candidate_segments(plog, segs[1].base_offset, plog.last_stable_offset)[0] is segs[1]


def test_copy_task_tiers_rolled_segments_in_order_then_local_retention_follows(env):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 60)
    originals = segment_bytes(plog)
    rolled = plog.segments[:-1]
    state = state_for(rlm, plog)
    rlm.copy_task(state).run(TaskContext())
    done = finished(rlmm, state.tip)
    assert [(m.start_offset, m.end_offset) for m in done] == [
        (s.base_offset, plog.next_segment_base_offset(s) - 1) for s in rolled
    ]
    assert [e.start_offset for e in events if e.type == "COPY_SEGMENT"] == [s.base_offset for s in rolled]
    assert plog.highest_offset_in_remote_storage == done[-1].end_offset
    for m in done:  # byte-identical objects, epoch map, and the epoch history up to the segment end
        assert rsm.segment_path(m, ".log").read_bytes() == originals[m.start_offset]
        assert dict(m.segment_leader_epochs) == {0: m.start_offset}
        assert rsm.segment_path(m, ".leader_epoch_checkpoint").read_bytes() == b"0\n1\n0 0\n"
        assert rsm.segment_path(m, ".snapshot").exists()
    # local retention (local.retention.bytes=1) may now delete exactly the copied segments
    plog.delete_old_segments()
    assert plog.local_log_start_offset == plog.active_segment.base_offset
    assert plog.log_start_offset == 0
    # running again copies nothing new
    n = len(events)
    rlm.copy_task(state).run(TaskContext())
    assert [e for e in events[n:] if e.type == "COPY_SEGMENT"] == []


def test_local_segments_are_not_deleted_before_they_are_copied(env):
    plog, rsm, rlmm, rlm, _ = env
    produce(plog, 60)
    before = [s.base_offset for s in plog.segments]
    plog.delete_old_segments()
    assert [s.base_offset for s in plog.segments][: len(before) - 1] == before[:-1]
    assert plog.local_log_start_offset == 0


def test_failed_copy_deletes_the_partial_upload_and_retries_with_a_new_id(env):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 30)
    state = state_for(rlm, plog)
    rsm.fail_copies = 1
    with pytest.raises(RemoteStorageException):
        rlm.copy_task(state).run(TaskContext())
    assert finished(rlmm, state.tip) == []
    assert plog.highest_offset_in_remote_storage == -1
    assert list(rsm.partition_dir(state.tip).glob("*")) == []  # nothing left behind
    assert [e.type for e in events] == ["COPY_SEGMENT", "DELETE_SEGMENT"]
    failed_id = events[0].segment_id
    rlm.copy_task(state).run(TaskContext())
    done = finished(rlmm, state.tip)
    assert done and done[0].start_offset == 0 and done[0].remote_log_segment_id.id != failed_id
    plog.delete_old_segments()
    assert plog.local_log_start_offset > 0


def test_copy_resumes_after_restart_from_the_rlmm(env, tmp_path):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 30)
    rlm.copy_task(state_for(rlm, plog)).run(TaskContext())
    copied = len([e for e in events if e.type == "COPY_SEGMENT"])
    produce(plog, 30)
    # a new RLM (a restarted broker, or a new leader) knows nothing but the RLMM
    rlm2 = RemoteLogManager(rlm.config, Logs(plog), rsm, rlmm)
    state = state_for(rlm2, plog)
    rlm2.copy_task(state).run(TaskContext())
    starts = [e.start_offset for e in events if e.type == "COPY_SEGMENT"]
    assert len(starts) == len(set(starts))  # nothing copied twice
    assert len(starts) > copied
    assert sorted(m.start_offset for m in finished(rlmm, state.tip)) == [s.base_offset for s in plog.segments[:-1]]


def test_copy_disable_and_copy_quota(env):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 30)
    plog.config = LogConfig(**{**plog.config.__dict__, "remote_log_copy_disable": True})
    rlm.copy_task(state_for(rlm, plog)).run(TaskContext())
    assert events == []
    plog.config = LogConfig(**{**plog.config.__dict__, "remote_log_copy_disable": False})
    rlm.copy_quota.update_quota(1)  # 1 byte/s: the first segment takes the burst into debt
    ctx = TaskContext()
    state = state_for(rlm, plog)
    import threading

    t = threading.Thread(target=rlm.copy_task(state).run, args=(ctx,))
    t.start()
    deadline = time.monotonic() + 30  # hang guard only
    while not [e for e in events if e.type == "COPY_SEGMENT"]:
        assert time.monotonic() < deadline, "the first segment was never copied"
        time.sleep(0.01)
    ctx.cancelled = True  # a leadership change while throttled ends the task
    t.join(30)
    assert not t.is_alive()
    assert len([e for e in events if e.type == "COPY_SEGMENT"]) == 1


def test_remote_read_is_byte_identical_and_whole_batches(env):
    plog, rsm, rlmm, rlm, _ = env
    produce(plog, 60)
    originals = segment_bytes(plog)
    rlm.copy_task(state_for(rlm, plog)).run(TaskContext())
    plog.delete_old_segments()
    local_start = plog.local_log_start_offset
    remote_bytes = b"".join(v for k, v in sorted(originals.items()) if k < local_start)
    # a catch-up consumer reading sequentially with small fetches gets exactly the produced bytes
    out = bytearray()
    offset = 0
    while offset < local_start:
        chunk = rlm.read(TP, offset, 700, timeout=10)
        hdrs = [h for _, h in iter_headers(chunk)]
        assert hdrs and sum(h.size for h in hdrs) == len(chunk)  # whole batches only
        assert len(chunk) <= 700 or len(hdrs) == 1  # max_bytes, or one batch (min one message)
        out += chunk
        offset = hdrs[-1].next_offset
    assert bytes(out) == remote_bytes
    # an offset in the middle of a batch returns that batch first
    chunk = rlm.read(TP, 4, 1, timeout=10)
    hdrs = [h for _, h in iter_headers(chunk)]
    assert len(hdrs) == 1 and hdrs[0].base_offset <= 4 <= hdrs[0].last_offset
    with pytest.raises(OffsetOutOfRangeError):
        rlm.read(TP, plog.log_end_offset + 10, 100, timeout=10)


def test_find_offset_by_timestamp_in_remote_segments(env):
    plog, rsm, rlmm, rlm, _ = env
    produce(plog, 60)
    rlm.copy_task(state_for(rlm, plog)).run(TaskContext())
    plog.delete_old_segments()
    # record at offset o has timestamp 1_000_000 + o
    assert rlm.find_offset_by_timestamp(TP, 1_000_000 + 10) == (10, 1_000_010, 0)
    assert rlm.find_offset_by_timestamp(TP, 0) == (0, 1_000_000, 0)
    # a timestamp whose record is local: the caller must look locally
    assert rlm.find_offset_by_timestamp(TP, 1_000_000 + plog.local_log_start_offset + 1) is None


def test_expiration_by_retention_bytes_moves_log_start_then_deletes(env):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 60)
    state = state_for(rlm, plog)
    rlm.copy_task(state).run(TaskContext())
    plog.delete_old_segments()
    done = finished(rlmm, state.tip)
    total_remote = sum(m.segment_size_in_bytes for m in done)
    local_only = plog.active_segment.size
    # keep everything but the two oldest remote segments' worth
    keep = total_remote + local_only - done[0].segment_size_in_bytes - done[1].segment_size_in_bytes
    plog.config = LogConfig(**{**plog.config.__dict__, "retention_bytes": keep})
    rlm.expiration_task(state).run(TaskContext())
    assert plog.log_start_offset == done[1].end_offset + 1
    assert [e.start_offset for e in events if e.type == "DELETE_SEGMENT"] == [done[0].start_offset, done[1].start_offset]
    assert [m.start_offset for m in finished(rlmm, state.tip)] == [m.start_offset for m in done[2:]]
    with pytest.raises(OffsetOutOfRangeError):
        rlm.read(TP, 0, 100, timeout=10)


def test_expiration_by_time_and_by_log_start_offset(env):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 60, ts0=int(time.time() * 1000) - 3_600_000)  # an hour old
    state = state_for(rlm, plog)
    rlm.copy_task(state).run(TaskContext())
    plog.delete_old_segments()
    done = finished(rlmm, state.tip)
    # DeleteRecords past the first remote segment
    plog.maybe_increment_log_start_offset(done[0].end_offset + 2)
    rlm.expiration_task(state).run(TaskContext())
    assert [e.start_offset for e in events if e.type == "DELETE_SEGMENT"] == [done[0].start_offset]
    # time retention of one minute: every remote segment is older
    plog.config = LogConfig(**{**plog.config.__dict__, "retention_ms": 60_000})
    rlm.expiration_task(state).run(TaskContext())
    assert finished(rlmm, state.tip) == []
    assert plog.log_start_offset == done[-1].end_offset + 1


def test_orphaned_copy_started_segment_is_cleaned(env):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 30)
    state = state_for(rlm, plog)
    seg = plog.segments[0]
    # a broker died between COPY_SEGMENT_STARTED and FINISHED, leaving a partial object
    from tieredlog.rsm.api import RemoteLogSegmentId, RemoteLogSegmentMetadata

    orphan = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(state.tip), seg.base_offset,
                                      plog.next_segment_base_offset(seg) - 1, 0, 1, 0, seg.size, {0: 0})
    rlmm.add_remote_log_segment_metadata(orphan)
    rlm.copy_task(state).run(TaskContext())  # re-copies the range under a new id
    rlm.expiration_task(state).run(TaskContext())
    ids = {m.remote_log_segment_id for m in rlmm.list_remote_log_segments(state.tip)}
    assert orphan.remote_log_segment_id not in ids
    assert all(m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in rlmm.list_remote_log_segments(state.tip))


def test_topic_deletion_removes_remote_data_and_survives_restart(env, tmp_path):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 30)
    state = state_for(rlm, plog)
    rlm.copy_task(state).run(TaskContext())
    assert finished(rlmm, state.tip)
    # the broker dies right after recording the deletion: the journal is all that is left
    rlm.pending_deletes.add(state.tip)
    rlm2 = RemoteLogManager(rlm.config, Logs(), rsm, rlmm)
    rlm2.start()
    try:
        deadline = time.monotonic() + 10
        while rlm2.pending_deletes.read() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rlm2.pending_deletes.read() == []
        assert list(rsm.partition_dir(state.tip).glob("*.log")) == []
    finally:
        rlm2.shutdown()


def test_remote_storage_disabled_deletes_remote_segments_without_a_partition_delete_marker(env):
    plog, rsm, rlmm, rlm, events = env
    produce(plog, 60)
    state = state_for(rlm, plog)
    rlm.copy_task(state).run(TaskContext())
    copied = finished(rlmm, state.tip)
    assert copied and list(rsm.iter_segment_files())
    rlm.on_leadership_change([plog.topic_partition])
    assert TP in rlm._leaders
    rlm.on_remote_storage_disabled([TP])
    assert TP not in rlm._leaders  # the copy and expiration tasks are gone
    deadline = time.monotonic() + 30  # a wait for the background task, not a performance bound

    def deleted() -> list[int]:
        return sorted(e.start_offset for e in events if e.type == "DELETE_SEGMENT")

    # the event of the last deletion is recorded just after its files go
    while (list(rsm.iter_segment_files()) or len(deleted()) < len(copied)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(rsm.iter_segment_files()) == []
    assert deleted() == [m.start_offset for m in copied]
    assert finished(rlmm, state.tip) == []
    # the partition itself is not marked deleted: tiering it again later must work
    assert rlm.pending_deletes.read() == []
    assert state.tip not in rlmm._store.delete_metadata and state.tip in rlmm._store.caches


def _one_record(value: bytes) -> bytes:
    return build_batch([(None, value, [], 1_000_000)])


def _values(data: bytes) -> list[tuple[int, bytes]]:
    from tieredlog.records.record import decode_batch

    return [(r.offset, r.value) for pos, _ in iter_headers(data) for r in decode_batch(data, pos)[1]]


def _remote_records(rlm: RemoteLogManager, plog: UnifiedLog, offset: int) -> list[tuple[int, bytes]]:
    """What a consumer fetching from ``offset`` reads of the remote tier, fetch after fetch."""
    out: list[tuple[int, bytes]] = []
    while offset < plog.local_log_start_offset:
        got = _values(rlm.read(TP, offset, 1 << 20, timeout=10))
        assert got, f"nothing read at {offset}"
        out += got
        offset = got[-1][0] + 1
    return out


def test_two_lineages_tiered_over_the_same_offsets_are_read_and_expired_each_by_its_own_log(env, tmp_path):
    """KIP-405 scenario 5 in small: A tiers seg-0-3 in epoch 0; B, elected uncleanly after offset 1,
    rewrites 2-4 in epoch 1 and tiers its own seg-0-3. The metadata serves epoch 0's offsets from
    B's copy (the last one), yet each log reads its own records, and A's remote retention deletes
    B's copy only once A's log start has passed it."""
    plog_a, rsm, rlmm, rlm_a, events = env
    size = len(_one_record(b"x0"))
    cfg = LogConfig(**{**plog_a.config.__dict__, "segment_bytes": 4 * size + size // 2})
    plog_a.config = cfg
    plog_b = UnifiedLog(tmp_path / "b" / f"{TP.topic}-{TP.partition}", cfg, topic_id=plog_a.topic_id)
    for value in (b"x0", b"x1", b"a2", b"a3", b"a4"):
        plog_a.append_as_leader(_one_record(value), 0)
    for value, epoch in ((b"x0", 0), (b"x1", 0), (b"b2", 1), (b"b3", 1), (b"b4", 1)):
        plog_b.append_as_leader(_one_record(value), epoch)
    rlm_b = RemoteLogManager(rlm_a.config, Logs(plog_b), rsm, rlmm)
    rlm_b.start()
    try:
        for plog, rlm in ((plog_a, rlm_a), (plog_b, rlm_b)):
            plog.update_high_watermark(plog.log_end_offset)
            rlm.copy_task(state_for(rlm, plog)).run(TaskContext())
            plog.delete_old_segments()
            assert plog.local_log_start_offset == 4
        seg_a, seg_b = finished(rlmm, state_for(rlm_a, plog_a).tip)
        assert [(m.start_offset, m.end_offset, m.segment_leader_epochs) for m in (seg_a, seg_b)] == [
            (0, 3, {0: 0}), (0, 3, {0: 0, 1: 2})]
        assert rlmm.remote_log_segment_metadata(seg_a.topic_id_partition, 0, 0) == seg_b

        assert _remote_records(rlm_a, plog_a, 0) == [(0, b"x0"), (1, b"x1"), (2, b"a2"), (3, b"a3")]
        assert _remote_records(rlm_a, plog_a, 2) == [(2, b"a2"), (3, b"a3")]
        assert _remote_records(rlm_b, plog_b, 0) == [(0, b"x0"), (1, b"x1"), (2, b"b2"), (3, b"b3")]

        # A's expiration: B's copy is not a duplicate of A's, and it stays while its offsets are A's log too
        state = state_for(rlm_a, plog_a)
        rlm_a.expiration_task(state).run(TaskContext())
        assert finished(rlmm, state.tip) == [seg_a, seg_b]
        # retention of one batch: A's seg-0-3 goes and the log start moves past both copies
        plog_a.config = LogConfig(**{**cfg.__dict__, "retention_bytes": size})
        rlm_a.expiration_task(state).run(TaskContext())
        assert plog_a.log_start_offset == 4
        rlm_a.expiration_task(state).run(TaskContext())
        assert finished(rlmm, state.tip) == []
        assert [e.segment_id for e in events if e.type == "DELETE_SEGMENT"] == [
            seg_a.remote_log_segment_id.id, seg_b.remote_log_segment_id.id]
    finally:
        rlm_b.shutdown()

