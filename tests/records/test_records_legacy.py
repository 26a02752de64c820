"""Legacy magic 0/1 reader: corruption, truncation and the odd cases old producers wrote."""

from __future__ import annotations

import gzip
import random
import struct
import zlib

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError, RecordError
from tieredlog.records.legacy import iter_legacy_messages
from tieredlog.records.record import build_batch


def _legacy(offset: int, magic: int, attributes: int, key, value, ts: int = 0) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", ts)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def _message_set(n: int, magic: int) -> bytes:
    return b"".join(_legacy(i, magic, 0, b"k%d" % i, b"value-%d" % i * 3, ts=100 + i) for i in range(n))


@settings(max_examples=80, deadline=None)
@given(magic=st.sampled_from([0, 1]), codec=st.sampled_from([0, 1]), seed=st.integers(0, 1 << 30))
def test_any_byte_flip_under_the_crc_is_detected(magic, codec, seed):
    inner = _message_set(3, magic)
    buf = bytearray(inner if codec == 0 else _legacy(2, magic, 1, None, gzip.compress(inner), ts=9))
    rnd = random.Random(seed)
    # First entry only: flips from its CRC field to its end.
    first_end = 12 + struct.unpack_from(">i", buf, 8)[0]
    pos = rnd.randrange(12, first_end)
    buf[pos] ^= rnd.randrange(1, 256)
    with pytest.raises(RecordError) as e:
        list(iter_legacy_messages(buf))
    assert e.value.position == 0


def test_corrupt_inner_message_names_the_wrapper_position():
    inner = bytearray(_message_set(2, 1))
    inner[-1] ^= 0xFF  # breaks the second inner message's CRC
    lead = _legacy(0, 1, 0, b"a", b"b")
    buf = lead + _legacy(5, 1, 1, None, gzip.compress(bytes(inner)))
    with pytest.raises(CorruptRecordError, match="CRC-32") as e:
        list(iter_legacy_messages(buf))
    assert e.value.position == len(lead)
    assert "decompressed" in str(e.value)


def test_truncation_names_the_entry_position():
    buf = _message_set(3, 1)
    second = len(_legacy(0, 1, 0, b"k0", b"value-0" * 3))
    for cut in range(second + 1, 2 * second):
        with pytest.raises(CorruptRecordError) as e:
            list(iter_legacy_messages(buf[:cut]))
        assert e.value.position == second
        assert [m.offset for m in iter_legacy_messages(buf[:cut], stop_at_partial=True)] == [0]


def test_impossible_sizes_and_lengths_are_corrupt():
    msg = bytearray(_legacy(0, 0, 0, b"key", b"value"))
    small = bytearray(msg)
    struct.pack_into(">i", small, 8, 5)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        list(iter_legacy_messages(small))
    # Key length longer than the message, with a CRC that matches the bad bytes.
    bad = bytearray(msg)
    struct.pack_into(">i", bad, 18, 1000)
    struct.pack_into(">I", bad, 12, zlib.crc32(bad[16:]))
    with pytest.raises(CorruptRecordError, match="invalid key length 1000") as e:
        list(iter_legacy_messages(bad))
    assert e.value.position == 18


def test_nested_compression_and_null_wrapper_value_are_corrupt():
    nested = _legacy(0, 1, 1, None, gzip.compress(_message_set(1, 1)))
    with pytest.raises(CorruptRecordError, match="nested"):
        list(iter_legacy_messages(_legacy(0, 1, 1, None, gzip.compress(nested))))
    with pytest.raises(CorruptRecordError, match="null value"):
        list(iter_legacy_messages(_legacy(0, 1, 1, None, None)))
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_messages(_legacy(0, 1, 1, None, b"not gzip at all")))


def test_v2_batch_or_unknown_magic_is_invalid():
    with pytest.raises(InvalidRecordError, match="v2"):
        list(iter_legacy_messages(build_batch([(b"k", b"v")])))
    msg = bytearray(_legacy(0, 0, 0, b"k", b"v"))
    msg[16] = 7
    with pytest.raises(InvalidRecordError, match="unknown magic 7"):
        list(iter_legacy_messages(msg))


def test_magic0_lz4_with_kafka_08_header_checksum_and_magic1_lz4():
    inner0 = _message_set(4, 0)
    frame = bytearray(lz4.frame.compress(inner0, block_linked=False, store_size=False))
    frame[6] ^= 0x21  # Kafka 0.8's wrong descriptor checksum
    msgs = list(iter_legacy_messages(_legacy(3, 0, 3, None, bytes(frame))))
    assert [m.value for m in msgs] == [b"value-%d" % i * 3 for i in range(4)]
    inner1 = _message_set(4, 1)
    good = lz4.frame.compress(inner1, block_linked=False)
    msgs = list(iter_legacy_messages(_legacy(13, 1, 3, None, good, ts=1)))
    assert [m.offset for m in msgs] == [10, 11, 12, 13]
    assert [m.timestamp for m in msgs] == [100, 101, 102, 103]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 1 << 30))
def test_garbage_with_matching_crc_raises_only_record_errors(seed):
    rnd = random.Random(seed)
    inner = _message_set(3, 1)
    buf = bytearray(_legacy(2, 1, rnd.choice([0, 1]), b"k", gzip.compress(inner) if rnd.random() < 0.5 else inner, ts=1))
    for _ in range(rnd.randint(1, 3)):
        buf[rnd.randrange(17, len(buf))] = rnd.randrange(256)
    struct.pack_into(">I", buf, 12, zlib.crc32(buf[16:]))
    try:
        list(iter_legacy_messages(buf))
    except RecordError:
        pass
