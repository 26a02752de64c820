"""The cleaner's work on one v2 batch, bytes in and bytes out (Kafka's MemoryRecords.filterTo with the
cleaner's RecordFilter).

A batch is walked record by record over its (decompressed) records section (the layout of
:mod:`tieredlog.formats.record_walk`), reading only the varints and the key each decision needs; no
record object is built, and one-byte varints are decoded inline. A batch whose records all stay, and that
needs no delete horizon, is copied as it is. Otherwise the records that stay are written into a new
batch with the original base offset, last offset delta (so the producer's last sequence survives),
codec, timestamp type, producer id, epoch, base sequence and partition leader epoch, Kafka's rule.
Each kept record's bytes are copied unchanged unless the base timestamp moves to a delete horizon
(KIP-534), which shifts every record's timestamp delta so record timestamps stay what they were.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.record_walk import ATTRIBUTES_SIZE, CONTROL_KEY, key_length_position
from tieredlog.formats.varint import read_varint, skip_varint, write_varint
from tieredlog.log.cleaner.offset_map import OffsetMap
from tieredlog.records.batch import (
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    BytesLike,
)
from tieredlog.records.codecs import compress, decompress
from tieredlog.records.record import build_empty_batch, seal_batch


class BatchRetention(enum.Enum):
    """What happens to a batch whose records all go (Kafka's BatchRetention)."""

    DELETE = 1  # drop the batch, whatever its records say
    DELETE_EMPTY = 2  # drop it only if no record stays
    RETAIN_EMPTY = 3  # keep at least its header: producer state or the round's last offset needs it


@dataclass(slots=True)
class FilterStats:
    messages_read: int = 0
    bytes_read: int = 0
    messages_retained: int = 0
    bytes_retained: int = 0
    invalid_messages: int = 0


def records_section(buf: BytesLike, pos: int, h: BatchHeader) -> tuple[BytesLike, int, int]:
    """The batch's records: its own bytes when uncompressed, else the decompressed data."""
    start, end = pos + HEADER_SIZE, pos + h.size
    codec = h.attributes & COMPRESSION_MASK
    if codec == COMPRESSION_NONE:
        return buf, start, end
    data = decompress(codec, memoryview(buf)[start:end])
    return data, 0, len(data)


def add_keys_to_map(buf: BytesLike, pos: int, h: BatchHeader, start_offset: int, offset_map: OffsetMap,
                    max_entries: int) -> tuple[bool, int]:
    """Put every keyed record of the batch at or past ``start_offset`` into the map: (whether the map
    filled before the batch ended, records read)."""
    count = h.records_count
    if count <= 0:
        return False, 0
    data, p, end = records_section(buf, pos, h)
    base = h.base_offset
    put = offset_map.put
    try:
        for index in range(count):
            # one-byte varints (most lengths and deltas) inline: a call each would double the cost
            b = data[p]
            if b < 0x80:
                rec_end = p + 1 + ((b >> 1) ^ -(b & 1))
                p += 1
            elif data[p + 1] < 0x80:
                v = (b & 0x7F) | (data[p + 1] << 7)
                rec_end = p + 2 + ((v >> 1) ^ -(v & 1))
                p += 2
            else:
                length, p = read_varint(data, p)
                rec_end = p + length
            q = skip_varint(data, p + ATTRIBUTES_SIZE)  # the timestamp delta, unread
            b = data[q]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                q += 1
            else:
                offset_delta, q = read_varint(data, q)
            b = data[q]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                q += 1
            else:
                key_len, q = read_varint(data, q)
            offset = base + offset_delta
            if key_len >= 0 and offset >= start_offset:
                if offset_map.size >= max_entries:
                    return True, index
                put(data[q : q + key_len], offset)
            p = rec_end
    except IndexError:
        raise CorruptRecordError(f"batch at offset {base}: record {index} is truncated") from None
    if p != end:
        raise CorruptRecordError(f"batch at offset {base}: {end - p} bytes left over after {count} records")
    return False, count


def control_type(buf: BytesLike, pos: int, h: BatchHeader) -> int | None:
    """The marker type of a control batch (0 ABORT, 1 COMMIT), None when it holds no record."""
    if h.records_count <= 0:
        return None
    p = pos + HEADER_SIZE
    _, p = read_varint(buf, p)  # record length
    key_len, p = read_varint(buf, key_length_position(buf, p))
    if key_len < CONTROL_KEY.size:
        return None
    return int(CONTROL_KEY.unpack_from(buf, p)[1])


def empty_batch(h: BatchHeader) -> bytes:
    """The header alone, no record (Kafka's empty batch): what keeps a producer's last sequence and
    epoch, or a cleaning round's last offset, once every record of the batch is gone."""
    return build_empty_batch(h.base_offset, h.last_offset, h.producer_id, h.producer_epoch, h.base_sequence,
                             h.partition_leader_epoch, h.timestamp_type, h.max_timestamp, h.is_transactional,
                             h.is_control)


@dataclass(slots=True)
class RecordFilter:
    """One cleaning round's view: the map, the clock, the topic's delete.retention.ms."""

    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    stats: FilterStats

    def filter(self, buf: BytesLike, pos: int, h: BatchHeader, retention: BatchRetention,
               discard_records: bool, marker_for_empty_txn: bool) -> bytes | bytearray | memoryview | None:
        """The batch to write for the batch at ``pos`` (``buf`` itself when it is that batch and it
        stays unchanged), or None."""
        stats = self.stats
        count = max(h.records_count, 0)
        stats.messages_read += count
        stats.bytes_read += h.size
        if retention is BatchRetention.DELETE:
            return None
        has_horizon = bool(h.attributes & DELETE_HORIZON_MASK)
        keep_deletes = not has_horizon or self.now_ms < h.base_timestamp
        kept: list[tuple[int, int, int]] = []  # (record start, record end, timestamp delta) of each kept record
        tombstones = False
        data: BytesLike = buf
        if count and not discard_records:
            data, p, end = records_section(buf, pos, h)
            is_control = h.is_control
            offset_map = self.offset_map
            latest = offset_map.latest_offset
            base = h.base_offset
            try:
                for _ in range(count):
                    start = p
                    b = data[p]
                    if b < 0x80:
                        p += 1
                        rec_end = p + ((b >> 1) ^ -(b & 1))
                    elif data[p + 1] < 0x80:
                        v = (b & 0x7F) | (data[p + 1] << 7)
                        p += 2
                        rec_end = p + ((v >> 1) ^ -(v & 1))
                    else:
                        length, p = read_varint(data, p)
                        rec_end = p + length
                    b = data[p + 1]
                    if b < 0x80:
                        ts_delta = (b >> 1) ^ -(b & 1)
                        q = p + 2
                    else:
                        ts_delta, q = read_varint(data, p + 1)
                    if is_control:
                        kept.append((start, rec_end, ts_delta))
                        p = rec_end
                        continue
                    b = data[q]
                    if b < 0x80:
                        offset_delta = (b >> 1) ^ -(b & 1)
                        q += 1
                    else:
                        offset_delta, q = read_varint(data, q)
                    b = data[q]
                    if b < 0x80:
                        key_len = (b >> 1) ^ -(b & 1)
                        q += 1
                    else:
                        key_len, q = read_varint(data, q)
                    offset = base + offset_delta
                    if offset > latest:
                        value_len = -1 if key_len < 0 else read_varint(data, q + key_len)[0]
                        kept.append((start, rec_end, ts_delta))
                        tombstones |= key_len >= 0 and value_len < 0
                    elif key_len < 0:
                        stats.invalid_messages += 1
                    elif offset >= offset_map.get(data[q : q + key_len]):
                        value_len = read_varint(data, q + key_len)[0]
                        if value_len >= 0:
                            kept.append((start, rec_end, ts_delta))
                        elif keep_deletes:
                            kept.append((start, rec_end, ts_delta))
                            tombstones = True
                    p = rec_end
            except IndexError:
                raise CorruptRecordError(f"batch at offset {base}: a record is truncated") from None
            if p != end:
                raise CorruptRecordError(f"batch at offset {base}: {end - p} bytes left over after {count} records")
        need_horizon = (tombstones or marker_for_empty_txn) and not has_horizon
        if kept and len(kept) == count and not need_horizon:
            stats.messages_retained += count
            stats.bytes_retained += h.size
            if isinstance(buf, (bytes, bytearray, memoryview)) and pos == 0 and len(buf) == h.size:
                return buf
            return memoryview(buf)[pos : pos + h.size]
        if kept:
            out = self._rebuild(h, data, kept, self.now_ms + self.delete_retention_ms if need_horizon else None)
        elif retention is BatchRetention.RETAIN_EMPTY:
            out = bytearray(empty_batch(h))
        else:
            return None
        stats.messages_retained += len(kept)
        stats.bytes_retained += len(out)
        return out

    @staticmethod
    def _rebuild(h: BatchHeader, data: BytesLike, kept: list[tuple[int, int, int]], horizon: int | None) -> bytearray:
        attributes = h.attributes
        base_ts = h.base_timestamp
        if horizon is not None:
            attributes |= DELETE_HORIZON_MASK
            base_ts = horizon
        shift = h.base_timestamp - base_ts
        body = bytearray()
        view = memoryview(data)
        max_delta: int | None = None
        for start, rec_end, ts_delta in kept:
            if max_delta is None or ts_delta > max_delta:
                max_delta = ts_delta
            if not shift:
                body += view[start:rec_end]
                continue
            _, p = read_varint(data, start)  # the length, rewritten below
            q = skip_varint(data, p + ATTRIBUTES_SIZE)  # past the timestamp delta
            rec = bytearray(view[p : p + ATTRIBUTES_SIZE])
            write_varint(rec, ts_delta + shift)
            rec += view[q:rec_end]
            write_varint(body, len(rec))
            body += rec
        if attributes & TIMESTAMP_TYPE_MASK:
            max_ts = h.max_timestamp  # LogAppendTime: the batch's own time
        else:
            max_ts = h.base_timestamp + (max_delta or 0)
        codec = attributes & COMPRESSION_MASK
        payload = compress(codec, body) if codec != COMPRESSION_NONE else body
        return seal_batch(payload, h.base_offset, h.last_offset_delta, h.partition_leader_epoch, attributes, base_ts,
                          max_ts, h.producer_id, h.producer_epoch, h.base_sequence, len(kept))
