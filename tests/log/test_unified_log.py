"""UnifiedLog: produce validation, offsets, reads by isolation, roll, timestamps, retention, tiering hooks,
DeleteRecords, truncation and the idempotent/transactional paths."""

from __future__ import annotations

import os
import time

import pytest

from tieredlog import errors
from tieredlog.log.config import LogConfig
from tieredlog.log.types import AppendOrigin, EpochEntry, FetchIsolation
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import iter_headers, validate_batch
from tieredlog.records.record import build_batch, build_control_batch


class Clock:
    def __init__(self, now: int = 1_700_000_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(n: int = 3, ts: int = 1_700_000_000_000, value: bytes = b"v" * 50, **kw) -> bytes:
    return build_batch([(b"k", value, [], ts + i) for i in range(n)], **kw)


def make_log(tmp_path, clock=None, **cfg) -> UnifiedLog:
    return UnifiedLog(tmp_path / "topic-0", LogConfig(**cfg), clock=clock or Clock())


def all_offsets(plog: UnifiedLog, start: int = 0) -> list[int]:
    out = []
    off = start
    while off < plog.log_end_offset:
        info = plog.read(off, 1 << 20, isolation=FetchIsolation.LOG_END)
        data = info.records.read_bytes() if not isinstance(info.records, bytes) else info.records
        if not data:
            break
        for _, h in iter_headers(data):
            validate_batch(data, _)
            out.extend(range(max(h.base_offset, off), h.next_offset))
            off = h.next_offset
    return out


def test_append_assigns_offsets_and_epoch_in_place(tmp_path):
    plog = make_log(tmp_path)
    a = plog.append_as_leader(batch(3), leader_epoch=5)
    b = plog.append_as_leader(batch(2) + batch(4), leader_epoch=5)
    assert (a.first_offset, a.last_offset, a.record_count) == (0, 2, 3)
    assert (b.first_offset, b.last_offset, b.record_count) == (3, 8, 6)
    assert plog.log_end_offset == 9
    plog.update_high_watermark(9)
    data = plog.read(0, 1 << 20).records.read_bytes()
    headers = [h for _, h in iter_headers(data)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 5), (3, 5), (5, 5)]
    for pos, _ in iter_headers(data):
        validate_batch(data, pos)  # CRC still valid after patching
    assert plog.leader_epoch_cache.epoch_entries() == [(5, 0)]
    plog.append_as_leader(batch(1), leader_epoch=7)
    assert plog.leader_epoch_cache.epoch_entries() == [(5, 0), (7, 9)]


def test_validation_errors_map_to_kafka_errors_and_lose_nothing(tmp_path):
    plog = make_log(tmp_path, max_message_bytes=500)
    plog.append_as_leader(batch(1), 0)
    good = batch(1)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with pytest.raises(errors.CorruptMessageError):
        plog.append_as_leader(bytes(corrupt), 0)
    with pytest.raises(errors.CorruptMessageError):
        plog.append_as_leader(good[:-5], 0)
    with pytest.raises(errors.MessageTooLargeError):
        plog.append_as_leader(batch(1, value=b"x" * 600), 0)
    old = bytearray(good)
    old[16] = 1
    with pytest.raises(errors.UnsupportedForMessageFormatError):
        plog.append_as_leader(bytes(old), 0)
    future = bytearray(good)
    future[16] = 3
    with pytest.raises(errors.InvalidRecordError):
        plog.append_as_leader(bytes(future), 0)
    with pytest.raises(errors.InvalidRecordError):
        plog.append_as_leader(build_control_batch(1, 5, 0, 0, 1_700_000_000_000), 0)
    with pytest.raises(errors.InvalidRecordError):
        plog.append_as_leader(b"", 0)
    # A good batch followed by a bad one: nothing of the request is written.
    with pytest.raises(errors.CorruptMessageError):
        plog.append_as_leader(good + bytes(corrupt), 0)
    assert plog.log_end_offset == 1
    assert plog.append_as_leader(good, 0).first_offset == 1


def test_record_list_larger_than_segment(tmp_path):
    plog = make_log(tmp_path, segment_bytes=300)
    with pytest.raises(errors.RecordListTooLargeError):
        plog.append_as_leader(batch(2) + batch(2) + batch(2), 0)


