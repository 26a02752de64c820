"""Consumer groups and committed offsets (`__consumer_offsets`).

`create_group_coordinator(broker)` is what the broker calls at start-up; the returned coordinator is
started with `await coordinator.start()` (creates and loads `__consumer_offsets`) and stopped with
`await coordinator.shutdown()`. The server's group handlers (tieredlog/server/group_apis.py) call it.
"""

from __future__ import annotations

from typing import Any

from tieredlog.coordinator.admin import GroupSummary, MemberSummary
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.contracts import CoordinatorBroker
from tieredlog.coordinator.group import GroupState
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.membership import JoinResult, SyncResult
from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore, MemoryGroupStore
from tieredlog.coordinator.timer import LoopScheduler

__all__ = [
    "GroupConfig", "GroupCoordinator", "GroupState", "GroupSummary", "JoinResult", "LogGroupStore",
    "MemberSummary", "MemoryGroupStore", "OFFSETS_TOPIC", "SyncResult", "create_group_coordinator",
]


class BrokerGroupCoordinator(GroupCoordinator):
    """The coordinator wired to a broker: its store is the broker's `__consumer_offsets` logs."""

    def __init__(self, broker: CoordinatorBroker, config: GroupConfig):
        super().__init__(config, LoopScheduler())
        self.broker = broker

    async def start(self) -> None:
        self.state.store = LogGroupStore.open(self.broker, self.config)
        await super().start()


def create_group_coordinator(broker: Any) -> GroupCoordinator:
    config = GroupConfig.from_properties(broker.config)
    return BrokerGroupCoordinator(broker, config)
