"""What this broker knows of the cluster: Kafka's ``MetadataCache`` (ZooKeeper mode).

Filled only by the controller's UpdateMetadata requests; Metadata answers come from it, so every
broker tells clients the same leaders, replicas and ISRs. Read and written on the event loop.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

LEADER_DURING_DELETE = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete: the topic is being deleted


@dataclass(frozen=True, slots=True)
class BrokerNode:
    broker_id: int
    endpoints: dict[str, tuple[str, int]]  # listener name -> (host, port)
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    zk_version: int = 0


@dataclass(slots=True)
class TopicEntry:
    name: str
    topic_id: uuid.UUID | None
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetadataDelta:
    """What one UpdateMetadata changed, for the broker to act on (topic table, configs)."""

    new_topics: tuple[str, ...]
    deleted_topics: tuple[str, ...]
    grown_topics: tuple[str, ...]


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id: int | None = None
        self.controller_epoch = -1
        self.brokers: dict[int, BrokerNode] = {}
        self.topics: dict[str, TopicEntry] = {}
        self._by_id: dict[uuid.UUID, str] = {}

    def update(self, controller_id: int, controller_epoch: int, brokers: list[BrokerNode],
               partitions: list[tuple[str, uuid.UUID | None, int, PartitionMetadata]]) -> MetadataDelta:
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.brokers = {b.broker_id: b for b in brokers}
        new: list[str] = []
        grown: list[str] = []
        touched_deletes: set[str] = set()
        for topic, topic_id, index, pm in partitions:
            entry = self.topics.get(topic)
            if pm.leader == LEADER_DURING_DELETE:
                if entry is not None:
                    entry.partitions.pop(index, None)
                    touched_deletes.add(topic)
                continue
            if entry is None or (topic_id is not None and entry.topic_id not in (None, topic_id)):
                # a new topic, or one deleted and created again under the same name
                entry = TopicEntry(topic, topic_id)
                self.topics[topic] = entry
                new.append(topic)
            elif index not in entry.partitions and topic not in new:
                grown.append(topic)
            if topic_id is not None:
                entry.topic_id = topic_id
                self._by_id[topic_id] = topic
            entry.partitions[index] = pm
        deleted = []
        for topic in touched_deletes:
            entry = self.topics.get(topic)
            if entry is not None and not entry.partitions:
                del self.topics[topic]
                if entry.topic_id is not None:
                    self._by_id.pop(entry.topic_id, None)
                deleted.append(topic)
        return MetadataDelta(tuple(new), tuple(deleted), tuple(dict.fromkeys(grown)))

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._by_id.get(topic_id)

    def partition(self, topic: str, index: int) -> PartitionMetadata | None:
        entry = self.topics.get(topic)
        return entry.partitions.get(index) if entry is not None else None

    def endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        node = self.brokers.get(broker_id)
        return node.endpoints.get(listener) if node is not None else None
