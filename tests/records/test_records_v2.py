"""RecordBatch v2 records: property round trips, corruption and truncation, control batches, varints."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError, RecordError
from tieredlog.formats.varint import (
    encode_uvarint,
    encode_varint,
    read_uvarint,
    read_varint,
    varint_size,
    zigzag_decode,
    zigzag_encode,
)
from tieredlog.records.batch import (
    CRC_OFFSET,
    HEADER_SIZE,
    compute_crc,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    validate_batch,
)
from tieredlog.records.record import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    decode_batch,
    iter_batches_records,
    parse_control_record,
    record_at_or_after,
)

headers_st = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3)
record_st = st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    headers_st,
    st.integers(min_value=0, max_value=1 << 42),
)
batch_kwargs_st = st.fixed_dictionaries(
    {
        "base_offset": st.integers(0, 1 << 50),
        "codec": st.sampled_from([0, 1, 2, 3, 4]),
        "partition_leader_epoch": st.integers(-1, 1 << 20),
        "timestamp_type": st.sampled_from([0, 1]),
    }
)
producer_st = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {
            "producer_id": st.integers(0, (1 << 63) - 1),
            "producer_epoch": st.integers(0, (1 << 15) - 1),
            "base_sequence": st.integers(0, (1 << 31) - 1),
            "is_transactional": st.booleans(),
        }
    ),
)


def _reseal(buf: bytearray) -> bytearray:
    """Fix batchLength and CRC after a test edits a batch, so only the edit itself is wrong."""
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return buf


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=12), kw=batch_kwargs_st, producer=producer_st)
def test_build_decode_round_trip(records, kw, producer):
    buf = build_batch(records, **kw, **producer)
    header, decoded = decode_batch(buf)
    assert header.size == len(buf)
    assert header.magic == 2
    assert header.compression == kw["codec"]
    assert header.base_offset == kw["base_offset"]
    assert header.partition_leader_epoch == kw["partition_leader_epoch"]
    assert header.records_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.base_timestamp == records[0][3]
    assert header.max_timestamp == max(r[3] for r in records)
    assert header.producer_id == producer.get("producer_id", -1)
    assert header.producer_epoch == producer.get("producer_epoch", -1)
    assert header.base_sequence == producer.get("base_sequence", -1)
    assert header.is_transactional == producer.get("is_transactional", False)
    assert not header.is_control
    assert header.timestamp_type == kw["timestamp_type"]
    for i, (rec, (key, value, headers, ts)) in enumerate(zip(decoded, records)):
        assert rec.offset == kw["base_offset"] + i
        # LogAppendTime batches give every record the batch's maxTimestamp, as Kafka's readers do.
        assert rec.timestamp == (header.max_timestamp if kw["timestamp_type"] else ts)
        assert rec.key == key and rec.value == value
        assert rec.headers == list(headers)
    # Building again from the decoded Record objects reproduces the same bytes (CreateTime only:
    # LogAppendTime records carry the rewritten timestamp).
    if kw["timestamp_type"] == 0:
        assert build_batch(decoded, **kw, **producer) == buf


@settings(max_examples=40, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=5), codecs=st.lists(st.sampled_from([0, 1, 2, 3, 4]), min_size=1, max_size=4))
def test_iter_batches_records_walks_a_segment(records, codecs):
    parts, offset = [], 0
    for codec in codecs:
        parts.append(build_batch(records, base_offset=offset, codec=codec))
        offset += len(records)
    seg = b"".join(parts)
    out = list(iter_batches_records(seg))
    assert [h.compression for h, _ in out] == codecs
    assert [r.offset for _, recs in out for r in recs] == list(range(offset))
    assert list(iter_batches_records(bytearray(seg))) == out


def test_record_objects_keep_offset_gaps():
    recs = [Record(100, 5, b"a", b"1"), Record(103, 6, None, b"2"), Record(110, 4, b"c", None, [("x", None)])]
    header, decoded = decode_batch(build_batch(recs, base_offset=100, codec=1))
    assert decoded == recs
    assert header.last_offset_delta == 10
    assert header.records_count == 3
    assert (header.base_timestamp, header.max_timestamp) == (5, 6)
    with pytest.raises(ValueError):
        build_batch([Record(5, 0, None, None), Record(5, 0, None, None)], base_offset=5)
    with pytest.raises(ValueError):
        build_batch([Record(4, 0, None, None)], base_offset=5)


def test_build_rejects_bad_input():
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(TypeError):
        build_batch([("str key", b"v")])
    with pytest.raises(TypeError):
        build_batch([(b"k", b"v", [(1, b"x")])])
    with pytest.raises(InvalidRecordError):
        build_batch([(b"k", b"v")], codec=6)
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v")], is_transactional=True)


def test_short_tuples_take_now_as_timestamp():
    header, (rec,) = decode_batch(build_batch([(b"k", b"v")]))
    assert rec.headers == [] and rec.key == b"k"
    assert rec.timestamp == header.base_timestamp > 1_600_000_000_000


@pytest.mark.parametrize("control_type", [CONTROL_ABORT, CONTROL_COMMIT])
def test_control_batch(control_type):
    buf = build_control_batch(control_type, producer_id=4242, producer_epoch=7, base_offset=99, timestamp=1234, coordinator_epoch=3)
    header, (rec,) = decode_batch(buf)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, -1)
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (99, 0, 1)
    assert rec.key == struct.pack(">hh", 0, control_type)
    assert rec.value == struct.pack(">hi", 0, 3)
    assert rec.timestamp == 1234 and rec.headers == []
    marker = parse_control_record(rec)
    assert (marker.version, marker.type, marker.coordinator_epoch) == (0, control_type, 3)
    with pytest.raises(ValueError):
        build_control_batch(2, 1, 1, 0, 0)


def test_parse_control_record_rejects_short_key():
    with pytest.raises(CorruptRecordError):
        parse_control_record(Record(0, 0, b"\x00", b""))
    with pytest.raises(CorruptRecordError):
        parse_control_record(Record(0, 0, struct.pack(">hh", 0, 1), b"\x00"))


def test_patches_outside_crc_keep_batch_valid_and_log_append_time():
    buf = bytearray(build_batch([(b"a", b"1", [], 10), (b"b", b"2", [], 20)], codec=3))
    patch_base_offset(buf, 0, 5000)
    patch_partition_leader_epoch(buf, 0, 17)
    header, recs = decode_batch(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (5000, 17)
    assert [r.offset for r in recs] == [5000, 5001]
    patch_log_append_time(buf, 0, 99_999)
    header, recs = decode_batch(buf)
    assert header.timestamp_type == 1 and header.max_timestamp == 99_999
    assert header.compression == 3
    assert [r.timestamp for r in recs] == [99_999, 99_999]


# ---------------------------------------------------------------------------------------------
# Corruption and truncation


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=6),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    seed=st.integers(0, 1 << 30),
)
def test_any_byte_flip_under_the_crc_is_detected(records, codec, seed):
    buf = bytearray(build_batch(records, codec=codec))
    rnd = random.Random(seed)
    pos = rnd.randrange(CRC_OFFSET, len(buf))
    buf[pos] ^= rnd.randrange(1, 256)  # the stored CRC itself included
    with pytest.raises(CorruptRecordError) as e:
        validate_batch(buf)
    assert e.value.position == 0
    with pytest.raises(CorruptRecordError):
        decode_batch(buf)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=6),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    seed=st.integers(0, 1 << 30),
)
def test_decoding_corrupt_bytes_without_crc_raises_only_record_errors(records, codec, seed):
    # A reader that skips the CRC (or a batch whose CRC was recomputed over garbage) must
    # still fail cleanly: never IndexError, struct.error, MemoryError or a library exception.
    buf = bytearray(build_batch(records, codec=codec))
    rnd = random.Random(seed)
    for _ in range(rnd.randint(1, 3)):
        buf[rnd.randrange(HEADER_SIZE - 4, len(buf))] = rnd.randrange(256)
    _reseal(buf)
    try:
        decode_batch(buf)
    except RecordError:
        pass


def test_every_truncation_names_the_batch_position():
    first = build_batch([(b"k%d" % i, b"v" * 50, [("h", b"x")], 1000 + i) for i in range(5)], codec=0)
    second = build_batch([(b"k", b"value" * 40, [], 7)], base_offset=5, codec=1)
    seg = first + second
    for cut in range(len(first) + 1, len(seg)):
        with pytest.raises(CorruptRecordError) as e:
            list(iter_batches_records(seg[:cut]))
        assert e.value.position == len(first), cut
        assert f"byte {len(first)}" in str(e.value)
        # A fetch response may end in a partial batch: the whole ones still come out.
        assert [h.base_offset for h, _ in iter_batches_records(seg[:cut], stop_at_partial=True)] == [0]
    for cut in range(0, len(first)):
        with pytest.raises(CorruptRecordError) as e:
            decode_batch(first[:cut])
        assert e.value.position == 0


def test_truncated_record_inside_a_resealed_batch_names_the_record_position():
    recs = [(b"key-one", b"value-one", [("h", b"v")], 1), (b"key-two", b"value-two", [], 2)]
    full = build_batch(recs)
    one = build_batch(recs[:1])
    second_record_at = len(one)  # the first record ends where a one-record batch ends
    for drop in range(1, len(full) - second_record_at):
        buf = _reseal(bytearray(full[:-drop]))
        with pytest.raises(CorruptRecordError) as e:
            decode_batch(buf)
        assert e.value.position == second_record_at, drop
        assert f"byte {second_record_at}" in str(e.value)


def test_trailing_bytes_after_the_records_are_corrupt():
    buf = _reseal(bytearray(build_batch([(b"k", b"v")])) + b"\x00\x00")
    with pytest.raises(CorruptRecordError, match="left over"):
        decode_batch(buf)


def test_record_count_beyond_the_data_is_corrupt():
    buf = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">i", buf, 57, 2)  # recordsCount
    struct.pack_into(">i", buf, 23, 1)  # lastOffsetDelta, so the header itself stays plausible
    _reseal(buf)
    with pytest.raises(CorruptRecordError):
        decode_batch(buf)
    struct.pack_into(">i", buf, 57, 1 << 30)
    struct.pack_into(">i", buf, 23, 1 << 30)
    _reseal(buf)
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        decode_batch(buf)


def test_negative_key_length_other_than_minus_one_is_corrupt():
    # Hand-made record: attributes 0, ts delta 0, offset delta 0, key length -2.
    body = b"\x00\x00\x00\x03\x00\x00"
    buf = bytearray(build_batch([(None, None, [], 0)]))
    del buf[HEADER_SIZE:]
    buf += encode_varint(len(body)) + body
    _reseal(buf)
    with pytest.raises(CorruptRecordError, match="invalid key length -2") as e:
        decode_batch(buf)
    assert e.value.position == HEADER_SIZE + 1 + 4


def test_compressed_record_errors_name_the_batch():
    pad = build_batch([(b"x", b"y")])
    buf = bytearray(build_batch([(b"k", b"v")], codec=4))
    seg = _reseal(buf)
    struct.pack_into(">i", seg, 57, 2)
    struct.pack_into(">i", seg, 23, 1)
    _reseal(seg)
    with pytest.raises(CorruptRecordError) as e:
        list(iter_batches_records(pad + bytes(seg)))
    assert e.value.position == len(pad)
    assert "decompressed" in str(e.value)


def test_wrong_magic_is_invalid():
    buf = bytearray(build_batch([(b"k", b"v")]))
    buf[16] = 1
    with pytest.raises(InvalidRecordError):
        decode_batch(buf)


# ---------------------------------------------------------------------------------------------
# Varints


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_varint_round_trip(n):
    enc = encode_varint(n)
    assert read_varint(enc + b"\xff", 0) == (n, len(enc))
    assert varint_size(n) == len(enc) <= 10
    assert zigzag_decode(zigzag_encode(n)) == n
    assert zigzag_encode(n) >= 0


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_uvarint_round_trip(n):
    enc = encode_uvarint(n)
    assert read_uvarint(b"\x00" + enc, 1) == (n, len(enc) + 1)


def test_varint_known_encodings():
    # Zigzag maps 0,-1,1,-2,2 to 0,1,2,3,4; 300 is protobuf's textbook example (uvarint ac 02).
    assert [encode_varint(n) for n in (0, -1, 1, -2, 2)] == [b"\x00", b"\x01", b"\x02", b"\x03", b"\x04"]
    assert encode_uvarint(300) == b"\xac\x02"
    assert encode_varint(150) == b"\xac\x02"
    assert encode_varint(-(1 << 63)) == b"\xff" * 9 + b"\x01"


def test_varint_errors_name_the_position():
    with pytest.raises(CorruptRecordError) as e:
        read_varint(b"\x00\x00\x80\x80", 2)
    assert e.value.position == 2
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        read_varint(b"\x80" * 11 + b"\x01", 0)
    with pytest.raises(ValueError):
        encode_uvarint(-1)


# ---------------------------------------------------------------------------------------------
# Produce-time checks of the records section (validate_batch's check_records)


def _with_count(buf: bytearray, count: int) -> bytearray:
    struct.pack_into(">i", buf, 57, count)  # recordsCount
    struct.pack_into(">i", buf, 23, count - 1)  # lastOffsetDelta, so the header stays consistent
    return _reseal(buf)


def test_unknown_codec_is_invalid_on_produce():
    for codec in (5, 6, 7):
        buf = bytearray(build_batch([(b"k", b"v")]))
        buf[22] = (buf[22] & ~7) | codec  # low byte of attributes
        _reseal(buf)
        with pytest.raises(InvalidRecordError, match=f"unknown compression codec {codec}"):
            validate_batch(buf)
        validate_batch(buf, check_records=False)  # recovery keeps it: its CRC holds


def test_record_count_the_bytes_cannot_hold_is_invalid():
    buf = _with_count(bytearray(build_batch([(b"k", b"v")] * 3)), 1 << 20)
    with pytest.raises(InvalidRecordError, match="cannot fit"):
        validate_batch(buf)
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        decode_batch(buf)


@pytest.mark.parametrize("first_length", [-1, 0, 5, 200, 1 << 40])
def test_first_record_length_that_cannot_be_is_invalid(first_length):
    good = build_batch([(b"key", b"value" * 3, [("h", b"x")], 7)])
    body_at = HEADER_SIZE + varint_size(len(good) - HEADER_SIZE - 1)
    buf = bytearray(good[:HEADER_SIZE]) + encode_varint(first_length) + good[body_at:]
    with pytest.raises(InvalidRecordError, match="first record|left over"):
        validate_batch(_reseal(buf))


def test_single_record_must_fill_the_batch_and_the_first_of_many_leave_room():
    one = _reseal(bytearray(build_batch([(b"k", b"v")])) + b"\x00" * 8)
    with pytest.raises(InvalidRecordError, match="left over"):
        validate_batch(one)
    # two records whose first length swallows the second
    two = bytearray(build_batch([(b"k", b"v"), (b"k", b"v")]))
    two[HEADER_SIZE] = zigzag_encode(len(two) - HEADER_SIZE - 1)  # one varint byte: the batch is small
    with pytest.raises(InvalidRecordError, match="first record length"):
        validate_batch(_reseal(two))


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_compressed_data_must_start_as_its_codec_does(codec):
    buf = bytearray(build_batch([(b"k", b"v" * 50)] * 4, codec=codec))
    buf[HEADER_SIZE] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="does not start as"):
        validate_batch(_reseal(buf))
    empty = _reseal(bytearray(build_batch([(b"k", b"v")], codec=codec))[:HEADER_SIZE])
    with pytest.raises(CorruptRecordError, match="holds no"):
        validate_batch(empty)


def test_clients_batches_pass_the_record_checks():
    from kafka.record.default_records import DefaultRecordBatchBuilder

    for codec in (0, 1, 2, 3, 4):
        b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        for i in range(20):
            b.append(i, timestamp=1000 + i, key=b"k%d" % i, value=b"v" * i, headers=[("h", b"x")])
        validate_batch(bytes(b.build()))
        validate_batch(build_batch([(None, None, [], 5)], codec=codec))
    validate_batch(build_control_batch(CONTROL_COMMIT, 5, 0, 0, 100))


@settings(max_examples=300, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=6), codec=st.sampled_from([0, 1, 2, 3, 4]),
       seed=st.integers(0, 1 << 30))
def test_record_checks_raise_only_record_errors(records, codec, seed):
    # Garbage under a recomputed CRC: the produce-time checks answer with a record error or let
    # it through (the records are not decoded on produce), never anything else.
    buf = bytearray(build_batch(records, codec=codec))
    rnd = random.Random(seed)
    for _ in range(rnd.randint(1, 4)):
        buf[rnd.randrange(HEADER_SIZE - 4, len(buf))] = rnd.randrange(256)
    _reseal(buf)
    try:
        validate_batch(buf)
    except RecordError:
        pass


def test_on_corrupt_skips_bad_batches_and_stops_where_lengths_cannot_be_trusted():
    good = [build_batch([(b"k", b"v%d" % i)], base_offset=i) for i in range(4)]
    crc_bad = bytearray(good[1])
    crc_bad[-1] ^= 1
    garbage_records = _reseal(bytearray(good[2][:HEADER_SIZE]) + b"\x02\x00" + b"\xff" * 8)
    no_length = bytearray(good[3])
    struct.pack_into(">i", no_length, 8, 3)  # shorter than a header: where the next batch starts is unknown
    seen: list[tuple[int, int | None, str]] = []
    buf = good[0] + bytes(crc_bad) + bytes(garbage_records) + good[3] + bytes(no_length) + good[0]
    out = list(iter_batches_records(buf, on_corrupt=lambda pos, h, e: seen.append(
        (pos, None if h is None else h.base_offset, type(e).__name__))))
    assert [h.base_offset for h, _ in out] == [0, 3]
    p1 = len(good[0])
    p2 = p1 + len(crc_bad)
    p4 = p2 + len(garbage_records) + len(good[3])
    assert seen == [(p1, 1, "CorruptRecordError"), (p2, 2, "CorruptRecordError"), (p4, 3, "CorruptRecordError")]
    with pytest.raises(CorruptRecordError):
        list(iter_batches_records(buf))


def test_record_at_or_after_a_timestamp_inside_one_batch():
    buf = b"x" * 7 + build_batch([(None, b"a", [], 500), (None, b"b", [], 100), (None, b"c", [], 600)], base_offset=10,
                                 codec=3)
    assert record_at_or_after(buf, 7, 450, 0) == (10, 500)
    assert record_at_or_after(buf, 7, 450, 11) == (12, 600)  # offsets below the start do not count
    assert record_at_or_after(buf, 7, 550, 10) == (12, 600)
    assert record_at_or_after(buf, 7, 500, 13) is None and record_at_or_after(buf, 7, 601, 0) is None
    # LogAppendTime: every record has the batch's max timestamp; nothing is decoded
    lat = bytearray(build_batch([(None, b"a"), (None, b"b")], base_offset=10))
    patch_log_append_time(lat, 0, 9_000)
    lat[HEADER_SIZE:] = bytes(len(lat) - HEADER_SIZE)  # the records would not even decode
    assert record_at_or_after(lat, 0, 8_000, 11) == (11, 9_000)
    assert record_at_or_after(lat, 0, 9_001, 0) is None
