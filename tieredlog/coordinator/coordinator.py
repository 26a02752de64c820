"""The classic-protocol group coordinator: JoinGroup/SyncGroup/Heartbeat/LeaveGroup and committed offsets.

A state machine that never touches a socket. JoinGroup and SyncGroup answers may be parked until the
rebalance reaches them, so those two return futures; everything else answers at once. Timers (session
timeouts, the DelayedJoin, the pending-sync deadline) come from a `Scheduler`; the broker's runs on the
asyncio loop. Durable state goes through a `GroupStore` as `__consumer_offsets` records.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from tieredlog import errors
from tieredlog.coordinator import schema
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.group import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
    Protocols,
)
from tieredlog.coordinator.timer import Scheduler

log = logging.getLogger(__name__)

NONE = 0
OFFSET_METADATA_TOO_LARGE = 12  # not (yet) a class in tieredlog.errors
UNKNOWN_MEMBER = errors.UnknownMemberIdError.code
ILLEGAL_GENERATION = errors.IllegalGenerationError.code
REBALANCE_IN_PROGRESS = errors.RebalanceInProgressError.code
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.code
COORDINATOR_LOAD_IN_PROGRESS = errors.CoordinatorLoadInProgressError.code
NOT_COORDINATOR = errors.NotCoordinatorError.code
INVALID_GROUP_ID = errors.InvalidGroupIdError.code
GROUP_ID_NOT_FOUND = errors.GroupIdNotFoundError.code
FENCED_INSTANCE_ID = errors.FencedInstanceIdError.code
INCONSISTENT_GROUP_PROTOCOL = errors.InconsistentGroupProtocolError.code


class GroupStore(Protocol):
    """Durable log of `__consumer_offsets` records (key, value or None for a tombstone)."""

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]], timestamp_ms: int) -> None:
        """Write the records to the group's partition; raises `tieredlog.errors.KafkaError` on failure."""

    def replay(self) -> Iterable[tuple[bytes, bytes | None]]:
        """Every record of every partition, in log order per partition."""


class MemoryGroupStore:
    """Keeps the records in a list: for a broker without durable offsets and for state-machine tests."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]], timestamp_ms: int) -> None:
        self.records.extend((group_id, key, value) for key, value in records)

    def replay(self) -> Iterable[tuple[bytes, bytes | None]]:
        return [(key, value) for _, key, value in self.records]


@dataclass
class JoinResult:
    error: int
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member id, group instance id, metadata for the chosen protocol); only the leader gets them.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


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
    error: int
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


def _resolve(future: asyncio.Future | None, value: object) -> None:
    if future is not None and not future.done():
        future.set_result(value)


def _valid_group_id(group_id: str | None, allow_empty: bool) -> bool:
    # Kafka accepts "" for the offset APIs, DescribeGroups and DeleteGroups for backwards compatibility.
    return group_id is not None and (allow_empty or group_id != "")


def _store_error_code(exc: Exception) -> int:
    """Kafka's mapping of a failed `__consumer_offsets` append to what the group client should see."""
    if not isinstance(exc, errors.KafkaError):
        log.error("__consumer_offsets append failed", exc_info=exc)
        return errors.UnknownServerError.code
    if isinstance(exc, (errors.NotEnoughReplicasError, errors.NotEnoughReplicasAfterAppendError,
                        errors.RequestTimedOutError, errors.UnknownTopicOrPartitionError)):
        return COORDINATOR_NOT_AVAILABLE
    if isinstance(exc, (errors.NotLeaderOrFollowerError, errors.KafkaStorageError)):
        # A full or failed log dir: Kafka sends the client to look for the coordinator again.
        return NOT_COORDINATOR
    if isinstance(exc, (errors.MessageTooLargeError, errors.RecordListTooLargeError,
                        errors.InvalidFetchSizeError)):
        return errors.InvalidCommitOffsetSizeError.code
    return errors.UnknownServerError.code


