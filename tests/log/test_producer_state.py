import logging
import struct

import crc32c
import pytest

from tieredlog.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceNumberError
from tieredlog.formats.producer_snapshot import CorruptSnapshotError
from tieredlog.formats.varint import encode_varint
from tieredlog.log.producer_state import (
    CompletedTxn,
    DuplicateBatch,
    ProducerStateManager,
    decode_snapshot,
    read_control_record,
)
from tieredlog.records.batch import BatchHeader
from tieredlog.records.record import ControlRecord, build_control_batch

INT32_MAX = 2**31 - 1


def hdr(pid, epoch, seq, count=1, txn=False, control=False):
    attrs = (0x10 if txn else 0) | (0x20 if control else 0)
    return BatchHeader(0, 0, 0, 2, 0, attrs, count - 1, 0, 0, pid, epoch, seq, count)


def append(psm, h, offset, ts=1000, control=None):
    """What the partition log does for a client batch: check, then update after the append."""
    dup = psm.check_sequence(h)
    assert dup is None
    return psm.update(h, offset, ts, control)


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(tmp_path)


def test_in_sequence_batches_and_gaps(psm):
    append(psm, hdr(1, 0, 0, count=3), 0)
    append(psm, hdr(1, 0, 3, count=2), 3)
    e = psm.last_entry(1)
    assert (e.producer_epoch, e.first_seq, e.last_seq, e.last_data_offset) == (0, 0, 4, 4)
    with pytest.raises(OutOfOrderSequenceNumberError, match="out of order sequence 6, expected 5"):
        psm.check_sequence(hdr(1, 0, 6))
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm.check_sequence(hdr(1, 0, 4))  # overlaps the last batch without matching it


def test_duplicates_of_the_last_five_batches_get_original_offsets(psm):
    for i in range(6):  # batches seq 2i..2i+1 at offsets 100+10i
        append(psm, hdr(9, 1, 2 * i, count=2), 100 + 10 * i, ts=5000 + i)
    assert psm.check_sequence(hdr(9, 1, 10, count=2)) == DuplicateBatch(150, 151, 5005)
    assert psm.check_sequence(hdr(9, 1, 2, count=2)) == DuplicateBatch(110, 111, 5001)
    # The oldest batch fell out of the 5-batch window: no longer recognised, so out of order.
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm.check_sequence(hdr(9, 1, 0, count=2))
    # Same sequences under another epoch are not duplicates.
    with pytest.raises(OutOfOrderSequenceNumberError, match="new epoch 2 must start at sequence 0"):
        psm.check_sequence(hdr(9, 2, 10, count=2))


def test_epoch_rules(psm):
    append(psm, hdr(5, 3, 0), 0)
    with pytest.raises(InvalidProducerEpochError, match="epoch 2, smaller than the last seen epoch 3"):
        psm.check_sequence(hdr(5, 2, 1))
    # A bumped epoch restarts at sequence 0 and forgets the old batches.
    append(psm, hdr(5, 4, 0), 1)
    e = psm.last_entry(5)
    assert e.producer_epoch == 4 and len(e.batches) == 1 and e.batches[0].first_offset == 1


def test_unknown_producer_is_accepted_with_any_sequence(psm):
    # KIP-360: its state may have gone with deleted segments; Kafka accepts it as new.
    assert psm.check_sequence(hdr(77, 0, 42)) is None
    psm.update(hdr(77, 0, 42), 10, 1)
    assert psm.check_sequence(hdr(77, 0, 43)) is None


def test_sequence_wraps_at_int32_max(psm):
    append(psm, hdr(3, 0, INT32_MAX - 1, count=3), 0)
    assert psm.last_entry(3).last_seq == 0  # BatchHeader.last_sequence wraps too
    assert psm.check_sequence(hdr(3, 0, 1)) is None
    psm.take_snapshot(3)
    reloaded = ProducerStateManager(psm.dir)
    reloaded.load(0, 3, now_ms=2000)
    assert reloaded.check_sequence(hdr(3, 0, INT32_MAX - 1, count=3)) == DuplicateBatch(0, 2, 1000)
    psm2 = ProducerStateManager(psm.dir)
    append(psm2, hdr(3, 0, INT32_MAX - 1), 0)
    append(psm2, hdr(3, 0, INT32_MAX), 1)
    assert psm2.check_sequence(hdr(3, 0, 0)) is None
    with pytest.raises(OutOfOrderSequenceNumberError):
        psm2.check_sequence(hdr(3, 0, 1))


def control_batch_bytes(control_type, coordinator_epoch):
    # One control record: attributes, timestampDelta, offsetDelta, key (version, type),
    # value (version, coordinatorEpoch), no headers. Varints are zig-zag encoded.
    body = bytes([0, 0, 0, 8]) + struct.pack(">hh", 0, control_type) + bytes([12])
    body += struct.pack(">hi", 0, coordinator_epoch) + bytes([0])
    record = bytes([len(body) * 2]) + body
    # a header of zeros but its batch length: the reader keeps every length within the batch
    return struct.pack(">qi", 0, 61 + len(record) - 12) + bytes(49) + record


