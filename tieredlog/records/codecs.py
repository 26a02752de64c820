"""Compression codecs of Kafka record batches: none, gzip, snappy, lz4, zstd.

The bytes we write are the bytes the Java client writes, so every Kafka client can read them:
- gzip: one gzip member (java.util.zip.GZIPOutputStream), level 6, mtime 0 so output is reproducible.
- snappy: xerial block framing (org.xerial.snappy.SnappyOutputStream): a 16-byte header, then
  blocks of at most 32 KiB input, each as a big-endian i32 length and raw snappy bytes.
  On read we also accept bare raw snappy, which librdkafka and older clients produce.
- lz4: an LZ4 frame with independent 64 KiB blocks and no content size, as Kafka's
  KafkaLZ4BlockOutputStream writes (Kafka's reader rejects linked blocks).
- zstd: one zstd frame at level 3, Kafka's default. On read the frame may lack a content size
  (zstd-jni streams never write one) and there may be several frames.

Bad compressed data raises CorruptRecordError; an unknown codec id raises InvalidRecordError.

Decompression is bounded: output past ``max_size`` (default :func:`decompressed_limit` of the input)
is corrupt, and no decoder is handed a size it would allocate up front from the data itself.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.block
import lz4.frame
import zstandard

from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError
from tieredlog.formats.varint import read_uvarint
from tieredlog.records.batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)

__all__ = ["compress", "decompress", "decompress_lz4_legacy", "decompressed_limit", "XERIAL_HEADER"]

XERIAL_MAGIC = b"\x82SNAPPY\x00"
# magic, then version 1 and minimum compatible version 1 as big-endian i32s.
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
GZIP_LEVEL = 6
ZSTD_LEVEL = 3

_I32 = struct.Struct(">i")
_U32LE = struct.Struct("<I")
_LZ4_MAGIC = 0x184D2204
_LZ4_SKIPPABLE_MASK = 0xFFFFFFF0
_LZ4_SKIPPABLE_MAGIC = 0x184D2A50
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}

# lz4 and snappy cannot expand data this much by construction (at most ~255x and ~21x), so only gzip
# and zstd data beyond what producers send reaches the cap; a zstd frame of zeros expands 32,000
# times, so a 1 MiB batch could otherwise ask for 32 GiB.
MAX_RATIO = 256
MIN_LIMIT = 64 << 20
# Worst expansion of one input byte, to size the input slices a streaming decoder is fed: a zstd
# RLE block turns 4 bytes into 128 KiB.
_ZSTD_MAX_EXPANSION = 1 << 15
_ZSTD_MIN_SLICE = 64
# A raw snappy copy writes at most 64 bytes for a 3-byte tag; a preamble claiming more than this per
# input byte is corrupt before anything is allocated for it.
_SNAPPY_MAX_EXPANSION = 32
# Output taken from zlib per call.
_STEP = 8 << 20
# An lz4 sequence needs one more input byte per 255 bytes of match: a frame expands at most ~255x.
_LZ4_MAX_EXPANSION = 256

_zstd_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)


def decompressed_limit(compressed_size: int) -> int:
    """The default bound on what ``compressed_size`` bytes may decompress to."""
    return max(MIN_LIMIT, MAX_RATIO * compressed_size)


def _too_big(limit: int) -> CorruptRecordError:
    return CorruptRecordError(f"decompressed data exceeds the limit of {limit} bytes")


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a batch's records section with ``codec`` (0 none .. 4 zstd)."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        # zlib directly (wbits=31 selects the gzip wrapper) gives a zero mtime and no file name.
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == COMPRESSION_SNAPPY:
        return _snappy_xerial_compress(data)
    if codec == COMPRESSION_LZ4:
        framed: bytes = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return framed
    if codec == COMPRESSION_ZSTD:
        return _zstd_compressor.compress(data)
    raise InvalidRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | bytearray | memoryview, max_size: int | None = None) -> bytes:
    """Inverse of :func:`compress`, tolerant of every framing real clients write. Output longer than
    ``max_size`` bytes (default ``decompressed_limit(len(data))``) raises CorruptRecordError, and
    no more than that (plus one decoder step) is ever held."""
    limit = decompressed_limit(len(data)) if max_size is None else max_size
    try:
        if codec == COMPRESSION_NONE:
            if len(data) > limit:
                raise _too_big(limit)
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            return _gzip_decompress(data, limit)
        if codec == COMPRESSION_SNAPPY:
            return _snappy_decompress(data, limit)
        if codec == COMPRESSION_LZ4:
            return _lz4_decompress(data, limit)
        if codec == COMPRESSION_ZSTD:
            return _zstd_decompress(data, limit)
    except CorruptRecordError:
        raise
    except (zlib.error, RuntimeError, zstandard.ZstdError, cramjam.DecompressionError, struct.error) as e:
        # lz4.frame raises RuntimeError, cramjam DecompressionError, zstandard ZstdError: to a
        # reader they all mean the batch is corrupt.
        raise CorruptRecordError(f"invalid {COMPRESSION_NAMES[codec]} data: {e}") from e
    raise InvalidRecordError(f"unknown compression codec {codec}")


def _gzip_decompress(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    out = []
    total = 0
    view = memoryview(data)
    # A gzip stream may hold several members; Java's GZIPInputStream reads them all.
    while True:
        d = zlib.decompressobj(31)
        pending: memoryview | bytes = view
        while True:
            # Never more than one step, and one byte past the room left: getting that byte means
            # the data is over the limit. (zlib would join a bigger output from blocks, twice its size.)
            chunk = d.decompress(pending, min(limit - total + 1, _STEP))
            total += len(chunk)
            if total > limit:
                raise _too_big(limit)
            out.append(chunk)
            pending = d.unconsumed_tail
            if d.eof or not pending and len(chunk) < _STEP:
                break
        if not d.eof:
            raise CorruptRecordError("gzip data truncated")
        rest = d.unused_data
        if not rest:
            break
        view = memoryview(rest)
    return out[0] if len(out) == 1 else b"".join(out)


def _snappy_xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for i in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[i : i + XERIAL_BLOCK_SIZE]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: memoryview, room: int) -> bytes:
    # cramjam allocates the length the block's preamble declares before decoding (and aborts the
    # process when that fails), so the preamble is checked first.
    declared, _ = read_uvarint(block, 0)
    if declared > room:
        raise CorruptRecordError(f"snappy block declares {declared} bytes, which exceeds the limit ({room} bytes left)")
    if declared > _SNAPPY_MAX_EXPANSION * len(block) + 64:
        raise CorruptRecordError(f"snappy block of {len(block)} bytes declares {declared} bytes")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    view = memoryview(data)
    if len(view) < 16 or view[:8] != XERIAL_MAGIC:
        return _snappy_raw(view, limit)
    # Version and compat ints are ignored: only v1 exists, and some producers write them little-endian.
    out = []
    total = 0
    pos = 16
    n = len(view)
    while pos < n:
        if n - pos < 4:
            raise CorruptRecordError(f"xerial snappy block length truncated at byte {pos}", position=pos)
        (size,) = _I32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > n:
            raise CorruptRecordError(
                f"xerial snappy block at byte {pos - 4} declares {size} bytes but {n - pos} remain", position=pos - 4
            )
        block = _snappy_raw(view[pos : pos + size], limit - total)
        total += len(block)
        out.append(block)
        pos += size
    return b"".join(out)


def _lz4_decompress(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    view = memoryview(data)
    out = []
    total = 0
    # Concatenated frames are legal; read them too (a loop: thousands of tiny frames fit a batch).
    while True:
        if len(view) < 4 or _U32LE.unpack_from(view, 0)[0] != _LZ4_MAGIC:
            raise CorruptRecordError("lz4 data does not start with the LZ4 frame magic", position=0)
        d = lz4.frame.LZ4FrameDecompressor()
        room = limit - total
        if room >= _LZ4_MAX_EXPANSION * len(view):
            # The frame cannot outgrow the room; max_length would allocate all of it up front.
            chunk = d.decompress(view)
        else:
            chunk = d.decompress(view, max_length=room + 1)
        total += len(chunk)
        if total > limit:
            raise _too_big(limit)
        if not d.eof:
            raise CorruptRecordError("lz4 frame truncated")
        out.append(chunk)
        rest = d.unused_data
        if not rest:
            break
        view = memoryview(rest)
    return out[0] if len(out) == 1 else b"".join(out)


def decompress_lz4_legacy(data: bytes | bytearray | memoryview) -> bytes:
    """Read an LZ4 frame written by Kafka 0.8/0.9 for magic 0 messages.

    Those versions computed the frame descriptor checksum over the magic number too, so a
    conforming decoder rejects their frames. We walk the frame ourselves, skip that checksum
    and decode each block with the raw block decoder.
    """
    view = memoryview(data)
    n = len(view)
    if n < 7 or _U32LE.unpack_from(view, 0)[0] != _LZ4_MAGIC:
        raise CorruptRecordError("lz4 data does not start with the LZ4 frame magic", position=0)
    flg, bd = view[4], view[5]
    if flg >> 6 != 1:
        raise CorruptRecordError(f"unsupported lz4 frame version {flg >> 6}", position=4)
    linked = not flg & 0x20
    block_checksum = bool(flg & 0x10)
    content_size = bool(flg & 0x08)
    content_checksum = bool(flg & 0x04)
    max_block = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07)
    if max_block is None:
        raise CorruptRecordError(f"invalid lz4 block size id in descriptor byte {bd:#04x}", position=5)
    pos = 6 + (8 if content_size else 0) + 1  # descriptor, optional content size, header checksum
    out = []
    total = 0
    limit = decompressed_limit(n)
    history = b""
    while True:
        if n - pos < 4:
            raise CorruptRecordError(f"lz4 block size truncated at byte {pos}", position=pos)
        (word,) = _U32LE.unpack_from(view, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        if size > max_block or pos + size > n:
            raise CorruptRecordError(f"lz4 block at byte {pos - 4} has invalid size {size}", position=pos - 4)
        block = view[pos : pos + size]
        if word & 0x80000000:
            out.append(bytes(block))  # stored uncompressed
        else:
            try:
                if linked and history:
                    # A linked block may refer back up to 64 KiB into what came before it.
                    out.append(lz4.block.decompress(block, uncompressed_size=max_block, dict=history))
                else:
                    out.append(lz4.block.decompress(block, uncompressed_size=max_block))
            except lz4.block.LZ4BlockError as e:
                raise CorruptRecordError(f"invalid lz4 block at byte {pos - 4}: {e}", position=pos - 4) from e
        total += len(out[-1])
        if total > limit:
            raise _too_big(limit)
        if linked:
            history = (history + out[-1])[-65536:]
        pos += size + (4 if block_checksum else 0)
    if content_checksum:
        pos += 4
    if pos > n:
        raise CorruptRecordError("lz4 frame truncated after its end mark", position=n)
    return b"".join(out)


def _zstd_decompress(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    # zstandard's decompressobj has no output bound, and its one-shot decompress allocates the
    # content size a frame header declares; so the frame is fed in slices small enough that one
    # slice cannot overshoot the room left by more than one block.
    view = memoryview(data)
    out = []
    total = 0
    # One decompressor per call: a ZstdDecompressor's context must not be shared between threads.
    dctx = zstandard.ZstdDecompressor()
    while True:
        d = dctx.decompressobj()
        pos, n = 0, len(view)
        while pos < n and not d.eof:
            step = max(_ZSTD_MIN_SLICE, (limit - total) // _ZSTD_MAX_EXPANSION)
            chunk = d.decompress(view[pos : pos + step])
            pos += step
            total += len(chunk)
            if total > limit:
                raise _too_big(limit)
            out.append(chunk)
        if not d.eof:
            raise CorruptRecordError("zstd frame truncated")
        rest = d.unused_data
        if pos < n:
            rest = bytes(rest) + bytes(view[pos:])
        if not rest:
            break
        view = memoryview(rest)
    return b"".join(out)
