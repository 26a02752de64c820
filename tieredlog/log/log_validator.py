"""Kafka's LogValidator for a produce's v2 batches: checked, then patched in place, never re-encoded.

Each batch's 61-byte header is read and its CRC checked; base offset and partition leader epoch lie
outside the CRC and are patched in place; LogAppendTime rewrites attributes and maxTimestamp and
recomputes the CRC. No record is decoded, so the cost per batch does not grow with its record count,
with two exceptions, both of Kafka's per-record rules: a compacted topic's records are walked for
missing keys, and a batch whose header shows an out-of-range timestamp is walked to name every record
out of range (records.scan reads a few varints per record, never building records).
"""

from __future__ import annotations

import struct

from tieredlog import errors
from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError
from tieredlog.log.config import LogConfig
from tieredlog.log.types import AppendOrigin
from tieredlog.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    compute_crc,
    validate_batch,
)
from tieredlog.records.scan import KEY_MISSING, TIMESTAMP_OUT_OF_RANGE, RecordFault, find_record_faults

LONG_MAX = (1 << 63) - 1

_MAX_TS_FIELD = struct.Struct(">q")
_ATTR_FIELD = struct.Struct(">h")
_CRC_FIELD = struct.Struct(">I")
_OFFSET_FIELD = struct.Struct(">q")
_EPOCH_FIELD = struct.Struct(">i")
_MAX_TIMESTAMP_OFFSET = 35


