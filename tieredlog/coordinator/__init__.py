"""Consumer groups and committed offsets (`__consumer_offsets`).

`GroupCoordinator` is the state machine the server's group handlers (tieredlog/server/group_apis.py)
call; `tieredlog/server/coordinators.py` builds it for a broker. What the coordinator needs from
outside is declared in `contracts.py`.
"""

from __future__ import annotations

from tieredlog.coordinator.admin import GroupSummary, MemberSummary
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.contracts import CoordinatorBroker
from tieredlog.coordinator.group import GroupState
from tieredlog.coordinator.group_coordinator import GroupCoordinator
from tieredlog.coordinator.membership import JoinResult, SyncResult
from tieredlog.coordinator.storage import OFFSETS_TOPIC, LogGroupStore, MemoryGroupStore

__all__ = [
    "CoordinatorBroker", "GroupConfig", "GroupCoordinator", "GroupState", "GroupSummary", "JoinResult",
    "LogGroupStore", "MemberSummary", "MemoryGroupStore", "OFFSETS_TOPIC", "SyncResult",
]
