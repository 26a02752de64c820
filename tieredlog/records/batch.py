"""RecordBatch v2 headers: the only part of a batch the broker looks at.

The broker treats batches as opaque bytes. It reads the fixed 61-byte header,
checks the CRC-32C (which covers attributes..end, so base offset and partition
leader epoch can be patched in place without recomputing it), and never
decompresses on the produce or fetch path.

Layout (big-endian), offsets in bytes:
  0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8
  17 crc u32 | 21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64
  35 maxTimestamp i64 | 43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32
  57 recordsCount i32 | 61 records...
"""

from __future__ import annotations

import functools
import mmap
import struct
from typing import Callable, Iterator, NamedTuple, TypeAlias

import crc32c as _crc32c

from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError
from tieredlog.formats.record_walk import MIN_RECORD_BODY, MIN_RECORD_SIZE
from tieredlog.formats.varint import read_varint

HEADER_SIZE = 61
# baseOffset + batchLength: the part of a batch not counted in batchLength.
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
PARTITION_LEADER_EPOCH_OFFSET = 12
BATCH_LENGTH_OFFSET = 8
LAST_OFFSET_DELTA_OFFSET = 23

# What the readers here accept: anything that indexes to ints and slices, including a mapped segment.
BytesLike: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength: common to every magic
# Public name for the header layout, for code that builds batches (records.record).
HEADER_STRUCT = _HEADER
MAX_TIMESTAMP_OFFSET = 35


