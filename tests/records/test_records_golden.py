"""Golden bytes: batches and messages written out by hand from Kafka's published formats.

Every varint below is worked out by hand (zigzag, then base-128 little-endian groups), so these
tests pin our parser and builder to the format itself, not to another library.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import crc32c

from tieredlog.records.legacy import NO_TIMESTAMP_TYPE, LegacyMessage, iter_legacy_messages
from tieredlog.records.record import Record, build_batch, build_control_batch, decode_batch

TS = 1_700_000_000_000

# Record 0: attributes 0, timestampDelta 0, offsetDelta 0, key "key" (len 3 -> 0x06), value "value"
# (len 5 -> 0x0a), one header (count 1 -> 0x02): key "h" (0x02), value "v" (0x02). 18 bytes -> 0x24.
R0 = bytes.fromhex("24" "00" "00" "00" "06") + b"key" + b"\x0a" + b"value" + b"\x02" + b"\x02h" + b"\x02v"
# Record 1: timestampDelta 5 (0x0a), offsetDelta 1 (0x02), null key (-1 -> 0x01), empty value (0x00),
# no headers. 6 bytes -> 0x0c.
R1 = bytes.fromhex("0c" "00" "0a" "02" "01" "00" "00")
# Record 2: timestampDelta 300 (zigzag 600 = 0x258 -> d8 04), offsetDelta 2 (0x04), 200-byte key
# (zigzag 400 = 0x190 -> 90 03), null value (0x01), no headers. 208 bytes (zigzag 416 = 0x1a0 -> a0 03).
R2 = bytes.fromhex("a003" "00" "d804" "04" "9003") + b"k" * 200 + bytes.fromhex("01" "00")
RECORDS = R0 + R1 + R2

HEADER = struct.Struct(">qiibIhiqqqhii")


def _v2_batch(records: bytes, *, attributes: int, last_delta: int, base_ts: int, max_ts: int,
              count: int, base_offset: int = 1234, epoch: int = 7, pid: int = -1, pepoch: int = -1, seq: int = -1) -> bytes:
    tail = struct.pack(">hiqqqhii", attributes, last_delta, base_ts, max_ts, pid, pepoch, seq, count) + records
    crc = crc32c.crc32c(tail)
    return struct.pack(">qiibI", base_offset, 49 + len(records), epoch, 2, crc) + tail


GOLDEN_V2 = _v2_batch(RECORDS, attributes=0, last_delta=2, base_ts=TS, max_ts=TS + 300, count=3)
EXPECTED = [
    Record(1234, TS, b"key", b"value", [("h", b"v")]),
    Record(1235, TS + 5, None, b"", []),
    Record(1236, TS + 300, b"k" * 200, None, []),
]


def test_crc32c_is_castagnoli():
    # The CRC-32C check value from the iSCSI spec, so a wrong polynomial cannot slip through.
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_parse_hand_built_v2_batch():
    header, records = decode_batch(GOLDEN_V2)
    assert header.base_offset == 1234 and header.partition_leader_epoch == 7
    assert header.size == len(GOLDEN_V2) == 61 + len(RECORDS)
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS + 300)
    assert records == EXPECTED


def test_build_reproduces_hand_built_v2_batch():
    built = build_batch(
        [(r.key, r.value, r.headers, r.timestamp) for r in EXPECTED], base_offset=1234, partition_leader_epoch=7
    )
    assert built == GOLDEN_V2
    assert build_batch(EXPECTED, base_offset=1234, partition_leader_epoch=7) == GOLDEN_V2


def test_build_reproduces_hand_built_idempotent_log_append_time_batch():
    golden = _v2_batch(RECORDS, attributes=0x10 | 0x08, last_delta=2, base_ts=TS, max_ts=TS + 300, count=3,
                       pid=31337, pepoch=4, seq=1000)
    built = build_batch(EXPECTED, base_offset=1234, partition_leader_epoch=7, producer_id=31337, producer_epoch=4,
                        base_sequence=1000, is_transactional=True, timestamp_type=1)
    assert built == golden
    header, records = decode_batch(golden)
    assert header.is_transactional and header.timestamp_type == 1
    assert [r.timestamp for r in records] == [TS + 300] * 3


def test_build_reproduces_hand_built_snappy_batch():
    # Kafka's snappy framing (xerial): magic, version 1, compat 1, then length-prefixed raw blocks.
    raw = bytes(cramjam.snappy.compress_raw(RECORDS))
    framed = b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">i", len(raw)) + raw
    golden = _v2_batch(framed, attributes=2, last_delta=2, base_ts=TS, max_ts=TS + 300, count=3)
    assert build_batch(EXPECTED, base_offset=1234, partition_leader_epoch=7, codec=2) == golden
    assert decode_batch(golden)[1] == EXPECTED


def test_parse_hand_built_gzip_batch_from_another_writer():
    golden = _v2_batch(gzip.compress(RECORDS, compresslevel=9), attributes=1, last_delta=2, base_ts=TS,
                       max_ts=TS + 300, count=3)
    assert decode_batch(golden)[1] == EXPECTED


def test_build_reproduces_hand_built_commit_marker():
    # Control record: key (version 0, type 1 = COMMIT) and value (version 0, coordinatorEpoch 12),
    # each 4 and 6 bytes (0x08, 0x0c); record length 1+1+1+1+4+1+6+1 = 16 -> 0x20.
    record = bytes.fromhex("20" "00" "00" "00" "08" "00000001" "0c" "0000" "0000000c" "00")
    golden = _v2_batch(record, attributes=0x30, last_delta=0, base_ts=TS, max_ts=TS, count=1, base_offset=88,
                       epoch=-1, pid=555, pepoch=3, seq=-1)
    assert build_control_batch(1, producer_id=555, producer_epoch=3, base_offset=88, timestamp=TS,
                               coordinator_epoch=12) == golden


# ---------------------------------------------------------------------------------------------
# Legacy magic 0 and 1


def _legacy(offset: int, magic: int, attributes: int, key: bytes | None, value: bytes | None, ts: int | None = None) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", ts)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, 4 + len(body), crc) + body


def test_parse_hand_built_legacy_v0_and_v1():
    v0 = _legacy(7, 0, 0, b"k", b"hello")
    assert len(v0) == 12 + 4 + 1 + 1 + 4 + 1 + 4 + 5
    v1 = _legacy(8, 1, 0, None, b"world", ts=TS)
    msgs = list(iter_legacy_messages(v0 + v1))
    assert msgs == [
        LegacyMessage(7, 0, -1, b"k", b"hello", 0, NO_TIMESTAMP_TYPE, struct.unpack_from(">I", v0, 12)[0], 0),
        LegacyMessage(8, 1, TS, None, b"world", 0, 0, struct.unpack_from(">I", v1, 12)[0], len(v0)),
    ]


def test_parse_hand_built_legacy_v1_gzip_wrapper_with_log_append_time():
    inner = _legacy(0, 1, 0, b"a", b"first", ts=10) + _legacy(1, 1, 0, None, b"second", ts=20)
    wrapper = _legacy(41, 1, 0x01 | 0x08, None, gzip.compress(inner), ts=5000)
    msgs = list(iter_legacy_messages(wrapper))
    assert [(m.offset, m.key, m.value, m.timestamp, m.timestamp_type, m.compression) for m in msgs] == [
        (40, b"a", b"first", 5000, 1, 1),
        (41, None, b"second", 5000, 1, 1),
    ]


def test_parse_hand_built_legacy_v0_snappy_wrapper_with_absolute_offsets():
    inner = _legacy(500, 0, 0, b"x", b"1") + _legacy(501, 0, 0, b"y", b"2")
    raw = bytes(cramjam.snappy.compress_raw(inner))
    xerial = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">i", len(raw)) + raw
    for payload in (raw, xerial):
        msgs = list(iter_legacy_messages(_legacy(501, 0, 0x02, None, payload)))
        assert [(m.offset, m.key, m.value, m.timestamp) for m in msgs] == [(500, b"x", b"1", -1), (501, b"y", b"2", -1)]
