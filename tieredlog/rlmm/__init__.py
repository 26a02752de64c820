"""RemoteLogMetadataManager: the contract, Kafka's cache rules, serde and the topic-based manager."""

from tieredlog.rlmm.api import (
    RemoteLogMetadataManager,
    RemoteLogMetadataManagerFatalError,
    ReplicaNotAvailableError,
)
from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
from tieredlog.rlmm.topic import METADATA_TOPIC, LogMetadataTopic, MetadataTopic
from tieredlog.rlmm.topic_based import TopicBasedRemoteLogMetadataManager, TopicBasedRlmmConfig

__all__ = [
    "METADATA_TOPIC",
    "InMemoryRemoteLogMetadataManager",
    "LogMetadataTopic",
    "MetadataTopic",
    "RemoteLogMetadataManager",
    "RemoteLogMetadataManagerFatalError",
    "ReplicaNotAvailableError",
    "TopicBasedRemoteLogMetadataManager",
    "TopicBasedRlmmConfig",
]