class BatchHeader(NamedTuple):
    """The 13 fields of a v2 header, in wire order: one ``HEADER_STRUCT.unpack_from`` is the whole
    construction, so a header costs one tuple, not 13 frozen-attribute stores. Immutable; a changed
    copy is ``h._replace(field=value)``."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on disk or on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """KIP-534: the cleaner has seen this batch's tombstones and transaction markers; the base
        timestamp is then the time after which it may drop them, no longer the first record's."""
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon when the flag is set (Kafka's RecordBatch.deleteHorizonMs), else None."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at int32 max, as in Kafka's DefaultRecordBatch.incrementSequence.
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


# BatchHeader from the 13 values of one unpack, without NamedTuple's keyword handling or length check
# (the struct always gives 13).
_make_header: Callable[[tuple[int, ...]], BatchHeader] = functools.partial(tuple.__new__, BatchHeader)


def read_header(buf: BytesLike, pos: int = 0) -> BatchHeader:
    """Parse the v2 header at ``pos``. Raises CorruptRecordError if it does not fit."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"batch header truncated at byte {pos}", position=pos)
    h = _make_header(_HEADER.unpack_from(buf, pos))
    if h.magic != 2:
        raise InvalidRecordError(f"unsupported magic {h.magic} at byte {pos}", position=pos)
    return h


def peek_size(buf: BytesLike, pos: int = 0) -> int:
    """Size in bytes of the batch (any magic) starting at ``pos``, from its length prefix."""
    if len(buf) - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length prefix truncated at byte {pos}", position=pos)
    length: int = _PREFIX.unpack_from(buf, pos)[1]
    return length + LOG_OVERHEAD


def next_offset_at(buf: BytesLike, pos: int = 0) -> int:
    """The offset after the v2 batch at ``pos``, from two header fields (no checks: for a caller that
    has already measured the whole batch, where parsing all 61 bytes would be wasted)."""
    base_offset: int = _I64.unpack_from(buf, pos)[0]
    last_offset_delta: int = _I32.unpack_from(buf, pos + LAST_OFFSET_DELTA_OFFSET)[0]
    return base_offset + last_offset_delta + 1


def compute_crc(buf: BytesLike, pos: int, size: int) -> int:
    crc: int = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
    return crc


def validate_batch(buf: BytesLike, pos: int = 0, max_size: int | None = None, *, check_records: bool = True) -> BatchHeader:
    """Read and fully check the v2 batch at ``pos``: sizes, magic, CRC-32C, counts, and (unless
    ``check_records`` is false) what :func:`check_records_section` can tell of the records in
    constant time. Readers that decode the records anyway, and recovery (which, as Kafka's, keeps
    every batch whose CRC holds), pass ``check_records=False``."""
    h = read_header(buf, pos)
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at byte {pos} has length {h.batch_length}, below the minimum {HEADER_SIZE - LOG_OVERHEAD}",
            position=pos,
        )
    if pos + h.size > len(buf):
        raise CorruptRecordError(
            f"batch at byte {pos} declares {h.size} bytes but only {len(buf) - pos} remain", position=pos
        )
    if max_size is not None and h.size > max_size:
        raise InvalidRecordError(f"batch at byte {pos} is {h.size} bytes, over the limit {max_size}", position=pos)
    if h.last_offset_delta < 0 or h.records_count < 0:
        raise CorruptRecordError(f"batch at byte {pos} has negative counts", position=pos)
    if h.records_count and h.last_offset_delta + 1 < h.records_count:
        raise CorruptRecordError(
            f"batch at byte {pos} has {h.records_count} records but lastOffsetDelta {h.last_offset_delta}", position=pos
        )
    crc = compute_crc(buf, pos, h.size)
    if crc != h.crc:
        raise CorruptRecordError(
            f"batch at byte {pos} fails CRC-32C check (stored {h.crc:#010x}, computed {crc:#010x})", position=pos
        )
    if check_records:
        check_records_section(buf, pos, h)
    return h


_GZIP_MAGIC = b"\x1f\x8b\x08"  # id1 id2 and deflate, the only gzip method
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_SKIPPABLE_TAIL = b"\x2a\x4d\x18"  # a skippable frame (0x184D2A5?) may come first


def check_records_section(buf: BytesLike, pos: int, h: BatchHeader) -> None:
    """Kafka's produce-time record rules that need no more than a few bytes of the records section,
    so a batch costs the same whatever its record count: a known codec; for an uncompressed batch,
    a record count the bytes can hold and a first record that fits (and, alone, fills the batch);
    for a compressed one, data that starts as its codec's frames do. The rest of the records is not
    read (the broker never decodes records on produce). Record errors raise InvalidRecordError
    (Kafka's INVALID_RECORD), a codec stream that cannot be one CorruptRecordError."""
    codec = h.attributes & COMPRESSION_MASK
    if codec > COMPRESSION_ZSTD:
        raise InvalidRecordError(f"batch at byte {pos} has unknown compression codec {codec}", position=pos)
    count = h.records_count
    if count <= 0:
        return  # an empty batch (compaction keeps them) has no records section to check
    start = pos + HEADER_SIZE
    end = pos + h.size
    if codec == COMPRESSION_NONE:
        if count > (end - start) // MIN_RECORD_SIZE:
            raise InvalidRecordError(
                f"batch at byte {pos}: record count {count} cannot fit in {end - start} bytes", position=pos
            )
        length, body = _first_record_length(buf, start, end, pos)
        record_end = body + length
        if length < MIN_RECORD_BODY or end - record_end < (count - 1) * MIN_RECORD_SIZE:
            raise InvalidRecordError(
                f"batch at byte {pos}: first record length {length} does not fit a batch of {count} records",
                position=start,
            )
        if count == 1 and record_end != end:
            raise InvalidRecordError(
                f"batch at byte {pos}: {end - record_end} bytes left over after its only record", position=record_end
            )
        return
    if start == end:
        raise CorruptRecordError(f"batch at byte {pos} holds no {COMPRESSION_NAMES[codec]} data", position=pos)
    head = bytes(buf[start : min(start + 4, end)])
    if codec == COMPRESSION_GZIP:
        ok = head[:3] == _GZIP_MAGIC
    elif codec == COMPRESSION_LZ4:
        ok = head == _LZ4_FRAME_MAGIC
    elif codec == COMPRESSION_ZSTD:
        ok = head == _ZSTD_FRAME_MAGIC or (len(head) == 4 and head[0] >> 4 == 5 and head[1:] == _ZSTD_SKIPPABLE_TAIL)
    else:
        ok = True  # snappy: raw blocks (librdkafka) have no magic to check
    if not ok:
        raise CorruptRecordError(
            f"batch at byte {pos}: data does not start as {COMPRESSION_NAMES[codec]} data does", position=pos
        )


def _first_record_length(buf: BytesLike, start: int, end: int, pos: int) -> tuple[int, int]:
    """The first record's zigzag length varint and where its body starts, read within the batch."""
    b = buf[start]
    if b < 0x80:  # the one-byte length of records under 64 bytes, without a call
        return (b >> 1) ^ -(b & 1), start + 1
    try:
        length, body = read_varint(buf, start)
    except CorruptRecordError:
        body = end + 1
    if body > end:  # read at most 10 bytes past the start, then held to the batch
        raise InvalidRecordError(f"batch at byte {pos}: first record length is not a varint", position=start)
    return length, body


def iter_headers(buf: BytesLike, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole v2 batch in ``buf[start:end]`` without CRC checks.

    Stops silently at a trailing partial batch (a fetch response may end with one).
    """
    end = len(buf) if end is None else end
    pos = start
    while end - pos >= HEADER_SIZE:
        size = peek_size(buf, pos)
        if size < HEADER_SIZE or pos + size > end:
            return
        yield pos, read_header(buf, pos)
        pos += size


def validate_batches(buf: BytesLike, max_batch_size: int | None = None) -> list[BatchHeader]:
    """Validate every batch of a produce request's records; the records must be whole batches."""
    headers: list[BatchHeader] = []
    pos = 0
    n = len(buf)
    if n == 0:
        raise InvalidRecordError("empty record set", position=0)
    while pos < n:
        h = validate_batch(buf, pos, max_batch_size)
        headers.append(h)
        pos += h.size
    return headers


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    _I64.pack_into(buf, pos, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def assign_offsets(buf: bytearray, headers: list[BatchHeader], first_offset: int, leader_epoch: int) -> int:
    """Patch base offsets (consecutive from ``first_offset``) and leader epochs in place.

    Returns the next offset after the last batch. The CRC stays valid.
    """
    pos = 0
    offset = first_offset
    for h in headers:
        _I64.pack_into(buf, pos, offset)
        _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        offset += h.last_offset_delta + 1
        pos += h.size
    return offset


def patch_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Turn the batch at ``pos`` into a LogAppendTime batch stamped ``timestamp``.

    Kafka does this for topics with message.timestamp.type=LogAppendTime: set the timestamp-type
    bit and maxTimestamp, then recompute the CRC (both fields lie inside it). Records are untouched;
    readers give every record the batch's maxTimestamp.
    """
    (attributes,) = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    (length,) = _I32.unpack_from(buf, pos + 8)
    _U32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, length + LOG_OVERHEAD))
