"""What the parts of one group coordinator share: the group table, the store, the clock.

Membership, committed offsets and group admin each own one seam of Kafka's GroupCoordinator; they
see the same groups, so they get one `CoordinatorState` instead of reaching into each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from kio.schema.errors import ErrorCode

from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group import GroupMetadata
from tieredlog.coordinator.storage import GroupStore
from tieredlog.coordinator.timer import Cancellable, Scheduler

if TYPE_CHECKING:
    from tieredlog.coordinator.consumer_group.group import ConsumerGroup


@dataclass
class PartitionOwnership:
    """In a cluster: the `__consumer_offsets` partitions this coordinator serves, Kafka's
    ownedPartitions and loadingPartitions, each with the leader epoch it was elected at."""

    partition_for: Callable[[str], int]
    owned: dict[int, int] = field(default_factory=dict)
    loading: dict[int, int] = field(default_factory=dict)


@dataclass
class CoordinatorState:
    config: GroupConfig
    scheduler: Scheduler
    store: GroupStore
    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    # False until the store is loaded and again after shutdown: requests then get COORDINATOR_NOT_AVAILABLE.
    active: bool = False
    # None: one broker, which coordinates every group; in a cluster, the partitions led here
    ownership: PartitionOwnership | None = None
    # KIP-848 groups by id; each also has a GroupMetadata in `groups` (no classic member) for its offsets
    consumer_groups: dict[str, "ConsumerGroup"] = field(default_factory=dict)

    def not_ready_error(self) -> ErrorCode | None:
        return None if self.active else ErrorCode.coordinator_not_available

    def ownership_error(self, group_id: str) -> ErrorCode | None:
        """The rest of Kafka's validateGroupStatus, in a cluster: COORDINATOR_LOAD_IN_PROGRESS while the
        group's partition loads, NOT_COORDINATOR when this broker does not lead it (the client finds
        the coordinator again)."""
        own = self.ownership
        if own is None:
            return None
        partition = own.partition_for(group_id)
        if partition in own.loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in own.owned:
            return ErrorCode.not_coordinator
        return None

    def any_loading(self) -> bool:
        return self.ownership is not None and bool(self.ownership.loading)

    def new_group(self, group_id: str) -> GroupMetadata:
        group = self.groups[group_id] = GroupMetadata(group_id, state_timestamp_ms=self.scheduler.wall_clock_ms())
        return group


def valid_group_id(group_id: str | None, allow_empty: bool) -> bool:
    # Kafka accepts "" for the offset APIs, DescribeGroups and DeleteGroups for backwards compatibility.
    return group_id is not None and (allow_empty or group_id != "")


def cancel(handle: Cancellable | None) -> None:
    if handle is not None:
        handle.cancel()