def test_timestamp_bounds(tmp_path):
    clock = Clock()
    plog = make_log(tmp_path, clock, message_timestamp_after_max_ms=1000, message_timestamp_before_max_ms=1000)
    with pytest.raises(errors.InvalidTimestampError):
        plog.append_as_leader(batch(1, ts=clock.now + 5000), 0)
    with pytest.raises(errors.InvalidTimestampError):
        plog.append_as_leader(batch(1, ts=clock.now - 5000), 0)
    plog.append_as_leader(batch(1, ts=clock.now), 0)


def test_log_append_time_rewrites_max_timestamp_and_crc(tmp_path):
    clock = Clock(1_800_000_000_000)
    plog = make_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = plog.append_as_leader(batch(3, ts=1000), 0)
    assert info.log_append_time == clock.now
    plog.update_high_watermark(plog.log_end_offset)
    data = plog.read(0, 1 << 20).records.read_bytes()
    h = validate_batch(data, 0)
    assert h.timestamp_type == 1 and h.max_timestamp == clock.now and h.base_timestamp == 1000
    assert plog.fetch_offset_by_timestamp(clock.now).offset == 0


def test_read_isolation_bounds_and_errors(tmp_path):
    plog = make_log(tmp_path)
    for _ in range(4):
        plog.append_as_leader(batch(2), 0)
    assert plog.read(0, 1 << 20).records == b""  # HW is 0: nothing visible to consumers
    plog.update_high_watermark(4)
    data = plog.read(0, 1 << 20).records.read_bytes()
    assert [h.base_offset for _, h in iter_headers(data)] == [0, 2]
    data = plog.read(0, 1 << 20, isolation=FetchIsolation.LOG_END).records.read_bytes()
    assert [h.base_offset for _, h in iter_headers(data)] == [0, 2, 4, 6]
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.read(9, 100)
    assert plog.read(8, 100, isolation=FetchIsolation.LOG_END).records == b""
    # min_one_message: one whole batch even when max_bytes is tiny.
    one = plog.read(1, 1, min_one_message=True)
    assert one.first_offset == 0 and len(one.records) == len(batch(2))
    # without it nothing whole fits: no bytes go, the byte Kafka's slice held is what the fetch counts
    cut = plog.read(1, 1, min_one_message=False).records
    assert (len(cut), cut.fetch_size) == (0, 1)


def test_file_slice_supports_sendfile(tmp_path):
    import socket

    plog = make_log(tmp_path)
    plog.append_as_leader(batch(3), 0)
    plog.update_high_watermark(3)
    sl = plog.read(0, 1 << 20).records
    a, b = socket.socketpair()
    with a, b, sl.open() as f:
        sent = os.sendfile(a.fileno(), f.fileno(), sl.position, sl.size)
        assert sent == sl.size
        assert b.recv(1 << 16) == sl.read_bytes()


def test_roll_on_segment_bytes_and_reads_across_segments(tmp_path):
    one = len(batch(2))
    plog = make_log(tmp_path, segment_bytes=one * 3)
    for _ in range(10):
        plog.append_as_leader(batch(2), 0)
    assert [s.base_offset for s in plog.segments] == [0, 6, 12, 18]
    assert all(s.size <= one * 3 for s in plog.segments)
    assert all_offsets(plog) == list(range(20))
    names = sorted(os.listdir(plog.dir))
    assert "00000000000000000006.log" in names and "00000000000000000006.snapshot" in names
    # Rolled segments' indexes are trimmed to their valid size.
    assert (plog.dir / "00000000000000000000.index").stat().st_size % 8 == 0
    assert (plog.dir / "00000000000000000000.index").stat().st_size < LogConfig().segment_index_bytes


def test_roll_on_segment_ms_from_first_batch_timestamp(tmp_path):
    plog = make_log(tmp_path, segment_ms=1000)
    plog.append_as_leader(batch(1, ts=1_700_000_000_000), 0)
    plog.append_as_leader(batch(1, ts=1_700_000_000_900), 0)
    assert plog.num_segments == 1
    plog.append_as_leader(batch(1, ts=1_700_000_001_001), 0)
    assert [s.base_offset for s in plog.segments] == [0, 2]


