"""Walks over the records of one v2 batch that read only what a produce-time rule needs.

The broker never decodes records on produce (batch.py); two of Kafka's per-record rules still need
the records: a compacted topic refuses records without a key, and a produce whose batch header shows
an out-of-range timestamp is answered with every offending record's index (KIP-467's batch_index).
These walks read each record's length, timestamp delta, offset delta and key length varints
(:mod:`tieredlog.formats.record_walk`) and skip the rest, so a batch that passes costs a few byte reads per record and builds no record (about a
tenth of decoding it); only the records found bad are listed.
"""

from __future__ import annotations

from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError
from tieredlog.formats.record_walk import MIN_RECORD_BODY, MIN_RECORD_SIZE
from tieredlog.formats.varint import read_varint
from tieredlog.records.batch import (
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    HEADER_SIZE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    BytesLike,
)
from tieredlog.records.codecs import decompress

__all__ = ["RecordFault", "KEY_MISSING", "TIMESTAMP_OUT_OF_RANGE", "find_record_faults"]

KEY_MISSING = 1
TIMESTAMP_OUT_OF_RANGE = 2

# (index in the batch, fault, the record's timestamp, the record's offset as the client sent it)
RecordFault = tuple[int, int, int, int]


def _records_section(buf: BytesLike, pos: int, h: BatchHeader) -> tuple[BytesLike, int, int]:
    """The records' bytes: the batch's own for an uncompressed batch, else the decompressed data."""
    start = pos + HEADER_SIZE
    end = pos + h.size
    codec = h.attributes & COMPRESSION_MASK
    if codec == COMPRESSION_NONE:
        return buf, start, end
    try:
        data = decompress(codec, memoryview(buf)[start:end])
    except CorruptRecordError as e:
        raise CorruptRecordError(f"batch at byte {pos}: {e}", position=pos) from e
    except InvalidRecordError as e:
        raise InvalidRecordError(f"batch at byte {pos}: {e}", position=pos) from e
    return data, 0, len(data)


def find_record_faults(
    buf: BytesLike,
    pos: int,
    h: BatchHeader,
    *,
    keys_required: bool,
    min_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> list[RecordFault]:
    """The records of the batch at ``pos`` (header ``h``, already validated) that break a rule, in
    record order, at most one fault each (a missing key first, as Kafka's validateRecord checks it
    first): a null key when ``keys_required``; a timestamp other than -1 outside
    ``[min_timestamp, max_timestamp]`` when the bounds are given (CreateTime topics; a LogAppendTime
    batch's records carry no timestamps of their own, so they are not checked). Records that do not
    parse raise InvalidRecordError, as Kafka's record reader does (INVALID_RECORD); compressed data
    that does not decompress raises CorruptRecordError."""
    count = h.records_count
    if count <= 0:
        return []
    check_ts = (min_timestamp is not None or max_timestamp is not None) and not h.attributes & TIMESTAMP_TYPE_MASK
    if not keys_required and not check_ts:
        return []
    lo = min_timestamp if min_timestamp is not None else -(1 << 64)
    hi = max_timestamp if max_timestamp is not None else 1 << 64
    data, p, end = _records_section(buf, pos, h)
    if count > (end - p) // MIN_RECORD_SIZE:
        raise InvalidRecordError(f"batch at byte {pos}: record count {count} cannot fit in {end - p} bytes", position=pos)
    if not check_ts and _all_keyed(data, p, end, count, pos):
        return []  # the common case of a compacted topic: a walk that builds nothing
    read = read_varint
    base_ts = h.base_timestamp
    base_offset = h.base_offset
    faults: list[RecordFault] = []
    index = 0
    try:
        for index in range(count):
            # Single-byte fast paths of the varints inline: records under 64 bytes, small deltas.
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                length, p = read(data, p)
            rec_end = p + length
            if length < MIN_RECORD_BODY or rec_end > end:
                raise InvalidRecordError(f"batch at byte {pos}: record {index} of length {length} overruns the batch",
                                         position=pos)
            p += 1  # attributes
            b = data[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                ts_delta, p = read(data, p)
            b = data[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                offset_delta, p = read(data, p)
            b = data[p]
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                key_length, p = read(data, p)
            if p > rec_end:
                raise InvalidRecordError(f"batch at byte {pos}: record {index} overruns its length", position=pos)
            if key_length < 0 and keys_required:
                faults.append((index, KEY_MISSING, base_ts + ts_delta, base_offset + offset_delta))
            elif check_ts:
                ts = base_ts + ts_delta
                if ts != NO_TIMESTAMP and (ts < lo or ts > hi):
                    faults.append((index, TIMESTAMP_OUT_OF_RANGE, ts, base_offset + offset_delta))
            p = rec_end
    except IndexError:
        raise InvalidRecordError(f"batch at byte {pos}: record {index} is truncated", position=pos) from None
    except CorruptRecordError:  # from read_varint
        raise InvalidRecordError(f"batch at byte {pos}: record {index} holds a bad varint", position=pos) from None
    if p != end:
        raise InvalidRecordError(f"batch at byte {pos}: {end - p} bytes left over after {count} records", position=pos)
    return faults



def _all_keyed(data: BytesLike, p: int, end: int, count: int, pos: int) -> bool:
    """Whether every record of ``data[p:end]`` has a key: the timestamp and offset deltas are skipped
    unread, and a zigzag varint is negative (a null key is -1) exactly when its first byte is odd."""
    index = 0
    try:
        for index in range(count):
            # the length varint: one byte under 64, two under 8 KiB, inline
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                v = (b & 0x7F) | (data[p + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                p += 2
            else:
                length, p = read_varint(data, p)
            rec_end = p + length
            if length < MIN_RECORD_BODY or rec_end > end:
                raise InvalidRecordError(f"batch at byte {pos}: record {index} of length {length} overruns the batch",
                                         position=pos)
            q = p + 1  # past the attributes
            while data[q] >= 0x80:  # timestamp delta
                q += 1
            q += 1
            while data[q] >= 0x80:  # offset delta
                q += 1
            q += 1
            if q >= rec_end:
                raise InvalidRecordError(f"batch at byte {pos}: record {index} overruns its length", position=pos)
            if data[q] & 1:
                return False
            p = rec_end
    except IndexError:
        raise InvalidRecordError(f"batch at byte {pos}: record {index} is truncated", position=pos) from None
    except CorruptRecordError:  # from read_varint
        raise InvalidRecordError(f"batch at byte {pos}: record {index} holds a bad varint", position=pos) from None
    if p != end:
        raise InvalidRecordError(f"batch at byte {pos}: {end - p} bytes left over after {count} records", position=pos)
    return True
