"""Round trips of every format in tieredlog.formats against bytes built field by field from Kafka's layouts."""

import json
import struct
import uuid

import crc32c
import pytest

from tieredlog.formats.checkpoints import (
    CorruptCheckpointError,
    encode_leader_epoch_checkpoint,
    encode_offset_checkpoint,
    encode_partition_metadata,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
    parse_partition_metadata,
)
from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.index import (
    CorruptIndexError,
    decode_offset_entries,
    decode_time_entries,
    encode_offset_entries,
    encode_time_entries,
)
from tieredlog.formats.lineage import filtered_epochs, is_within_lineage, segment_epoch_bounds, segment_leader_epochs
from tieredlog.formats.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    SegmentManifest,
    decode_manifest,
    encode_manifest,
    manifest_fields,
)
from tieredlog.formats.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    decode_producer_snapshot,
    encode_producer_snapshot,
)
from tieredlog.formats.record_walk import (
    CONTROL_KEY,
    CONTROL_VALUE,
    MIN_RECORD_BODY,
    MIN_RECORD_SIZE,
    key_length_position,
)
from tieredlog.formats.txn_index import AbortedTxn, collect_aborted_across, decode_txn_entries
from tieredlog.formats.varint import (
    encode_uvarint,
    encode_varint,
    read_uvarint,
    read_varint,
    skip_varint,
    varint_size,
)


def test_offset_index_entries():
    data = struct.pack(">ii", 0, 0) + struct.pack(">ii", 7, 4096) + struct.pack(">ii", (1 << 31) - 1, 1 << 30)
    assert encode_offset_entries([(0, 0), (7, 4096), ((1 << 31) - 1, 1 << 30)]) == data
    rel, pos = decode_offset_entries(data + b"\x01\x02")  # a partial tail is not an entry
    assert (list(rel), list(pos)) == ([0, 7, (1 << 31) - 1], [0, 4096, 1 << 30])


def test_time_index_entries():
    data = struct.pack(">qi", 1_700_000_000_000, 0) + struct.pack(">qi", -5, 9) + struct.pack(">qi", 1 << 40, 12)
    assert encode_time_entries([(1_700_000_000_000, 0), (-5, 9), (1 << 40, 12)]) == data
    ts, rel = decode_time_entries(memoryview(data))
    assert (list(ts), list(rel)) == ([1_700_000_000_000, -5, 1 << 40], [0, 9, 12])
    assert [list(c) for c in decode_time_entries(b"")] == [[], []]


def test_txn_index_entries_and_search():
    a, b = AbortedTxn(7, 3, 10, 3), AbortedTxn(8, 12, 20, 25)
    data = struct.pack(">hqqqq", 0, 7, 3, 10, 3) + struct.pack(">hqqqq", 0, 8, 12, 20, 25)
    assert a.to_bytes() + b.to_bytes() == data
    assert decode_txn_entries(data, "x") == [a, b]
    with pytest.raises(CorruptIndexError, match="not a multiple of 34"):
        decode_txn_entries(data[:-1], "x")
    with pytest.raises(CorruptIndexError, match="unknown version 1"):
        decode_txn_entries(struct.pack(">hqqqq", 1, 7, 3, 10, 3), "x")
    # b's last stable offset reaches the bound: the third index is never consumed
    def indexes():
        yield [a]
        yield [a, b]
        raise AssertionError("searched past a complete index")
    assert collect_aborted_across(indexes(), 5, 15) == [a, b]


def test_offset_checkpoint_text():
    data = b"0\n2\nt 0 10\nother.topic 3 42\n"
    assert encode_offset_checkpoint([("t", 0, 10), ("other.topic", 3, 42)]) == data
    assert parse_offset_checkpoint(data, "f") == [("t", 0, 10), ("other.topic", 3, 42)]
    assert parse_offset_checkpoint(b"", "f") == []
    with pytest.raises(CorruptCheckpointError, match="f, line 3"):
        parse_offset_checkpoint(b"0\n1\nt -1 10\n", "f")


def test_leader_epoch_checkpoint_text_is_one_format():
    data = b"0\n3\n0 0\n2 15\n5 1000\n"
    assert encode_leader_epoch_checkpoint([(0, 0), (2, 15), (5, 1000)]) == data
    assert parse_leader_epoch_checkpoint(data) == [(0, 0), (2, 15), (5, 1000)]
    assert encode_leader_epoch_checkpoint([]) == b"0\n0\n"
    with pytest.raises(CorruptCheckpointError, match="expected 2 entries but found 1"):
        parse_leader_epoch_checkpoint(b"0\n2\n0 0\n", "remote index")
    with pytest.raises(CorruptCheckpointError, match="unrecognized version"):
        parse_leader_epoch_checkpoint(b"1\n0\n")


def test_partition_metadata_text():
    u = uuid.UUID("b53d6ee7-3d8e-4ba7-9e40-0d1d5d0e36a1")
    data = encode_partition_metadata(u)
    assert data == b"version: 0\ntopic_id: tT1u5z2OS6eeQA0dXQ42oQ\n"
    assert parse_partition_metadata(data, "p") == u
    with pytest.raises(CorruptCheckpointError, match="line 2"):
        parse_partition_metadata(b"version: 0\ntopic: x\n", "p")


