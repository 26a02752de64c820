"""A RemoteStorageManager with Kafka's contract and nothing more: it copies, fetches and deletes, but
cannot list what it holds (no ``ListableRemoteStorageManager``), as a plugin with its own object layout.
It stores through a LocalTieredStorage under ``rsm.config.dir``.

Loaded by name (``fetch_only_rsm:FetchOnlyStorage``) with this folder as the class path, directly or as
the chunked plugin's ``chunked.backend``; readers then find its segments only from
``__remote_log_metadata`` (``metadataSource=brokers``).
"""

from __future__ import annotations

from typing import BinaryIO, Mapping

from tieredlog.rsm.api import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
)
from tieredlog.rsm.local import LocalTieredStorage


class FetchOnlyStorage(RemoteStorageManager):
    def __init__(self) -> None:
        self._local = LocalTieredStorage()

    def configure(self, configs: Mapping[str, object]) -> None:
        self._local.configure(configs)

    def copy_log_segment_data(self, remote_log_segment_metadata: RemoteLogSegmentMetadata,
                              log_segment_data: LogSegmentData) -> CustomMetadata | None:
        return self._local.copy_log_segment_data(remote_log_segment_metadata, log_segment_data)

    def fetch_log_segment(self, remote_log_segment_metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        return self._local.fetch_log_segment(remote_log_segment_metadata, start_position, end_position)

    def fetch_index(self, remote_log_segment_metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        return self._local.fetch_index(remote_log_segment_metadata, index_type)

    def delete_log_segment_data(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        self._local.delete_log_segment_data(remote_log_segment_metadata)

    def close(self) -> None:
        self._local.close()
