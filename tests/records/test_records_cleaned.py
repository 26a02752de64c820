"""Batches as the log cleaner leaves them: emptied batches (recordsCount 0, Kafka's
DefaultRecordBatch.writeEmptyHeader), offset gaps between and inside batches, and KIP-534's
delete-horizon attribute. Built, checked, decoded and searched by the shared record code."""

from __future__ import annotations

import struct

import crc32c
import pytest

from tieredlog.records.batch import (
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    read_header,
    validate_batch,
    validate_batches,
)
from tieredlog.records.record import (
    Record,
    build_batch,
    build_empty_batch,
    decode_batch,
    iter_batches_records,
    record_at_or_after,
)

T = 1_700_000_000_000


def _empty(**kw) -> bytes:
    args = dict(base_offset=104, last_offset=107, producer_id=7, producer_epoch=3, base_sequence=10,
                partition_leader_epoch=2, timestamp_type=0, max_timestamp=T + 7, is_transactional=False,
                is_control=False)
    args.update(kw)
    return build_empty_batch(**args)


def test_empty_batch_is_the_header_alone_laid_out_as_kafka_writes_it():
    b = _empty()
    assert len(b) == HEADER_SIZE == 61
    # the spec's layout, read field by field here rather than through the module's own struct
    base, length, ple, magic, crc = struct.unpack_from(">qiibI", b, 0)
    attributes, lod, base_ts, max_ts, pid, epoch, seq, count = struct.unpack_from(">hiqqqhii", b, 21)
    assert (base, length, ple, magic) == (104, 49, 2, 2)
    assert (attributes, lod, base_ts, max_ts) == (0, 3, -1, T + 7)  # no codec, no first record
    assert (pid, epoch, seq, count) == (7, 3, 10, 0)
    assert crc == crc32c.crc32c(b[21:])


def test_empty_batch_validates_and_decodes_to_no_records():
    b = _empty()
    h = validate_batch(b)  # the produce-time record checks too: there is nothing to check
    assert (h.base_offset, h.last_offset, h.next_offset, h.records_count) == (104, 107, 108, 0)
    # the producer's last sequence survives the records: the next one it may send is 14
    assert (h.base_sequence, h.last_sequence) == (10, 13)
    assert not h.has_delete_horizon and h.delete_horizon_ms is None
    header, records = decode_batch(b)
    assert header == h and records == []
    assert decode_batch(b, verify_crc=False)[1] == []
    assert validate_batches(b) == [h]


@pytest.mark.parametrize(
    "kw, attributes",
    [
        (dict(timestamp_type=1), 0x08),
        (dict(is_transactional=True), 0x10),
        (dict(is_transactional=True, is_control=True), 0x30),
        (dict(delete_horizon_ms=T + 86_400_000), 0x40),
        (dict(is_transactional=True, timestamp_type=1, delete_horizon_ms=T), 0x58),
    ],
)
def test_empty_batch_attributes(kw, attributes):
    b = _empty(**kw)
    h = validate_batch(b)
    assert h.attributes == attributes and h.compression == 0
    assert h.is_transactional == bool(attributes & 0x10) and h.is_control == bool(attributes & 0x20)
    horizon = kw.get("delete_horizon_ms")
    assert h.has_delete_horizon == (horizon is not None)
    assert h.delete_horizon_ms == horizon
    assert h.base_timestamp == (-1 if horizon is None else horizon)
    assert decode_batch(b)[1] == []


def test_empty_batch_of_one_offset():
    h = validate_batch(_empty(base_offset=5, last_offset=5, base_sequence=-1, producer_id=-1, producer_epoch=-1))
    assert (h.last_offset_delta, h.records_count, h.last_sequence) == (0, 0, -1)