def test_producer_snapshot():
    entries = [SnapshotEntry(7, 1, 1, 41, 1, 2000, -1, 40), SnapshotEntry(1000, 3, 7, 32, 2, 1500, 4, -1)]
    body = struct.pack(">i", 2) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    data = struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    assert encode_producer_snapshot(entries) == data
    assert decode_producer_snapshot(data) == entries
    assert decode_producer_snapshot(encode_producer_snapshot([])) == []
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptSnapshotError, match="CRC-32C mismatch") as e:
        decode_producer_snapshot(bytes(bad))
    assert e.value.position == 2
    with pytest.raises(CorruptSnapshotError, match="truncated"):
        decode_producer_snapshot(data[:9])


def test_manifest():
    m = SegmentManifest(
        topic="t", topic_id=uuid.UUID("b53d6ee7-3d8e-4ba7-9e40-0d1d5d0e36a1"), partition=3,
        segment_id=uuid.UUID(int=1), start_offset=100, end_offset=199, max_timestamp_ms=5, broker_id=1,
        event_timestamp_ms=6, segment_size_in_bytes=4096, segment_leader_epochs={2: 150, 1: 100},
        tx_index_present=False, file_sizes={"log": 4096, "index": 8})
    data = encode_manifest(m, "s")
    body = decode_manifest(data)
    assert body == {
        "version": 1, "topic": "t", "topic_id": "tT1u5z2OS6eeQA0dXQ42oQ", "partition": 3,
        "segment_id": "AAAAAAAAAAAAAAAAAAAAAQ", "start_offset": 100, "end_offset": 199, "max_timestamp_ms": 5,
        "broker_id": 1, "event_timestamp_ms": 6, "segment_size_in_bytes": 4096,
        "segment_leader_epochs": [[1, 100], [2, 150]], "tx_index_present": False,
        "files": {"log": {"name": "s.log", "size": 4096}, "index": {"name": "s.index", "size": 8}},
    }
    assert data == json.dumps(body, sort_keys=True).encode()  # the same segment always gives the same bytes
    assert manifest_fields(body) == m
    for bad, reason in [(b"[]", "not an object"), (b"{", "not JSON"), (b'{"version": 2}', "version 2"),
                        (b" " * (MAX_MANIFEST_BYTES + 1), "over")]:
        with pytest.raises(ManifestError, match=reason):
            decode_manifest(bad)
    with pytest.raises(ManifestError, match="KeyError: 'end_offset'"):
        manifest_fields({k: v for k, v in body.items() if k != "end_offset"})
    with pytest.raises(ManifestError, match="ValueError"):
        manifest_fields({**body, "topic_id": "not-a-uuid"})


class _Seg:
    def __init__(self, epochs, end):
        self.segment_leader_epochs, self.end_offset = epochs, end


def test_lineage_arithmetic():
    entries = [(0, 0), (1, 10), (2, 10), (3, 25)]  # epoch 1 holds no records
    assert filtered_epochs(entries) == [(0, 0), (2, 10), (3, 25)]
    assert segment_leader_epochs(entries, 5, 20) == {0: 5, 2: 10}
    assert segment_epoch_bounds(_Seg({0: 5, 2: 10}, 19)) == [(0, 5, 9), (2, 10, 19)]
    assert is_within_lineage(_Seg({0: 5, 2: 10}, 19), entries, 30)
    assert not is_within_lineage(_Seg({0: 5, 1: 10}, 19), entries, 30)  # written by the leader of epoch 1


def test_varints_are_kafkas():
    # ByteUtils.writeVarint/writeVarlong: zigzag, then 7 bits a byte, low group first
    cases = [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
             (300, b"\xd8\x04"), ((1 << 63) - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-(1 << 63), b"\xff" * 9 + b"\x01")]
    for value, data in cases:
        assert encode_varint(value) == data and varint_size(value) == len(data)
        assert read_varint(b"\xaa" + data + b"\xaa", 1) == (value, 1 + len(data))
        assert skip_varint(data, 0) == len(data)
    assert encode_uvarint(300) == b"\xac\x02" and read_uvarint(b"\xac\x02", 0) == (300, 2)
    with pytest.raises(CorruptRecordError, match="truncated at byte 0"):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        read_varint(b"\x80" * 10 + b"\x01", 0)


def test_record_walk_finds_the_key():
    # length | attributes | timestampDelta 1000 (2 bytes) | offsetDelta 3 | keyLength 2 | "k1" | ...
    body = b"\x00" + encode_varint(1000) + encode_varint(3) + encode_varint(2) + b"k1" + encode_varint(-1) + b"\x00"
    record = encode_varint(len(body)) + body
    assert len(body) >= MIN_RECORD_BODY and MIN_RECORD_SIZE == MIN_RECORD_BODY + 1
    pos = key_length_position(record, 1)
    assert read_varint(record, pos) == (2, pos + 1) and record[pos + 1 : pos + 3] == b"k1"
    # a COMMIT marker of coordinator epoch 5: key version 0 type 1, value version 0 epoch 5
    assert CONTROL_KEY.pack(0, 1) + CONTROL_VALUE.pack(0, 5) == b"\0\0\0\1" + b"\0\0\0\0\0\5"
