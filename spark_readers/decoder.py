"""Whole record batches (bytes of a segment) to one Arrow batch with the schema of Spark's Kafka source.

Columns (``KafkaRecordToRowConverter``): ``key binary, value binary, topic string, partition int,
offset long, timestamp timestamp, timestampType int`` and, with ``includeHeaders``, ``headers
array<struct<key string, value binary>>``, null (not empty) for a record without headers.

Batches are checked (sizes, CRC-32C) and decompressed, once each, by ``tieredlog.records``; their
records are decoded into column arrays by :mod:`spark_readers.columns` (numpy, no object per record)
and the binary columns gathered from the records' bytes by Arrow. Control batches (transaction markers) are
skipped, as are records outside ``[from_offset, to_offset)`` and the batches of aborted transactions
(read_committed: the planner lists them, see :mod:`spark_readers.transactions`), which are dropped by
their header, without decompressing them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from spark_readers.columns import BatchRecords, RecordColumns, decode_columns
from tieredlog.formats.errors import CorruptRecordError, RecordError
from tieredlog.records.batch import (
    COMPRESSION_NONE,
    HEADER_SIZE,
    BatchHeader,
    BytesLike,
    peek_size,
    read_header,
    validate_batch,
)
from tieredlog.records.codecs import decompress

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
# Spark names the item field of an array "element" and compares it too.
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    # Kafka timestamps are epoch milliseconds; Spark's TimestampType is microseconds since the epoch,
    # UTC, and Spark checks the Arrow type of what read() yields exactly.
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
SPARK_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
             "timestampType int")
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"


def kafka_schema(include_headers: bool) -> pa.Schema:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def spark_ddl(include_headers: bool) -> str:
    return SPARK_DDL + (HEADERS_DDL if include_headers else "")


class CorruptSegmentError(Exception):
    """Bytes of a segment object that are not whole, valid batches; names the object and byte."""


@dataclass(frozen=True, slots=True)
class Source:
    """Where the bytes came from: for the rows' topic/partition columns and for error messages."""

    topic: str
    partition: int
    object_name: str
    # The position of the buffer's first byte in the object.
    base_position: int


def _aborted_ranges(aborted: Sequence[tuple[int, int, int]]) -> dict[int, list[tuple[int, int]]]:
    """Producer id -> the ``[first offset, marker offset)`` ranges of its aborted transactions."""
    out: dict[int, list[tuple[int, int]]] = {}
    for producer_id, first, marker in aborted:
        out.setdefault(producer_id, []).append((first, marker))
    return out


def _in_aborted(dropped: dict[int, list[tuple[int, int]]], header: BatchHeader) -> bool:
    """A transactional batch lies in one of its producer's aborted transactions: a producer has one
    transaction open at a time, from its first batch to its marker."""
    ranges = dropped.get(header.producer_id)
    return ranges is not None and any(first <= header.base_offset and header.last_offset < marker
                                      for first, marker in ranges)


def decode_records(data: BytesLike, source: Source, from_offset: int, to_offset: int,
                   include_headers: bool, aborted: Sequence[tuple[int, int, int]] = ()) -> pa.RecordBatch:
    """Records of the whole batches in ``data`` with offsets in ``[from_offset, to_offset)``, but
    those of the ``aborted`` transactions ``(producer id, first offset, marker offset)``."""
    picked = checked_batches(data, source, from_offset, to_offset, aborted)
    return _decode(data, source, picked, from_offset, to_offset, include_headers)


def checked_batches(data: BytesLike, source: Source, from_offset: int, to_offset: int,
                    aborted: Sequence[tuple[int, int, int]] = ()) -> list[tuple[int, BatchHeader]]:
    """(position, header) of the batches of ``data`` that hold wanted records, each checked whole
    (sizes, CRC-32C): the part of the decoding that a fetching thread can do while another batch is
    decoded, the CRC being computed without the interpreter lock."""
    picked = _batches(data, source, from_offset, to_offset, _aborted_ranges(aborted))
    for pos, h in picked:
        try:
            validate_batch(data, pos, check_records=False)
            if h.records_count < 0:
                raise CorruptRecordError(f"negative record count {h.records_count}", position=pos)
        except RecordError as exc:
            raise _corrupt(source, pos, exc) from None
    return picked