def test_roll_on_full_index(tmp_path):
    plog = make_log(tmp_path, index_interval_bytes=1, segment_index_bytes=8 * 3)
    for _ in range(12):
        plog.append_as_leader(batch(1), 0)
    assert plog.num_segments > 2
    for seg in plog.segments[:-1]:
        assert seg.time_index.entries <= 2 and seg.offset_index.entries <= 3
    assert all_offsets(plog) == list(range(12))


def test_offset_by_timestamp(tmp_path):
    plog = make_log(tmp_path, segment_bytes=len(batch(3)) * 2)
    base = 1_700_000_000_000
    for i in range(6):
        plog.append_as_leader(batch(3, ts=base + 100 * i), leader_epoch=2)
    # batch i holds offsets 3i..3i+2 with timestamps base+100i .. base+100i+2
    assert plog.fetch_offset_by_timestamp(base).offset == 0
    r = plog.fetch_offset_by_timestamp(base + 201)
    assert (r.offset, r.timestamp, r.leader_epoch) == (7, base + 201, 2)
    assert plog.fetch_offset_by_timestamp(base + 203).offset == 9
    assert plog.fetch_offset_by_timestamp(base + 10_000) is None
    assert plog.fetch_offset_by_timestamp(-1).offset == 18
    assert plog.fetch_offset_by_timestamp(-2).offset == 0
    mx = plog.fetch_offset_by_timestamp(-3)
    assert mx.timestamp == base + 502 and mx.offset == 17


def test_retention_by_size_and_time(tmp_path):
    clock = Clock()
    one = len(batch(2))
    plog = make_log(tmp_path, clock, segment_bytes=one * 2, retention_bytes=one * 5, file_delete_delay_ms=1000)
    for _ in range(10):
        plog.append_as_leader(batch(2, ts=clock.now), 0)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.num_segments == 5
    assert plog.delete_old_segments() == 2  # 10 batches, keep >= 5 batches' worth: drop two 2-batch segments
    assert plog.log_start_offset == 8 and plog.local_log_start_offset == 8
    assert sorted(p.name for p in plog.dir.glob("*.deleted"))[:1] == ["00000000000000000000.index.deleted"]
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.read(2, 100)
    assert plog.delete_expired_files(clock.now + 999) == 0
    assert plog.delete_expired_files(clock.now + 1000) == 2
    assert not list(plog.dir.glob("*.deleted"))


def test_time_retention_rolls_active_and_respects_high_watermark(tmp_path):
    clock = Clock()
    plog = make_log(tmp_path, clock, retention_ms=1000, file_delete_delay_ms=0, segment_bytes=len(batch(1)) * 2)
    for _ in range(5):
        plog.append_as_leader(batch(1, ts=clock.now), 0)
    clock.now += 5000
    plog.update_high_watermark(2)
    assert plog.delete_old_segments() == 1  # the segment above the HW stays
    plog.update_high_watermark(5)
    assert plog.delete_old_segments() == 2  # everything expired: roll, then delete the old active segment too
    assert plog.num_segments == 1 and plog.active_segment.size == 0
    assert plog.log_start_offset == 5 == plog.log_end_offset
    assert plog.append_as_leader(batch(1, ts=clock.now), 0).first_offset == 5


def test_tiered_local_retention_only_below_remote_offset(tmp_path):
    clock = Clock()
    one = len(batch(2))
    plog = make_log(
        tmp_path, clock, segment_bytes=one * 2, remote_storage_enable=True, local_retention_bytes=0,
        retention_bytes=-1, file_delete_delay_ms=0,
    )
    for _ in range(8):
        plog.append_as_leader(batch(2, ts=clock.now), 0)
    plog.update_high_watermark(plog.log_end_offset)
    assert [s.base_offset for s in plog.segments] == [0, 4, 8, 12]
    assert [s.base_offset for s in plog.segments_to_copy(plog.last_stable_offset)] == [0, 4, 8]
    assert plog.delete_old_segments() == 0  # nothing is in remote storage yet
    plog.update_highest_offset_in_remote_storage(7)  # segments [0,4) and [4,8) are uploaded
    assert [s.base_offset for s in plog.segments_to_copy(plog.last_stable_offset)] == [8]
    assert plog.producer_snapshot_for(plog.segments[2]).name == "00000000000000000012.snapshot"
    assert plog.delete_old_segments() == 2
    assert plog.log_start_offset == 0 and plog.local_log_start_offset == 8
    with pytest.raises(errors.OffsetMovedToTieredStorageError):
        plog.read(3, 100)
    assert plog.read(8, 100).first_offset == 8
    # The RLM's total retention moves the log start offset; below it is out of range.
    plog.maybe_increment_log_start_offset(6, "remote_retention")
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.read(5, 100)


