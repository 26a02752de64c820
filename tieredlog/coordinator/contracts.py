"""What the group coordinator needs from outside its package, as small typed Protocols.

`tieredlog/server/coordinators.py` hands in the implementations: the Broker (which hosts
`__consumer_offsets`), the topic's partition logs (UnifiedLogs), in a cluster the ReplicaManager
(appends at the partition's leader epoch, acks=all waits), and the consumer protocol's subscription
decoder (kio's schema behind the server's frame guard: the coordinator never imports the protocol
package).
"""

from __future__ import annotations

from typing import Callable, Collection, Protocol

from tieredlog.log.types import AppendOrigin, FetchDataInfo, FetchIsolation, LogAppendInfo, TopicPartition


class OffsetsTopicLog(Protocol):
    """The calls the group store makes on one `__consumer_offsets` partition."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def append_as_leader(self, records: bytearray, leader_epoch: int, origin: AppendOrigin = ...) -> LogAppendInfo: ...

    def update_high_watermark(self, offset: int) -> int: ...

    def read(
        self, fetch_offset: int, max_bytes: int, isolation: FetchIsolation = ..., min_one_message: bool = ...
    ) -> FetchDataInfo: ...


class OffsetsTopicReplicas(Protocol):
    """In a cluster: the replica manager's produce path for the `__consumer_offsets` partitions this
    broker leads (Kafka's coordinator appends through ReplicaManager.appendRecords with acks=-1)."""

    def append_to_leader(self, tp: TopicPartition, records: bytes | bytearray, required_acks: int,
                         origin: AppendOrigin = ...) -> LogAppendInfo:
        """Append at the partition's current leader epoch; NotLeaderOrFollowerError when this broker no
        longer leads it, NotEnoughReplicasError when the ISR is below min.insync.replicas."""
        ...

    async def wait_for_acks(self, tp: TopicPartition, required_offset: int,
                            timeout_s: float) -> type[Exception] | None:
        """None once the ISR has everything below ``required_offset``, else the error class
        (NotLeaderOrFollowerError, NotEnoughReplicasAfterAppendError, RequestTimedOutError)."""
        ...


class InternalTopic(Protocol):
    @property
    def partitions(self) -> int: ...


class CoordinatorBroker(Protocol):
    """The broker as the group coordinator sees it: a host for `__consumer_offsets`."""

    def create_internal_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> InternalTopic:
        """Create the topic if missing; an existing one is returned as it is (its partition count kept)."""
        ...

    def get_partition_log(self, topic: str, partition: int) -> OffsetsTopicLog | None: ...


# The topics a ConsumerProtocolSubscription (a "consumer" member's JoinGroup metadata) names, or None
# when the bytes are not one: OffsetDelete then treats the group as subscribed to every topic.
SubscribedTopics = Callable[[bytes], Collection[str] | None]
