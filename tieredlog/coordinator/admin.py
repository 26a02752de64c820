"""Group admin: ListGroups, DescribeGroups and DeleteGroups.

Only an Empty group can be deleted: its offsets and its group metadata get tombstones in
`__consumer_offsets`, then it is gone from the table (Dead for anyone still holding it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from kio.schema.errors import ErrorCode

from tieredlog.coordinator import schema
from tieredlog.coordinator.group import GroupState
from tieredlog.coordinator.state import CoordinatorState, cancel, valid_group_id
from tieredlog.coordinator.storage import store_error_code


@dataclass
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class GroupSummary:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


class GroupAdmin:
    def __init__(self, state: CoordinatorState) -> None:
        self.state = state

    def list_groups(self, states: Iterable[str] = ()) -> tuple[ErrorCode, list[tuple[str, str, str]]]:
        """(error, [(group id, protocol type, state)]); `states` filters case-insensitively."""
        if (code := self.state.not_ready_error()) is not None:
            return code, []
        if self.state.any_loading():
            # Kafka too: the list would miss the groups of a partition still loading
            return ErrorCode.coordinator_load_in_progress, []
        wanted = {s.lower() for s in states}
        listed = [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.state.groups.values()
            if not g.is_state(GroupState.DEAD) and (not wanted or g.state.value.lower() in wanted)
        ]
        return ErrorCode.none, listed

    def describe_group(self, group_id: str) -> GroupSummary:
        def dead(code: ErrorCode) -> GroupSummary:
            return GroupSummary(group_id, code, GroupState.DEAD.value, "", "", [])

        if (code := self.state.not_ready_error()) is not None:
            return dead(code)
        if not valid_group_id(group_id, allow_empty=True):
            return dead(ErrorCode.invalid_group_id)
        if (code := self.state.ownership_error(group_id)) is not None:
            return dead(code)
        group = self.state.groups.get(group_id)
        if group is None:
            return dead(ErrorCode.none)
        stable = group.is_state(GroupState.STABLE)
        protocol = (group.protocol_name or "") if stable else ""
        members = [
            MemberSummary(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.metadata_for(protocol) if stable else b"", m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return GroupSummary(group_id, ErrorCode.none, group.state.value, group.protocol_type or "", protocol, members)

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        result: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            if (code := self.state.not_ready_error()) is not None:
                result[group_id] = code
                continue
            if not valid_group_id(group_id, allow_empty=True):
                result[group_id] = ErrorCode.invalid_group_id
                continue
            if (code := self.state.ownership_error(group_id)) is not None:
                result[group_id] = code
                continue
            group = self.state.groups.get(group_id)
            if group is None or group.is_state(GroupState.DEAD):
                result[group_id] = ErrorCode.group_id_not_found
                continue
            if not group.is_state(GroupState.EMPTY):
                result[group_id] = ErrorCode.non_empty_group
                continue
            tombstones: list[tuple[bytes, bytes | None]] = [
                (schema.encode_offset_key(group_id, t, p), None) for t, p in group.offsets
            ]
            tombstones.append((schema.encode_group_key(group_id), None))
            try:
                self.state.store.append(group_id, tombstones, self.state.scheduler.wall_clock_ms())
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                result[group_id] = store_error_code(exc)
                continue
            cancel(group.join_handle)
            cancel(group.sync_handle)
            group.offsets.clear()
            group.transition_to(GroupState.DEAD, self.state.scheduler.wall_clock_ms())
            del self.state.groups[group_id]
            result[group_id] = ErrorCode.none
        return result