def test_only_local_log_segments_follow_the_highest_remote_offset(tmp_path):
    one = len(batch(2))
    plog = make_log(tmp_path, segment_bytes=one * 2, remote_storage_enable=True)
    for _ in range(7):
        plog.append_as_leader(batch(2), 0)
    assert [s.base_offset for s in plog.segments] == [0, 4, 8, 12]
    assert [s.base_offset for s in plog.only_local_log_segments()] == [0, 4, 8, 12]
    assert plog.only_local_log_segments_size() == plog.size == 7 * one
    plog.update_highest_offset_in_remote_storage(6)  # [4, 8) is only partly remote: still counted
    assert [s.base_offset for s in plog.only_local_log_segments()] == [4, 8, 12]
    plog.update_highest_offset_in_remote_storage(11)
    assert [s.base_offset for s in plog.only_local_log_segments()] == [12]  # the active segment always counts
    assert plog.only_local_log_segments_size() == one
    assert plog.next_segment_base_offset(plog.segments[1]) == 8
    assert plog.next_segment_base_offset(plog.active_segment) == plog.log_end_offset == 14


def test_delete_records(tmp_path):
    plog = make_log(tmp_path, segment_bytes=len(batch(2)) * 2, file_delete_delay_ms=0)
    for _ in range(6):
        plog.append_as_leader(batch(2), 0)
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.maybe_increment_log_start_offset(5)  # above the HW
    plog.update_high_watermark(12)
    assert plog.maybe_increment_log_start_offset(5)
    assert plog.log_start_offset == 5
    with pytest.raises(errors.OffsetOutOfRangeError):
        plog.read(4, 100)
    assert plog.read(5, 100).first_offset == 4  # the batch holding offset 5
    assert plog.delete_old_segments() == 1  # segment [0,4) is wholly below the start offset
    assert plog.segments[0].base_offset == 4


def test_truncate_to(tmp_path):
    plog = make_log(tmp_path, segment_bytes=len(batch(2)) * 2)
    for epoch in (1, 1, 2, 2, 3):
        plog.append_as_leader(batch(2), epoch)
    plog.update_high_watermark(10)
    assert plog.truncate_to(4)
    assert plog.log_end_offset == 4 and plog.high_watermark == 4
    assert [s.base_offset for s in plog.segments] == [0, 4]
    assert plog.leader_epoch_cache.epoch_entries() == [(1, 0)]
    assert plog.append_as_leader(batch(2), 4).first_offset == 4
    assert all_offsets(plog) == list(range(6))
    assert not plog.truncate_to(100)


def test_idempotent_duplicates_get_original_offsets(tmp_path):
    plog = make_log(tmp_path)
    plog.append_as_leader(batch(1), 0)
    b0 = batch(3, producer_id=42, producer_epoch=0, base_sequence=0)
    first = plog.append_as_leader(b0, 0)
    again = plog.append_as_leader(b0, 0)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (1, 3)
    assert plog.log_end_offset == 4
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        plog.append_as_leader(batch(1, producer_id=42, producer_epoch=0, base_sequence=7), 0)
    assert plog.append_as_leader(batch(1, producer_id=42, producer_epoch=0, base_sequence=3), 0).first_offset == 4


def test_transactions_lso_and_aborted_index(tmp_path):
    plog = make_log(tmp_path)
    plog.append_as_leader(batch(2), 0)
    plog.append_as_leader(batch(2, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True), 0)
    plog.append_as_leader(batch(1), 0)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == 2  # the open transaction starts at 2
    data = plog.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED).records.read_bytes()
    assert [h.base_offset for _, h in iter_headers(data)] == [0]
    marker = build_control_batch(0, 9, 0, 0, 1_700_000_000_000)  # ABORT
    plog.append_as_leader(marker, 0, origin=AppendOrigin.COORDINATOR)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == plog.log_end_offset == 6
    info = plog.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in info.aborted_transactions] == [(9, 2, 5)]
    assert plog.active_segment.txn_index_path.stat().st_size == 34


