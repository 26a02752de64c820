"""Compression codecs: round trips, the framings real clients write, and clear errors on bad data."""

from __future__ import annotations

import gzip
import random
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredlog.records.codecs import XERIAL_HEADER, compress, decompress, decompress_lz4_legacy
from tieredlog.records.errors import CorruptRecordError, InvalidRecordError

CODECS = [0, 1, 2, 3, 4]
COMPRESSED = [1, 2, 3, 4]


def _sample(size: int, seed: int = 1) -> bytes:
    # Compressible but not trivial: random words from a small vocabulary.
    rnd = random.Random(seed)
    words = [bytes(rnd.choices(range(97, 123), k=rnd.randint(2, 9))) for _ in range(64)]
    out = bytearray()
    while len(out) < size:
        out += rnd.choice(words) + b" "
    return bytes(out[:size])


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000))
def test_round_trip_random(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 32 * 1024, 32 * 1024 + 1, 200_000])
def test_round_trip_sizes_and_buffer_types(codec, size):
    data = _sample(size)
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, bytearray(packed)) == data
    assert decompress(codec, memoryview(packed)) == data


def test_snappy_writes_xerial_framing_with_32k_blocks():
    data = _sample(70_000)
    packed = compress(2, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    assert XERIAL_HEADER == packed[:16]
    # Walk the blocks: 32 KiB, 32 KiB, and the rest, each a big-endian length and raw snappy.
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert pos == len(packed)
    assert [len(b) for b in blocks] == [32768, 32768, 70_000 - 65536]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_snappy_as_librdkafka_writes_it():
    data = _sample(5000)
    assert decompress(2, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_ignores_little_endian_xerial_version_ints():
    data = _sample(3000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    framed = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + struct.pack(">i", len(raw)) + raw
    assert decompress(2, framed) == data


def test_lz4_frame_has_independent_blocks_and_no_content_size():
    packed = compress(3, _sample(100_000))
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg, bd = packed[4], packed[5]
    assert flg & 0x20, "blocks must be independent: Kafka's reader rejects linked blocks"
    assert not flg & 0x08, "Java's writer never stores the content size"
    assert (bd >> 4) & 0x07 == 4  # 64 KiB blocks


def test_lz4_reads_frames_from_other_writers():
    data = _sample(100_000)
    for kwargs in ({}, {"block_linked": True}, {"content_checksum": True, "store_size": True}):
        assert decompress(3, lz4.frame.compress(data, **kwargs)) == data
    assert decompress(3, lz4.frame.compress(data[:10]) + lz4.frame.compress(data[10:])) == data


def test_lz4_legacy_accepts_kafka_08_broken_header_checksum():
    data = _sample(150_000)
    frame = bytearray(lz4.frame.compress(data, block_linked=False, store_size=False))
    frame[6] ^= 0x5A  # the header checksum byte, wrong as Kafka 0.8/0.9 wrote it
    with pytest.raises(CorruptRecordError):
        decompress(3, frame)
    assert decompress_lz4_legacy(frame) == data
    # With content size, block checksums and a content checksum too.
    frame2 = bytearray(lz4.frame.compress(data, block_checksum=True, content_checksum=True, store_size=True))
    frame2[14] ^= 0x33
    assert decompress_lz4_legacy(frame2) == data


def test_zstd_reads_frames_without_content_size_and_several_frames():
    data = _sample(50_000)
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(4, streamed) == data
    assert decompress(4, streamed + zstandard.ZstdCompressor().compress(b"tail")) == data + b"tail"


def test_gzip_reads_several_members_and_other_writers():
    data = _sample(20_000)
    assert decompress(1, gzip.compress(data[:7]) + gzip.compress(data[7:], compresslevel=1)) == data


def test_gzip_output_is_reproducible():
    data = _sample(10_000)
    assert compress(1, data) == compress(1, data)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_compressed_data_is_corrupt(codec):
    packed = compress(codec, _sample(80_000, seed=codec))
    for cut in (0, 1, 5, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut])


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_is_corrupt(codec):
    with pytest.raises(CorruptRecordError, match="invalid|truncated|magic|declares"):
        decompress(codec, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x05garbage-bytes-here")
    with pytest.raises(CorruptRecordError):
        decompress(codec, bytes(range(256)) * 3)


def test_xerial_block_overrun_names_position():
    bad = XERIAL_HEADER + struct.pack(">i", 1000) + b"abc"
    with pytest.raises(CorruptRecordError) as e:
        decompress(2, bad)
    assert e.value.position == 16


@pytest.mark.parametrize("codec", [-1, 5, 7])
def test_unknown_codec_is_invalid(codec):
    with pytest.raises(InvalidRecordError):
        compress(codec, b"x")
    with pytest.raises(InvalidRecordError):
        decompress(codec, b"x")