@pytest.mark.parametrize(
    "kw",
    [
        dict(base_offset=10, last_offset=9),
        dict(base_offset=0, last_offset=1 << 31),
        dict(timestamp_type=2),
        dict(delete_horizon_ms=-1),
    ],
)
def test_empty_batch_rejects_what_no_batch_can_say(kw):
    with pytest.raises(ValueError):
        _empty(**kw)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_delete_horizon_batch_keeps_record_timestamps(codec):
    horizon = T + 86_400_000
    records = [Record(200, T + 5, b"a", None), Record(203, T + 1, b"b", b"v"), Record(206, T + 9, b"c", None)]
    b = build_batch(records, base_offset=200, codec=codec, delete_horizon_ms=horizon)
    h = validate_batch(b)
    assert h.attributes & DELETE_HORIZON_MASK and h.compression == codec
    assert (h.has_delete_horizon, h.delete_horizon_ms, h.base_timestamp) == (True, horizon, horizon)
    assert (h.max_timestamp, h.records_count, h.last_offset) == (T + 9, 3, 206)
    _, got = decode_batch(b)
    # timestamps are deltas from the horizon (negative here) and come back unchanged
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == [
        (r.offset, r.timestamp, r.key, r.value) for r in records]


def test_delete_horizon_flag_on_a_producers_batch_passes_the_checks():
    # set by hand on a batch built without it, as a cleaner rewriting only the header would
    b = bytearray(build_batch([(b"k", b"v", [], T)] * 2, producer_id=1, producer_epoch=0, base_sequence=0))
    struct.pack_into(">h", b, 21, read_header(b).attributes | DELETE_HORIZON_MASK)
    struct.pack_into(">q", b, 27, T + 1000)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    h = validate_batch(b)
    assert h.delete_horizon_ms == T + 1000
    assert [r.timestamp for r in decode_batch(b)[1]] == [T + 1000, T + 1000]  # base + delta, as written


def test_empty_compressed_batch_without_data_decodes_to_no_records():
    # Kafka's empty batches are uncompressed; one that kept its codec bit has no stream to decompress
    b = bytearray(_empty())
    struct.pack_into(">h", b, 21, 4)  # zstd
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    h = validate_batch(b)
    assert h.compression == 4 and decode_batch(b)[1] == []


def _cleaned_segment() -> tuple[bytes, list[bytes]]:
    parts = [
        # offsets 100..103 with 101 and 102 removed: lastOffsetDelta still 3
        build_batch([Record(100, T, b"a", b"1"), Record(103, T + 3, b"b", b"2")], base_offset=100,
                    partition_leader_epoch=1),
        _empty(),  # 104..107, every record gone
        # a gap between batches: 108..109 gone with their batch
        build_batch([Record(111, T + 11, b"c", None)], base_offset=110, codec=1, delete_horizon_ms=T + 99),
        build_batch([Record(112, T + 12, b"d", b"4"), Record(115, T + 15, b"e", b"5")], base_offset=112,
                    codec=4, timestamp_type=1),
    ]
    return b"".join(parts), parts


def test_a_cleaned_segment_walks_batch_by_batch_with_its_gaps():
    seg, parts = _cleaned_segment()
    got = list(iter_batches_records(seg))
    assert [(h.base_offset, h.last_offset, h.records_count) for h, _ in got] == [
        (100, 103, 2), (104, 107, 0), (110, 111, 1), (112, 115, 2)]
    assert [[r.offset for r in recs] for _, recs in got] == [[100, 103], [], [111], [112, 115]]
    assert [h.size for h, _ in got] == [len(p) for p in parts]
    assert [h.base_offset for h in validate_batches(seg)] == [100, 104, 110, 112]
    # LogAppendTime: every record takes the batch's max timestamp
    assert [r.timestamp for r in got[3][1]] == [T + 15, T + 15]


def test_timestamp_search_skips_removed_offsets_and_empty_batches():
    seg, parts = _cleaned_segment()
    pos = [0]
    for p in parts[:-1]:
        pos.append(pos[-1] + len(p))
    assert record_at_or_after(seg, pos[0], T + 1, 0) == (103, T + 3)
    assert record_at_or_after(seg, pos[0], T, 101) == (103, T + 3)
    assert record_at_or_after(seg, pos[1], 0, 0) is None  # no record: the search goes on
    assert record_at_or_after(_empty(timestamp_type=1), 0, 0, 0) is None
    # LogAppendTime with its first offsets removed: the first record kept, not the base offset
    assert record_at_or_after(seg, pos[3], T, 0) == (112, T + 15)
    assert record_at_or_after(seg, pos[3], T, 113) == (115, T + 15)
    lat = build_batch([Record(300, T, b"x", b"1"), Record(302, T, b"y", b"2")], base_offset=299, timestamp_type=1)
    assert record_at_or_after(lat, 0, 0, 0) == (300, T)