def test_read_committed_reports_a_transaction_aborted_in_a_later_segment(tmp_path):
    """The abort marker's segment holds the txn index entry, even when that segment starts past the
    read's upper bound (the LSO, held back here by another open transaction)."""
    plog = make_log(tmp_path)
    plog.append_as_leader(batch(2, producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True), 0)
    plog.append_as_leader(batch(1), 0)
    plog.append_as_leader(batch(2, producer_id=2, producer_epoch=0, base_sequence=0, is_transactional=True), 0)
    plog.roll()
    plog.append_as_leader(build_control_batch(0, 1, 0, 0, 1_700_000_000_000), 0, origin=AppendOrigin.COORDINATOR)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == 3 and plog.segments[1].base_offset == 5  # producer 2 is still open
    info = plog.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert [h.base_offset for _, h in iter_headers(info.records.read_bytes())] == [0, 2]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in info.aborted_transactions] == [(1, 0, 5)]


def test_follower_append_keeps_offsets(tmp_path):
    leader = make_log(tmp_path / "l")
    leader.append_as_leader(batch(2), 3)
    leader.append_as_leader(batch(3), 4)
    leader.update_high_watermark(5)
    data = leader.read(0, 1 << 20).records.read_bytes()
    follower = make_log(tmp_path / "f")
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert follower.leader_epoch_cache.epoch_entries() == [(3, 0), (4, 2)]
    with pytest.raises(errors.UnexpectedAppendOffsetError):
        follower.append_as_follower(data)


def test_flush_messages_moves_recovery_point(tmp_path):
    plog = make_log(tmp_path, flush_messages=5)
    plog.append_as_leader(batch(3), 0)
    assert plog.recovery_point == 0
    plog.append_as_leader(batch(3), 0)
    assert plog.recovery_point == 6
    clock = Clock()
    plog2 = make_log(tmp_path / "b", clock, flush_ms=1000)
    plog2.append_as_leader(batch(1), 0)
    assert not plog2.flush_if_due()
    clock.now += 1000
    assert plog2.flush_if_due() and plog2.recovery_point == 1


def test_topic_id_persisted_and_checked(tmp_path):
    import uuid

    tid = uuid.uuid4()
    plog = UnifiedLog(tmp_path / "t-0", LogConfig(), topic_id=tid)
    plog.close()
    assert UnifiedLog(tmp_path / "t-0", LogConfig()).topic_id == tid
    with pytest.raises(errors.InconsistentTopicIdError):
        UnifiedLog(tmp_path / "t-0", LogConfig(), topic_id=uuid.uuid4())


def test_several_batches_of_one_producer_in_one_request(tmp_path):
    """Kafka checks each batch against the ones before it in the same request, not only the stored state."""
    plog = make_log(tmp_path)

    def pb(seq, n=2, epoch=0, **kw):
        return batch(n, producer_id=5, producer_epoch=epoch, base_sequence=seq, **kw)

    info = plog.append_as_leader(pb(0) + pb(2) + pb(4), 0)
    assert (info.first_offset, info.last_offset, info.duplicate) == (0, 5, False)
    assert plog.producer_state.last_entry(5).last_seq == 5
    # A retry of the whole request is answered with the original offsets of its first batch.
    dup = plog.append_as_leader(pb(0) + pb(2) + pb(4), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1) and plog.log_end_offset == 6
    # Interleaved producers, each in sequence within the request.
    other = batch(1, producer_id=6, producer_epoch=0, base_sequence=0)
    assert plog.append_as_leader(pb(6) + other + pb(8), 0).last_offset == 10
    # A gap between two batches of the request rejects the request and writes nothing.
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        plog.append_as_leader(pb(10) + pb(13), 0)
    assert plog.log_end_offset == 11
    # A new epoch inside the request must start at 0; an older epoch after a newer one is fenced.
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        plog.append_as_leader(pb(10) + pb(3, epoch=1), 0)
    with pytest.raises(errors.InvalidProducerEpochError):
        plog.append_as_leader(pb(0, epoch=2) + pb(2, epoch=1), 0)
    assert plog.log_end_offset == 11
    assert plog.append_as_leader(pb(10) + pb(0, epoch=1), 0).last_offset == 14
    assert plog.producer_state.last_entry(5).producer_epoch == 1


