"""Kafka's RemoteLogMetadataSerde wire format and metadata partitioner, against hand-derived bytes."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredlog.rlmm.partitioner import (
    java_objects_hash,
    metadata_partition,
    metadata_partition_key,
    murmur2,
)
from tieredlog.rlmm.serde import (
    MetadataSerdeError,
    RemoteLogSegmentMetadataSnapshot,
    deserialize,
    serialize,
)
from tieredlog.rsm import (
    CustomMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

TOPIC_ID = uuid.UUID(int=(0x0102030405060708 << 64) | 0x090A0B0C0D0E0F10)
SEG_ID = uuid.UUID(int=0xA1)
TP = TopicIdPartition(TOPIC_ID, "t", 2)

# Hand-encoded pieces (flexible version 0): compact string "t" = 02 74, uuid = 16 raw bytes,
# every struct followed by an empty tagged-field section (00).
TP_BYTES = bytes.fromhex("0274") + TOPIC_ID.bytes + bytes.fromhex("00000002") + b"\x00"
SEG_ID_BYTES = TP_BYTES + SEG_ID.bytes + b"\x00"


def seg_md(**kw) -> RemoteLogSegmentMetadata:
    fields = dict(
        remote_log_segment_id=RemoteLogSegmentId(TP, SEG_ID),
        start_offset=10,
        end_offset=20,
        max_timestamp_ms=30,
        broker_id=3,
        event_timestamp_ms=40,
        segment_size_in_bytes=50,
        segment_leader_epochs={1: 10, 2: 15},
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        custom_metadata=None,
        tx_index_present=True,
    )
    fields.update(kw)
    return RemoteLogSegmentMetadata(**fields)


def test_golden_partition_delete_record():
    md = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, 4, 3)
    expected = (
        bytes([1, 2, 0])  # frame version 1, api key 2, version 0
        + TP_BYTES
        + bytes.fromhex("00000003")  # BrokerId
        + bytes.fromhex("0000000000000004")  # EventTimestampMs
        + b"\x01"  # RemotePartitionDeleteState
        + b"\x00"  # tagged fields
    )
    assert serialize(md) == expected
    assert deserialize(expected) == md


def test_golden_segment_record():
    md = seg_md()
    expected = (
        bytes([1, 0, 0])
        + SEG_ID_BYTES
        + (10).to_bytes(8, "big")  # StartOffset
        + (20).to_bytes(8, "big")  # EndOffset
        + (3).to_bytes(4, "big")  # BrokerId
        + (30).to_bytes(8, "big")  # MaxTimestampMs
        + (40).to_bytes(8, "big")  # EventTimestampMs
        + b"\x03"  # compact array of 2 entries
        + (1).to_bytes(4, "big") + (10).to_bytes(8, "big") + b"\x00"
        + (2).to_bytes(4, "big") + (15).to_bytes(8, "big") + b"\x00"
        + (50).to_bytes(4, "big")  # SegmentSizeInBytes
        + b"\x00"  # CustomMetadata null
        + b"\x00"  # state COPY_SEGMENT_STARTED
        + b"\x00"  # no tagged fields: TxnIndexEmpty is false
    )
    assert serialize(md) == expected
    assert deserialize(expected) == md


def test_golden_segment_record_with_custom_metadata_and_empty_txn_index():
    md = seg_md(custom_metadata=CustomMetadata(b"xyz"), tx_index_present=False,
                state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    value = serialize(md)
    # ... SegmentSizeInBytes | 04 'xyz' | state 01 | 1 tagged field: tag 0, size 1, true
    assert value.endswith((50).to_bytes(4, "big") + b"\x04xyz" + b"\x01" + bytes([1, 0, 1, 1]))
    assert deserialize(value) == md


def test_golden_update_record():
    upd = RemoteLogSegmentMetadataUpdate(
        RemoteLogSegmentId(TP, SEG_ID), 40, None, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 3
    )
    expected = (
        bytes([1, 1, 0]) + SEG_ID_BYTES + (3).to_bytes(4, "big") + (40).to_bytes(8, "big") + b"\x00" + b"\x02"
        + b"\x00"
    )
    assert serialize(upd) == expected
    assert deserialize(expected) == upd


def test_reads_version_1_with_tagged_fields():
    # v1 adds tagged BrokerLeaderEpoch (tag 0) and EndOffset (tag 1) to the update record.
    value = (
        bytes([1, 1, 1]) + SEG_ID_BYTES + (3).to_bytes(4, "big") + (40).to_bytes(8, "big") + b"\x00" + b"\x01"
        + bytes([2, 0, 4]) + (7).to_bytes(4, "big") + bytes([1, 8]) + (99).to_bytes(8, "big")
    )
    upd = deserialize(value)
    assert upd == RemoteLogSegmentMetadataUpdate(
        RemoteLogSegmentId(TP, SEG_ID), 40, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 3
    )


def test_snapshot_record_round_trip():
    snap = RemoteLogSegmentMetadataSnapshot(SEG_ID, 0, 9, 5, 1, 6, 100, {0: 0}, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                            CustomMetadata(b""), True)
    value = serialize(snap)
    assert value[:3] == bytes([1, 3, 0]) and value[3:19] == SEG_ID.bytes
    assert deserialize(value) == snap


@pytest.mark.parametrize(
    "value",
    [
        b"",
        bytes([0, 0, 0]),  # frame version 0
        bytes([1, 9, 0]),  # unknown api key
        bytes([1, 2, 5]),  # unknown version
        bytes([1, 2, 0]) + TP_BYTES,  # truncated
        bytes([1, 2, 0]) + TP_BYTES + bytes(13) + b"\x00" + b"\x00",  # trailing byte
        bytes([1, 2, 0]) + TP_BYTES + bytes(12) + b"\x07" + b"\x00",  # bad state
    ],
)
def test_malformed_values_are_rejected(value):
    with pytest.raises(MetadataSerdeError):
        deserialize(value)


_uuids = st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1))
_topics = st.text(alphabet="abcXYZ09._-", min_size=1, max_size=30)


@st.composite
def _segments(draw):
    tp = TopicIdPartition(draw(_uuids), draw(_topics), draw(st.integers(0, 2**31 - 1)))
    start = draw(st.integers(0, 2**62))
    end = start + draw(st.integers(0, 2**20))
    epochs = draw(st.dictionaries(st.integers(0, 2**31 - 1), st.integers(start, end), min_size=1, max_size=5))
    custom = draw(st.none() | st.binary(max_size=40).map(CustomMetadata))
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, draw(_uuids)), start, end, draw(st.integers(-1, 2**62)), draw(st.integers(-1, 2**31 - 1)),
        draw(st.integers(0, 2**62)), draw(st.integers(0, 2**31 - 1)), epochs,
        draw(st.sampled_from(list(RemoteLogSegmentState))), custom, draw(st.booleans()),
    )


@settings(max_examples=200, deadline=None)
@given(_segments())
def test_segment_round_trip(md):
    assert deserialize(serialize(md)) == md
    upd = RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, md.event_timestamp_ms, md.custom_metadata,
                                         md.state, md.broker_id)
    assert deserialize(serialize(upd)) == upd
    pdm = RemotePartitionDeleteMetadata(md.topic_id_partition, RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                                        md.event_timestamp_ms, md.broker_id)
    assert deserialize(serialize(pdm)) == pdm


# -- partitioner ----------------------------------------------------------------------------------

KAFKA_MURMUR2_VECTORS = {  # Kafka's UtilsTest.testMurmur2
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafka():
    for data, expected in KAFKA_MURMUR2_VECTORS.items():
        assert murmur2(data) == expected


def test_partition_key_is_java_objects_hash_of_lsb_msb_partition():
    # msb 0, lsb 1, partition 0: 31*(31*(31+1)+0)+0 = 30752 = 0x7820
    assert metadata_partition_key(uuid.UUID(int=1), 0) == bytes.fromhex("00007820")
    # Long.hashCode(-1) == 0 and Long.hashCode(0x1_00000002) == 3: 31*(31*(31+0)+3)+5 = 29889
    u = uuid.UUID(int=(0x0000000100000002 << 64) | 0xFFFFFFFFFFFFFFFF)
    assert metadata_partition_key(u, 5) == (29889).to_bytes(4, "big")
    # int overflow wraps like Java's
    # int overflow wraps like Java's: 31 + MAX = -2147483618; 31 * that + MAX wraps to 929
    assert java_objects_hash(2**31 - 1, 2**31 - 1) == 929


def test_metadata_partition_is_murmur2_of_key_mod_n():
    tp = TopicIdPartition(uuid.UUID(int=1), "whatever", 0)
    expected = (murmur2(bytes.fromhex("00007820")) & 0x7FFFFFFF) % 50
    assert metadata_partition(tp, 50) == expected
    # the topic name takes no part, the topic id and partition do
    assert metadata_partition(TopicIdPartition(uuid.UUID(int=1), "other", 0), 50) == expected
    spread = {metadata_partition(TopicIdPartition(TOPIC_ID, "t", p), 50) for p in range(200)}
    assert len(spread) > 25
    with pytest.raises(ValueError):
        metadata_partition(tp, 0)


# -- hostile values: a record value is decoded or refused with MetadataSerdeError, nothing else ----

_VALID_VALUES = [
    serialize(seg_md()),
    serialize(seg_md(custom_metadata=CustomMetadata(b"cm" * 5), tx_index_present=False)),
    serialize(RemoteLogSegmentMetadataUpdate(RemoteLogSegmentId(TP, SEG_ID), 40, None,
                                             RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 3)),
    serialize(RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 40, 3)),
]


def _deserialize_or_serde_error(value: bytes) -> None:
    try:
        deserialize(value)
    except MetadataSerdeError:
        pass


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.binary(max_size=200))
def test_arbitrary_values_decode_or_raise_serde_error(value):
    _deserialize_or_serde_error(value)
    _deserialize_or_serde_error(b"\x01\x00\x00" + value)  # past the frame: into a segment record


@settings(max_examples=500, deadline=None, derandomize=True)
@given(which=st.integers(0, len(_VALID_VALUES) - 1), seed=st.integers(0, 1 << 30))
def test_damaged_values_decode_or_raise_serde_error(which, seed):
    import random

    rnd = random.Random(seed)
    buf = bytearray(_VALID_VALUES[which])
    for _ in range(rnd.randint(1, 3)):
        op = rnd.randrange(3)
        if op == 0 and buf:
            buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        elif op == 1:
            del buf[rnd.randrange(len(buf) + 1):]
        else:  # a varint length or count made huge
            at = rnd.randrange(len(buf) + 1)
            buf[at : at + 1] = rnd.choice([b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x10"])
    _deserialize_or_serde_error(bytes(buf))


def test_counts_are_bounded_by_the_bytes_left():
    value = bytearray(serialize(seg_md()))
    at = value.index(bytes.fromhex("03" "00000001" "000000000000000a" "00"))  # 2 epochs -> compact length 3
    value[at : at + 1] = b"\xff\xff\xff\xff\x0f"  # 4 billion entries
    with pytest.raises(MetadataSerdeError, match="cannot fit"):
        deserialize(bytes(value))
    with pytest.raises(MetadataSerdeError, match="longer than 5 bytes"):
        deserialize(b"\x01\x00\x00" + b"\xff\xff\xff\xff\xff\x01")