class LogValidator:
    """The checks one append gets, for one origin under the log's current config. Built per append
    (one object per request, not per record): a config change applies from the next append on."""

    __slots__ = ("config", "origin", "topic_partition")

    def __init__(self, config: LogConfig, origin: AppendOrigin, topic_partition: object = ""):
        self.config = config
        self.origin = origin
        # named in per-record error messages, as Kafka's TopicPartition.toString ("topic-0")
        self.topic_partition = str(topic_partition)

    @property
    def uses_log_append_time(self) -> bool:
        return self.config.message_timestamp_type == "LogAppendTime"

    def validate_batches(self, buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
        """Every batch's structure, CRC and size, mapped to Kafka's errors; nothing is written unless
        every batch passes."""
        n = len(buf)
        if n == 0:
            raise errors.InvalidRecordError("empty record set")
        client = self.origin is AppendOrigin.CLIENT
        replication = self.origin is AppendOrigin.REPLICATION
        headers: list[BatchHeader] = []
        pos = 0
        max_size = self.config.max_message_bytes
        while pos < n:
            if n - pos < HEADER_SIZE:
                if n - pos > MAGIC_OFFSET and buf[pos + MAGIC_OFFSET] in (0, 1):
                    raise errors.UnsupportedForMessageFormatError(f"message format v{buf[pos + MAGIC_OFFSET]} is not supported")
                raise errors.CorruptMessageError(f"record set truncated: {n - pos} bytes left at byte {pos}")
            magic = buf[pos + MAGIC_OFFSET]
            if magic in (0, 1):
                # We only store v2; old clients' message sets would need conversion, which we never do.
                raise errors.UnsupportedForMessageFormatError(f"message format v{magic} at byte {pos} is not supported")
            if magic != 2:
                raise errors.InvalidRecordError(f"unknown magic {magic} at byte {pos}")
            size = int.from_bytes(buf[pos + 8 : pos + 12], "big", signed=True) + LOG_OVERHEAD
            if size > max_size:
                raise errors.MessageTooLargeError(
                    f"batch at byte {pos} is {size} bytes, larger than max.message.bytes {max_size}"
                )
            try:
                h = validate_batch(buf, pos)
            except CorruptRecordError as e:
                raise errors.CorruptMessageError(str(e)) from None
            except InvalidRecordError as e:
                raise errors.InvalidRecordError(str(e)) from None
            # A leader's appends are fresh batches, every offset with its record. A follower copies
            # the leader's log as it is, cleaned batches included: offsets the cleaner removed and
            # emptied batches (recordsCount 0) kept for their producer state. Kafka checks these
            # counts only where it assigns offsets (LogValidator.validateBatch), never on replication.
            if not replication and (h.records_count <= 0 or h.last_offset_delta + 1 != h.records_count):
                raise errors.InvalidRecordError(
                    f"batch at byte {pos}: record count {h.records_count} does not match lastOffsetDelta {h.last_offset_delta}"
                )
            if h.is_control and client:
                raise errors.InvalidRecordError("clients are not allowed to write control records")
            if h.has_producer_id and h.base_sequence < 0 and client:
                raise errors.InvalidRecordError(f"batch at byte {pos} has a producer id but no sequence number")
            headers.append(h)
            pos += h.size
        return headers

    def find_missing_keys(self, buf: bytes | bytearray, headers: list[BatchHeader]) -> list[RecordFault]:
        """A compacted topic's records must have keys (Kafka's LogValidator.validateKey): the records
        without one, indexed across the record set. The one per-record rule every batch is walked for,
        and only on compacted topics: other topics never read past a header. Run before the log's lock
        is taken, as it costs a few varint reads per record."""
        if not self.config.compact:
            return []
        faults: list[RecordFault] = []
        pos = 0
        first = 0
        for h in headers:
            for index, kind, ts, offset in self._record_faults(buf, pos, h, keys_required=True):
                faults.append((first + index, kind, ts, offset))
            pos += h.size
            first += h.records_count
        return faults

    def validate_records(
        self, buf: bytes | bytearray, headers: list[BatchHeader], now: int, missing_keys: list[RecordFault]
    ) -> None:
        """Refuse the record set if any record breaks a per-record rule: ``missing_keys`` (from
        :meth:`find_missing_keys`) and, on CreateTime topics, message.timestamp.after/before.max.ms.
        The timestamp bounds are checked on the headers (the max timestamp bounds the future, the
        first record's timestamp the past); only a batch whose header fails is walked, to name every
        record out of range. The error carries every bad record (Kafka's RecordValidationException):
        INVALID_TIMESTAMP if any timestamp is bad, else INVALID_RECORD."""
        cfg = self.config
        faults = list(missing_keys)
        header_error: str | None = None
        if not self.uses_log_append_time:
            low = now - cfg.message_timestamp_before_max_ms
            high = now + cfg.message_timestamp_after_max_ms
            check_past = cfg.message_timestamp_before_max_ms < LONG_MAX
            pos = 0
            first = 0
            for h in headers:
                if h.max_timestamp > high:
                    header_error = f"timestamp {h.max_timestamp} is more than message.timestamp.after.max.ms in the future"
                elif check_past and 0 <= h.base_timestamp < low:
                    header_error = f"timestamp {h.base_timestamp} is more than message.timestamp.before.max.ms in the past"
                else:
                    pos += h.size
                    first += h.records_count
                    continue
                for index, kind, ts, offset in self._record_faults(buf, pos, h, keys_required=False,
                                                                    min_timestamp=low, max_timestamp=high):
                    faults.append((first + index, kind, ts, offset))
                pos += h.size
                first += h.records_count
        if not faults:
            if header_error is not None:
                # The header's max timestamp is out of range though no record's is. It is stored as
                # sent (headers are never rewritten), and would misplace the batch in the time index.
                raise errors.InvalidTimestampError(header_error)
            return
        # A record both without a key and out of range is reported once, for its key (Kafka checks
        # the key first).
        by_index: dict[int, RecordFault] = {}
        for f in faults:
            by_index.setdefault(f[0], f)
        record_errors = [(i, self._fault_message(by_index[i], now)) for i in sorted(by_index)]
        if any(f[1] == TIMESTAMP_OUT_OF_RANGE for f in by_index.values()):
            raise errors.InvalidTimestampError(
                "One or more records have been rejected due to invalid timestamp", record_errors=record_errors
            )
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
        raise errors.InvalidRecordError(
            f"One or more records have been rejected due to {len(record_errors)} record errors in total, and only "
            f"showing the first three errors at most: [{shown}]",
            record_errors=record_errors,
        )

    def _fault_message(self, fault: RecordFault, now: int) -> str:
        """Kafka's per-record messages (LogValidator.validateKey / validateTimestamp), word for word:
        clients show them to users, and some match on them."""
        _, kind, ts, offset = fault
        if kind == KEY_MISSING:
            return f"Compacted topic cannot accept message without key in topic partition {self.topic_partition}"
        cfg = self.config
        return (
            f"Timestamp {ts} of message with offset {offset} is out of range. The timestamp should be within "
            f"[{now - cfg.message_timestamp_before_max_ms}, {now + cfg.message_timestamp_after_max_ms}]"
        )

    @staticmethod
    def _record_faults(
        buf: bytes | bytearray, pos: int, h: BatchHeader, *, keys_required: bool,
        min_timestamp: int | None = None, max_timestamp: int | None = None,
    ) -> list[RecordFault]:
        try:
            return find_record_faults(buf, pos, h, keys_required=keys_required,
                                      min_timestamp=min_timestamp, max_timestamp=max_timestamp)
        except CorruptRecordError as e:
            raise errors.CorruptMessageError(str(e)) from None
        except InvalidRecordError as e:
            raise errors.InvalidRecordError(str(e)) from None

    def assign_offsets_and_timestamps(
        self, buf: bytearray, headers: list[BatchHeader], first_offset: int, leader_epoch: int, now: int
    ) -> list[BatchHeader]:
        """Patch offsets and the leader epoch (and LogAppendTime) into ``buf``; returns the headers as
        they now read, so offsets and timestamps downstream are the stored ones. The new headers are
        the old ones with the patched fields replaced: no header is parsed twice."""
        log_append_time = self.uses_log_append_time
        out: list[BatchHeader] = []
        pos = 0
        offset = first_offset
        for h in headers:
            size = h.batch_length + LOG_OVERHEAD
            # base offset and partition leader epoch lie outside the CRC
            _OFFSET_FIELD.pack_into(buf, pos, offset)
            _EPOCH_FIELD.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
            if log_append_time:
                # attributes and maxTimestamp lie inside it: recompute it
                attributes = h.attributes | TIMESTAMP_TYPE_MASK
                _ATTR_FIELD.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
                _MAX_TS_FIELD.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, now)
                crc = compute_crc(buf, pos, size)
                _CRC_FIELD.pack_into(buf, pos + CRC_OFFSET, crc)
                h = h._replace(base_offset=offset, partition_leader_epoch=leader_epoch, crc=crc,
                               attributes=attributes, max_timestamp=now)
            else:
                h = h._replace(base_offset=offset, partition_leader_epoch=leader_epoch)
            out.append(h)
            offset += h.last_offset_delta + 1
            pos += size
        return out
