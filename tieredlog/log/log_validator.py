"""Kafka's LogValidator for a produce's v2 batches: checked, then patched in place, never re-encoded.

Each batch's 61-byte header is read and its CRC checked; base offset and partition leader epoch lie
outside the CRC and are patched in place; LogAppendTime rewrites attributes and maxTimestamp and
recomputes the CRC. No record is decoded, so the cost per batch does not grow with its record count.
"""

from __future__ import annotations

import struct

from tieredlog import errors
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
from tieredlog.records.errors import CorruptRecordError, InvalidRecordError

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

    __slots__ = ("config", "origin")

    def __init__(self, config: LogConfig, origin: AppendOrigin):
        self.config = config
        self.origin = origin

    @property
    def uses_log_append_time(self) -> bool:
        return self.config.message_timestamp_type == "LogAppendTime"

    def validate_batches(self, buf: bytes | bytearray) -> list[BatchHeader]:
        """Every batch's structure, CRC and size, mapped to Kafka's errors; nothing is written unless
        every batch passes."""
        n = len(buf)
        if n == 0:
            raise errors.InvalidRecordError("empty record set")
        client = self.origin is AppendOrigin.CLIENT
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
            if h.records_count <= 0 or h.last_offset_delta + 1 != h.records_count:
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

    def validate_timestamps(self, headers: list[BatchHeader], now: int) -> None:
        """message.timestamp.after/before.max.ms (CreateTime topics). Header-level, no record decoding:
        the max timestamp bounds the future, the first record's timestamp the past."""
        cfg = self.config
        for h in headers:
            if h.max_timestamp > now + cfg.message_timestamp_after_max_ms:
                raise errors.InvalidTimestampError(
                    f"timestamp {h.max_timestamp} is more than message.timestamp.after.max.ms in the future"
                )
            if cfg.message_timestamp_before_max_ms < LONG_MAX and 0 <= h.base_timestamp < now - cfg.message_timestamp_before_max_ms:
                raise errors.InvalidTimestampError(
                    f"timestamp {h.base_timestamp} is more than message.timestamp.before.max.ms in the past"
                )

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