def test_read_control_record():
    assert read_control_record(control_batch_bytes(1, 7)) == ControlRecord(0, 1, 7)
    assert read_control_record(b"xx" + control_batch_bytes(0, 3), 2) == ControlRecord(0, 0, 3)
    # Agrees with the records package's marker builder.
    assert read_control_record(build_control_batch(0, 5, 1, 100, 1234, coordinator_epoch=9)) == ControlRecord(0, 0, 9)
    with pytest.raises(ValueError):
        read_control_record(control_batch_bytes(1, 7)[:66])
    # lengths that reach past the batch, into whatever follows it, are refused
    batch = bytearray(control_batch_bytes(1, 7))
    value_len_at = 61 + 1 + 3 + 1 + 4  # length, attributes + deltas, key length, key
    for length in (120, 1 << 40):
        bad = batch[:value_len_at] + encode_varint(length) + batch[value_len_at + 1 :]
        struct.pack_into(">i", bad, 8, len(bad) - 12)
        with pytest.raises(ValueError, match="value of"):
            read_control_record(bytes(bad) + bytes(200))
    key_too_long = bytearray(batch)
    key_too_long[61 + 4] = 100  # key length 50
    with pytest.raises(ValueError, match="key of 50 bytes"):
        read_control_record(bytes(key_too_long) + bytes(200))


def test_transactions_and_first_unstable_offset(psm):
    assert psm.first_unstable_offset() is None
    append(psm, hdr(1, 0, 0, txn=True), 10)
    append(psm, hdr(2, 0, 0, txn=True), 15)
    append(psm, hdr(1, 0, 1, txn=True), 16)  # same transaction: first offset stays 10
    append(psm, hdr(3, 0, 0), 17)  # non-transactional producer does not matter
    assert psm.first_unstable_offset() == 10 and psm.first_undecided_offset() == 10
    with pytest.raises(InvalidTxnStateError, match="transaction open since offset 10"):
        psm.check_sequence(hdr(1, 0, 2))
    commit = append(psm, hdr(1, 0, -1, control=True), 20, control=ControlRecord(0, 1, 4))
    assert commit == CompletedTxn(1, 10, 20, is_aborted=False)
    assert psm.last_entry(1).coordinator_epoch == 4 and psm.last_entry(1).current_txn_first_offset is None
    # Decided but the marker is not replicated yet: still unstable until the HW passes it.
    assert psm.first_undecided_offset() == 15
    assert psm.first_unstable_offset() == 10
    psm.on_high_watermark_updated(20)
    assert psm.first_unstable_offset() == 10
    psm.on_high_watermark_updated(21)
    assert psm.first_unstable_offset() == 15
    abort = append(psm, hdr(2, 0, -1, control=True), 22, control=ControlRecord(0, 0, 4))
    assert abort == CompletedTxn(2, 15, 22, is_aborted=True)
    assert psm.last_stable_offset(abort) == 23
    psm.on_high_watermark_updated(23)
    assert psm.first_unstable_offset() is None
    # A fenced coordinator's marker with an old producer epoch is refused on the client path.
    with pytest.raises(InvalidProducerEpochError):
        psm.check_sequence(BatchHeader(0, 0, 0, 2, 0, 0x30, 0, 0, 0, 2, -1, -1, 1))


def test_last_stable_offset_with_another_open_transaction(psm):
    append(psm, hdr(1, 0, 0, txn=True), 5)
    append(psm, hdr(2, 0, 0, txn=True), 6)
    txn = psm.update(hdr(2, 0, -1, control=True), 8, 0, ControlRecord(0, 0, 0))
    assert psm.last_stable_offset(txn) == 5


def golden_snapshot():
    # Built field by field from Kafka's producer snapshot schema v1.
    entries = b"".join(
        [
            struct.pack(">i", 2),
            # producer 7: epoch 1, last batch seq 0..1 at offsets 40..41, ts 2000, open txn since 40
            struct.pack(">q", 7) + struct.pack(">h", 1) + struct.pack(">i", 1) + struct.pack(">q", 41)
            + struct.pack(">i", 1) + struct.pack(">q", 2000) + struct.pack(">i", -1) + struct.pack(">q", 40),
            # producer 1000: epoch 3, last batch seq 5..7 at offsets 30..32, ts 1500, no txn
            struct.pack(">q", 1000) + struct.pack(">h", 3) + struct.pack(">i", 7) + struct.pack(">q", 32)
            + struct.pack(">i", 2) + struct.pack(">q", 1500) + struct.pack(">i", -1) + struct.pack(">q", -1),
        ]
    )
    return struct.pack(">h", 1) + struct.pack(">I", crc32c.crc32c(entries)) + entries


def build_state(psm):
    append(psm, hdr(1000, 3, 0, count=5), 20, ts=1400)
    append(psm, hdr(1000, 3, 5, count=3), 30, ts=1500)
    append(psm, hdr(7, 1, 0, count=2, txn=True), 40, ts=2000)


