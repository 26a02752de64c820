"""Group membership, Kafka's classic protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
rebalance between them.

JoinGroup and SyncGroup answers may be parked until the rebalance reaches them, so those two return
futures; Heartbeat and LeaveGroup answer at once. Timers (session timeouts, the DelayedJoin and
Kafka's InitialDelayedJoin, the pending-sync deadline) come from the state's `Scheduler`. A group's
metadata record (GroupMetadataValue) is written when a generation's assignment is stored, when a
rebalance empties the group and when a static member (KIP-345) takes over its place under a new id.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable

from kio.schema.errors import ErrorCode

from tieredlog.coordinator import schema
from tieredlog.coordinator.group import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupState,
    MemberMetadata,
    Protocols,
)
from tieredlog.coordinator.state import CoordinatorState, cancel, valid_group_id
from tieredlog.coordinator.storage import WaitForIsr, store_error_code

log = logging.getLogger(__name__)


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member id, group instance id, metadata for the chosen protocol); only the leader gets them.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    # JoinGroup v9+: a static leader rejoining a Stable group gets the members but must not assign.
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


def _resolve(future: asyncio.Future | None, value: object) -> None:
    if future is not None and not future.done():
        future.set_result(value)


class GroupMembership:
    def __init__(self, state: CoordinatorState) -> None:
        self.state = state
        # in a cluster: SyncGroup assignments waiting for the ISR (kept so they are not collected)
        self._store_tasks: set[asyncio.Task] = set()

    # -- shared with the other parts -----------------------------------------------------------------
    def shutdown(self) -> None:
        """Cancel every timer; parked clients rediscover the coordinator and rejoin."""
        for group in self.state.groups.values():
            self._release(group)
        for task in list(self._store_tasks):
            task.cancel()

    def unload(self, group: GroupMetadata) -> None:
        """Kafka's onGroupUnloaded: this broker no longer leads the group's partition. Its timers stop,
        parked members get NOT_COORDINATOR (they find the new coordinator), the group is Dead here."""
        self._release(group)
        if not group.is_state(GroupState.DEAD):
            group.transition_to(GroupState.DEAD, self.state.scheduler.wall_clock_ms())

    def _release(self, group: GroupMetadata) -> None:
        cancel(group.join_handle)
        cancel(group.sync_handle)
        for handle in group.pending_members.values():
            cancel(handle)
        for member in group.members.values():
            cancel(member.heartbeat_handle)
            _resolve(member.awaiting_join, JoinResult(ErrorCode.not_coordinator, member.member_id))
            _resolve(member.awaiting_sync, SyncResult(ErrorCode.not_coordinator))
            member.awaiting_join = member.awaiting_sync = None

    def hand_over(self, group: GroupMetadata) -> None:
        """The group becomes a consumer group (KIP-848's online upgrade): its timers stop and members parked
        in a JoinGroup or SyncGroup get REBALANCE_IN_PROGRESS, so they rejoin the consumer group."""
        cancel(group.join_handle)
        cancel(group.sync_handle)
        group.join_handle = group.sync_handle = None
        for handle in group.pending_members.values():
            cancel(handle)
        for member in group.members.values():
            cancel(member.heartbeat_handle)
            _resolve(member.awaiting_join, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
            _resolve(member.awaiting_sync, SyncResult(ErrorCode.rebalance_in_progress))
            member.awaiting_join = member.awaiting_sync = None

    def take_over(self, group: GroupMetadata, rebalance_reason: str | None) -> None:
        """A consumer group became this classic group again (KIP-848's online downgrade): its members get
        sessions and, unless a static member only took another's place, a rebalance starts, as Kafka's
        convertToClassicGroup does."""
        for member in group.members.values():
            self.schedule_heartbeat(group, member)
        if rebalance_reason is not None:
            self._prepare_rebalance(group, rebalance_reason)

    def validate_member(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's validateCurrentMember: with an instance id, it must be mapped to this member id (another
        id: FENCED_INSTANCE_ID, the instance replaced this one); without, the member id must be known."""
        if instance_id is not None:
            static = group.member_by_instance_id(instance_id)
            if static is None:
                return ErrorCode.unknown_member_id
            return ErrorCode.none if static.member_id == member_id else ErrorCode.fenced_instance_id
        return ErrorCode.none if member_id in group.members else ErrorCode.unknown_member_id

    def schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration: the member's session starts again."""
        cancel(member.heartbeat_handle)
        member.heartbeat_handle = self.state.scheduler.call_later(
            member.session_timeout_ms, lambda: self._on_heartbeat_expired(group, member)
        )

    # -- helpers -------------------------------------------------------------------------------------
    def _future(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()

    def _done(self, value: object) -> asyncio.Future:
        future = self._future()
        future.set_result(value)
        return future

    def _on_heartbeat_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join is not None or member.awaiting_sync is not None:
            # A parked member is bounded by the rebalance timeout, not its session.
            self.schedule_heartbeat(group, member)
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)

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
        supports_skip_assignment: bool = False,
    ) -> asyncio.Future:
        """`require_known_member_id`: JoinGroup v4+ (KIP-394); `supports_skip_assignment`: v9+."""

        def fail(code: ErrorCode, mid: str = member_id) -> asyncio.Future:
            return self._done(JoinResult(code, mid))

        config = self.state.config
        if (code := self.state.not_ready_error()) is not None:
            return fail(code)
        if not valid_group_id(group_id, allow_empty=False):
            return fail(ErrorCode.invalid_group_id)
        if (code := self.state.ownership_error(group_id)) is not None:
            return fail(code)
        if not (config.min_session_timeout_ms <= session_timeout_ms <= config.max_session_timeout_ms):
            return fail(ErrorCode.invalid_session_timeout)
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.state.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return fail(ErrorCode.unknown_member_id)
            group = self.state.new_group(group_id)
        known = group.has(member_id) or member_id in group.pending_members
        if len(group.members) >= config.max_size and (is_unknown or not known):
            return fail(ErrorCode.group_max_size_reached)
        if group.is_state(GroupState.DEAD):
            return fail(ErrorCode.coordinator_not_available)
        if not group.supports_protocols(protocol_type, protocols):
            self._forget_if_unused(group)
            return fail(ErrorCode.inconsistent_group_protocol)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        member = MemberMetadata(
            member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
            session_timeout_ms, protocol_type, list(protocols),
        )
        if is_unknown:
            future = self._new_member_join(group, member, require_known_member_id, supports_skip_assignment)
        else:
            future = self._current_member_join(group, member)
        self._try_complete_join(group)
        return future

    def _forget_if_unused(self, group: GroupMetadata) -> None:
        # A join that failed validation must not leave a phantom group behind for ListGroups.
        if (group.is_state(GroupState.EMPTY) and group.generation_id == 0 and not group.members
                and not group.pending_members and not group.offsets):
            self.state.groups.pop(group.group_id, None)

    def _new_member_join(
        self, group: GroupMetadata, member: MemberMetadata, require_known: bool, supports_skip_assignment: bool
    ) -> asyncio.Future:
        if member.group_instance_id is not None:
            # KIP-345: no MEMBER_ID_REQUIRED round, the instance id already names the member.
            member.member_id = f"{member.group_instance_id}-{uuid.uuid4()}"
            previous = group.member_by_instance_id(member.group_instance_id)
            if previous is not None:
                return self._update_static_member_and_rebalance(
                    group, previous.member_id, member, supports_skip_assignment)
            return self._add_member_and_rebalance(group, member)
        member.member_id = f"{member.client_id}-{uuid.uuid4()}"
        if require_known:
            # KIP-394: hand out the id first, so a client that retries after a lost response does not
            # leave an orphan member behind. The id expires if the client never comes back with it.
            new_id = member.member_id
            group.pending_members[new_id] = self.state.scheduler.call_later(
                member.session_timeout_ms, lambda: self._on_pending_member_expired(group, new_id)
            )
            return self._done(JoinResult(ErrorCode.member_id_required, new_id))
        return self._add_member_and_rebalance(group, member)

    def _current_member_join(self, group: GroupMetadata, request: MemberMetadata) -> asyncio.Future:
        member_id = request.member_id
        if member_id in group.pending_members:
            cancel(group.pending_members.pop(member_id))
            return self._add_member_and_rebalance(group, request)
        code = self.validate_member(group, member_id, request.group_instance_id)
        if code != ErrorCode.none:
            return self._done(JoinResult(code, member_id))
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, request)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # Same metadata: the member most likely lost our JoinGroup response; answer it again.
                self.schedule_heartbeat(group, member)
                return self._done(self._join_result(group, member))
            return self._update_member_and_rebalance(group, member, request)
        # Empty (no members, unreachable here) or Stable.
        if group.is_leader(member_id) or not member.matches(request.protocols):
            return self._update_member_and_rebalance(group, member, request)
        self.schedule_heartbeat(group, member)
        result = self._join_result(group, member)
        result.members = []
        return self._done(result)

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, old_member_id: str, request: MemberMetadata, supports_skip_assignment: bool
    ) -> asyncio.Future:
        """Kafka's updateStaticMemberAndRebalance: a restarted static member takes over its old place.
        In a Stable group whose protocol stays the same it gets the current generation and assignment
        back without a rebalance, once the new member id is stored (a crash must not resurrect the old
        id); otherwise the group rebalances as for any metadata change."""
        new_member_id = request.member_id
        current_leader = group.leader_id
        member = group.members[old_member_id]
        # A zombie of the old instance still parked in JoinGroup or SyncGroup learns it is replaced.
        _resolve(member.awaiting_join, JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        _resolve(member.awaiting_sync, SyncResult(ErrorCode.fenced_instance_id))
        member.awaiting_join = member.awaiting_sync = None
        group.replace_static_member(old_member_id, new_member_id)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms,
               member.client_id, member.client_host)
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host
        member.awaiting_join = future = self._future()
        self.schedule_heartbeat(group, member)
        log.info("group %s: static member %s replaces member id %s with %s", group.group_id,
                 member.group_instance_id, old_member_id, new_member_id)
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            # The leader may be assigning to the old id right now: the new id would get nothing.
            self._prepare_rebalance(group, f"static member {member.group_instance_id} rejoined")
        elif group.is_state(GroupState.STABLE):
            if group.select_protocol() != group.protocol_name:
                self._prepare_rebalance(group, f"static member {member.group_instance_id} changed the protocol")
                return future

            def stored(code: ErrorCode) -> None:
                if group.members.get(new_member_id) is not member or member.awaiting_join is not future:
                    return  # replaced again, left or expired meanwhile: that path answered
                if not group.is_state(GroupState.STABLE):
                    return  # a rebalance started while the ISR caught up: the member is part of it
                member.awaiting_join = None
                if code != ErrorCode.none:
                    # Kafka reverts too: the old id stays the member's, the new instance retries.
                    log.warning("group %s: failed to store static member %s: %s", group.group_id,
                                member.group_instance_id, code.name)
                    (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms,
                     member.client_id, member.client_host) = old
                    group.replace_static_member(new_member_id, old_member_id)
                    self.schedule_heartbeat(group, member)
                    _resolve(future, JoinResult(code, UNKNOWN_MEMBER_ID, group.generation_id, group.protocol_type,
                                                group.protocol_name, current_leader or ""))
                    return
                result = JoinResult(ErrorCode.none, new_member_id, group.generation_id, group.protocol_type,
                                    group.protocol_name, current_leader or "")
                if supports_skip_assignment and group.is_leader(new_member_id):
                    # v9+: the leader learns it leads (to watch metadata) but must not assign again.
                    result = self._join_result(group, member)
                    result.skip_assignment = True
                # Before v9 the old leader id is answered, so a rejoining leader does not run the assignor
                # for a generation whose assignment a Stable group would never hand out.
                _resolve(future, result)

            full = {m.member_id: m.assignment for m in group.members.values()}
            try:
                wait = self._store_group(group, full)
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                stored(store_error_code(exc, group_metadata=True))
                return future
            self._after_store(wait, stored)
        # PreparingRebalance: the member waits for the rebalance like every other member.
        return future

    def _after_store(self, wait: WaitForIsr | None, then: Callable[[ErrorCode], None]) -> None:
        """Calls `then` with the store's outcome: at once alone, once the ISR has the record in a cluster."""
        if wait is None:
            then(ErrorCode.none)
            return

        async def waiting() -> None:
            try:
                await wait()
                code = ErrorCode.none
            except Exception as exc:  # noqa: BLE001 - a failed wait is the member's answer, not the broker's
                code = store_error_code(exc, group_metadata=True)
            then(code)

        task = asyncio.get_running_loop().create_task(waiting())
        self._store_tasks.add(task)
        task.add_done_callback(self._store_tasks.discard)

    def _add_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata) -> asyncio.Future:
        member.is_new = True
        member.awaiting_join = self._future()
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self.schedule_heartbeat(group, member)
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
        _resolve(member.awaiting_join, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.awaiting_join = self._future()
        self.schedule_heartbeat(group, member)
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
            ErrorCode.none, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
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
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        cancel(group.sync_handle)
        group.sync_handle = None
        cancel(group.join_handle)
        scheduler = self.state.scheduler
        if group.is_state(GroupState.EMPTY):
            # Kafka's InitialDelayedJoin: give the first members of a new group a moment to arrive
            # together instead of rebalancing once per member.
            delay = self.state.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_initial = True
            group.join_handle = scheduler.call_later(
                delay, lambda: self._on_initial_join_expired(group, delay, remaining)
            )
        else:
            group.join_initial = False
            group.join_handle = scheduler.call_later(group.rebalance_timeout_ms(), lambda: self._complete_join(group))
        group.transition_to(GroupState.PREPARING_REBALANCE, scheduler.wall_clock_ms())

    def _on_initial_join_expired(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        if not group.is_state(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            next_delay = min(delay, remaining)
            left = max(remaining - delay, 0)
            group.join_handle = self.state.scheduler.call_later(
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
        cancel(group.join_handle)
        group.join_handle = None
        group.join_initial = False
        for member in group.not_yet_rejoined():
            if member.is_static:
                continue  # KIP-345: a static member stays until its session times out
            log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
            _resolve(member.awaiting_sync, SyncResult(ErrorCode.unknown_member_id))
            cancel(member.heartbeat_handle)
            group.remove(member.member_id)
        if not group.maybe_elect_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait another rebalance timeout for
            # them to rejoin or for their sessions to expire, as Kafka does.
            log.warning("group %s: no member rejoined; the rebalance waits", group.group_id)
            group.join_handle = self.state.scheduler.call_later(
                group.rebalance_timeout_ms(), lambda: self._complete_join(group))
            return
        group.new_member_added = False
        group.pending_sync.clear()
        group.generation_id += 1
        now = self.state.scheduler.wall_clock_ms()
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
            self.schedule_heartbeat(group, member)
            group.pending_sync.add(member.member_id)
        generation = group.generation_id
        group.sync_handle = self.state.scheduler.call_later(
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
                cancel(member.heartbeat_handle)
            group.remove(member_id)
        self._maybe_prepare_rebalance(group, "members failed to sync")

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, code: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            _resolve(member.awaiting_sync, SyncResult(code))
            member.awaiting_sync = None

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata) -> None:
        _resolve(member.awaiting_join, JoinResult(ErrorCode.unknown_member_id, member.member_id))
        _resolve(member.awaiting_sync, SyncResult(ErrorCode.unknown_member_id))
        member.awaiting_join = member.awaiting_sync = None
        cancel(member.heartbeat_handle)
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
        def fail(code: ErrorCode) -> asyncio.Future:
            return self._done(SyncResult(code))

        if (code := self.state.not_ready_error()) is not None:
            return fail(code)
        if not valid_group_id(group_id, allow_empty=False):
            return fail(ErrorCode.invalid_group_id)
        if (code := self.state.ownership_error(group_id)) is not None:
            return fail(code)
        group = self.state.groups.get(group_id)
        if group is None:
            return fail(ErrorCode.unknown_member_id)
        if group.is_state(GroupState.DEAD):
            return fail(ErrorCode.coordinator_not_available)
        code = self.validate_member(group, member_id, group_instance_id)
        if code != ErrorCode.none:
            return fail(code)
        if generation_id != group.generation_id:
            return fail(ErrorCode.illegal_generation)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return fail(ErrorCode.inconsistent_group_protocol)
        if protocol_name is not None and protocol_name != group.protocol_name:
            return fail(ErrorCode.inconsistent_group_protocol)
        if group.is_state(GroupState.EMPTY):
            return fail(ErrorCode.unknown_member_id)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return fail(ErrorCode.rebalance_in_progress)
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        self.schedule_heartbeat(group, member)
        if group.is_state(GroupState.STABLE):
            return self._done(SyncResult(ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name))
        # CompletingRebalance: park until the leader's assignment arrives.
        _resolve(member.awaiting_sync, SyncResult(ErrorCode.rebalance_in_progress))
        member.awaiting_sync = self._future()
        future = member.awaiting_sync
        if group.is_leader(member_id):
            full = {mid: assignments.get(mid, b"") for mid in group.members}
            try:
                wait = self._store_group(group, full)
            except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
                self._assignment_not_stored(group, store_error_code(exc, group_metadata=True))
                return future
            if wait is None:
                self._assignment_stored(group, full)
            else:
                # in a cluster the members get their assignment once the ISR has it (Kafka's storeGroup
                # callback); the group stays CompletingRebalance meanwhile
                task = asyncio.get_running_loop().create_task(
                    self._await_assignment(group, group.generation_id, full, wait))
                self._store_tasks.add(task)
                task.add_done_callback(self._store_tasks.discard)
        return future

    def _assignment_stored(self, group: GroupMetadata, full: dict[str, bytes]) -> None:
        for mid, member_ in group.members.items():
            member_.assignment = full.get(mid, b"")
            _resolve(member_.awaiting_sync, SyncResult(ErrorCode.none, member_.assignment, group.protocol_type,
                                                       group.protocol_name))
            member_.awaiting_sync = None
        group.transition_to(GroupState.STABLE, self.state.scheduler.wall_clock_ms())
        if not group.pending_sync:
            cancel(group.sync_handle)
            group.sync_handle = None

    def _assignment_not_stored(self, group: GroupMetadata, code: ErrorCode) -> None:
        self._reset_and_propagate_assignment_error(group, code)
        self._maybe_prepare_rebalance(group, "failed to store the group assignment")

    async def _await_assignment(self, group: GroupMetadata, generation: int, full: dict[str, bytes],
                                wait: WaitForIsr) -> None:
        try:
            await wait()
            code = ErrorCode.none
        except Exception as exc:  # noqa: BLE001 - a failed wait is the members' answer, not the broker's
            code = store_error_code(exc, group_metadata=True)
        # the group may have moved on meanwhile (a rebalance, a member gone, its partition resigned)
        if (self.state.groups.get(group.group_id) is not group or group.generation_id != generation
                or not group.is_state(GroupState.COMPLETING_REBALANCE)):
            return
        if code == ErrorCode.none:
            self._assignment_stored(group, full)
        else:
            self._assignment_not_stored(group, code)

    # -- Heartbeat / LeaveGroup ----------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        if (code := self.state.not_ready_error()) is not None:
            return code
        if not valid_group_id(group_id, allow_empty=False):
            return ErrorCode.invalid_group_id
        if (code := self.state.ownership_error(group_id)) is not None:
            return code
        group = self.state.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_state(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        code = self.validate_member(group, member_id, group_instance_id)
        if code != ErrorCode.none:
            return code
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_state(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self.schedule_heartbeat(group, group.members[member_id])
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """Returns (group error, [(member id, instance id, error)]) for the (member id, instance id) pairs."""
        if (code := self.state.not_ready_error()) is not None:
            return code, []
        if not valid_group_id(group_id, allow_empty=False):
            return ErrorCode.invalid_group_id, []
        if (code := self.state.ownership_error(group_id)) is not None:
            return code, []
        group = self.state.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [(mid, iid, ErrorCode.unknown_member_id) for mid, iid in leaving]
        if group.is_state(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, []
        results: list[tuple[str, str | None, ErrorCode]] = []
        for member_id, instance_id in leaving:
            results.append((member_id, instance_id, self._leave(group, member_id, instance_id)))
        return ErrorCode.none, results

    def _leave(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID:
            # KIP-345's administrative removal: the instance id alone names a static member.
            static = group.member_by_instance_id(instance_id) if instance_id is not None else None
            if static is None:
                return ErrorCode.unknown_member_id
            member = static
        elif member_id in group.pending_members:
            cancel(group.pending_members.pop(member_id))
            self._try_complete_join(group)
            return ErrorCode.none
        else:
            code = self.validate_member(group, member_id, instance_id)
            if code != ErrorCode.none:
                return code
            member = group.members[member_id]
        log.info("group %s: member %s left", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)
        return ErrorCode.none

    # -- group metadata records ----------------------------------------------------------------------
    def _store_group(self, group: GroupMetadata, assignments: dict[str, bytes]) -> WaitForIsr | None:
        return self.state.store.append(group.group_id, [group_record(group, assignments)],
                                       self.state.scheduler.wall_clock_ms())

    def _store_group_quietly(self, group: GroupMetadata) -> None:
        try:
            # in a cluster not waited for: Kafka answers the rebalance without it too
            self._store_group(group, {})
        except Exception as exc:  # noqa: BLE001 - a failed append must not take the broker down
            # Kafka only logs this too: an empty group's metadata is rebuilt by the next join.
            log.warning("group %s: failed to store empty group metadata: %s", group.group_id, exc)


def group_record(group: GroupMetadata, assignments: dict[str, bytes]) -> tuple[bytes, bytes]:
    """The group's GroupMetadataValue record with these assignments."""
    protocol = group.protocol_name
    value = schema.StoredGroup(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=protocol,
        leader=group.leader_id,
        current_state_timestamp=group.state_timestamp_ms,
        members=[
            schema.StoredMember(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata_for(protocol) if protocol else b"",
                assignments.get(m.member_id, b""),
            )
            for m in group.members.values()
        ],
    )
    return schema.encode_group_key(group.group_id), schema.encode_group_value(value)
