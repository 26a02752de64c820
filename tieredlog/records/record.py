"""Records inside a v2 batch: decoding a whole batch, building batches.

The broker itself never calls this on produce or fetch (it only reads batch headers); tools,
tests, the control-marker writer and the Spark reader do. The record layout and the varints are
:mod:`tieredlog.formats.record_walk` and :mod:`tieredlog.formats.varint`.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence, Union

from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError, RecordError
from tieredlog.formats.record_walk import CONTROL_KEY, CONTROL_VALUE, MIN_RECORD_SIZE
from tieredlog.formats.varint import read_varint, write_varint
from tieredlog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    BytesLike,
    compute_crc,
    peek_size,
    read_header,
    validate_batch,
)
from tieredlog.records.codecs import compress, decompress

__all__ = [
    "Record",
    "ControlRecord",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "decode_batch",
    "iter_batches_records",
    "record_at_or_after",
    "build_batch",
    "build_control_batch",
    "build_empty_batch",
    "parse_control_record",
]

Header = tuple[str, Union[bytes, None]]
# A header as build_batch takes it: the key may also be UTF-8 bytes already.
HeaderInput = tuple[Union[str, bytes], Union[bytes, None]]

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """The key and value of a transaction marker (Kafka's EndTransactionMarker)."""

    version: int
    type: int  # CONTROL_ABORT or CONTROL_COMMIT (other types exist for KRaft)
    coordinator_epoch: int | None


# ---------------------------------------------------------------------------------------------
# Varints


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_batch(buf: BytesLike, pos: int = 0, *, verify_crc: bool = True) -> tuple[BatchHeader, list[Record]]:
    """Decode the v2 batch at ``pos`` into its header and records, decompressing as needed.

    Checks sizes and (unless ``verify_crc`` is false) the CRC-32C first. Record offsets and
    timestamps are absolute. For LogAppendTime batches every record takes the batch's
    maxTimestamp, as Kafka's consumers do.
    """
    if verify_crc:
        # the records are decoded below, with errors that name the record
        header = validate_batch(buf, pos, check_records=False)
    else:
        header = read_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > len(buf):
            raise CorruptRecordError(
                f"batch at byte {pos} declares {header.size} bytes but only {len(buf) - pos} remain", position=pos
            )
    end = pos + header.size
    count = header.records_count
    if count < 0:
        raise CorruptRecordError(f"batch at byte {pos} has negative record count {count}", position=pos)
    log_append_time = header.max_timestamp if header.timestamp_type == 1 else None
    codec = header.compression
    if count == 0 and end == pos + HEADER_SIZE:
        # A batch the cleaner emptied: no records section, not even an empty compressed stream.
        return header, []
    if codec == COMPRESSION_NONE:
        # Slices of a bytearray would be copied twice (slice, then bytes()); a memoryview once.
        view = buf if isinstance(buf, bytes) else memoryview(buf)
        records = _decode_records(
            view, pos + HEADER_SIZE, end, count, header.base_offset, header.base_timestamp, log_append_time, 0, pos
        )
    else:
        try:
            data = decompress(codec, memoryview(buf)[pos + HEADER_SIZE : end])
        except CorruptRecordError as e:
            raise CorruptRecordError(f"batch at byte {pos}: {e}", position=pos) from e
        except InvalidRecordError as e:
            raise InvalidRecordError(f"batch at byte {pos}: {e}", position=pos + ATTRIBUTES_OFFSET) from e
        records = _decode_records(
            data, 0, len(data), count, header.base_offset, header.base_timestamp, log_append_time, pos, pos
        )
    return header, records


def record_at_or_after(buf: BytesLike, pos: int, timestamp: int, start_offset: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of the batch at ``pos`` with a timestamp at or after
    ``timestamp`` and an offset at or after ``start_offset``, or None when no record of this batch
    qualifies (the search goes on with the next batch), as Kafka's LogSegment.findOffsetByTimestamp
    looks inside a batch. ListOffsets by timestamp, local and remote; decompresses, so never on
    the event loop. A LogAppendTime batch gives every record its max timestamp: nothing to decode,
    unless the cleaner took records out of it (its first offsets may be gone, or all of them)."""
    h = read_header(buf, pos)
    if h.timestamp_type == 1 and h.records_count == h.last_offset_delta + 1:
        if h.max_timestamp >= timestamp and h.last_offset >= start_offset:
            return max(h.base_offset, start_offset), h.max_timestamp
        return None
    _, records = decode_batch(buf, pos)
    for r in records:
        if r.timestamp >= timestamp and r.offset >= start_offset:
            return r.offset, r.timestamp
    return None


def iter_batches_records(
    buf: BytesLike,
    start: int = 0,
    *,
    verify_crc: bool = True,
    stop_at_partial: bool = False,
    on_corrupt: Callable[[int, BatchHeader | None, RecordError], None] | None = None,
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Decode every v2 batch of a segment or fetch response, in order.

    A trailing partial batch raises CorruptRecordError unless ``stop_at_partial`` is set (a fetch
    response may legitimately end with one). With ``on_corrupt``, a batch that does not decode is
    handed to it (position, header when its 61 bytes read as one, error) and skipped when its
    length says where the next batch starts; a length that cannot (shorter than a header) is
    handed over the same way and ends the walk.
    """
    pos = start
    n = len(buf)
    while pos < n:
        if n - pos < HEADER_SIZE or pos + peek_size(buf, pos) > n:
            if stop_at_partial:
                return
            raise CorruptRecordError(f"partial batch at byte {pos}: only {n - pos} bytes remain", position=pos)
        if on_corrupt is None:
            header, records = decode_batch(buf, pos, verify_crc=verify_crc)
            yield header, records
            pos += header.size
            continue
        size = peek_size(buf, pos)
        try:
            header, records = decode_batch(buf, pos, verify_crc=verify_crc)
        except RecordError as exc:
            try:
                readable: BatchHeader | None = read_header(buf, pos)
            except RecordError:
                readable = None
            on_corrupt(pos, readable, exc)
            if size < HEADER_SIZE:
                return
            pos += size
            continue
        yield header, records
        pos += size


def _decode_records(
    data: BytesLike,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    compressed_at: int,
    batch_pos: int,
) -> list[Record]:
    """Parse ``count`` records from ``data[pos:end]``, which they must fill exactly.

    ``compressed_at`` is 0 for an uncompressed batch (positions are then absolute in the
    buffer); otherwise positions are within the decompressed data and errors name the batch.
    """

    def rv(p: int) -> tuple[int, int]:
        # read_varint's own error would carry a position inside decompressed data; reword it here.
        try:
            return read_varint(data, p)
        except CorruptRecordError:
            raise fail("varint truncated or longer than 10 bytes", p) from None

    def fail(msg: str, at: int) -> CorruptRecordError:
        if compressed_at:
            return CorruptRecordError(
                f"batch at byte {batch_pos}: {msg} at byte {at} of the decompressed records", position=batch_pos
            )
        return CorruptRecordError(f"batch at byte {batch_pos}: {msg} at byte {at}", position=at)

    records: list[Record] = []
    append = records.append
    if count > (end - pos) // MIN_RECORD_SIZE:
        # A huge count is corruption, not a reason to loop.
        raise fail(f"record count {count} cannot fit in {end - pos} bytes", pos)
    rec_start = pos
    try:
        for _ in range(count):
            rec_start = pos
            # Inlined single-byte fast paths of read_varint: this loop is the decoder's hot spot.
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = rv(pos)
            rec_end = pos + length
            if length < 0 or rec_end > end:
                raise fail(f"record length {length} overruns the batch", rec_start)
            pos += 1  # attributes: unused, always 0
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = rv(pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = rv(pos)
            b = data[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = rv(pos)
            if klen < 0:
                if klen != -1:
                    raise fail(f"invalid key length {klen}", pos)
                key = None
            else:
                if pos + klen > rec_end:
                    raise fail(f"key length {klen} overruns the record", pos)
                key = bytes(data[pos : pos + klen])
                pos += klen
            b = data[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = rv(pos)
            if vlen < 0:
                if vlen != -1:
                    raise fail(f"invalid value length {vlen}", pos)
                value = None
            else:
                if pos + vlen > rec_end:
                    raise fail(f"value length {vlen} overruns the record", pos)
                value = bytes(data[pos : pos + vlen])
                pos += vlen
            b = data[pos]
            if b < 0x80:
                hcount = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                hcount, pos = rv(pos)
            headers: list[Header] = []
            if hcount:
                if hcount < 0 or hcount > rec_end - pos:
                    raise fail(f"invalid header count {hcount}", pos)
                for _h in range(hcount):
                    hklen, pos = rv(pos)
                    if hklen < 0 or pos + hklen > rec_end:
                        raise fail(f"invalid header key length {hklen}", pos)
                    try:
                        hkey = str(data[pos : pos + hklen], "utf-8")
                    except UnicodeDecodeError:
                        raise fail("header key is not valid UTF-8", pos) from None
                    pos += hklen
                    hvlen, pos = rv(pos)
                    if hvlen < 0:
                        if hvlen != -1:
                            raise fail(f"invalid header value length {hvlen}", pos)
                        hval = None
                    else:
                        if pos + hvlen > rec_end:
                            raise fail(f"header value length {hvlen} overruns the record", pos)
                        hval = bytes(data[pos : pos + hvlen])
                        pos += hvlen
                    headers.append((hkey, hval))
            if pos != rec_end:
                raise fail(f"record declares {length} bytes but its fields take {pos - (rec_end - length)}", rec_start)
            append(
                Record(
                    base_offset + offset_delta,
                    base_timestamp + ts_delta if log_append_time is None else log_append_time,
                    key,
                    value,
                    headers,
                )
            )
    except IndexError:
        raise fail("record truncated", rec_start) from None
    if pos != end:
        raise fail(f"{end - pos} bytes left over after {count} records", pos)
    return records


def parse_control_record(record: Record) -> ControlRecord:
    """Read the key (version, type) and value (version, coordinatorEpoch) of a control record."""
    if record.key is None or len(record.key) < CONTROL_KEY.size:
        raise CorruptRecordError(f"control record at offset {record.offset} has a short key")
    version, ctype = CONTROL_KEY.unpack_from(record.key)
    epoch = None
    if ctype in (CONTROL_ABORT, CONTROL_COMMIT):
        if record.value is None or len(record.value) < CONTROL_VALUE.size:
            raise CorruptRecordError(f"transaction marker at offset {record.offset} has a short value")
        _, epoch = CONTROL_VALUE.unpack_from(record.value)
    return ControlRecord(version, ctype, epoch)


# ---------------------------------------------------------------------------------------------
# Building

# A Record, or (key, value[, headers[, timestamp]]) with any of the last two None or left out.
RecordInput = Union[Record, Sequence[Any]]


def build_batch(
    records: Iterable[RecordInput],
    *,
    base_offset: int = 0,
    codec: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: int = 0,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Build one v2 batch, byte-identical to what Kafka's Java producer writes for the same input.

    ``records`` holds either ``Record`` objects, whose offsets must be ascending and at least
    ``base_offset`` (gaps are kept, as after compaction), or tuples ``(key, value[, headers[,
    timestamp]])`` that take consecutive offsets from ``base_offset``. A missing or None
    timestamp means now. The first record's timestamp is the batch's baseTimestamp, unless
    ``delete_horizon_ms`` is given: then, as the cleaner writes a batch under KIP-534, the horizon is
    the baseTimestamp, the delete-horizon attribute is set and record timestamps are deltas from it.
    """
    if codec & ~COMPRESSION_MASK or codec > 4:
        raise InvalidRecordError(f"unknown compression codec {codec}")
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
    if is_transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id")
    if delete_horizon_ms is not None and delete_horizon_ms < 0:
        raise ValueError(f"delete_horizon_ms must be a timestamp, not {delete_horizon_ms}")
    body = bytearray()
    rec = bytearray()
    count = 0
    base_ts = NO_TIMESTAMP
    max_ts = NO_TIMESTAMP
    last_delta = -1
    key: bytes | None
    value: bytes | None
    headers: Sequence[HeaderInput]
    ts: int | None
    for item in records:
        if isinstance(item, Record):
            delta = item.offset - base_offset
            key, value, headers, ts = item.key, item.value, item.headers, item.timestamp
            if delta <= last_delta:
                raise ValueError(f"record offsets must ascend from base_offset {base_offset}: got {item.offset}")
        else:
            delta = last_delta + 1
            key, value = item[0], item[1]
            headers = item[2] if len(item) > 2 and item[2] is not None else ()
            ts = item[3] if len(item) > 3 else None
        if delta > _I32_MAX:
            raise ValueError(f"offset delta {delta} does not fit an int32")
        if ts is None:
            ts = int(time.time() * 1000)
        if count == 0:
            max_ts = ts
            base_ts = ts if delete_horizon_ms is None else delete_horizon_ms
        elif ts > max_ts:
            max_ts = ts
        ts_delta = ts - base_ts
        if not _I64_MIN <= ts_delta <= _I64_MAX:
            raise ValueError(f"timestamp {ts} is too far from the batch's first timestamp {base_ts}")
        _encode_record(rec, ts_delta, delta, key, value, headers)
        write_varint(body, len(rec))
        body += rec
        del rec[:]
        last_delta = delta
        count += 1
    if count == 0:
        raise ValueError("a batch needs at least one record")
    payload = compress(codec, body) if codec != COMPRESSION_NONE else body
    attributes = codec
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    return bytes(seal_batch(payload, base_offset, last_delta, partition_leader_epoch, attributes, base_ts, max_ts,
                            producer_id, producer_epoch, base_sequence, count))


def _encode_record(
    out: bytearray,
    ts_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[HeaderInput],
) -> None:
    out.append(0)  # attributes: none are defined for records
    write_varint(out, ts_delta)
    write_varint(out, offset_delta)
    _write_nullable(out, key, "key")
    _write_nullable(out, value, "value")
    write_varint(out, len(headers))
    for hkey, hval in headers:
        if isinstance(hkey, str):
            hkey = hkey.encode("utf-8")
        elif not isinstance(hkey, (bytes, bytearray, memoryview)):
            raise TypeError(f"header key must be str, not {type(hkey).__name__}")
        write_varint(out, len(hkey))
        out += hkey
        _write_nullable(out, hval, "header value")


def _write_nullable(out: bytearray, data: bytes | bytearray | memoryview | None, what: str) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
        return
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"record {what} must be bytes or None, not {type(data).__name__}")
    write_varint(out, len(data))
    out += data


def build_empty_batch(
    base_offset: int,
    last_offset: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    timestamp_type: int,
    max_timestamp: int,
    is_transactional: bool,
    is_control: bool,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """A batch whose records were all removed, the 61-byte header alone (Kafka's
    DefaultRecordBatch.writeEmptyHeader): the cleaner keeps one where a producer's last sequence and
    epoch, or a transaction's marker, must survive. It spans ``base_offset..last_offset`` as the
    original did (so the next sequence the producer may send is still known) and holds no record.

    As Kafka writes it: uncompressed, recordsCount 0, baseTimestamp -1 (no record to be the first)
    and ``max_timestamp`` the original batch's. With ``delete_horizon_ms`` the KIP-534 flag is set and
    the horizon takes the baseTimestamp's place (Kafka never sets it on an empty batch, but reads it
    the same way).
    """
    delta = last_offset - base_offset
    if not 0 <= delta <= _I32_MAX:
        raise ValueError(f"last_offset {last_offset} must be at least base_offset {base_offset}, within an int32")
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
    if delete_horizon_ms is not None and delete_horizon_ms < 0:
        raise ValueError(f"delete_horizon_ms must be a timestamp, not {delete_horizon_ms}")
    attributes = COMPRESSION_NONE
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    base_timestamp = NO_TIMESTAMP if delete_horizon_ms is None else delete_horizon_ms
    return bytes(seal_batch(b"", base_offset, delta, partition_leader_epoch, attributes, base_timestamp, max_timestamp,
                            producer_id, producer_epoch, base_sequence, 0))


def seal_batch(
    payload: bytes | bytearray | memoryview,
    base_offset: int,
    last_offset_delta: int,
    partition_leader_epoch: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytearray:
    """A v2 batch: the header with these fields, its length and CRC computed, before ``payload``
    (the records section, compressed as ``attributes`` says)."""
    out = bytearray(HEADER_SIZE)
    out += payload
    HEADER_STRUCT.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        2,
        0,  # CRC, filled below once the bytes it covers are final
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return out


def build_control_batch(
    control_type: int,
    producer_id: int,
    producer_epoch: int,
    base_offset: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    *,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch: one control record, transactional and control bits set."""
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise ValueError(f"control_type must be 0 (ABORT) or 1 (COMMIT), not {control_type}")
    key = CONTROL_KEY.pack(0, control_type)
    value = CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [Record(base_offset, timestamp, key, value, [])],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
