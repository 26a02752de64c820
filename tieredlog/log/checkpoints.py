"""Kafka's small text checkpoint files, byte-compatible with Apache Kafka.

- offset checkpoints (``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
  ``log-start-offset-checkpoint``): ``0``, count, then ``topic partition offset`` lines;
- ``leader-epoch-checkpoint``: ``0``, count, then ``epoch startOffset`` lines;
- ``partition.metadata``: ``version: 0`` and ``topic_id: <base64url uuid>``.

Writes are atomic (``tieredlog.atomic_file``): the new content goes to ``<file>.tmp``, is fsynced,
renamed over the old file, and the directory is fsynced, so a crash leaves either the old or the new
file, never a torn one.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Callable, Generic, Iterable, Mapping, TypeVar

from tieredlog.atomic_file import atomic_write
from tieredlog.kafka_uuid import kafka_str_to_uuid, uuid_to_kafka_str
from tieredlog.log.types import EpochEntry, TopicPartition

CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"

T = TypeVar("T")


class CorruptCheckpointError(ValueError):
    """A checkpoint file that cannot be parsed. The message names the file and the 1-based line."""

    def __init__(self, source: str, line_no: int | None, reason: str):
        where = f"{source}, line {line_no}" if line_no is not None else source
        super().__init__(f"malformed checkpoint {where}: {reason}")
        self.source = source
        self.line_no = line_no


# ---------------------------------------------------------------------------------------------
# generic "version / count / entries" text format


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


class CheckpointFile(Generic[T]):
    """A version-0 checkpoint of entries of type T, read and written whole."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def _format_line(self, entry: T) -> str:
        raise NotImplementedError

    def _parse_line(self, line: str) -> T:
        raise NotImplementedError

    def exists(self) -> bool:
        return self.path.exists()

    def read_entries(self) -> list[T]:
        """Entries in file order; a missing file reads as empty."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return parse_checkpoint(data, str(self.path), self._parse_line)

    def write_entries(self, entries: Iterable[T], sync: bool = True) -> None:
        atomic_write(self.path, format_checkpoint([self._format_line(e) for e in entries]), sync)


# ---------------------------------------------------------------------------------------------
# offset checkpoints


class OffsetCheckpointFile(CheckpointFile[tuple[TopicPartition, int]]):
    """``topic partition offset`` per line: recovery points, high watermarks, log start offsets."""

    def _format_line(self, entry: tuple[TopicPartition, int]) -> str:
        tp, offset = entry
        return f"{tp.topic} {tp.partition} {offset}"

    def _parse_line(self, line: str) -> tuple[TopicPartition, int]:
        topic, partition, offset = _fields(line, 3)
        p, o = int(partition), int(offset)
        if p < 0:
            raise ValueError(f"negative partition {p}")
        return TopicPartition(topic, p), o

    def read(self) -> dict[TopicPartition, int]:
        return dict(self.read_entries())

    def write(self, offsets: Mapping[TopicPartition, int], sync: bool = True) -> None:
        items = sorted(((TopicPartition(*tp), int(o)) for tp, o in offsets.items()), key=lambda kv: kv[0])
        self.write_entries(items, sync)


# ---------------------------------------------------------------------------------------------
# leader-epoch checkpoint


def _parse_epoch_line(line: str) -> EpochEntry:
    epoch, offset = _fields(line, 2)
    return EpochEntry(int(epoch), int(offset))


def leader_epoch_checkpoint_bytes(entries: Iterable[EpochEntry]) -> bytes:
    """The checkpoint text for ``entries``: what the RSM copy ships as the leader-epoch index."""
    return format_checkpoint([f"{e.epoch} {e.start_offset}" for e in entries])


def parse_leader_epoch_checkpoint(data: bytes, source: str = "<leader-epoch buffer>") -> list[EpochEntry]:
    """Parse checkpoint text (a file's bytes or a remote leader-epoch index)."""
    return parse_checkpoint(data, source, _parse_epoch_line)


class LeaderEpochCheckpointFile(CheckpointFile[EpochEntry]):
    """``epoch startOffset`` per line, in epoch order."""

    def _format_line(self, entry: EpochEntry) -> str:
        return f"{entry.epoch} {entry.start_offset}"

    def _parse_line(self, line: str) -> EpochEntry:
        return _parse_epoch_line(line)

    def read(self) -> list[EpochEntry]:
        return self.read_entries()

    def write(self, entries: Iterable[EpochEntry], sync: bool = True) -> None:
        self.write_entries([EpochEntry(*e) for e in entries], sync)


# ---------------------------------------------------------------------------------------------
# topic ids and partition.metadata


class PartitionMetadataFile:
    """``partition.metadata``: the topic id a partition directory belongs to."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.exists()

    def write(self, topic_id: uuid.UUID, sync: bool = True) -> None:
        text = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_kafka_str(topic_id)}\n"
        atomic_write(self.path, text.encode("ascii"), sync)

    def read(self) -> uuid.UUID | None:
        """The topic id, or None when the file does not exist."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        src = str(self.path)
        try:
            lines = data.decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError(src, None, f"not UTF-8 text (byte {e.start})") from None
        values = []
        for i, key in enumerate(("version", "topic_id"), start=1):
            if len(lines) < i:
                raise CorruptCheckpointError(src, i, f"missing '{key}: ...' line")
            k, sep, v = lines[i - 1].partition(":")
            if not sep or k.strip() != key:
                raise CorruptCheckpointError(src, i, f"expected '{key}: ...', found {lines[i - 1]!r}")
            values.append(v.strip())
        if values[0] != str(PARTITION_METADATA_VERSION):
            raise CorruptCheckpointError(src, 1, f"unrecognized version {values[0]!r}")
        try:
            return kafka_str_to_uuid(values[1])
        except ValueError as e:
            raise CorruptCheckpointError(src, 2, str(e)) from None
