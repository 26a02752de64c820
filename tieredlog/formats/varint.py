"""Kafka's varints: zigzag-encoded base-128 (protobuf's sint) for the signed varint and varlong of
v2 records, plain base-128 for the unsigned varints of flexible protocol versions and snappy blocks.

Walks that run per record (the decoder, the produce-time scans, the cleaner) inline the one-byte
case, ``b < 0x80`` giving ``(b >> 1) ^ -(b & 1)``, and call these for the rest; a zigzag varint is
negative (a null length is -1) exactly when its first byte is odd.
"""

from __future__ import annotations

import mmap

from tieredlog.formats.errors import CorruptRecordError

BytesLike = bytes | bytearray | memoryview | mmap.mmap
# A varlong never needs more than 10 bytes (64 bits in 7-bit groups).
MAX_VARINT_BYTES = 10


def zigzag_encode(n: int) -> int:
    # Python ints are unbounded, so the sign is folded in arithmetically, not by a fixed-width shift.
    return (n << 1) if n >= 0 else ((-n) << 1) - 1


def zigzag_decode(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    """Append a zigzag varint (Kafka's varint and varlong alike)."""
    v = zigzag_encode(value)
    if v < 0x80:  # most deltas and lengths fit one byte
        out.append(v)
        return
    write_uvarint(out, v)


def encode_uvarint(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def varint_size(value: int) -> int:
    """Bytes taken by the zigzag varint encoding of ``value``."""
    v = zigzag_encode(value)
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size


def read_uvarint(buf: BytesLike, pos: int) -> tuple[int, int]:
    """Read an unsigned varint at ``pos``; returns (value, position after it)."""
    start = pos
    n = len(buf)
    result = 0
    shift = 0
    while True:
        if pos >= n:
            raise CorruptRecordError(f"varint truncated at byte {start}", position=start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 7 * MAX_VARINT_BYTES:
            raise CorruptRecordError(f"varint longer than 10 bytes at byte {start}", position=start)


def read_varint(buf: BytesLike, pos: int) -> tuple[int, int]:
    """Read a zigzag varint/varlong at ``pos``; returns (value, position after it)."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def skip_varint(buf: BytesLike, pos: int) -> int:
    """The position after the varint at ``pos``, unread (IndexError when the buffer ends inside it)."""
    while buf[pos] >= 0x80:
        pos += 1
    return pos + 1
