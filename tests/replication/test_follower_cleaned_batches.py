"""A follower copies a compacted leader's log as it is: batches with offsets removed between and
inside them, batches emptied by the cleaner (recordsCount 0) and batches with KIP-534's delete
horizon. The replication path accepts them (Kafka checks record counts only where it assigns
offsets), a leader's append still refuses them, and the log reads them back, fetch, timestamp search,
decoded walk and recovery alike."""

from __future__ import annotations

import time

import pytest

from tieredlog import errors
from tieredlog.log.batch_reader import LogBatches
from tieredlog.log.config import LogConfig
from tieredlog.log.log_validator import LogValidator
from tieredlog.log.types import AppendOrigin, FetchIsolation
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import Record, build_batch, build_empty_batch, iter_batches_records

# recent: producer state drops producers idle for producer.id.expiration.ms by the wall clock
T = int(time.time() * 1000) - 60_000
HORIZON = T + 86_400_000
COMPACT = LogConfig(cleanup_policy="compact")


def cleaned() -> list[bytes]:
    return [
        # 0..3 with 1 and 2 removed; producer 7's sequences 0..3
        build_batch([Record(0, T, b"a", b"1"), Record(3, T + 3, b"b", b"2")], base_offset=0, producer_id=7,
                    producer_epoch=0, base_sequence=0, partition_leader_epoch=1),
        # 4..7 emptied: kept so producer 7's last sequence (7) survives its records
        build_empty_batch(4, 7, 7, 0, 4, 1, 0, T + 7, False, False),
        # 8..9 removed with their batch; a tombstone stamped with its delete horizon
        build_batch([Record(10, T + 10, b"c", None)], base_offset=10, partition_leader_epoch=2,
                    delete_horizon_ms=HORIZON),
        build_batch([Record(11, T + 11, b"d", b"x" * 40), Record(14, T + 14, b"e", b"y" * 40)], base_offset=11,
                    codec=4, partition_leader_epoch=2),
    ]


def data(info) -> bytes:
    r = info.records
    return bytes(r) if isinstance(r, (bytes, bytearray, memoryview)) else r.read_bytes()


@pytest.mark.parametrize("policy", ["compact", "delete"])
def test_replication_accepts_cleaned_batches(policy):
    buf = bytearray(b"".join(cleaned()))
    headers = LogValidator(LogConfig(cleanup_policy=policy), AppendOrigin.REPLICATION).validate_batches(buf)
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [
        (0, 3, 2), (4, 7, 0), (10, 10, 1), (11, 14, 2)]
    assert buf == b"".join(cleaned())  # checked, not patched


@pytest.mark.parametrize("origin", [AppendOrigin.CLIENT, AppendOrigin.COORDINATOR])
@pytest.mark.parametrize("index", [0, 1, 3])
def test_a_leader_append_still_refuses_them(origin, index):
    # Kafka's LogValidator.validateBatch: a fresh batch's count matches its offset span
    with pytest.raises(errors.InvalidRecordError, match="record count"):
        LogValidator(COMPACT, origin).validate_batches(bytearray(cleaned()[index]))


def test_replication_still_checks_crc_and_size():
    bad = bytearray(cleaned()[1])
    bad[-1] ^= 1  # recordsCount, under the CRC
    with pytest.raises(errors.CorruptMessageError):
        LogValidator(COMPACT, AppendOrigin.REPLICATION).validate_batches(bad)
    small = LogConfig(cleanup_policy="compact", max_message_bytes=70)
    with pytest.raises(errors.MessageTooLargeError):
        LogValidator(small, AppendOrigin.REPLICATION).validate_batches(bytearray(b"".join(cleaned())))
    # the emptied batch alone (61 bytes) fits
    LogValidator(small, AppendOrigin.REPLICATION).validate_batches(bytearray(cleaned()[1]))


def test_follower_appends_and_reads_back_a_cleaned_log(tmp_path):
    parts = cleaned()
    plog = UnifiedLog(tmp_path / "t-0", COMPACT)
    info = plog.append_as_follower(parts[0] + parts[1])
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 7, 2)
    info = plog.append_as_follower(parts[2] + parts[3])
    assert (info.first_offset, info.last_offset, info.record_count) == (10, 14, 3)
    assert plog.log_end_offset == 15
    assert plog.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 10)]
    plog.update_high_watermark(15)

    whole = b"".join(parts)
    assert data(plog.read(0, 1 << 20)) == whole  # byte for byte
    starts = {0: 0, 1: 0, 3: 0, 4: 1, 6: 1, 8: 2, 9: 2, 10: 2, 12: 3, 14: 3}
    for offset, first in starts.items():  # from a removed offset: the batch holding it, or the next
        assert data(plog.read(offset, 1 << 20)) == b"".join(parts[first:]), offset
    assert data(plog.read(15, 1 << 20)) == b""

    got = [(h.base_offset, [r.offset for r in recs]) for h, recs in iter_batches_records(whole)]
    assert got == [(0, [0, 3]), (4, []), (10, [10]), (11, [11, 14])]
    walked = [(h.base_offset, [r.offset for r in recs]) for h, recs in LogBatches(plog, 1)]
    assert walked == [(0, [3]), (4, []), (10, [10]), (11, [11, 14])]

    # the emptied batch carries producer 7 to sequence 7
    entry = plog.producer_state._producers[7]
    assert (entry.batches[-1].last_seq, entry.batches[-1].last_offset) == (7, 7)

    # a timestamp search skips what has no record: the empty batch's max timestamp is not a record's
    assert (plog.fetch_offset_by_timestamp(T + 1).offset, plog.fetch_offset_by_timestamp(T + 4).offset) == (3, 10)
    assert plog.fetch_offset_by_timestamp(T + 9).offset == 10
    assert plog.fetch_offset_by_timestamp(T + 12).offset == 14


def test_recovery_keeps_the_cleaned_batches(tmp_path):
    parts = cleaned()
    plog = UnifiedLog(tmp_path / "t-0", COMPACT)
    plog.append_as_follower(b"".join(parts))
    plog.flush()
    reopened = UnifiedLog(tmp_path / "t-0", COMPACT, had_clean_shutdown=False, recovery_point=0)
    assert reopened.log_end_offset == 15
    reopened.update_high_watermark(15)
    assert [h.base_offset for _, h in iter_headers(data(reopened.read(0, 1 << 20)))] == [0, 4, 10, 11]
    assert reopened.producer_state._producers[7].batches[-1].last_seq == 7


def test_the_producer_continues_after_its_emptied_batch_when_this_replica_leads(tmp_path):
    parts = cleaned()
    plog = UnifiedLog(tmp_path / "t-0", COMPACT)
    plog.append_as_follower(b"".join(parts))
    # without the emptied batch the last sequence would be 3, and 8 out of order
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        plog.append_as_leader(build_batch([(b"g", b"z", [], T + 21)], producer_id=7, producer_epoch=0,
                                          base_sequence=4), leader_epoch=3)
    nxt = build_batch([(b"f", b"z", [], T + 20)], producer_id=7, producer_epoch=0, base_sequence=8)
    info = plog.append_as_leader(nxt, leader_epoch=3)
    assert (info.first_offset, info.duplicate) == (15, False)
    plog.update_high_watermark(plog.log_end_offset)
    assert [h.base_offset for _, h in iter_headers(data(plog.read(0, 1 << 20, FetchIsolation.LOG_END)))] == [
        0, 4, 10, 11, 15]
