"""`__consumer_offsets` keys and values in Kafka's wire schemas, and the group -> partition mapping."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredlog.coordinator import schema
from tieredlog.coordinator.group import OffsetAndMetadata


def test_java_string_hash_matches_java():
    # Values of java.lang.String.hashCode(), well known or computed by hand from the definition.
    assert schema.java_string_hash("") == 0
    assert schema.java_string_hash("a") == 97
    assert schema.java_string_hash("hello") == 99162322
    assert schema.java_string_hash("polygenelubricants") == -(2**31)
    # A non-BMP character counts as two UTF-16 code units (surrogate pair 0xD83D 0xDE00).
    assert schema.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_partition_for_uses_kafka_abs():
    assert schema.partition_for("hello", 50) == 99162322 % 50
    # Utils.abs(Integer.MIN_VALUE) is 0, not a negative number.
    assert schema.partition_for("polygenelubricants", 50) == 0
    negative = next(g for g in (f"a-longer-consumer-group-name-{i}" for i in range(1000)) if schema.java_string_hash(g) < 0)
    assert schema.partition_for(negative, 50) == abs(schema.java_string_hash(negative)) % 50


def test_offset_commit_key_and_value_bytes():
    key = schema.encode_offset_key("g", "t", 7)
    assert key == struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 7)
    assert schema.decode_key(key) == schema.OffsetKey("g", "t", 7)
    value = schema.encode_offset_value(OffsetAndMetadata(42, 5, "m", 1700))
    assert value == struct.pack(">hqih", 3, 42, 5, 1) + b"m" + struct.pack(">q", 1700)
    assert schema.decode_offset_value(value) == OffsetAndMetadata(42, 5, "m", 1700)


def test_reads_older_offset_value_versions():
    v1 = struct.pack(">hqh", 1, 9, 2) + b"md" + struct.pack(">qq", 100, 200)  # with expireTimestamp
    assert schema.decode_offset_value(v1) == OffsetAndMetadata(9, -1, "md", 100)


def test_group_metadata_round_trip_and_layout():
    group = schema.StoredGroup(
        "consumer", 3, "range", "m1", 1234,
        [schema.StoredMember("m1", "inst", "cid", "/1.2.3.4", 30000, 10000, b"sub", b"asg")],
    )
    raw = schema.encode_group_value(group)
    assert raw[:2] == struct.pack(">h", 3)
    assert schema.decode_group_value(raw) == group
    assert schema.decode_key(schema.encode_group_key("g")) == schema.GroupKey("g")


def test_reads_group_metadata_v0_without_rebalance_timeout():
    member = b"".join([struct.pack(">h", 2), b"m1", struct.pack(">h", 1), b"c", struct.pack(">h", 1), b"h",
                       struct.pack(">i", 6000), struct.pack(">i", 1), b"s", struct.pack(">i", 1), b"a"])
    raw = (struct.pack(">h", 0) + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 2)
           + struct.pack(">h", 5) + b"range" + struct.pack(">h", 2) + b"m1" + struct.pack(">i", 1) + member)
    g = schema.decode_group_value(raw)
    assert (g.generation, g.protocol, g.leader) == (2, "range", "m1")
    assert g.members[0].session_timeout_ms == 6000 and g.members[0].rebalance_timeout_ms == 6000


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x09abc", b"\x00\x01\x00\x05ab", b"\x00\x02\xff\xfe"])
def test_garbage_keys_raise_schema_error(raw):
    with pytest.raises(schema.SchemaError):
        schema.decode_key(raw)


# Whatever bytes a `__consumer_offsets` record holds, the decoders answer with a value or a
# SchemaError (which the loader counts and skips), and allocate nothing its lengths ask for beyond
# the bytes there are.
_VALID = [
    schema.encode_offset_key("group-a", "topic-b", 7),
    schema.encode_group_key("group-a"),
    schema.encode_offset_value(OffsetAndMetadata(42, 3, "meta" * 5, 1_700_000_000_000)),
    schema.encode_group_value(schema.StoredGroup("consumer", 4, "range", "m1", 1_700_000_000_000, [
        schema.StoredMember("m1", None, "client", "/10.0.0.1", 30000, 10000, b"sub" * 4, b"assign" * 3),
        schema.StoredMember("m2", "inst", "client", "/10.0.0.2", 30000, 10000, b"", b"x"),
    ])),
]
_DECODERS = [schema.decode_key, schema.decode_offset_value, schema.decode_group_value]


def _decodes_or_schema_error(data: bytes) -> None:
    for decode in _DECODERS:
        try:
            decode(data)
        except schema.SchemaError:
            pass


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_schema_error(data):
    _decodes_or_schema_error(data)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(which=st.integers(0, len(_VALID) - 1), seed=st.integers(0, 1 << 30))
def test_damaged_records_decode_or_raise_schema_error(which, seed):
    rnd = random.Random(seed)
    buf = bytearray(_VALID[which])
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(3)
        if op == 0 and buf:
            buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        elif op == 1:
            del buf[rnd.randrange(len(buf) + 1):]
        else:  # a length or count field made huge: nothing may be allocated from it
            at = rnd.randrange(max(1, len(buf) - 3))
            buf[at : at + 4] = struct.pack(">i", rnd.choice([0x7FFFFFFF, -2, 0x7FFF, -(1 << 31)]))
    _decodes_or_schema_error(bytes(buf))


def test_a_huge_member_count_fails_on_the_bytes_not_on_memory():
    raw = bytearray(_VALID[3])
    count_at = raw.index(struct.pack(">q", 1_700_000_000_000)) + 8
    struct.pack_into(">i", raw, count_at, 0x7FFFFFFF)
    with pytest.raises(schema.SchemaError, match="truncated"):
        schema.decode_group_value(bytes(raw))
