"""Consumer groups and committed offsets (`__consumer_offsets`).

`create_group_coordinator(broker)` is what the broker calls at start-up; the returned coordinator is
started with `await coordinator.start()` (creates and loads `__consumer_offsets`) and stopped with
`await coordinator.shutdown()`. The server's group handlers (tieredlog/server/group_apis.py) call it.
"""

from __future__ import annotations

from typing import Any

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.coordinator import (
    GroupCoordinator,
    GroupSummary,
    JoinResult,
    MemberSummary,
    MemoryGroupStore,
    SyncResult,
)
from tieredlog.coordinator.group import GroupState
from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore
from tieredlog.coordinator.timer import LoopScheduler

__all__ = [
    "GroupConfig", "GroupCoordinator", "GroupState", "GroupSummary", "JoinResult", "LogGroupStore",
    "MemberSummary", "MemoryGroupStore", "OFFSETS_TOPIC", "SyncResult", "create_group_coordinator",
]

# Kafka's defaults for the offsets topic: compacted, small-ish segments.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


class BrokerGroupCoordinator(GroupCoordinator):
    """The coordinator wired to a broker: its store is the broker's `__consumer_offsets` logs."""

    def __init__(self, broker: Any, config: GroupConfig):
        super().__init__(config, LoopScheduler())
        self.broker = broker

    async def start(self) -> None:
        configs = dict(OFFSETS_TOPIC_CONFIGS)
        configs["segment.bytes"] = str(self.config.offsets_topic_segment_bytes)
        topic = self.broker.create_internal_topic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, configs)
        # An existing topic keeps its partition count: the group -> partition mapping must not move.
        partitions = getattr(topic, "partitions", self.config.offsets_topic_num_partitions)
        self.store = LogGroupStore(lambda p: self.broker.get_partition_log(OFFSETS_TOPIC, p), partitions)
        await super().start()


def create_group_coordinator(broker: Any) -> GroupCoordinator:
    config = GroupConfig.from_properties(broker.config)
    return BrokerGroupCoordinator(broker, config)