def decode_record_batches(data: BytesLike, source: Source, from_offset: int, to_offset: int,
                          include_headers: bool, aborted: Sequence[tuple[int, int, int]] = (),
                          batch_bytes: int = 8 << 20) -> Iterator[pa.RecordBatch]:
    """:func:`decode_records` in Arrow batches of about ``batch_bytes`` of ``data`` each (at least one
    record batch), so that a consumer of the first (Spark's JVM) works while the next decodes."""
    picked = checked_batches(data, source, from_offset, to_offset, aborted)
    return decode_checked_batches(data, source, picked, from_offset, to_offset, include_headers, batch_bytes)


def decode_checked_batches(data: BytesLike, source: Source, picked: list[tuple[int, BatchHeader]],
                           from_offset: int, to_offset: int, include_headers: bool,
                           batch_bytes: int = 8 << 20) -> Iterator[pa.RecordBatch]:
    """:func:`decode_record_batches` of the batches :func:`checked_batches` picked."""
    first = 0
    while first < len(picked) or first == 0:
        last = first + 1
        limit = picked[first][0] + batch_bytes if picked else 0
        while last < len(picked) and picked[last][0] < limit:
            last += 1
        yield _decode(data, source, picked[first:last], from_offset, to_offset, include_headers)
        first = last


def _decode(data: BytesLike, source: Source, picked: list[tuple[int, BatchHeader]], from_offset: int,
            to_offset: int, include_headers: bool) -> pa.RecordBatch:
    arena, sections = _arena(data, source, picked)
    batches = [BatchRecords(start, end, h.records_count, h.base_offset, h.base_timestamp,
                            h.max_timestamp if h.timestamp_type == 1 else None, h.timestamp_type)
               # a batch the cleaner emptied has no records section at all
               for (_, h), (start, end) in zip(picked, sections) if not (start == end and h.records_count == 0)]
    try:
        columns = decode_columns(arena, batches, from_offset, to_offset, include_headers)
    except CorruptRecordError as exc:
        raise _corrupt_record(source, picked, sections, exc) from None
    return _to_arrow(columns, pa.py_buffer(arena), source, picked)


def _corrupt_record(source: Source, picked: list[tuple[int, BatchHeader]], sections: list[tuple[int, int]],
                    exc: CorruptRecordError) -> CorruptSegmentError:
    """``exc`` (at a position in the arena) named by its batch's byte in the object."""
    at = exc.position if exc.position is not None else sections[0][0]
    i = max(bisect.bisect_right([start for start, _ in sections], at) - 1, 0)
    (pos, h), (start, _) = picked[i], sections[i]
    where = (f"byte {source.base_position + pos + HEADER_SIZE + at - start}" if h.compression == COMPRESSION_NONE
             else f"byte {at - start} of its decompressed records")
    return CorruptSegmentError(f"{source.object_name}: corrupt batch at byte {source.base_position + pos}: "
                               f"{exc} at {where}")


def _arena(data: BytesLike, source: Source, picked: list[tuple[int, BatchHeader]]) -> tuple[BytesLike, list[tuple[int, int]]]:
    """The bytes the records are walked in and their binary columns gathered from, and where each
    picked batch (checked by :func:`checked_batches`) has its records section in them. The segment's
    bytes themselves when no batch is compressed; else every records section, decompressed (once) or
    not, end to end."""
    if all(h.compression == COMPRESSION_NONE for _, h in picked):
        return data, [(pos + HEADER_SIZE, pos + h.size) for pos, h in picked]
    arena = bytearray()
    sections: list[tuple[int, int]] = []
    for pos, h in picked:
        start, end = pos + HEADER_SIZE, pos + h.size
        try:
            if h.compression == COMPRESSION_NONE:
                section: BytesLike = memoryview(data)[start:end]
            else:
                section = decompress(h.compression, memoryview(data)[start:end])
        except RecordError as exc:
            raise _corrupt(source, pos, exc) from None
        sections.append((len(arena), len(arena) + len(section)))
        arena += section
    return arena, sections


