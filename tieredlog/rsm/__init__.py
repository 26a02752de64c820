"""The RemoteStorageManager plugin contract. Plugin authors import from here and nothing else."""

from tieredlog.rsm.api import (
    CustomMetadata,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    RetriableRemoteStorageException,
    TopicIdPartition,
)

__all__ = [
    "CustomMetadata",
    "IndexType",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundException",
    "RemoteStorageException",
    "RemoteStorageManager",
    "RetriableRemoteStorageException",
    "TopicIdPartition",
]
