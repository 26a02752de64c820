"""Reading magic 0 and 1 message sets (Kafka before 0.11). The broker never writes them.

Old segments, dump-log and tests need them. Each entry of a message set is
  offset i64 | messageSize i32 | crc u32 | magic i8 | attributes i8 | [timestamp i64, magic 1] |
  keyLength i32 | key | valueLength i32 | value
with the CRC-32 (IEEE, zlib's) over magic..end. A compressed "wrapper" message carries a whole
inner message set, compressed, as its value. Inner offsets are absolute under magic 0; under
magic 1 they are relative and the wrapper holds the absolute offset of the last inner message.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError, RecordError
from tieredlog.records.batch import (
    COMPRESSION_LZ4,
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BytesLike,
)
from tieredlog.records.codecs import decompress, decompress_lz4_legacy

__all__ = ["LegacyMessage", "iter_legacy_messages", "NO_TIMESTAMP_TYPE"]

NO_TIMESTAMP_TYPE = -1  # magic 0 messages have no timestamp (Kafka's TimestampType.NO_TIMESTAMP_TYPE)

_ENTRY_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_I32 = struct.Struct(">i")
_CRC_START = LOG_OVERHEAD + 4  # the CRC covers magic..end
# crc + magic + attributes + key length + value length, then + timestamp for magic 1.
_MIN_SIZE = {0: 14, 1: 22}


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    offset: int
    magic: int
    timestamp: int  # NO_TIMESTAMP (-1) for magic 0
    key: bytes | None
    value: bytes | None
    compression: int  # the wrapper's codec for messages that came out of one
    timestamp_type: int = NO_TIMESTAMP_TYPE  # 0 CreateTime, 1 LogAppendTime, -1 for magic 0
    crc: int = 0
    position: int = 0  # byte position of the (outer) entry in the buffer


@dataclass(slots=True)
class _Entry:
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: memoryview | None
    crc: int
    end: int


def iter_legacy_messages(
    buf: BytesLike, start: int = 0, *, verify_crc: bool = True, stop_at_partial: bool = False
) -> Iterator[LegacyMessage]:
    """Yield every message of a magic 0/1 message set, unpacking compressed wrappers.

    Raises CorruptRecordError (with ``.position``) on bad CRCs, impossible sizes, truncation or
    bad compressed data, and InvalidRecordError on a v2 batch or an unknown magic. A trailing
    partial entry raises too, unless ``stop_at_partial`` is set.
    """
    view = memoryview(buf)
    pos = start
    n = len(view)
    while pos < n:
        if n - pos < LOG_OVERHEAD or pos + LOG_OVERHEAD + _I32.unpack_from(view, pos + 8)[0] > n:
            if stop_at_partial:
                return
            raise CorruptRecordError(f"message truncated at byte {pos}: only {n - pos} bytes remain", position=pos)
        e = _read_entry(view, pos, n, verify_crc, None)
        codec = e.attributes & COMPRESSION_MASK
        ts_type = _timestamp_type(e)
        if codec == COMPRESSION_NONE:
            yield LegacyMessage(
                e.offset, e.magic, e.timestamp, e.key, _bytes(e.value), codec, ts_type, e.crc, pos
            )
        else:
            yield from _inner_messages(e, codec, ts_type, verify_crc, pos)
        pos = e.end


def _timestamp_type(e: _Entry) -> int:
    if e.magic == 0:
        return NO_TIMESTAMP_TYPE
    return 1 if e.attributes & TIMESTAMP_TYPE_MASK else 0


def _bytes(v: memoryview | None) -> bytes | None:
    return None if v is None else bytes(v)


def _inner_messages(wrapper: _Entry, codec: int, ts_type: int, verify_crc: bool, pos: int) -> Iterator[LegacyMessage]:
    if wrapper.value is None:
        raise CorruptRecordError(f"compressed message at byte {pos} has a null value", position=pos)
    try:
        if codec == COMPRESSION_LZ4 and wrapper.magic == 0:
            data = decompress_lz4_legacy(wrapper.value)
        else:
            data = decompress(codec, wrapper.value)
    except (CorruptRecordError, InvalidRecordError) as exc:
        raise type(exc)(f"compressed message at byte {pos}: {exc}", position=pos) from exc
    view = memoryview(data)
    n = len(view)
    inner: list[_Entry] = []
    p = 0
    while p < n:
        if n - p < LOG_OVERHEAD:
            raise CorruptRecordError(
                f"inner message truncated at byte {p} of the decompressed set of the message at byte {pos}",
                position=pos,
            )
        e = _read_entry(view, p, n, verify_crc, pos)
        if e.attributes & COMPRESSION_MASK:
            # Kafka never nests compression; a producer that did is broken.
            raise CorruptRecordError(
                f"compressed message nested at byte {p} of the decompressed set of the message at byte {pos}",
                position=pos,
            )
        inner.append(e)
        p = e.end
    if not inner:
        raise CorruptRecordError(f"compressed message at byte {pos} holds no messages", position=pos)
    # Magic 1 wrappers carry the last inner message's absolute offset; inner offsets are relative.
    shift = wrapper.offset - inner[-1].offset if wrapper.magic > 0 else 0
    for e in inner:
        timestamp = wrapper.timestamp if ts_type == 1 else e.timestamp
        yield LegacyMessage(
            e.offset + shift, e.magic, timestamp, e.key, _bytes(e.value), codec, ts_type, e.crc, pos
        )


def _read_entry(view: memoryview, pos: int, end: int, verify_crc: bool, wrapper_pos: int | None) -> _Entry:
    """Parse one entry at ``pos``. Inside a wrapper (``wrapper_pos`` set) positions are in the
    decompressed data, so errors carry the wrapper's position in the buffer instead."""

    def fail(msg: str, at: int, cls: type[RecordError] = CorruptRecordError) -> RecordError:
        if wrapper_pos is None:
            return cls(f"{msg} at byte {at}", position=at)
        return cls(
            f"{msg} at byte {at} of the decompressed set of the message at byte {wrapper_pos}", position=wrapper_pos
        )

    if end - pos < LOG_OVERHEAD + 6:
        raise fail("message header truncated", pos)
    offset, size, crc, magic, attributes = _ENTRY_V0.unpack_from(view, pos)
    if magic not in (0, 1):
        if magic == 2:
            raise fail("record batch v2 found where a magic 0/1 message was expected", pos, InvalidRecordError)
        raise fail(f"unknown magic {magic}", pos, InvalidRecordError)
    if size < _MIN_SIZE[magic]:
        raise fail(f"message size {size} below the minimum {_MIN_SIZE[magic]} for magic {magic}", pos)
    msg_end = pos + LOG_OVERHEAD + size
    if msg_end > end:
        raise fail(f"message declares {size} bytes but only {end - pos - LOG_OVERHEAD} remain", pos)
    if verify_crc:
        computed = zlib.crc32(view[pos + _CRC_START : msg_end])
        if computed != crc:
            raise fail(f"message fails CRC-32 check (stored {crc:#010x}, computed {computed:#010x})", pos)
    p = pos + LOG_OVERHEAD + 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _TIMESTAMP.unpack_from(view, p)
        p += 8
    key, p = _read_bytes(view, p, msg_end, fail, "key")
    if msg_end - p < 4:
        raise fail("value length truncated", p)
    value, p = _read_bytes(view, p, msg_end, fail, "value")
    if p != msg_end:
        raise fail(f"{msg_end - p} bytes left over after the value of the message", pos)
    return _Entry(offset, magic, attributes, timestamp, _bytes(key), value, crc, msg_end)


def _read_bytes(
    view: memoryview, p: int, end: int, fail: Callable[[str, int], RecordError], what: str
) -> tuple[memoryview | None, int]:
    (length,) = _I32.unpack_from(view, p)
    p += 4
    if length == -1:
        return None, p
    if length < 0 or p + length > end:
        raise fail(f"invalid {what} length {length}", p - 4)
    return view[p : p + length], p + length
