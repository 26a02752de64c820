"""Kafka's small text checkpoint files, byte for byte:

- offset checkpoints (``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
  ``log-start-offset-checkpoint``): ``0``, count, then ``topic partition offset`` lines;
- ``leader-epoch-checkpoint`` (also the leader-epoch index a remote copy ships): ``0``, count, then
  ``epoch startOffset`` lines;
- ``partition.metadata``: ``version: 0`` and ``topic_id: <base64url uuid>``.
"""

from __future__ import annotations

import uuid
from typing import Callable, Iterable, TypeVar

from tieredlog.kafka_uuid import kafka_str_to_uuid, uuid_to_kafka_str

CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0

T = TypeVar("T")


class CorruptCheckpointError(ValueError):
    """A checkpoint that cannot be parsed. The message names the source and the 1-based line."""

    def __init__(self, source: str, line_no: int | None, reason: str):
        where = f"{source}, line {line_no}" if line_no is not None else source
        super().__init__(f"malformed checkpoint {where}: {reason}")
        self.source = source
        self.line_no = line_no


# ---------------------------------------------------------------------------------------------
# the "version / count / entries" text


def format_checkpoint(lines: list[str], version: int = CHECKPOINT_VERSION) -> bytes:
    out = [str(version), str(len(lines)), *lines]
    return ("\n".join(out) + "\n").encode("utf-8")


def parse_checkpoint(data: bytes, source: str, parse_line: Callable[[str], T]) -> list[T]:
    """Parse a version-0 checkpoint. An empty buffer is an empty checkpoint, as in Kafka."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(source, None, f"not UTF-8 text (byte {e.start})") from None
    lines = text.splitlines()
    if not lines:
        return []
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(source, 1, f"unrecognized version {lines[0]!r} (expected {CHECKPOINT_VERSION})")
    if len(lines) < 2:
        raise CorruptCheckpointError(source, 2, "missing entry count")
    try:
        expected = int(lines[1].strip())
    except ValueError:
        raise CorruptCheckpointError(source, 2, f"entry count {lines[1]!r} is not a number") from None
    if expected < 0:
        raise CorruptCheckpointError(source, 2, f"negative entry count {expected}")
    entries: list[T] = []
    for i, line in enumerate(lines[2:], start=3):
        if not line.strip():
            continue  # tolerate a trailing blank line
        try:
            entries.append(parse_line(line))
        except (ValueError, IndexError) as e:
            raise CorruptCheckpointError(source, i, f"{line!r}: {e}") from None
    if len(entries) != expected:
        raise CorruptCheckpointError(source, None, f"expected {expected} entries but found {len(entries)}")
    return entries


def _fields(line: str, n: int) -> list[str]:
    parts = line.split()
    if len(parts) != n:
        raise ValueError(f"expected {n} fields, found {len(parts)}")
    return parts


# ---------------------------------------------------------------------------------------------
# offset checkpoints


def format_offset_line(topic: str, partition: int, offset: int) -> str:
    return f"{topic} {partition} {offset}"


def parse_offset_line(line: str) -> tuple[str, int, int]:
    """``topic partition offset`` -> its three fields; ValueError for anything else."""
    topic, partition, offset = _fields(line, 3)
    p, o = int(partition), int(offset)
    if p < 0:
        raise ValueError(f"negative partition {p}")
    return topic, p, o


def encode_offset_checkpoint(entries: Iterable[tuple[str, int, int]]) -> bytes:
    """``(topic, partition, offset)`` entries, in the order given."""
    return format_checkpoint([format_offset_line(t, p, o) for t, p, o in entries])


def parse_offset_checkpoint(data: bytes, source: str) -> list[tuple[str, int, int]]:
    return parse_checkpoint(data, source, parse_offset_line)


# ---------------------------------------------------------------------------------------------
# leader-epoch checkpoint


def format_epoch_line(epoch: int, start_offset: int) -> str:
    return f"{epoch} {start_offset}"


def parse_epoch_line(line: str) -> tuple[int, int]:
    epoch, offset = _fields(line, 2)
    return int(epoch), int(offset)


def encode_leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    """The checkpoint text for ``(epoch, start offset)`` entries: the local file and the leader-epoch
    index a remote copy ships are these same bytes."""
    return format_checkpoint([format_epoch_line(e, o) for e, o in entries])


def parse_leader_epoch_checkpoint(data: bytes, source: str = "<leader-epoch buffer>") -> list[tuple[int, int]]:
    """``(epoch, start offset)`` entries of checkpoint text (a file's bytes or a remote leader-epoch index)."""
    return parse_checkpoint(data, source, parse_epoch_line)


# ---------------------------------------------------------------------------------------------
# partition.metadata


def encode_partition_metadata(topic_id: uuid.UUID) -> bytes:
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_kafka_str(topic_id)}\n".encode("ascii")


def parse_partition_metadata(data: bytes, source: str) -> uuid.UUID:
    """The topic id of ``partition.metadata`` text; CorruptCheckpointError naming the line otherwise."""
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(source, None, f"not UTF-8 text (byte {e.start})") from None
    values = []
    for i, key in enumerate(("version", "topic_id"), start=1):
        if len(lines) < i:
            raise CorruptCheckpointError(source, i, f"missing '{key}: ...' line")
        k, sep, v = lines[i - 1].partition(":")
        if not sep or k.strip() != key:
            raise CorruptCheckpointError(source, i, f"expected '{key}: ...', found {lines[i - 1]!r}")
        values.append(v.strip())
    if values[0] != str(PARTITION_METADATA_VERSION):
        raise CorruptCheckpointError(source, 1, f"unrecognized version {values[0]!r}")
    try:
        return kafka_str_to_uuid(values[1])
    except ValueError as e:
        raise CorruptCheckpointError(source, 2, str(e)) from None