def _batches(data: BytesLike, source: Source, from_offset: int, to_offset: int,
             dropped: dict[int, list[tuple[int, int]]]) -> list[tuple[int, BatchHeader]]:
    """(position, header) of the batches holding wanted records, by their headers alone."""
    picked: list[tuple[int, BatchHeader]] = []
    pos, n = 0, len(data)
    while pos < n:
        try:
            if n - pos < HEADER_SIZE or pos + peek_size(data, pos) > n:
                raise CorruptSegmentError(
                    f"{source.object_name}: partial batch at byte {source.base_position + pos} "
                    f"({n - pos} bytes left)")
            header = read_header(data, pos)
        except RecordError as exc:
            raise _corrupt(source, pos, exc) from None
        if header.base_offset >= to_offset:
            break
        if not (header.next_offset <= from_offset or header.is_control or (
                dropped and header.is_transactional and _in_aborted(dropped, header))):
            picked.append((pos, header))
        pos += header.size
    return picked


def _corrupt(source: Source, pos: int, exc: RecordError) -> CorruptSegmentError:
    at = source.base_position + (exc.position if exc.position is not None else pos)
    return CorruptSegmentError(f"{source.object_name}: corrupt batch at byte {at}: {exc}")


def _fragments(cuts: npt.NDArray[np.int64], arena: pa.Buffer) -> pa.Array:
    """The arena cut at ``cuts``: fragment ``4i`` is the ``i``th key (or header key), ``4i + 2`` its value."""
    if not len(cuts):
        return pa.array([], pa.large_binary())
    return pa.Array.from_buffers(pa.large_binary(), len(cuts) - 1, [None, pa.py_buffer(cuts), arena])


def _gather(fragments: pa.Array, first: int, count: int, valid: npt.NDArray[np.bool_] | None) -> pa.Array:
    """Fragments ``first, first + 4, ...`` (``count`` of them) as one binary array, null where
    ``valid`` is false."""
    indices = pa.array(np.arange(first, first + 4 * count, 4, dtype=np.int64),
                       mask=None if valid is None else ~valid)  # a null index takes a null
    return fragments.take(indices).cast(pa.binary())


def _to_arrow(columns: RecordColumns, arena: pa.Buffer, source: Source,
              picked: list[tuple[int, BatchHeader]]) -> pa.RecordBatch:
    count = len(columns)
    fragments = _fragments(columns.cuts, arena)
    arrays = [
        _gather(fragments, 0, count, columns.key_valid),
        _gather(fragments, 2, count, columns.value_valid),
        pa.repeat(pa.scalar(source.topic, pa.string()), count),
        pa.repeat(pa.scalar(source.partition, pa.int32()), count),
        pa.array(columns.offsets),
        # Kafka timestamps are epoch milliseconds, Spark's microseconds
        pc.multiply_checked(pa.array(columns.timestamps), 1000).cast(TIMESTAMP_TYPE),
        pa.array(columns.timestamp_types),
    ]
    if columns.include_headers:
        arrays.append(_headers(columns, arena, source, picked))
    return pa.RecordBatch.from_arrays(arrays, schema=kafka_schema(columns.include_headers))


def _headers(columns: RecordColumns, arena: pa.Buffer, source: Source,
             picked: list[tuple[int, BatchHeader]]) -> pa.Array:
    header_count = len(columns.header_cuts) >> 2
    fragments = _fragments(columns.header_cuts, arena)
    keys = _gather(fragments, 0, header_count, None)
    try:
        text = keys.cast(pa.string())
    except pa.ArrowInvalid:
        raise _bad_header_key(columns, keys, source, picked) from None
    items = pa.StructArray.from_arrays(
        [text, _gather(fragments, 2, header_count, columns.header_value_valid)], fields=list(HEADER_TYPE))
    list_offsets = pa.array(columns.header_offsets)
    # null, not [], for a record without headers: Spark's Kafka source does the same
    mask = pc.equal(list_offsets[1:], list_offsets[:-1])
    return pa.ListArray.from_arrays(list_offsets, items, type=HEADERS_TYPE, mask=mask)


def _bad_header_key(columns: RecordColumns, keys: pa.Array, source: Source,
                    picked: list[tuple[int, BatchHeader]]) -> CorruptSegmentError:
    """Which record's header key is not UTF-8, by its batch's position: found only on this path."""
    bad = next(i for i, k in enumerate(keys.to_pylist()) if not _is_utf8(k))
    offset = int(columns.offsets[int(np.searchsorted(columns.header_offsets, bad, side="right")) - 1])
    pos = next(p for p, h in picked if h.base_offset <= offset <= h.last_offset)
    return CorruptSegmentError(f"{source.object_name}: corrupt batch at byte {source.base_position + pos}: "
                               f"a header key of the record at offset {offset} is not valid UTF-8")


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
