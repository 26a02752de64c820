"""A remote segment's life in the metadata and the object store: the one place that writes both.

Copy: COPY_SEGMENT_STARTED in the RLMM (metadata before data), the RSM upload, then
COPY_SEGMENT_FINISHED. Delete: DELETE_SEGMENT_STARTED, the RSM delete, DELETE_SEGMENT_FINISHED. A
partition deletion: DELETE_PARTITION_MARKED / STARTED / FINISHED around the segment deletes. Each
step is idempotent, so a task that fails half-way is simply run again. The copy task, the
expiration task, KIP-950's disable-with-delete and topic deletion all go through here.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from typing import Callable

from tieredlog.errors import ReplicaNotAvailableError
from tieredlog.rlm.metrics import RemoteStorageMetrics
from tieredlog.rlmm.api import RemoteLogMetadataManager
from tieredlog.rsm.api import (
    CustomMetadata,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)
from tieredlog.rsm.cleaner_offset import RemoteCleanerOffsetStore
from tieredlog.rsm.listing import ListableRemoteStorageManager

log = logging.getLogger(__name__)


def _parts(data: LogSegmentData) -> list[Path | bytes]:
    """The objects a copy hands the RSM: log, offset and time indexes, transaction index (when there
    is one), producer snapshot, leader-epoch index."""
    parts: list[Path | bytes] = [data.log_segment, data.offset_index, data.time_index]
    if data.transaction_index is not None:
        parts.append(data.transaction_index)
    parts += [data.producer_snapshot_index, bytes(data.leader_epoch_index)]
    return parts


def _size(part: Path | bytes) -> int:
    if isinstance(part, bytes):
        return len(part)
    try:
        return os.stat(part).st_size
    except OSError:
        return 0  # deleted since: counted without its bytes


class CustomMetadataSizeLimitExceededException(RemoteStorageException):
    """The RSM returned custom metadata over remote.log.metadata.custom.metadata.max.bytes;
    Kafka stops copying for the partition until leadership changes."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class RemoteSegmentLifecycle:
    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        broker_id: int,
        metrics: RemoteStorageMetrics,
        on_segment_deleted: Callable[[uuid.UUID], None] = lambda _segment_id: None,
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker_id = broker_id
        self.metrics = metrics
        self._on_segment_deleted = on_segment_deleted  # drop cached indexes and read-ahead of it

    # ---- metadata reads ---------------------------------------------------------------------------
    def ready(self, tip: TopicIdPartition) -> bool:
        return self.rlmm.is_ready(tip)

    def require_loaded(self, tip: TopicIdPartition) -> None:
        """Load the partition's remote metadata; a task retries while it is still loading: the
        RLMM lists a partition's segments only once it has read them."""
        self.rlmm.on_partition_leadership_changes({tip}, set())
        if not self.ready(tip):
            raise ReplicaNotAvailableError(f"{tip}: remote metadata not loaded yet")

    def segments(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        return list(self.rlmm.list_remote_log_segments(tip, leader_epoch))

    def segment_for(self, tip: TopicIdPartition, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The FINISHED segment the RLMM serves ``offset`` of ``epoch`` from."""
        return self.rlmm.remote_log_segment_metadata(tip, epoch, offset)

    def next_segment_with_txn_index(self, tip: TopicIdPartition, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """KIP-1058: the first FINISHED segment of ``epoch`` at or after ``offset`` with a txn index."""
        return self.rlmm.next_segment_with_txn_index(tip, epoch, offset)

    def highest_offset_for_epoch(self, tip: TopicIdPartition, epoch: int) -> int | None:
        return self.rlmm.highest_offset_for_epoch(tip, epoch)

    # ---- transitions ------------------------------------------------------------------------------
    def _update(
        self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, custom: CustomMetadata | None = None
    ) -> RemoteLogSegmentMetadata:
        update = RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, _now_ms(), custom, state, self.broker_id)
        self.rlmm.update_remote_log_segment_metadata(update)
        return md.create_with_updates(update)

    def copy(
        self, md: RemoteLogSegmentMetadata, data: LogSegmentData, custom_metadata_max_bytes: int
    ) -> RemoteLogSegmentMetadata:
        """STARTED -> RSM upload -> FINISHED; returns the FINISHED metadata. A failed upload, or one
        whose custom metadata is over the limit, is deleted again before the error is raised: never
        a half-written object left behind."""
        topic = md.topic_id_partition.topic
        self.rlmm.add_remote_log_segment_metadata(md)
        self.metrics.copy_requests.labels(topic).inc()
        try:
            custom = self.rsm.copy_log_segment_data(md, data)
        except BaseException:
            try:
                self.delete(md)
            except Exception:
                # the copy task reports the upload's own failure (rate-limited); the expiration task
                # deletes the leftover later (a COPY_SEGMENT_STARTED segment below the tiered offset)
                log.debug("%s: could not delete failed upload %s", md.topic_id_partition,
                          md.remote_log_segment_id.id, exc_info=True)
            raise
        parts = _parts(data)
        self.metrics.object_store.record(topic, "PUT", len(parts), sum(_size(p) for p in parts))
        if custom is not None and len(custom.value) > custom_metadata_max_bytes:
            self.delete(md)
            raise CustomMetadataSizeLimitExceededException(
                f"{md.topic_id_partition}: custom metadata of {len(custom.value)} bytes exceeds "
                f"remote.log.metadata.custom.metadata.max.bytes={custom_metadata_max_bytes}"
            )
        return self._update(md, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, custom)

    def delete(self, md: RemoteLogSegmentMetadata) -> None:
        """DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED (each step idempotent)."""
        topic = md.topic_id_partition.topic
        if md.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            md = self._update(md, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
        self.metrics.delete_requests.labels(topic).inc()
        try:
            self.rsm.delete_log_segment_data(md)
        except Exception:
            self.metrics.delete_errors.labels(topic).inc()
            raise
        self.metrics.object_store.record(topic, "DELETE", 6 if md.tx_index_present else 5)
        self._on_segment_deleted(md.remote_log_segment_id.id)
        try:
            self._update(md, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
        except RemoteResourceNotFoundException:
            pass  # already finished by an earlier attempt

    def publish_log_start(self, tip: TopicIdPartition, offset: int | None) -> bool:
        """Tell readers without a broker the partition's log start offset (None: the partition is gone),
        through the RSM's listing contract; False when the RSM has none (no such reader can read it)."""
        if not isinstance(self.rsm, ListableRemoteStorageManager):
            return False
        self.rsm.write_log_start_offset(tip, offset)
        self.metrics.object_store.record(tip.topic, "DELETE" if offset is None else "PUT", 1)
        return True

    def publish_cleaner_offset(self, tip: TopicIdPartition, offset: int | None) -> bool:
        """Keep where the remote tier is clean up to beside it, for whichever broker leads next (None: the
        partition is gone); False when the RSM cannot hold it (a new leader then cleans from the start).
        Any RSM that implements the clean offset's write and read holds it, with or without listing."""
        if not isinstance(self.rsm, RemoteCleanerOffsetStore):
            return False
        self.rsm.write_cleaner_offset(tip, offset)
        self.metrics.object_store.record(tip.topic, "DELETE" if offset is None else "PUT", 1)
        return True

    def read_cleaner_offset(self, tip: TopicIdPartition) -> int | None:
        """The offset :meth:`publish_cleaner_offset` last kept; None when there is none."""
        if not isinstance(self.rsm, RemoteCleanerOffsetStore):
            return None
        offset = self.rsm.read_cleaner_offset(tip)
        self.metrics.object_store.record(tip.topic, "GET", 1)
        return offset

    def mark_partition(self, tip: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        self.rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(tip, state, _now_ms(), self.broker_id)
        )

    def delete_partition(self, tip: TopicIdPartition, cancelled: Callable[[], bool]) -> bool:
        """Delete every remote segment of a partition whose topic was deleted, between
        DELETE_PARTITION_STARTED and FINISHED. Resumable: a restarted broker runs it again from its
        journal. False if ``cancelled`` stopped it before the end."""
        self.mark_partition(tip, RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
        if not self.delete_all_segments(tip, cancelled):
            return False
        self.publish_log_start(tip, None)
        self.publish_cleaner_offset(tip, None)
        self.mark_partition(tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        return True

    def delete_all_segments(self, tip: TopicIdPartition, cancelled: Callable[[], bool]) -> bool:
        for md in sorted(self.segments(tip), key=lambda m: m.start_offset):
            if cancelled():
                return False
            if md.state != RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                self.delete(md)
        return True
