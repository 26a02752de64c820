"""The RemoteStorageManager contract (KIP-405), in Python.

Plugin authors import everything from ``tieredlog.rsm`` and nothing else: this module depends on
no part of the broker.
"""

from __future__ import annotations

import abc
import enum
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Mapping, Self


class RemoteStorageException(Exception):
    """Any failure of remote storage. Kafka: RemoteStorageException."""


class RemoteResourceNotFoundException(RemoteStorageException):
    """The requested segment or index does not exist in remote storage."""


class RetriableRemoteStorageException(RemoteStorageException):
    """A transient failure (throttling, 5xx, connection reset): the caller may retry."""


class IndexType(enum.Enum):
    OFFSET = "OFFSET"
    TIMESTAMP = "TIMESTAMP"
    PRODUCER_SNAPSHOT = "PRODUCER_SNAPSHOT"
    TRANSACTION = "TRANSACTION"
    LEADER_EPOCH = "LEADER_EPOCH"


class RemoteLogSegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    def is_valid_transition(self, new: "RemoteLogSegmentState") -> bool:
        if new == self:
            return True
        return new in _SEGMENT_TRANSITIONS[self]


_SEGMENT_TRANSITIONS = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    },
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: set(),
}


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @staticmethod
    def generate_new(tp: TopicIdPartition) -> "RemoteLogSegmentId":
        return RemoteLogSegmentId(tp, uuid.uuid4())


@dataclass(frozen=True, slots=True)
class CustomMetadata:
    value: bytes


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """One segment in remote storage. Offsets are inclusive; ``segment_leader_epochs`` maps
    each leader epoch in the segment to its first offset."""

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: CustomMetadata | None = None
    # tieredlog extension: the local segment's txn index existed (Kafka keeps this in the
    # transactionIndex Optional of LogSegmentData; readers need it without fetching).
    tx_index_present: bool = field(default=False)

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"start_offset {self.start_offset} must be >= 0")
        if self.end_offset < self.start_offset:
            raise ValueError(f"end_offset {self.end_offset} must be >= start_offset {self.start_offset}")
        if not self.segment_leader_epochs:
            raise ValueError("segment_leader_epochs must not be empty")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def create_with_updates(self, update: "RemoteLogSegmentMetadataUpdate") -> "RemoteLogSegmentMetadata":
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError("update is for another segment")
        return replace(
            self,
            state=update.state,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            custom_metadata=update.custom_metadata if update.custom_metadata is not None else self.custom_metadata,
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: CustomMetadata | None
    state: RemoteLogSegmentState
    broker_id: int

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The files of one rolled local segment, handed to ``copy_log_segment_data``.

    ``leader_epoch_index`` is the leader-epoch checkpoint text (version, count, ``epoch offset``
    lines) covering the history up to the end of this segment, as bytes.
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes


def check_positions(start_position: int, end_position: int | None) -> None:
    """The positions rule of :meth:`RemoteStorageManager.fetch_log_segment`: ValueError otherwise."""
    if start_position < 0:
        raise ValueError(f"start_position {start_position} must be >= 0")
    if end_position is not None and end_position < start_position:
        raise ValueError(f"end_position {end_position} must be >= start_position {start_position}")


class RemoteStorageManager(abc.ABC):
    """Stores and serves the data of rolled log segments. Implementations must be thread safe:
    the broker calls them from its copier, expiration and reader pools at once."""

    def configure(self, configs: Mapping[str, object]) -> None:
        """Receives every ``rsm.config.*`` broker property with the prefix stripped, plus ``broker.id``."""

    @abc.abstractmethod
    def copy_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadata, log_segment_data: LogSegmentData
    ) -> CustomMetadata | None:
        """Copy the segment and all its indexes. Idempotent: existing content is overwritten."""

    @abc.abstractmethod
    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """A stream of the segment's bytes from ``start_position`` to ``end_position``, both inclusive,
        cut at the end of the object. Raises RemoteResourceNotFoundException if missing."""

    @abc.abstractmethod
    def fetch_index(self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """A stream of one index. A missing transaction index raises RemoteResourceNotFoundException."""

    @abc.abstractmethod
    def delete_log_segment_data(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        """Delete the segment and its indexes. Idempotent: data already gone is not an error."""

    def close(self) -> None:
        """Release resources."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
