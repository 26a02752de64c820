"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: the KIP-848 half of the group coordinator.

One heartbeat does what Kafka's GroupMetadataManager.consumerGroupHeartbeat does, in order: validate the
request, find (or create) the group and the member and fence stale ones, apply the member's subscription,
bump the group epoch when what the assignment depends on changed, compute the target assignment again
when the group epoch is ahead of it, move the member one step towards its target (reconciliation.py) and
write what changed as `__consumer_offsets` records (records.py). Alone, a broker's append is committed at
once; in a cluster the answer waits for the ISR (the in-memory state has moved already: a failed wait
is answered with the store's error and the member retries, as with a lost response).

A group's committed offsets stay in the classic coordinator's `GroupMetadata` of the same id (offsets.py
serves both protocols): a consumer group always has one, holding no classic member.

Timers: a member without a heartbeat for group.consumer.session.timeout.ms is removed, and one that does
not revoke within its rebalance timeout too (Kafka fences both the same way).
"""

from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Mapping

from kio.schema.errors import ErrorCode

from tieredlog.coordinator import schema
from tieredlog.coordinator.consumer_group import records, regex_refresh
from tieredlog.coordinator.consumer_group.assignors import ASSIGNORS, Partitions
from tieredlog.coordinator.consumer_group.classic_members import ClassicMembers
from tieredlog.coordinator.consumer_group.group import ConsumerGroup, ConsumerGroupState
from tieredlog.coordinator.consumer_group.member import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerMember,
    MemberState,
    is_subset,
    normalize,
)
from tieredlog.coordinator.consumer_group.migration import (
    ClassicRebalance,
    EmbeddedConsumerProtocol,
    GroupMigration,
    Record,
    TopicsView,
)
from tieredlog.coordinator.consumer_group.reconciliation import MemberAssignment, reconcile
from tieredlog.coordinator.consumer_group.regex import InvalidRegex, compile_topic_regex
from tieredlog.coordinator.group import CONSUMER_PROTOCOL_TYPE, GroupMetadata, GroupState
from tieredlog.coordinator.state import CoordinatorState, cancel
from tieredlog.coordinator.storage import WaitForIsr, store_error_code

log = logging.getLogger(__name__)



@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass
class HeartbeatResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None


@dataclass
class DescribedMember:
    member: ConsumerMember
    target: Partitions


@dataclass
class DescribedGroup:
    group_id: str
    error: ErrorCode
    message: str | None = None
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: list[DescribedMember] = field(default_factory=list)
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)


def _fail(code: ErrorCode, message: str | None = None) -> HeartbeatResult:
    return HeartbeatResult(error=code, message=message)


class ConsumerGroupCoordinator:
    def __init__(self, state: CoordinatorState) -> None:
        self.state = state
        self.topics: TopicsView = dict
        # KIP-848's online migration, once the server hands in the consumer protocol's codec
        self.migration: GroupMigration | None = None
        self.classic: ClassicMembers | None = None

    def enable_migration(self, protocol: EmbeddedConsumerProtocol, membership: ClassicRebalance) -> None:
        self.migration = GroupMigration(self, protocol, membership)
        self.classic = ClassicMembers(self, protocol)

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.state.consumer_groups

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------------
    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        result, pending = self._heartbeat(req)
        if pending is not None:
            try:
                await pending()
            except Exception as exc:  # noqa: BLE001 - the wait's failure is this heartbeat's answer
                return _fail(store_error_code(exc))
        return result

    def _heartbeat(self, req: HeartbeatRequest) -> tuple[HeartbeatResult, WaitForIsr | None]:
        config = self.state.config
        if (code := self.state.not_ready_error()) is not None:
            return _fail(code), None
        if not config.consumer_protocol_enabled:
            return _fail(ErrorCode.unsupported_version), None
        if (invalid := self._validate(req)) is not None:
            return invalid, None
        if (code := self.state.ownership_error(req.group_id)) is not None:
            return _fail(code), None
        if req.member_id == "" and req.member_epoch == JOIN_EPOCH:
            # v0 clients may leave the member id to the coordinator
            req.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        now = self.state.scheduler.wall_clock_ms()
        out: list[Record] = []
        group = self.groups.get(req.group_id)
        if group is None:
            shell = self.state.groups.get(req.group_id)
            if shell is not None and (shell.members or not shell.is_state(GroupState.EMPTY)):
                upgraded = None
                if req.member_epoch == JOIN_EPOCH and self.migration is not None and self.migration.can_upgrade(shell):
                    upgraded = self.migration.upgrade(shell, out)
                if upgraded is None:
                    return _fail(ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group."), None
                group = upgraded
        if group is None:
            shell = self.state.groups.get(req.group_id)
            if req.member_epoch != JOIN_EPOCH:
                return _fail(ErrorCode.unknown_member_id, f"Consumer group {req.group_id} not found."), None
            group = ConsumerGroup(req.group_id)
            if shell is None:
                shell = self.state.new_group(req.group_id)
            elif shell.generation_id > 0:
                # an empty classic group becomes a consumer group: its classic metadata goes, offsets stay
                out.append((schema.encode_group_key(req.group_id), None))
                shell.generation_id = 0
            shell.protocol_type = CONSUMER_PROTOCOL_TYPE
            self.groups[req.group_id] = group

        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, req, out, now)

        member, refused = self._find_member(group, req, out)
        if refused is not None:
            self._drop_if_unused(group)
            # an upgrade done on the way stands
            return refused, self.append(group.group_id, out, now) if group.group_id in self.groups else None
        assert member is not None
        before = MemberAssignment(member.member_epoch, member.previous_member_epoch, member.state,
                                  member.assigned, member.pending_revocation)
        bump = self._apply_subscription(group, member, req, out)
        self.advance_member(group, member, bump, req.owned, out)
        self.schedule_session(group, member)
        after = MemberAssignment(member.member_epoch, member.previous_member_epoch, member.state,
                                 member.assigned, member.pending_revocation)
        send = (req.member_epoch == JOIN_EPOCH or before.assigned != after.assigned
                or (req.owned is not None and normalize(req.owned) != member.assigned))
        result = HeartbeatResult(member_id=member.member_id, member_epoch=member.member_epoch,
                                 heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
                                 assignment=member.assigned if send else None)
        return result, self.append(group.group_id, out, now)

    def _validate(self, req: HeartbeatRequest) -> HeartbeatResult | None:
        def invalid(message: str) -> HeartbeatResult:
            return _fail(ErrorCode.invalid_request, message)

        if not req.group_id:
            return _fail(ErrorCode.invalid_group_id, "GroupId can't be empty.")
        if req.member_id == "" and (req.api_version >= 1 or req.member_epoch != JOIN_EPOCH):
            return invalid("MemberId can't be empty.")
        if req.member_epoch < STATIC_LEAVE_EPOCH:
            return invalid(f"MemberEpoch {req.member_epoch} is invalid.")
        if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            return invalid("InstanceId can't be null when leaving as a static member.")
        if req.member_epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                return invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is not None and any(req.owned.values()):
                return invalid("TopicPartitions must be empty when (re-)joining.")
            if not req.subscribed_topic_names and req.subscribed_topic_regex is None:
                return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        if req.server_assignor is not None and req.server_assignor not in self.state.config.consumer_assignors:
            return _fail(ErrorCode.unsupported_assignor, f"ServerAssignor {req.server_assignor} is not supported. "
                         f"Supported assignors: {', '.join(self.state.config.consumer_assignors)}.")
        if req.subscribed_topic_regex:
            try:
                compile_topic_regex(req.subscribed_topic_regex)
            except InvalidRegex as exc:
                return _fail(ErrorCode.invalid_regular_expression, f"SubscribedTopicRegex is invalid: {exc}")
        return None

    def _find_member(self, group: ConsumerGroup, req: HeartbeatRequest, out: list[Record]
                     ) -> tuple[ConsumerMember | None, HeartbeatResult | None]:
        max_size = self.state.config.consumer_max_size

        def full() -> HeartbeatResult | None:
            if len(group.members) >= max_size:
                return _fail(ErrorCode.group_max_size_reached,
                             f"The consumer group has reached its maximum capacity of {max_size} members.")
            return None

        if req.instance_id is not None:
            existing = group.member_by_instance_id(req.instance_id)
            if req.member_epoch == JOIN_EPOCH:
                if existing is None:
                    if (code := full()) is not None:
                        return None, code
                    member = group.members[req.member_id] = ConsumerMember(req.member_id, req.instance_id)
                    return member, None
                if existing.member_id == req.member_id:
                    return existing, None
                if existing.member_epoch != STATIC_LEAVE_EPOCH and existing.classic is None:
                    # a classic member's instance is taken over at once (it never says it left)
                    return None, _fail(ErrorCode.unreleased_instance_id,
                                       f"Static member {existing.member_id} with instance id {req.instance_id} "
                                       "is not released yet.")
                # the restarted instance takes over the assignment its previous incarnation left
                self.forget(group, existing, out)
                member = replace(existing, member_id=req.member_id, session_handle=None, revocation_handle=None,
                                 classic_handle=None, classic=None, member_epoch=JOIN_EPOCH,
                                 previous_member_epoch=JOIN_EPOCH)
                group.members[member.member_id] = member
                if member.member_id not in group.target and existing.member_id in group.target:
                    group.target[member.member_id] = group.target.pop(existing.member_id)
                    out.append((records.encode_key(records.TARGET_ASSIGNMENT_MEMBER, group.group_id, member.member_id),
                                records.encode_target_member(group.target[member.member_id])))
                out.append(self.member_metadata_record(group, member))
                out.append(self.current_assignment_record(group, member))
                return member, None
            if existing is None:
                return None, _fail(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
            if existing.member_id != req.member_id:
                return None, _fail(ErrorCode.fenced_instance_id,
                                   f"Static member {req.member_id} with instance id {req.instance_id} was fenced.")
            member = existing
        else:
            found = group.members.get(req.member_id)
            if req.member_epoch == JOIN_EPOCH:
                if found is None:
                    if (code := full()) is not None:
                        return None, code
                    found = group.members[req.member_id] = ConsumerMember(req.member_id)
                return found, None
            if found is None:
                return None, _fail(ErrorCode.unknown_member_id,
                                   f"Member {req.member_id} is not a member of group {group.group_id}.")
            member = found
        if req.member_epoch > member.member_epoch:
            return None, _fail(ErrorCode.fenced_member_epoch,
                               f"The consumer group member has a greater member epoch ({req.member_epoch}) than "
                               f"the one known by the group coordinator ({member.member_epoch}).")
        if req.member_epoch < member.member_epoch:
            # a member that missed the response of its last epoch bump may retry with the previous epoch
            retry = req.member_epoch == member.previous_member_epoch and (
                req.owned is None or is_subset(normalize(req.owned), member.assigned))
            if not retry:
                return None, _fail(ErrorCode.fenced_member_epoch,
                                   f"The consumer group member has a smaller member epoch ({req.member_epoch}) "
                                   f"than the one known by the group coordinator ({member.member_epoch}).")
        return member, None

    def _apply_subscription(self, group: ConsumerGroup, member: ConsumerMember, req: HeartbeatRequest,
                            out: list[Record]) -> bool:
        """Take the request's non-null fields; True when the assignment depends on what changed."""
        updated = replace(member)
        if req.instance_id is not None:
            updated.instance_id = req.instance_id
        if req.rack_id is not None:
            updated.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None:
            updated.subscribed_topic_names = tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_regex is not None:
            updated.subscribed_topic_regex = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            updated.server_assignor = req.server_assignor
        updated.client_id = req.client_id
        updated.client_host = req.client_host
        new = req.member_epoch == JOIN_EPOCH and member.member_epoch == JOIN_EPOCH and not member.assigned
        metadata_fields = ("instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names",
                           "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor")
        changed = any(getattr(updated, f) != getattr(member, f) for f in metadata_fields)
        subscription_changed = any(getattr(updated, f) != getattr(member, f) for f in
                                   ("subscribed_topic_names", "server_assignor"))
        old_regex = member.subscribed_topic_regex
        for f in metadata_fields:
            setattr(member, f, getattr(updated, f))
        if changed or new:
            out.append(self.member_metadata_record(group, member))
        regex_bump = self._update_regexes(group, member, old_regex)
        return subscription_changed or regex_bump or (new and member.member_id not in group.target)

    def _update_regexes(self, group: ConsumerGroup, member: ConsumerMember, old_regex: str | None) -> bool:
        """Kafka's maybeUpdateRegularExpressions, after the member took its new regex: True (a new group
        epoch) when the regex is one another member's already resolved. A regex new to the group is
        resolved in a later loop turn (Kafka's executor): until then it adds no topic, and the resolution
        bumps the group epoch when it lands, so the member gets the regex's topics on a later heartbeat."""
        regex = member.subscribed_topic_regex
        bump = require = False
        if regex and regex != old_regex:
            if any(m.subscribed_topic_regex == regex for m in group.members.values() if m is not member):
                bump = regex in group.resolved_regexes
            else:
                require = True
        self._maybe_refresh_regexes(group, require)
        return bump

    def _maybe_refresh_regexes(self, group: ConsumerGroup, require: bool) -> None:
        if not regex_refresh.needs_refresh(group, require, self.state.scheduler.wall_clock_ms(), self.topics):
            return
        started = self.state.scheduler.wall_clock_ms()
        names = list(self.topics())
        regexes = sorted(regex_refresh.subscribed_regexes(group))

        def wanted() -> bool:
            return (not group.dead and self.groups.get(group.group_id) is group
                    and self.state.ownership_error(group.group_id) is None)

        def done(matched: dict[str, frozenset[str]]) -> None:
            group.regex_refresh = None
            group.regex_topics_fingerprint = resolution.fingerprint
            self._regexes_resolved(group, matched, started, len(names))

        resolution = regex_refresh.RegexResolution(self.state.scheduler, regexes, names, wanted, done)
        group.regex_refresh = resolution
        resolution.start()

    def _regexes_resolved(self, group: ConsumerGroup, matched: Mapping[str, frozenset[str]], started: int,
                          scanned: int) -> None:
        """Kafka's handleRegularExpressionsResult: each regex still subscribed gets its resolution written
        (ConsumerGroupRegularExpression); a changed one, or subscribed topics that changed with it, bumps
        the group epoch (the members get the new target on their next heartbeat)."""
        used = regex_refresh.subscribed_regexes(group)
        out: list[Record] = []
        bump = False
        for regex, topics in matched.items():
            if regex not in used:
                continue
            previous = group.resolved_regexes.get(regex)
            bump |= topics != (previous.topics if previous is not None else frozenset())
            resolved = records.ResolvedRegex(topics, group.group_epoch, started)
            group.resolved_regexes[regex] = resolved
            out.append((records.encode_key(records.REGULAR_EXPRESSION, group.group_id, regex),
                        records.encode_resolved_regex(resolved)))
        if self.refresh_subscription_metadata(group, out):
            bump = True
        if bump:
            self.bump_group_epoch(group, out)
        now = self.state.scheduler.wall_clock_ms()
        log.info("group %s: scanned %d topics to refresh regular expressions %s in %d ms%s", group.group_id,
                 scanned, sorted(matched), now - started, f": group epoch {group.group_epoch}" if bump else "")
        try:
            self.append(group.group_id, out, now)
        except Exception as exc:  # noqa: BLE001 - the state has moved; the records follow with the next change
            log.error("group %s: writing the resolution of its regular expressions failed: %s", group.group_id, exc)

    def bump_group_epoch(self, group: ConsumerGroup, out: list[Record]) -> None:
        group.group_epoch += 1
        out.append((records.encode_key(records.GROUP_METADATA, group.group_id), records.encode_epoch(group.group_epoch)))

    def advance_member(self, group: ConsumerGroup, member: ConsumerMember, bump: bool, owned: Partitions | None,
                       out: list[Record]) -> None:
        """After a member's subscription is recorded (``bump``: it changed the group's target): a new group
        epoch when it or the subscribed topics changed, the target computed again when behind, and the
        member reconciled against what it owns. Shared by both protocols' members."""
        if self.refresh_subscription_metadata(group, out):
            bump = True
        if bump:
            self.bump_group_epoch(group, out)
        if group.group_epoch > group.assignment_epoch:
            self.compute_target(group, out)
        self.reconcile_member(group, member, owned, out)

    def refresh_subscription_metadata(self, group: ConsumerGroup, out: list[Record]) -> bool:
        """The subscribed topics' ids and partition counts, from the members' names and the regexes'
        resolutions as they stand (a regex nobody uses any more loses its record)."""
        topics = self.topics()
        names: set[str] = set()
        used: set[str] = set()
        for m in group.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                used.add(m.subscribed_topic_regex)
        for regex in set(group.resolved_regexes) - used:
            del group.resolved_regexes[regex]
            out.append((records.encode_key(records.REGULAR_EXPRESSION, group.group_id, regex), None))
        for resolved in group.resolved_regexes.values():
            names.update(resolved.topics)
        metadata = {topics[n][0]: (n, topics[n][1]) for n in names if n in topics}
        if metadata == group.subscription_metadata:
            return False
        group.subscription_metadata = metadata
        out.append((records.encode_key(records.PARTITION_METADATA, group.group_id),
                    records.encode_partition_metadata(metadata)))
        return True

    def _member_topics(self, group: ConsumerGroup, member: ConsumerMember) -> frozenset[uuid.UUID]:
        ids = {name: topic_id for topic_id, (name, _) in group.subscription_metadata.items()}
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            resolved = group.resolved_regexes.get(member.subscribed_topic_regex)
            if resolved is not None:  # an unresolved regex adds nothing until its resolution lands
                names |= resolved.topics
        return frozenset(ids[n] for n in names if n in ids)

    def assignor_for(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: the configured order), else the first configured."""
        configured = self.state.config.consumer_assignors
        votes = [m.server_assignor for m in group.members.values() if m.server_assignor in configured]
        if not votes:
            return configured[0]
        return max(configured, key=lambda name: (votes.count(name), -configured.index(name)))

    def compute_target(self, group: ConsumerGroup, out: list[Record]) -> None:
        assignor = ASSIGNORS[self.assignor_for(group)]
        subscriptions = {m.member_id: self._member_topics(group, m) for m in group.members.values()}
        counts = {t: n for t, (_, n) in group.subscription_metadata.items()}
        target = assignor.assign(subscriptions, counts, group.target)
        for member_id, partitions in target.items():
            if group.target.get(member_id) != partitions or member_id not in group.target:
                out.append((records.encode_key(records.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                            records.encode_target_member(partitions)))
        group.target = target
        group.assignment_epoch = group.group_epoch
        out.append((records.encode_key(records.TARGET_ASSIGNMENT_METADATA, group.group_id),
                    records.encode_epoch(group.assignment_epoch)))

    def reconcile_member(self, group: ConsumerGroup, member: ConsumerMember, owned: Partitions | None,
                   out: list[Record]) -> None:
        current = MemberAssignment(member.member_epoch, member.previous_member_epoch, member.state,
                                   member.assigned, member.pending_revocation)
        owners = group.owners()

        def held_elsewhere(topic: uuid.UUID, partition: int) -> bool:
            holder = owners.get((topic, partition))
            return holder is not None and holder != member.member_id

        nxt = reconcile(current, group.assignment_epoch, group.target.get(member.member_id, {}),
                        normalize(owned) if owned is not None else None, held_elsewhere)
        if nxt == current:
            return
        member.member_epoch, member.previous_member_epoch = nxt.member_epoch, nxt.previous_member_epoch
        member.state, member.assigned, member.pending_revocation = nxt.state, nxt.assigned, nxt.pending_revocation
        out.append(self.current_assignment_record(group, member))
        cancel(member.revocation_handle)
        member.revocation_handle = None
        if member.state is MemberState.UNREVOKED_PARTITIONS and member.rebalance_timeout_ms > 0:
            epoch = member.member_epoch

            def revocation_expired() -> None:
                live = group.members.get(member.member_id)
                if live is member and member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch == epoch:
                    log.info("group %s: member %s did not revoke its partitions within %d ms: removed",
                             group.group_id, member.member_id, member.rebalance_timeout_ms)
                    self.remove_on_timer(group, member)

            member.revocation_handle = self.state.scheduler.call_later(member.rebalance_timeout_ms,
                                                                       revocation_expired)

    def _leave(self, group: ConsumerGroup, req: HeartbeatRequest, out: list[Record], now: int
               ) -> tuple[HeartbeatResult, WaitForIsr | None]:
        member = group.members.get(req.member_id)
        if req.instance_id is not None:
            by_instance = group.member_by_instance_id(req.instance_id)
            if by_instance is None:
                return _fail(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown."), None
            if by_instance.member_id != req.member_id:
                return _fail(ErrorCode.fenced_instance_id,
                             f"Static member {req.member_id} with instance id {req.instance_id} was fenced."), None
            member = by_instance
        if member is None:
            return _fail(ErrorCode.unknown_member_id,
                         f"Member {req.member_id} is not a member of group {group.group_id}."), None
        interval = self.state.config.consumer_heartbeat_interval_ms
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # a static member that will come back keeps its assignment until its session ends
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            cancel(member.revocation_handle)
            member.revocation_handle = None
            out.append(self.current_assignment_record(group, member))
            self.schedule_session(group, member)
            return HeartbeatResult(member_id=member.member_id, member_epoch=STATIC_LEAVE_EPOCH,
                                   heartbeat_interval_ms=interval), self.append(group.group_id, out, now)
        self.remove_or_downgrade(group, member, out)
        return HeartbeatResult(member_id=member.member_id, member_epoch=LEAVE_EPOCH,
                               heartbeat_interval_ms=interval), self.append(group.group_id, out, now)

    # -- member removal ----------------------------------------------------------------------------------
    def forget(self, group: ConsumerGroup, member: ConsumerMember, out: list[Record]) -> None:
        """Drop the member and its records, without touching the group epoch."""
        cancel(member.session_handle)
        cancel(member.revocation_handle)
        cancel(member.classic_handle)
        group.members.pop(member.member_id, None)
        for record_type in (records.CURRENT_MEMBER_ASSIGNMENT, records.TARGET_ASSIGNMENT_MEMBER,
                            records.MEMBER_METADATA):
            out.append((records.encode_key(record_type, group.group_id, member.member_id), None))

    def remove(self, group: ConsumerGroup, member: ConsumerMember, out: list[Record]) -> None:
        self.forget(group, member, out)
        group.target.pop(member.member_id, None)
        self.refresh_subscription_metadata(group, out)
        self.bump_group_epoch(group, out)
        if not group.members:
            shell = self.state.groups.get(group.group_id)
            if shell is not None:
                # offsets of an empty group expire counting from now (offsets.retention.minutes)
                shell.state_timestamp_ms = self.state.scheduler.wall_clock_ms()

    def remove_on_timer(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if not self.state.active or self.groups.get(group.group_id) is not group:
            return
        out: list[Record] = []
        self.remove_or_downgrade(group, member, out)
        try:
            self.append(group.group_id, out, self.state.scheduler.wall_clock_ms())
        except Exception:  # noqa: BLE001 - the member is gone here; the records follow with the next change
            log.exception("group %s: writing the removal of member %s failed", group.group_id, member.member_id)

    def remove_or_downgrade(self, group: ConsumerGroup, member: ConsumerMember, out: list[Record]) -> None:
        """Kafka's consumerGroupFenceMember: when only classic members stay, the group becomes classic again."""
        if self.migration is not None and self.migration.can_downgrade(group, member.member_id):
            self.migration.downgrade(group, member.member_id, out)
        else:
            self.remove(group, member, out)

    def schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A classic member's session is its JoinGroup's session timeout."""
        cancel(member.session_handle)
        timeout = (member.classic.session_timeout_ms if member.classic is not None
                   else self.state.config.consumer_session_timeout_ms)

        def expired() -> None:
            if group.members.get(member.member_id) is member:
                log.info("group %s: member %s session expired after %d ms: removed", group.group_id,
                         member.member_id, timeout)
                self.remove_on_timer(group, member)

        member.session_handle = self.state.scheduler.call_later(timeout, expired)

    def topic_names(self, group: ConsumerGroup) -> dict[uuid.UUID, str]:
        names = {t: n for t, (n, _) in group.subscription_metadata.items()}
        names.update({tid: n for n, (tid, _) in self.topics().items()})
        return names

    def _drop_if_unused(self, group: ConsumerGroup) -> None:
        """A group created by a heartbeat that was then refused leaves nothing behind."""
        if not group.members and group.group_epoch == 0:
            self.groups.pop(group.group_id, None)
            shell = self.state.groups.get(group.group_id)
            if shell is not None and not shell.offsets and not shell.has_pending_offsets() and not shell.members:
                del self.state.groups[group.group_id]

    # -- records ---------------------------------------------------------------------------------------
    def append(self, group_id: str, out: list[Record], now: int) -> WaitForIsr | None:
        if not out:
            return None
        return self.state.store.append(group_id, out, now)

    @staticmethod
    def member_metadata_record(group: ConsumerGroup, m: ConsumerMember) -> Record:
        return (records.encode_key(records.MEMBER_METADATA, group.group_id, m.member_id),
                records.encode_member_metadata(records.StoredMemberMetadata(
                    m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names,
                    m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic)))

    @staticmethod
    def current_assignment_record(group: ConsumerGroup, m: ConsumerMember) -> Record:
        return (records.encode_key(records.CURRENT_MEMBER_ASSIGNMENT, group.group_id, m.member_id),
                records.encode_current_assignment(records.StoredCurrentAssignment(
                    m.member_epoch, m.previous_member_epoch, int(m.state), m.assigned, m.pending_revocation)))

    def tombstones(self, group: ConsumerGroup) -> list[Record]:
        """Every record of an (empty) group, deleted: DeleteGroups."""
        out: list[Record] = []
        for m in list(group.members.values()):
            self.forget(group, m, out)
        for regex in group.resolved_regexes:
            out.append((records.encode_key(records.REGULAR_EXPRESSION, group.group_id, regex), None))
        for record_type in (records.TARGET_ASSIGNMENT_METADATA, records.PARTITION_METADATA, records.GROUP_METADATA):
            out.append((records.encode_key(record_type, group.group_id), None))
        return out

    # -- restart / unload ------------------------------------------------------------------------------
    def adopt(self, groups: Mapping[str, ConsumerGroup]) -> None:
        """Loaded members get a full session to heartbeat to this coordinator."""
        for group in groups.values():
            for member in group.members.values():
                self.schedule_session(group, member)

    def unload(self, group: ConsumerGroup) -> None:
        for member in group.members.values():
            cancel(member.session_handle)
            cancel(member.revocation_handle)
            cancel(member.classic_handle)
        cancel(group.regex_refresh)
        group.regex_refresh = None
        group.dead = True

    def shutdown(self) -> None:
        for group in self.groups.values():
            cancel(group.regex_refresh)
            for member in group.members.values():
                cancel(member.session_handle)
                cancel(member.revocation_handle)
                cancel(member.classic_handle)

    # -- ConsumerGroupDescribe / classic interplay ------------------------------------------------------
    def describe(self, group_id: str) -> DescribedGroup:
        if (code := self.state.not_ready_error()) is not None:
            return DescribedGroup(group_id, code)
        if (code := self.state.ownership_error(group_id)) is not None:
            return DescribedGroup(group_id, code)
        group = self.groups.get(group_id)
        if group is None:
            shell = self.state.groups.get(group_id)
            message = (f"Group {group_id} is not a consumer group." if shell is not None
                       else f"Group {group_id} not found.")
            return DescribedGroup(group_id, ErrorCode.group_id_not_found, message)
        names = self.topic_names(group)
        return DescribedGroup(
            group_id, ErrorCode.none, None, group.state.value, group.group_epoch, group.assignment_epoch,
            self.assignor_for(group),
            [DescribedMember(m, group.target.get(m.member_id, {})) for m in group.members.values()], names)

    def owns(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def subscribed_topics(self, group: ConsumerGroup) -> set[str]:
        return group.subscribed_topic_names()

    def list_state(self, group_id: str) -> ConsumerGroupState | None:
        group = self.groups.get(group_id)
        return None if group is None else group.state

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.groups

    @staticmethod
    def shell_of(state: CoordinatorState, group_id: str) -> GroupMetadata | None:
        return state.groups.get(group_id)
