"""Kafka's checkpoint files on disk: offset checkpoints, ``leader-epoch-checkpoint`` and
``partition.metadata``. Their text is :mod:`tieredlog.formats.checkpoints`; this module reads and
writes the files.

Writes are atomic (``tieredlog.atomic_file``): the new content goes to ``<file>.tmp``, is fsynced,
renamed over the old file, and the directory is fsynced, so a crash leaves either the old or the new
file, never a torn one.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Generic, Iterable, Mapping, TypeVar

from tieredlog.atomic_file import atomic_write
from tieredlog.formats.checkpoints import (
    encode_partition_metadata,
    format_checkpoint,
    format_epoch_line,
    format_offset_line,
    parse_checkpoint,
    parse_epoch_line,
    parse_offset_line,
    parse_partition_metadata,
)
from tieredlog.log.types import EpochEntry, TopicPartition

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"

T = TypeVar("T")


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
        return format_offset_line(tp.topic, tp.partition, offset)

    def _parse_line(self, line: str) -> tuple[TopicPartition, int]:
        topic, partition, offset = parse_offset_line(line)
        return TopicPartition(topic, partition), offset

    def read(self) -> dict[TopicPartition, int]:
        return dict(self.read_entries())

    def write(self, offsets: Mapping[TopicPartition, int], sync: bool = True) -> None:
        items = sorted(((TopicPartition(*tp), int(o)) for tp, o in offsets.items()), key=lambda kv: kv[0])
        self.write_entries(items, sync)


# ---------------------------------------------------------------------------------------------
# leader-epoch checkpoint


class LeaderEpochCheckpointFile(CheckpointFile[EpochEntry]):
    """``epoch startOffset`` per line, in epoch order."""

    def _format_line(self, entry: EpochEntry) -> str:
        return format_epoch_line(entry.epoch, entry.start_offset)

    def _parse_line(self, line: str) -> EpochEntry:
        return EpochEntry(*parse_epoch_line(line))

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
        atomic_write(self.path, encode_partition_metadata(topic_id), sync)

    def read(self) -> uuid.UUID | None:
        """The topic id, or None when the file does not exist."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return parse_partition_metadata(data, str(self.path))
