"""What the group coordinator needs from outside its package, as small typed Protocols.

`tieredlog/server/coordinators.py` hands in the implementations: the Broker (which hosts
`__consumer_offsets`), the topic's partition logs (UnifiedLogs), and the consumer protocol's
subscription decoder (kio's schema behind the server's frame guard: the coordinator never imports
the protocol package).
"""

from __future__ import annotations

from typing import Callable, Collection, Protocol

from tieredlog.log.types import FetchDataInfo, FetchIsolation, LogAppendInfo


class OffsetsTopicLog(Protocol):
    """The calls the group store makes on one `__consumer_offsets` partition."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def append_as_leader(self, records: bytearray, leader_epoch: int) -> LogAppendInfo: ...

    def update_high_watermark(self, offset: int) -> int: ...

    def read(
        self, fetch_offset: int, max_bytes: int, isolation: FetchIsolation = ..., min_one_message: bool = ...
    ) -> FetchDataInfo: ...


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
