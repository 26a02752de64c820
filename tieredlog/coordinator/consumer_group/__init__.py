"""KIP-848 consumer groups (group.protocol=consumer): ConsumerGroupHeartbeat, ConsumerGroupDescribe,
server-side assignors, incremental reconciliation and their `__consumer_offsets` records."""

from __future__ import annotations

from tieredlog.coordinator.consumer_group.coordinator import (
    ConsumerGroupCoordinator,
    DescribedGroup,
    HeartbeatRequest,
    HeartbeatResult,
)
from tieredlog.coordinator.consumer_group.group import ConsumerGroup, ConsumerGroupState

__all__ = ["ConsumerGroup", "ConsumerGroupCoordinator", "ConsumerGroupState", "DescribedGroup", "HeartbeatRequest",
           "HeartbeatResult"]