class GroupCoordinator:
    def __init__(self, config: GroupConfig, scheduler: Scheduler, store: GroupStore | None = None):
        self.config = config
        self.scheduler = scheduler
        self.store: GroupStore = store if store is not None else MemoryGroupStore()
        self.groups: dict[str, GroupMetadata] = {}
        self.active = False

    # -- lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        self.load()
        self.active = True

    async def shutdown(self) -> None:
        self.active = False
        for group in self.groups.values():
            self._cancel(group.join_handle)
            self._cancel(group.sync_handle)
            for handle in group.pending_members.values():
                self._cancel(handle)
            for member in group.members.values():
                self._cancel(member.heartbeat_handle)
                # Parked clients rediscover the coordinator and rejoin.
                _resolve(member.awaiting_join, JoinResult(NOT_COORDINATOR, member.member_id))
                _resolve(member.awaiting_sync, SyncResult(NOT_COORDINATOR))
                member.awaiting_join = member.awaiting_sync = None

    def load(self) -> None:
        """Rebuild groups and committed offsets from the store (Kafka's loadGroupsAndOffsets)."""
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        stored: dict[str, schema.StoredGroup | None] = {}
        unreadable = 0
        first_unreadable: schema.SchemaError | None = None
        for key_bytes, value in self.store.replay():
            try:
                key = schema.decode_key(key_bytes)
                if isinstance(key, schema.OffsetKey):
                    tp = (key.topic, key.partition)
                    if value is None:
                        offsets.get(key.group, {}).pop(tp, None)
                    else:
                        offsets.setdefault(key.group, {})[tp] = schema.decode_offset_value(value)
                else:
                    stored[key.group] = None if value is None else schema.decode_group_value(value)
            except schema.SchemaError as exc:
                # A record we cannot read (a newer Kafka's schema, or damage) must not stop the
                # coordinator loading; one line for all of them, however many there are.
                unreadable += 1
                first_unreadable = first_unreadable or exc
        if first_unreadable is not None:
            log.warning("skipped %d unreadable __consumer_offsets record(s); the first: %s", unreadable, first_unreadable)
        self.groups.clear()
        for group_id in set(offsets) | {g for g, v in stored.items() if v is not None}:
            group = GroupMetadata(group_id, state_timestamp_ms=self.scheduler.now_ms())
            group.offsets = offsets.get(group_id, {})
            saved = stored.get(group_id)
            if saved is not None:
                group.generation_id = saved.generation
                group.protocol_type = saved.protocol_type or None
                group.protocol_name = saved.protocol
                for m in saved.members:
                    group.members[m.member_id] = MemberMetadata(
                        m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        m.rebalance_timeout_ms, m.session_timeout_ms, saved.protocol_type,
                        [(saved.protocol or "", m.subscription)], m.assignment,
                    )
                group.leader_id = saved.leader if saved.leader in group.members else None
                if group.members:
                    group.state = GroupState.STABLE
                    for member in group.members.values():
                        self._schedule_heartbeat(group, member)
            if group.members or group.offsets or group.generation_id > 0:
                self.groups[group_id] = group

    # -- helpers -------------------------------------------------------------------------------------
    @staticmethod
    def _cancel(handle: object) -> None:
        if handle is not None:
            handle.cancel()  # type: ignore[attr-defined]

    def _not_ready_error(self) -> int | None:
        return None if self.active else COORDINATOR_NOT_AVAILABLE

    def _future(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()

    def _done(self, value: object) -> asyncio.Future:
        future = self._future()
        future.set_result(value)
        return future

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._cancel(member.heartbeat_handle)
        member.heartbeat_handle = self.scheduler.call_later(
            member.session_timeout_ms, lambda: self._on_heartbeat_expired(group, member)
        )

    def _on_heartbeat_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join is not None or member.awaiting_sync is not None:
            # A parked member is bounded by the rebalance timeout, not its session.
            self._schedule_heartbeat(group, member)
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)

    def _validate_member(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> int:
        member = group.members.get(member_id)
        if instance_id is not None:
            static = group.member_by_instance_id(instance_id)
            if static is not None and static.member_id != member_id:
                return FENCED_INSTANCE_ID
        if member is None:
            return UNKNOWN_MEMBER
        return NONE

    # -- JoinGroup -----------------------------------------------------------------------------------
    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        require_known_member_id: bool,
    ) -> asyncio.Future:
        def fail(code: int, mid: str = member_id) -> asyncio.Future:
            return self._done(JoinResult(code, mid))

        if (code := self._not_ready_error()) is not None:
            return fail(code)
        if not _valid_group_id(group_id, allow_empty=False):
            return fail(INVALID_GROUP_ID)
        if not (self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms):
            return fail(errors.InvalidSessionTimeoutError.code)
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return fail(UNKNOWN_MEMBER)
            group = self.groups[group_id] = GroupMetadata(group_id, state_timestamp_ms=self.scheduler.now_ms())
        known = group.has(member_id) or member_id in group.pending_members
        if len(group.members) >= self.config.max_size and (is_unknown or not known):
            return fail(errors.GroupMaxSizeReachedError.code)
        if group.is_state(GroupState.DEAD):
            return fail(COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(protocol_type, protocols):
            self._forget_if_unused(group)
            return fail(INCONSISTENT_GROUP_PROTOCOL)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        member = MemberMetadata(
            member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
            session_timeout_ms, protocol_type, list(protocols),
        )
        if is_unknown:
            future = self._new_member_join(group, member, require_known_member_id)
        else:
            future = self._current_member_join(group, member)
        self._try_complete_join(group)
        return future

    def _forget_if_unused(self, group: GroupMetadata) -> None:
        # A join that failed validation must not leave a phantom group behind for ListGroups.
        if (group.is_state(GroupState.EMPTY) and group.generation_id == 0 and not group.members
                and not group.pending_members and not group.offsets):
            self.groups.pop(group.group_id, None)

    def _new_member_join(self, group: GroupMetadata, member: MemberMetadata, require_known: bool) -> asyncio.Future:
        member.member_id = f"{member.client_id}-{uuid.uuid4()}"
        if member.group_instance_id is not None:
            # Static membership, simplified: the newest instance replaces (fences) the previous one.
            previous = group.member_by_instance_id(member.group_instance_id)
            if previous is not None:
                _resolve(previous.awaiting_join, JoinResult(FENCED_INSTANCE_ID, previous.member_id))
                _resolve(previous.awaiting_sync, SyncResult(FENCED_INSTANCE_ID))
                previous.awaiting_join = previous.awaiting_sync = None
                self._cancel(previous.heartbeat_handle)
                group.remove(previous.member_id)
        elif require_known:
            # KIP-394: hand out the id first, so a client that retries after a lost response does not
            # leave an orphan member behind. The id expires if the client never comes back with it.
            new_id = member.member_id
            group.pending_members[new_id] = self.scheduler.call_later(
                member.session_timeout_ms, lambda: self._on_pending_member_expired(group, new_id)
            )
            return self._done(JoinResult(errors.MemberIdRequiredError.code, new_id))
        return self._add_member_and_rebalance(group, member)

    def _current_member_join(self, group: GroupMetadata, request: MemberMetadata) -> asyncio.Future:
        member_id = request.member_id
        if member_id in group.pending_members:
            self._cancel(group.pending_members.pop(member_id))
            return self._add_member_and_rebalance(group, request)
        code = self._validate_member(group, member_id, request.group_instance_id)
        if code != NONE:
            return self._done(JoinResult(code, member_id))
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, request)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # Same metadata: the member most likely lost our JoinGroup response; answer it again.
                self._schedule_heartbeat(group, member)
                return self._done(self._join_result(group, member))
            return self._update_member_and_rebalance(group, member, request)
        # Empty (no members, unreachable here) or Stable.
        if group.is_leader(member_id) or not member.matches(request.protocols):
            return self._update_member_and_rebalance(group, member, request)
        self._schedule_heartbeat(group, member)
        result = self._join_result(group, member)
        result.members = []
        return self._done(result)

    def _add_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata) -> asyncio.Future:
        member.is_new = True
        member.awaiting_join = self._future()
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"adding new member {member.member_id}")
        return member.awaiting_join

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, request: MemberMetadata
    ) -> asyncio.Future:
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host
        # A member re-sending JoinGroup while parked supersedes its earlier request.
        _resolve(member.awaiting_join, JoinResult(REBALANCE_IN_PROGRESS, member.member_id))
        member.awaiting_join = self._future()
        self._schedule_heartbeat(group, member)
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}")
        return member.awaiting_join

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members = []
        if group.is_leader(member.member_id) and group.protocol_name is not None:
            members = [
                (m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            ]
        return JoinResult(
            NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id or "", members,
        )

    def _on_pending_member_expired(self, group: GroupMetadata, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            self._try_complete_join(group)

    # -- the rebalance -------------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        log.info("group %s: preparing rebalance (%s)", group.group_id, reason)
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, REBALANCE_IN_PROGRESS)
        self._cancel(group.sync_handle)
        group.sync_handle = None
        self._cancel(group.join_handle)
        if group.is_state(GroupState.EMPTY):
            # Kafka's InitialDelayedJoin: give the first members of a new group a moment to arrive
            # together instead of rebalancing once per member.
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_initial = True
            group.join_handle = self.scheduler.call_later(
                delay, lambda: self._on_initial_join_expired(group, delay, remaining)
            )
        else:
            group.join_initial = False
            group.join_handle = self.scheduler.call_later(
                group.rebalance_timeout_ms(), lambda: self._complete_join(group)
            )
        group.transition_to(GroupState.PREPARING_REBALANCE, self.scheduler.now_ms())

    def _on_initial_join_expired(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        if not group.is_state(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            next_delay = min(delay, remaining)
            left = max(remaining - delay, 0)
            group.join_handle = self.scheduler.call_later(
                next_delay, lambda: self._on_initial_join_expired(group, delay, left)
            )
            return
        self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        if (
            group.is_state(GroupState.PREPARING_REBALANCE)
            and not group.join_initial
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """Kafka's onCompleteJoin: evict who did not rejoin, start the next generation, answer everyone."""
        if not group.is_state(GroupState.PREPARING_REBALANCE):
            return
        self._cancel(group.join_handle)
        group.join_handle = None
        group.join_initial = False
        for member in group.not_yet_rejoined():
            log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
            _resolve(member.awaiting_sync, SyncResult(UNKNOWN_MEMBER))
            self._cancel(member.heartbeat_handle)
            group.remove(member.member_id)
        group.maybe_elect_joined_leader()
        group.new_member_added = False
        group.pending_sync.clear()
        group.generation_id += 1
        now = self.scheduler.now_ms()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition_to(GroupState.EMPTY, now)
            self._store_group_quietly(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(GroupState.COMPLETING_REBALANCE, now)
        log.info(
            "group %s: generation %d (%s) with %d members, leader %s", group.group_id, group.generation_id,
            group.protocol_name, len(group.members), group.leader_id,
        )
        for member in group.members.values():
            _resolve(member.awaiting_join, self._join_result(group, member))
            member.awaiting_join = None
            member.is_new = False
            self._schedule_heartbeat(group, member)
            group.pending_sync.add(member.member_id)
        generation = group.generation_id
        group.sync_handle = self.scheduler.call_later(
            group.rebalance_timeout_ms(), lambda: self._on_sync_expired(group, generation)
        )

    def _on_sync_expired(self, group: GroupMetadata, generation: int) -> None:
        if group.generation_id != generation or not group.pending_sync:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            log.info("group %s: member %s never sent SyncGroup", group.group_id, member_id)
            if member is not None:
                self._cancel(member.heartbeat_handle)
            group.remove(member_id)
        self._maybe_prepare_rebalance(group, "members failed to sync")

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, code: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            _resolve(member.awaiting_sync, SyncResult(code))
            member.awaiting_sync = None

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata) -> None:
        _resolve(member.awaiting_join, JoinResult(UNKNOWN_MEMBER, member.member_id))
        _resolve(member.awaiting_sync, SyncResult(UNKNOWN_MEMBER))
        member.awaiting_join = member.awaiting_sync = None
        self._cancel(member.heartbeat_handle)
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id}")
        elif group.is_state(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- SyncGroup -----------------------------------------------------------------------------------
    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> asyncio.Future:
        def fail(code: int) -> asyncio.Future:
            return self._done(SyncResult(code))

        if (code := self._not_ready_error()) is not None:
            return fail(code)
        if not _valid_group_id(group_id, allow_empty=False):
            return fail(INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return fail(UNKNOWN_MEMBER)
        if group.is_state(GroupState.DEAD):
            return fail(COORDINATOR_NOT_AVAILABLE)
        code = self._validate_member(group, member_id, group_instance_id)
        if code != NONE:
            return fail(code)
        if generation_id != group.generation_id:
            return fail(ILLEGAL_GENERATION)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return fail(INCONSISTENT_GROUP_PROTOCOL)
        if protocol_name is not None and protocol_name != group.protocol_name:
            return fail(INCONSISTENT_GROUP_PROTOCOL)
        if group.is_state(GroupState.EMPTY):
            return fail(UNKNOWN_MEMBER)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return fail(REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        self._schedule_heartbeat(group, member)
        if group.is_state(GroupState.STABLE):
            return self._done(SyncResult(NONE, member.assignment, group.protocol_type, group.protocol_name))
        # CompletingRebalance: park until the leader's assignment arrives.
        _resolve(member.awaiting_sync, SyncResult(REBALANCE_IN_PROGRESS))
        member.awaiting_sync = self._future()
        future = member.awaiting_sync
        if group.is_leader(member_id):
            full = {mid: assignments.get(mid, b"") for mid in group.members}
            try:
                self._store_group(group, full)
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                self._reset_and_propagate_assignment_error(group, _store_error_code(exc))
                self._maybe_prepare_rebalance(group, "failed to store the group assignment")
                return future
            for mid, member_ in group.members.items():
                member_.assignment = full[mid]
                _resolve(member_.awaiting_sync, SyncResult(NONE, member_.assignment, group.protocol_type,
                                                           group.protocol_name))
                member_.awaiting_sync = None
            group.transition_to(GroupState.STABLE, self.scheduler.now_ms())
            if not group.pending_sync:
                self._cancel(group.sync_handle)
                group.sync_handle = None
        return future

    # -- Heartbeat / LeaveGroup ----------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        if (code := self._not_ready_error()) is not None:
            return code
        if not _valid_group_id(group_id, allow_empty=False):
            return INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER
        if group.is_state(GroupState.DEAD):
            return COORDINATOR_NOT_AVAILABLE
        code = self._validate_member(group, member_id, group_instance_id)
        if code != NONE:
            return code
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        if group.is_state(GroupState.EMPTY):
            return UNKNOWN_MEMBER
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return REBALANCE_IN_PROGRESS
        return NONE

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """Returns (group error, [(member id, instance id, error)]) for the (member id, instance id) pairs."""
        if (code := self._not_ready_error()) is not None:
            return code, []
        if not _valid_group_id(group_id, allow_empty=False):
            return INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None:
            return NONE, [(mid, iid, UNKNOWN_MEMBER) for mid, iid in leaving]
        if group.is_state(GroupState.DEAD):
            return COORDINATOR_NOT_AVAILABLE, []
        results = []
        for member_id, instance_id in leaving:
            if instance_id is None and member_id in group.pending_members:
                self._cancel(group.pending_members.pop(member_id))
                self._try_complete_join(group)
                results.append((member_id, instance_id, NONE))
                continue
            member = group.members.get(member_id)
            if instance_id is not None:
                static = group.member_by_instance_id(instance_id)
                if static is None:
                    results.append((member_id, instance_id, UNKNOWN_MEMBER))
                    continue
                if member_id != UNKNOWN_MEMBER_ID and static.member_id != member_id:
                    results.append((member_id, instance_id, FENCED_INSTANCE_ID))
                    continue
                member = static
            if member is None:
                results.append((member_id, instance_id, UNKNOWN_MEMBER))
                continue
            log.info("group %s: member %s left", group_id, member.member_id)
            self._remove_member_and_update_group(group, member)
            results.append((member_id, instance_id, NONE))
        return NONE, results

    # -- offsets -------------------------------------------------------------------------------------
    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
    ) -> dict[tuple[str, int], int]:
        """Commit (offset, leader epoch, metadata) per partition; returns the error code per partition."""
        def all_(code: int) -> dict[tuple[str, int], int]:
            return {tp: code for tp in offsets}

        if (code := self._not_ready_error()) is not None:
            return all_(code)
        if not _valid_group_id(group_id, allow_empty=True):
            return all_(INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return all_(ILLEGAL_GENERATION)
            group = GroupMetadata(group_id, state_timestamp_ms=self.scheduler.now_ms())
            self.groups[group_id] = group
        if group.is_state(GroupState.DEAD):
            return all_(COORDINATOR_NOT_AVAILABLE)
        if not (generation_id < 0 and group.is_state(GroupState.EMPTY)):
            # A commit from a group member: it must be current.
            if group.is_state(GroupState.COMPLETING_REBALANCE):
                return all_(REBALANCE_IN_PROGRESS)
            code = self._validate_member(group, member_id, group_instance_id)
            if code != NONE:
                return all_(code)
            if generation_id != group.generation_id:
                return all_(ILLEGAL_GENERATION)
            self._schedule_heartbeat(group, group.members[member_id])
        return self._do_commit(group, offsets)

    def _do_commit(
        self, group: GroupMetadata, offsets: dict[tuple[str, int], tuple[int, int, str | None]]
    ) -> dict[tuple[str, int], int]:
        now = self.scheduler.wall_clock_ms()
        result: dict[tuple[str, int], int] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                result[tp] = OFFSET_METADATA_TOO_LARGE
                continue
            accepted[tp] = OffsetAndMetadata(offset, leader_epoch, metadata, now)
        if accepted:
            records = [
                (schema.encode_offset_key(group.group_id, t, p), schema.encode_offset_value(v))
                for (t, p), v in accepted.items()
            ]
            try:
                self.store.append(group.group_id, records, now)
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                code = _store_error_code(exc)
                return {**result, **{tp: code for tp in accepted}}
            group.offsets.update(accepted)
            result.update({tp: NONE for tp in accepted})
        return result

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> tuple[int, dict[tuple[str, int], OffsetAndMetadata | None]]:
        """Committed offsets (None = nothing committed); `partitions=None` asks for all of them."""
        if (code := self._not_ready_error()) is not None:
            return code, {}
        if not _valid_group_id(group_id, allow_empty=True):
            return INVALID_GROUP_ID, {}
        group = self.groups.get(group_id)
        committed = {} if group is None or group.is_state(GroupState.DEAD) else group.offsets
        if partitions is None:
            return NONE, dict(committed)
        # Without transactional commits there is never a pending offset, so require_stable is met.
        return NONE, {tp: committed.get(tp) for tp in partitions}

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        if (code := self._not_ready_error()) is not None:
            return code, {}
        if not _valid_group_id(group_id, allow_empty=False):
            return INVALID_GROUP_ID, {}
        group = self.groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return GROUP_ID_NOT_FOUND, {}
        result: dict[tuple[str, int], int] = {}
        deletable: list[tuple[str, int]] = []
        if group.is_state(GroupState.EMPTY):
            deletable = list(partitions)
        elif group.protocol_type == "consumer":
            for tp in partitions:
                if group.is_subscribed_to(tp[0]):
                    result[tp] = errors.GroupSubscribedToTopicError.code
                else:
                    deletable.append(tp)
        else:
            return errors.NonEmptyGroupError.code, {}
        present = [tp for tp in deletable if tp in group.offsets]
        if present:
            tombstones = [(schema.encode_offset_key(group_id, t, p), None) for t, p in present]
            try:
                self.store.append(group_id, tombstones, self.scheduler.wall_clock_ms())
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                return _store_error_code(exc), {}
            for tp in present:
                del group.offsets[tp]
        result.update({tp: NONE for tp in deletable})
        return NONE, result

    # -- admin ---------------------------------------------------------------------------------------
    def list_groups(self, states: Iterable[str] = ()) -> tuple[int, list[tuple[str, str, str]]]:
        """(error, [(group id, protocol type, state)]); `states` filters case-insensitively."""
        if (code := self._not_ready_error()) is not None:
            return code, []
        wanted = {s.lower() for s in states}
        listed = [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not g.is_state(GroupState.DEAD) and (not wanted or g.state.value.lower() in wanted)
        ]
        return NONE, listed

    def describe_group(self, group_id: str) -> GroupSummary:
        def dead(code: int) -> GroupSummary:
            return GroupSummary(group_id, code, GroupState.DEAD.value, "", "", [])

        if (code := self._not_ready_error()) is not None:
            return dead(code)
        if not _valid_group_id(group_id, allow_empty=True):
            return dead(INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return dead(NONE)
        stable = group.is_state(GroupState.STABLE)
        protocol = (group.protocol_name or "") if stable else ""
        members = [
            MemberSummary(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.metadata_for(protocol) if stable else b"", m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return GroupSummary(group_id, NONE, group.state.value, group.protocol_type or "", protocol, members)

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        result: dict[str, int] = {}
        for group_id in group_ids:
            if (code := self._not_ready_error()) is not None:
                result[group_id] = code
                continue
            if not _valid_group_id(group_id, allow_empty=True):
                result[group_id] = INVALID_GROUP_ID
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_state(GroupState.DEAD):
                result[group_id] = GROUP_ID_NOT_FOUND
                continue
            if not group.is_state(GroupState.EMPTY):
                result[group_id] = errors.NonEmptyGroupError.code
                continue
            tombstones: list[tuple[bytes, bytes | None]] = [
                (schema.encode_offset_key(group_id, t, p), None) for t, p in group.offsets
            ]
            tombstones.append((schema.encode_group_key(group_id), None))
            try:
                self.store.append(group_id, tombstones, self.scheduler.wall_clock_ms())
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                result[group_id] = _store_error_code(exc)
                continue
            self._cancel(group.join_handle)
            self._cancel(group.sync_handle)
            group.offsets.clear()
            group.transition_to(GroupState.DEAD, self.scheduler.now_ms())
            del self.groups[group_id]
            result[group_id] = NONE
        return result

    # -- group metadata records ----------------------------------------------------------------------
    def _store_group(self, group: GroupMetadata, assignments: dict[str, bytes]) -> None:
        protocol = group.protocol_name
        value = schema.StoredGroup(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp=self.scheduler.wall_clock_ms(),
            members=[
                schema.StoredMember(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                    m.session_timeout_ms, m.metadata_for(protocol) if protocol else b"",
                    assignments.get(m.member_id, b""),
                )
                for m in group.members.values()
            ],
        )
        record = (schema.encode_group_key(group.group_id), schema.encode_group_value(value))
        self.store.append(group.group_id, [record], self.scheduler.wall_clock_ms())

    def _store_group_quietly(self, group: GroupMetadata) -> None:
        try:
            self._store_group(group, {})
        except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
            # Kafka only logs this too: an empty group's metadata is rebuilt by the next join.
            log.warning("group %s: failed to store empty group metadata: %s", group.group_id, exc)
