"""The RemoteLogMetadataManager contract (KIP-405), in Python.

Kafka's methods return futures; ours are plain blocking calls that are read-your-write: a call that
writes returns only once the new state is visible to every query of the same manager. The RLM calls
them from its worker threads, never from the event loop. Implementations must be thread safe.
"""

from __future__ import annotations

import abc
from typing import Iterable, Iterator, Mapping

from tieredlog.errors import ReplicaNotAvailableError
from tieredlog.rsm.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)

__all__ = [
    "RemoteLogMetadataManager",
    "RemoteLogMetadataManagerFatalError",
    "ReplicaNotAvailableError",
    "check_new_segment",
    "check_segment_update",
]


class RemoteLogMetadataManagerFatalError(Exception):
    """The manager cannot work at all (e.g. the metadata topic exists with another partition count).
    Kafka exits the broker on it (FatalExitError)."""


def check_new_segment(md: RemoteLogSegmentMetadata) -> None:
    if md.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise ValueError(f"a new remote segment must be COPY_SEGMENT_STARTED, not {md.state.name}")


def check_segment_update(update: RemoteLogSegmentMetadataUpdate) -> None:
    if update.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise ValueError("COPY_SEGMENT_STARTED is added with add_remote_log_segment_metadata, not updated")


class RemoteLogMetadataManager(abc.ABC):
    """Stores and serves the metadata of remote log segments."""

    def configure(self, configs: Mapping[str, object]) -> None:
        """Receives every ``rlmm.config.*`` broker property with the prefix stripped, plus
        ``broker.id``, ``log.dir`` (the first log dir) and ``cluster.id``."""

    @abc.abstractmethod
    def add_remote_log_segment_metadata(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        """Record a segment whose copy starts. Only COPY_SEGMENT_STARTED is accepted (ValueError)."""

    @abc.abstractmethod
    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a segment to COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED or DELETE_SEGMENT_FINISHED.
        COPY_SEGMENT_STARTED is rejected (ValueError); an unknown segment raises
        RemoteResourceNotFoundException; an invalid transition is logged and dropped."""

    @abc.abstractmethod
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch_for_offset: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` within the slice of
        ``epoch_for_offset`` (from the epoch's start to the next epoch's start - 1 or the segment end)."""

    @abc.abstractmethod
    def highest_offset_for_epoch(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int | None:
        """The highest offset of ``leader_epoch`` in any segment that reached COPY_SEGMENT_FINISHED."""

    @abc.abstractmethod
    def put_remote_partition_delete_metadata(self, remote_partition_delete_metadata: RemotePartitionDeleteMetadata) -> None:
        """Record a partition delete state (MARKED -> STARTED -> FINISHED)."""

    @abc.abstractmethod
    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """Segments in COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED or DELETE_SEGMENT_STARTED state
        (all of them, or those holding ``leader_epoch``), sorted by start offset."""

    @abc.abstractmethod
    def on_partition_leadership_changes(
        self, leader_partitions: Iterable[TopicIdPartition], follower_partitions: Iterable[TopicIdPartition]
    ) -> None:
        """The broker now leads or follows these partitions: their metadata must be loaded."""

    @abc.abstractmethod
    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """The broker no longer hosts these partitions."""

    @abc.abstractmethod
    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        """Total size in bytes of the segments ``list_remote_log_segments(tp, leader_epoch)`` returns."""

    def next_segment_with_txn_index(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """KIP-1058: the first FINISHED segment at or after ``offset`` in ``epoch`` whose transaction
        index is not empty. The default is Kafka's: the segment holding the offset."""
        return self.remote_log_segment_metadata(topic_id_partition, epoch, offset)

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """Whether the partition's metadata is loaded; queries before that raise ReplicaNotAvailableError."""
        return True

    def close(self) -> None:
        """Release resources."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
