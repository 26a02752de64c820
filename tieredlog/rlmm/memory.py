"""InMemoryRemoteLogMetadataManager: the RLMM without a metadata topic (Kafka has the same for its
tests). State is lost on close; useful to test the RLM without a broker."""

from __future__ import annotations

import threading
from typing import Iterable, Iterator

from tieredlog.rlmm.api import RemoteLogMetadataManager, check_new_segment, check_segment_update
from tieredlog.rlmm.cache import RemotePartitionMetadataStore
from tieredlog.rsm.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemoteResourceNotFoundException,
    TopicIdPartition,
)


class InMemoryRemoteLogMetadataManager(RemoteLogMetadataManager):
    def __init__(self) -> None:
        self._store = RemotePartitionMetadataStore()
        self._lock = threading.RLock()

    def add_remote_log_segment_metadata(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        check_new_segment(remote_log_segment_metadata)
        with self._lock:
            cache = self._store.cache(remote_log_segment_metadata.topic_id_partition)
            cache.mark_initialized()
            cache.add_copy_in_progress_segment(remote_log_segment_metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        check_segment_update(update)
        with self._lock:
            cache = self._store.caches.get(update.topic_id_partition)
            if cache is None:
                raise RemoteResourceNotFoundException(f"no remote segments for {update.topic_id_partition}")
            cache.update_remote_log_segment_metadata(update)

    def remote_log_segment_metadata(self, topic_id_partition, epoch_for_offset, offset):
        with self._lock:
            cache = self._store.caches.get(topic_id_partition)
            return None if cache is None else cache.remote_log_segment_metadata(epoch_for_offset, offset)

    def next_segment_with_txn_index(self, topic_id_partition, epoch, offset):
        with self._lock:
            cache = self._store.caches.get(topic_id_partition)
            return None if cache is None else cache.next_segment_with_txn_index(epoch, offset)

    def highest_offset_for_epoch(self, topic_id_partition, leader_epoch):
        with self._lock:
            cache = self._store.caches.get(topic_id_partition)
            return None if cache is None else cache.highest_offset_for_epoch(leader_epoch)

    def put_remote_partition_delete_metadata(self, remote_partition_delete_metadata: RemotePartitionDeleteMetadata):
        with self._lock:
            self._store.handle_partition_delete(remote_partition_delete_metadata)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        with self._lock:
            cache = self._store.caches.get(topic_id_partition)
            return iter(() if cache is None else cache.list_remote_log_segments(leader_epoch))

    def on_partition_leadership_changes(self, leader_partitions: Iterable, follower_partitions: Iterable) -> None:
        pass

    def on_stop_partitions(self, partitions: Iterable) -> None:
        pass

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        return sum(m.segment_size_in_bytes for m in self.list_remote_log_segments(topic_id_partition, leader_epoch))