def test_non_transactional_batch_after_transactional_one_in_the_same_request(tmp_path):
    plog = make_log(tmp_path)
    txn = batch(2, producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)
    plain = batch(1, producer_id=8, producer_epoch=0, base_sequence=2)
    with pytest.raises(errors.InvalidTxnStateError):
        plog.append_as_leader(txn + plain, 0)
    assert plog.log_end_offset == 0
    txn2 = batch(1, producer_id=8, producer_epoch=0, base_sequence=2, is_transactional=True)
    assert plog.append_as_leader(txn + txn2, 0).last_offset == 2
    assert plog.producer_state.first_unstable_offset() == 0


def test_list_offsets_by_timestamp_from_other_threads_while_the_log_moves(tmp_path):
    """The server runs ListOffsets by timestamp off the event loop (it decodes a batch): concurrent
    appends, rolls, retention and physical deletes must never make it fail or answer a record that
    does not exist; every answer is the first record at or after the timestamp among the live ones."""
    import random
    import threading
    import time

    from tieredlog.records.batch import COMPRESSION_LZ4

    ts0 = 1_700_000_000_000
    plog = make_log(tmp_path, segment_bytes=3000, retention_bytes=9000, file_delete_delay_ms=0)
    failures: list[BaseException] = []
    answers = 0
    stop = threading.Event()

    def lookups(seed: int) -> None:
        nonlocal answers
        rng = random.Random(seed)
        while not stop.is_set():
            end = plog.log_end_offset
            if end == 0:
                continue
            target = ts0 + rng.randrange(end)
            try:
                found = plog.fetch_offset_by_timestamp(target)
                if found is not None:
                    assert found.timestamp == ts0 + found.offset >= target, (target, found)
                    answers += 1
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(e)
                return

    threads = [threading.Thread(target=lookups, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    offset = 0
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline and not failures:
            recs = [(None, os.urandom(40), [], ts0 + offset + i) for i in range(5)]
            plog.append_as_leader(build_batch(recs, codec=COMPRESSION_LZ4), 0)
            offset += 5
            plog.update_high_watermark(plog.log_end_offset)
            plog.delete_old_segments()
            plog.delete_expired_files()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == [] and answers > 100 and plog.log_start_offset > 0


def test_list_offsets_decodes_without_the_log_lock(tmp_path, monkeypatch):
    # A ListOffsets decompressing a big batch must not stall produce and fetch on the same partition.
    import threading

    import tieredlog.log.unified_log as ul

    plog = make_log(tmp_path)
    plog.append_as_leader(batch(5, ts=1_000), 0)
    decoding, release = threading.Event(), threading.Event()
    real = ul.record_at_or_after

    def slow(*args):
        decoding.set()
        assert release.wait(10)
        return real(*args)

    monkeypatch.setattr(ul, "record_at_or_after", slow)
    result = []
    lookup = threading.Thread(target=lambda: result.append(plog.fetch_offset_by_timestamp(1_002)))
    lookup.start()
    assert decoding.wait(10)
    plog.append_as_leader(batch(1, ts=2_000), 0)  # would wait for the lock if the decode held it
    release.set()
    lookup.join()
    assert result[0].offset == 2 and result[0].timestamp == 1_002 and plog.log_end_offset == 6


def test_list_offsets_by_timestamp_is_safe_against_a_concurrent_delete(tmp_path, monkeypatch):
    # Deterministic version of the race: while a lookup searches the first segment, another thread
    # moves the log start past it and deletes it (DeleteRecords, retention, file.delete.delay.ms=0).
    # The lookup must finish on the segment it found, not fail on a deleted file.
    import threading

    from tieredlog.log.segment import LogSegment

    TS0 = Clock().now  # not expired by retention.ms
    plog = make_log(tmp_path, segment_bytes=600, file_delete_delay_ms=0)
    for i in range(12):
        plog.append_as_leader(batch(3, ts=TS0 + 3 * i), 0)
    plog.update_high_watermark(plog.log_end_offset)
    first, second = plog.segments[0], plog.segments[1]
    assert first.next_offset >= 3

    def delete_first_segment() -> None:
        plog.maybe_increment_log_start_offset(second.base_offset)
        plog.delete_old_segments()
        plog.delete_expired_files(plog._clock() + 1)

    deleter = threading.Thread(target=delete_first_segment)
    real = LogSegment.find_offset_by_timestamp

    def racing(seg, *args):
        if seg is first and not deleter.is_alive() and deleter.ident is None:
            deleter.start()
            deleter.join(0.5)  # done at once unless the lookup holds the log's lock
        return real(seg, *args)

    monkeypatch.setattr(LogSegment, "find_offset_by_timestamp", racing)
    found = plog.fetch_offset_by_timestamp(TS0 + 1)
    deleter.join()
    assert (found.offset, found.timestamp) == (1, TS0 + 1)
    assert not first.log_path.exists() and plog.log_start_offset == second.base_offset


def test_list_offsets_goes_on_past_a_batch_whose_matching_records_are_below_the_start(tmp_path):
    # Kafka's LogSegment.findOffsetByTimestamp: a batch reaches the timestamp only with records
    # below the log start (DeleteRecords cut it): the answer is in a later batch. It used to be the
    # batch's last offset with the max timestamp of an earlier, deleted record.
    t = Clock().now
    plog = make_log(tmp_path)
    plog.append_as_leader(build_batch([(None, b"a", [], t + 50), (None, b"b", [], t + 1), (None, b"c", [], t + 2)]), 0)
    plog.append_as_leader(build_batch([(None, b"d", [], t + 60)]), 0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.maybe_increment_log_start_offset(1)
    found = plog.fetch_offset_by_timestamp(t + 50)
    assert (found.offset, found.timestamp) == (3, t + 60)
    assert plog.fetch_offset_by_timestamp(t + 61) is None


def test_rebuild_from_remote_restarts_the_log_with_the_remote_lineage_and_producer_state(tmp_path):
    # the producer snapshot shipped with the remote segment ending at offset 5 (taken by the leader)
    now = int(time.time() * 1000)  # a snapshot's producers expire by wall-clock time when loaded
    leader = make_log(tmp_path / "leader", clock=Clock(now))
    leader.append_as_leader(batch(3, ts=now, producer_id=42, producer_epoch=0, base_sequence=0), 0)
    leader.append_as_leader(batch(3, ts=now, producer_id=42, producer_epoch=0, base_sequence=3), 1)
    snapshot = leader.producer_state.take_snapshot(6).read_bytes()

    follower = make_log(tmp_path / "follower", clock=Clock(now))
    follower.append_as_follower(batch(2, ts=now, base_offset=0, partition_leader_epoch=0))  # stale local data
    follower.rebuild_from_remote(6, 0, [EpochEntry(0, 0), EpochEntry(1, 3), EpochEntry(2, 6)], snapshot)

    assert (follower.log_start_offset, follower.local_log_start_offset, follower.log_end_offset) == (0, 6, 6)
    assert follower.high_watermark == 6
    assert follower.highest_offset_in_remote_storage == 5
    # epochs starting at or after the new start come from the leader's batches, not the remote index
    assert [tuple(e) for e in follower.leader_epoch_cache.epoch_entries()] == [(0, 0), (1, 3)]
    assert follower.producer_state.last_entry(42).last_seq == 5
    # replication resumes at 6: the next idempotent batch of producer 42 is in sequence
    follower.append_as_follower(batch(1, ts=now, base_offset=6, partition_leader_epoch=2, producer_id=42,
                                      producer_epoch=0, base_sequence=6))
    assert follower.log_end_offset == 7
    # a restart finds the same local log and lineage on disk (the log start offset below the local one is
    # the LogManager's log-start-offset checkpoint's to keep)
    follower.close()
    again = make_log(tmp_path / "follower", clock=Clock(now))
    assert (again.local_log_start_offset, again.log_end_offset) == (6, 7)
    assert [tuple(e) for e in again.leader_epoch_cache.epoch_entries()][-1] == (2, 6)