def test_snapshot_golden_bytes_and_round_trip(tmp_path):
    psm = ProducerStateManager(tmp_path)
    build_state(psm)
    assert psm.map_end_offset == 42
    path = psm.take_snapshot(50)
    assert path.name == "00000000000000000050.snapshot"
    assert path.read_bytes() == golden_snapshot()
    assert psm.snapshot_file(50) == path and psm.snapshot_file(49) is None
    assert psm.latest_snapshot_offset == 50

    fresh = ProducerStateManager(tmp_path)
    assert fresh.load(0, 60, now_ms=3000) == 50
    e = fresh.last_entry(1000)
    assert (e.producer_epoch, e.first_seq, e.last_seq, e.last_data_offset, e.last_timestamp) == (3, 5, 7, 32, 1500)
    # Only the last batch survives a snapshot (as in Kafka): its retry is still a duplicate.
    assert fresh.check_sequence(hdr(1000, 3, 5, count=3)) == DuplicateBatch(30, 32, 1500)
    assert fresh.check_sequence(hdr(1000, 3, 8)) is None
    assert fresh.first_unstable_offset() == 40
    assert fresh.last_entry(7).current_txn_first_offset == 40


def test_corrupt_snapshot_is_ignored_deleted_and_older_one_used(tmp_path, caplog):
    psm = ProducerStateManager(tmp_path)
    append(psm, hdr(1, 0, 0), 0, ts=100)
    psm.take_snapshot(1)
    append(psm, hdr(1, 0, 1), 1, ts=100)
    bad = psm.take_snapshot(2)
    data = bytearray(bad.read_bytes())
    data[-3] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="CRC-32C mismatch") as ei:
        decode_snapshot(bytes(data))
    assert ei.value.position == 2

    fresh = ProducerStateManager(tmp_path)
    with caplog.at_level(logging.WARNING, logger="tieredlog.log.producer_state"):
        assert fresh.load(0, 2, now_ms=200) == 1
    assert "corrupt producer snapshot" in caplog.text and bad.name in caplog.text
    assert not bad.exists()
    assert fresh.last_entry(1).last_seq == 0


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\x00\x01\x00", "truncated"),
        (struct.pack(">hI", 2, crc32c.crc32c(b"\0\0\0\0")) + b"\0\0\0\0", "unknown snapshot version 2"),
        (struct.pack(">hI", 1, crc32c.crc32c(b"\0\0\0\1")) + b"\0\0\0\1", "entry count 1"),
    ],
)
def test_decode_snapshot_rejects_bad_data(data, reason):
    with pytest.raises(CorruptSnapshotError, match=reason):
        decode_snapshot(data)


def test_truncate_and_reload(tmp_path):
    psm = ProducerStateManager(tmp_path)
    append(psm, hdr(1, 0, 0), 0, ts=100)
    psm.take_snapshot(1)
    append(psm, hdr(1, 0, 1), 1, ts=100)
    psm.take_snapshot(2)
    append(psm, hdr(1, 0, 2), 2, ts=100)
    # The log is truncated to offset 1: snapshot 2 is gone and sequence 1 may be written again.
    assert psm.truncate_and_reload(0, 1, now_ms=200) == 1
    assert psm.snapshot_offsets() == [1]
    assert psm.last_entry(1).last_seq == 0
    assert psm.check_sequence(hdr(1, 0, 1)) is None
    # Log start moves past the only snapshot: it is deleted, the in-memory state stays.
    psm.update(hdr(1, 0, 1), 1, 100)
    assert psm.truncate_and_reload(1, 2, now_ms=200) == 2
    assert psm.snapshot_offsets() == [] and psm.last_entry(1).last_seq == 1


def test_delete_snapshots_below_and_truncate_fully(tmp_path):
    psm = ProducerStateManager(tmp_path)
    for o in (5, 10, 15):
        psm.take_snapshot(o)
    psm.delete_snapshots_below(10)
    assert psm.snapshot_offsets() == [10, 15] and psm.oldest_snapshot_offset == 10
    psm.truncate_fully_and_start_at(100)
    assert psm.snapshot_offsets() == [] and psm.map_end_offset == 100 and psm.active_producers == {}


def test_follower_rebuild_from_a_placed_snapshot(tmp_path):
    # The follower copies the remote segment's snapshot into its directory, then reloads.
    (tmp_path / "00000000000000000050.snapshot").write_bytes(golden_snapshot())
    psm = ProducerStateManager(tmp_path)
    psm.truncate_fully_and_reload_snapshots()
    assert psm.load(50, 50, now_ms=3000) == 50
    assert sorted(psm.active_producers) == [7, 1000]


def test_expired_producers_are_dropped(tmp_path):
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    append(psm, hdr(1, 0, 0), 0, ts=100)
    append(psm, hdr(2, 0, 0, txn=True), 1, ts=100)  # open transaction: never expires
    append(psm, hdr(3, 0, 0), 2, ts=900)
    assert psm.remove_expired_producers(now_ms=1500) == [1]
    assert sorted(psm.active_producers) == [2, 3]
    psm.take_snapshot(3)
    fresh = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    fresh.load(0, 3, now_ms=2000)
    assert sorted(fresh.active_producers) == [2]
