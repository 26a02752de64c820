"""Whole record batches (bytes of a segment) to one Arrow batch with the schema of Spark's Kafka source.

Columns (``KafkaRecordToRowConverter``): ``key binary, value binary, topic string, partition int,
offset long, timestamp timestamp, timestampType int`` and, with ``includeHeaders``, ``headers
array<struct<key string, value binary>>``, null (not empty) for a record without headers.

Batches are parsed and decompressed by ``tieredlog.records`` (all five codecs, CRC checked); this
module only moves the records' fields into per-column lists. Control batches (transaction markers)
are skipped, as are records outside ``[from_offset, to_offset)`` and the batches of aborted
transactions (read_committed: the planner lists them, see :mod:`spark_readers.transactions`), which
are dropped by their header, without decompressing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from tieredlog.records.batch import HEADER_SIZE, BatchHeader, peek_size, read_header
from tieredlog.records.errors import RecordError
from tieredlog.records.record import decode_batch

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


def decode_records(data: bytes, source: Source, from_offset: int, to_offset: int,
                   include_headers: bool, aborted: Sequence[tuple[int, int, int]] = ()) -> pa.RecordBatch:
    """Records of the whole batches in ``data`` with offsets in ``[from_offset, to_offset)``, but
    those of the ``aborted`` transactions ``(producer id, first offset, marker offset)``."""
    dropped = _aborted_ranges(aborted)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    timestamps: list[int] = []  # microseconds
    timestamp_types: list[int] = []
    header_keys: list[str] = []
    header_values: list[bytes | None] = []
    header_offsets: list[int] = [0]
    header_present: list[bool] = []
    pos, n = 0, len(data)
    while pos < n:
        try:
            if n - pos < HEADER_SIZE or pos + peek_size(data, pos) > n:
                raise CorruptSegmentError(
                    f"{source.object_name}: partial batch at byte {source.base_position + pos} "
                    f"({n - pos} bytes left)")
            header = read_header(data, pos)
            if header.next_offset <= from_offset or header.is_control or (
                    dropped and header.is_transactional and _in_aborted(dropped, header)):
                pos += header.size
                continue
            if header.base_offset >= to_offset:
                break
            header, records = decode_batch(data, pos)
        except RecordError as exc:
            at = source.base_position + (exc.position if exc.position is not None else pos)
            raise CorruptSegmentError(f"{source.object_name}: corrupt batch at byte {at}: {exc}") from None
        ts_type = header.timestamp_type
        for r in records:
            if not from_offset <= r.offset < to_offset:
                continue
            keys.append(r.key)
            values.append(r.value)
            offsets.append(r.offset)
            timestamps.append(r.timestamp * 1000)
            timestamp_types.append(ts_type)
            if include_headers:
                for hk, hv in r.headers:
                    header_keys.append(hk)
                    header_values.append(hv)
                header_offsets.append(len(header_keys))
                header_present.append(bool(r.headers))
        pos += header.size
    count = len(offsets)
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(source.topic, pa.string()), count),
        pa.repeat(pa.scalar(source.partition, pa.int32()), count),
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.int64()).cast(TIMESTAMP_TYPE),
        pa.array(timestamp_types, pa.int32()),
    ]
    if include_headers:
        items = pa.StructArray.from_arrays(
            [pa.array(header_keys, pa.string()), pa.array(header_values, pa.binary())], fields=list(HEADER_TYPE))
        # null, not [], for a record without headers: Spark's Kafka source does the same
        mask = pa.array([not present for present in header_present], pa.bool_())
        columns.append(pa.ListArray.from_arrays(pa.array(header_offsets, pa.int32()), items, type=HEADERS_TYPE,
                                                mask=mask))
    return pa.RecordBatch.from_arrays(columns, schema=kafka_schema(include_headers))
