"""The RemoteStorageManager plugin contract. Plugin authors import from here and nothing else: the
contract (``api``), the config reader with one-line errors, and the loader a plugin that wraps another
RSM builds it with."""

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
    check_positions,
)
from tieredlog.rsm.cleaner_offset import RemoteCleanerOffsetStore
from tieredlog.rsm.config import ConfigReader, RemoteStorageConfigError
from tieredlog.rsm.keys import SegmentObjectKey
from tieredlog.rsm.listing import ListableRemoteStorageManager
from tieredlog.rsm.registry import PluginLoadError, load_remote_storage_manager

__all__ = [
    "ConfigReader",
    "CustomMetadata",
    "IndexType",
    "ListableRemoteStorageManager",
    "LogSegmentData",
    "PluginLoadError",
    "RemoteCleanerOffsetStore",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundException",
    "RemoteStorageConfigError",
    "RemoteStorageException",
    "RemoteStorageManager",
    "RetriableRemoteStorageException",
    "SegmentObjectKey",
    "TopicIdPartition",
    "check_positions",
    "load_remote_storage_manager",
]
