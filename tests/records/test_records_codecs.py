"""Compression codecs: round trips, the framings real clients write, and clear errors on bad data."""

from __future__ import annotations

import gzip
import random
import struct
import subprocess
import sys
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError
from tieredlog.records.codecs import (
    MAX_RATIO,
    MIN_LIMIT,
    XERIAL_HEADER,
    compress,
    decompress,
    decompress_lz4_legacy,
    decompressed_limit,
)

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


# ---------------------------------------------------------------------------------------------
# Bounded decompression: what a hostile batch may make the broker hold


def _zeros_compressed(codec: int, size: int) -> bytes:
    """``size`` zero bytes compressed by a streaming encoder, so the test never holds them whole."""
    chunk = bytes(1 << 20)
    if codec == 1:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(c.compress(chunk) for _ in range(size >> 20)) + c.flush()
    if codec == 3:
        c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False)
        return c.begin() + b"".join(c.compress(chunk) for _ in range(size >> 20)) + c.flush()
    c = zstandard.ZstdCompressor(level=1).compressobj()
    return b"".join(c.compress(chunk) for _ in range(size >> 20)) + c.flush()


@pytest.mark.parametrize("codec", [1, 4])
def test_a_decompression_bomb_stops_at_the_default_limit(codec):
    # 256 MiB of zeros squeezed into a few KiB (zstd) or ~250 KiB (gzip, 1,000 times): the default
    # limit ends it, and nothing near the full size is ever allocated.
    size = 256 << 20
    bomb = _zeros_compressed(codec, size)
    limit = decompressed_limit(len(bomb))
    assert limit == max(MIN_LIMIT, MAX_RATIO * len(bomb)) < size
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="exceeds the limit"):
            decompress(codec, bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit + (16 << 20), peak


@pytest.mark.parametrize("codec", CODECS)
def test_max_size_is_exact(codec):
    data = _sample(300_000, seed=codec)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decompress(codec, packed, max_size=len(data) - 1)
    if codec in (3, 4):  # several frames: the limit is on their sum
        with pytest.raises(CorruptRecordError, match="exceeds the limit"):
            decompress(codec, packed + packed, max_size=2 * len(data) - 1)
        assert decompress(codec, packed + packed, max_size=2 * len(data)) == data + data


@pytest.mark.integration  # a subprocess under a memory limit
def test_snappy_preamble_is_checked_before_cramjam_allocates_it():
    # Five bytes declaring 4 GiB: cramjam would allocate it first and abort the whole process when
    # it cannot (a Rust allocation failure is not a MemoryError). Run under a 1 GiB address-space
    # limit, as a small broker host would be.
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from tieredlog.records.codecs import decompress, XERIAL_HEADER\n"
        "from tieredlog.formats.errors import CorruptRecordError\n"
        "import struct\n"
        "for data in (b'\\xff\\xff\\xff\\xff\\x0f\\x00', XERIAL_HEADER + struct.pack('>i', 6) + b'\\xff\\xff\\xff\\xff\\x0f\\x00',\n"
        "             b'\\x80\\x80\\x80\\x20' + b'\\x00' * 40):\n"
        "    try:\n"
        "        decompress(2, data)\n"
        "    except CorruptRecordError as e:\n"
        "        print('corrupt:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("corrupt:") == 3, out.stdout


def test_many_tiny_lz4_frames_are_read_without_recursion():
    # Eleven bytes per empty frame: a 1 MiB batch holds ~95,000 of them.
    frames = lz4.frame.compress(b"") * 20_000 + lz4.frame.compress(b"end")
    assert decompress(3, frames) == b"end"
