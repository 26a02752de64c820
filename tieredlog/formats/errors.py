"""Record-format errors (the v2 batch and its records), each carrying the byte position where the problem was found."""

from __future__ import annotations


class RecordError(Exception):
    """Base class; ``position`` is the byte offset in the buffer or file, when known."""

    def __init__(self, message: str, position: int | None = None):
        super().__init__(message)
        self.position = position


class CorruptRecordError(RecordError):
    """Bytes that are not a valid batch (bad CRC, truncated, impossible sizes). Kafka: CORRUPT_MESSAGE (2)."""


class InvalidRecordError(RecordError):
    """A batch the broker refuses though its CRC holds (wrong magic, too large, unknown codec, records
    its header cannot describe). Kafka: INVALID_RECORD (87)."""
