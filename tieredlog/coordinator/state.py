"""What the parts of one group coordinator share: the group table, the store, the clock.

Membership, committed offsets and group admin each own one seam of Kafka's GroupCoordinator; they
see the same groups, so they get one `CoordinatorState` instead of reaching into each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group import GroupMetadata
from tieredlog.coordinator.storage import GroupStore
from tieredlog.coordinator.timer import Cancellable, Scheduler


@dataclass
class CoordinatorState:
    config: GroupConfig
    scheduler: Scheduler
    store: GroupStore
    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    # False until the store is loaded and again after shutdown: requests then get COORDINATOR_NOT_AVAILABLE.
    active: bool = False

    def not_ready_error(self) -> ErrorCode | None:
        return None if self.active else ErrorCode.coordinator_not_available

    def new_group(self, group_id: str) -> GroupMetadata:
        group = self.groups[group_id] = GroupMetadata(group_id, state_timestamp_ms=self.scheduler.now_ms())
        return group


def valid_group_id(group_id: str | None, allow_empty: bool) -> bool:
    # Kafka accepts "" for the offset APIs, DescribeGroups and DeleteGroups for backwards compatibility.
    return group_id is not None and (allow_empty or group_id != "")


def cancel(handle: Cancellable | None) -> None:
    if handle is not None:
        handle.cancel()
