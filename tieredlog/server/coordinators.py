"""Assembles the group coordinator (called once at broker start-up; the only place its parts are
built and handed to each other).

- Settings: the broker config's group.* / offsets.* keys (`GroupConfig.from_properties`).
- Store: `__consumer_offsets` in this broker's own logs (`LogGroupStore.open`: created with Kafka's
  configs when missing, an existing topic keeps its partition count). The Broker is what the
  coordinator's `CoordinatorBroker` protocol asks for.
- Timers: the asyncio loop (`LoopScheduler`), no threads.
- Consumer-protocol subscriptions: `consumer_protocol.subscribed_topics` (kio's schemas behind the
  request guard).
The Broker then awaits `start()` (loads the store) and, on stop, `shutdown()`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.storage import LogGroupStore
from tieredlog.coordinator.timer import LoopScheduler
from tieredlog.server.consumer_protocol import subscribed_topics

if TYPE_CHECKING:
    from tieredlog.server.broker import Broker


def create_group_coordinator(broker: Broker) -> GroupCoordinator:
    config = GroupConfig.from_properties(broker.config)
    return GroupCoordinator(config, LoopScheduler(), LogGroupStore.open(broker, config), subscriptions=subscribed_topics)
