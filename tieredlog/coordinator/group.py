"""Group and member metadata of the classic consumer-group protocol.

Plain data plus the small queries the coordinator's state machine asks of a group (who may still join,
which protocol the members agree on). Nothing here schedules timers or touches storage.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Collection

from tieredlog.coordinator.contracts import SubscribedTopics

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's GroupMetadata.validPreviousStates: a transition from any other state is a coordinator bug.
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState) - {GroupState.DEAD},
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}

Protocols = list[tuple[str, bytes]]


@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    # Futures of the parked JoinGroup / SyncGroup responses of this member, if any.
    awaiting_join: Any = None
    awaiting_sync: Any = None
    # A member that joined in the current rebalance and has not yet received a JoinGroup response.
    is_new: bool = False
    heartbeat_handle: Any = None

    @property
    def is_static(self) -> bool:
        """KIP-345: a member with a group.instance.id keeps its place across restarts."""
        return self.group_instance_id is not None

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        # A member votes for the first protocol in its own preference order that everyone supports.
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    # Kafka's currentStateTimestamp: wall-clock ms of the last state transition, stored in the group's
    # GroupMetadataValue (v2+). -1: unknown (a record of an older version), so offset expiry of an
    # Empty group goes by each offset's commit timestamp instead.
    state_timestamp_ms: int = -1
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED that have not joined with them yet.
    pending_members: dict[str, Any] = field(default_factory=dict)
    # Members that got a JoinGroup response for this generation but have not sent SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # In a cluster a commit reaches `offsets` once the ISR has it, and two commits' waits may end in
    # either order: the number of the newest commit applied per partition keeps an older one out.
    offset_commit_seq: dict[tuple[str, int], int] = field(default_factory=dict)
    # Partitions with a commit appended whose wait for the ISR has not ended (Kafka's
    # pendingOffsetCommits): offset expiry leaves them alone, or its tombstone could land after the commit.
    pending_offset_commits: Counter[tuple[str, int]] = field(default_factory=Counter)
    # TxnOffsetCommits appended whose wait has not ended: their offsets are not pending yet, but the
    # group must not become Dead under them.
    pending_txn_appends: int = 0
    # TxnOffsetCommit: offsets written in a producer's open transaction, applied to `offsets` when the
    # COMMIT marker reaches the group's partition, dropped on ABORT (Kafka's pendingTransactionalOffsetCommits)
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)
    # True once a brand-new member joins during the very first rebalance (InitialDelayedJoin extends).
    new_member_added: bool = False
    # The pending DelayedJoin: `join_initial` marks Kafka's InitialDelayedJoin, which never completes early.
    join_handle: Any = None
    join_initial: bool = False
    sync_handle: Any = None

    # -- state ---------------------------------------------------------------------------------------
    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int = -1) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- offsets -------------------------------------------------------------------------------------
    def has_pending_offsets(self) -> bool:
        """Offsets on their way in: a commit waiting for the ISR, or a transaction's still open."""
        return bool(self.pending_offset_commits) or bool(self.pending_txn_offsets) or self.pending_txn_appends > 0

    def expired_offsets(
        self, now_ms: int, retention_ms: int, decode: SubscribedTopics
    ) -> dict[tuple[str, int], OffsetAndMetadata]:
        """The committed offsets offsets.retention.minutes (``retention_ms``) has expired, Kafka's
        GroupMetadata.removeExpiredOffsets (KIP-211) without the removal:
        - an Empty group: all of them, once the retention has passed since it became Empty (since
          each offset's commit when that moment is unknown);
        - a Stable consumer group: those of topics no member subscribes to any more, by commit time;
        - a standalone consumer's (no protocol type: commits only, never a member): by commit time;
        - any other group keeps them all (it is rebalancing, or its subscriptions cannot be read).
        A partition whose commit is still waiting for the ISR is kept; offsets of an open transaction
        are not in `offsets` yet, so they never expire."""
        subscribed: Collection[str] = ()
        emptied_ms = -1
        if self.protocol_type is not None and self.is_state(GroupState.EMPTY):
            emptied_ms = self.state_timestamp_ms
        elif self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.is_state(GroupState.STABLE):
            topics = self.subscribed_topics(decode)
            if topics is None:
                return {}
            subscribed = topics
        elif self.protocol_type is not None:
            return {}
        return {
            tp: o for tp, o in self.offsets.items()
            if tp[0] not in subscribed and tp not in self.pending_offset_commits
            and (emptied_ms if emptied_ms >= 0 else o.commit_timestamp) + retention_ms <= now_ms
        }

    # -- membership ----------------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            # Prefer a member that is already waiting in the current rebalance as the new leader.
            joined = [m for m in self.members.values() if m.awaiting_join is not None]
            pool = joined or list(self.members.values())
            self.leader_id = pool[0].member_id if pool else None
        return member

    def replace_static_member(self, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """Kafka's replaceStaticMember: a static member that rejoins with an unknown member id keeps its
        place (assignment, leadership, pending SyncGroup) under the new id; the old id is then unknown,
        so a zombie still using it is fenced."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        return member

    def member_by_instance_id(self, instance_id: str) -> MemberMetadata | None:
        for member in self.members.values():
            if member.group_instance_id == instance_id:
                return member
        return None

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join() == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def maybe_elect_joined_leader(self) -> bool:
        """Keep the current leader if it rejoined, else pick a member that did. False if none did."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        names: set[str] | None = None
        for member in self.members.values():
            mine = {name for name, _ in member.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def supports_protocols(self, protocol_type: str, protocols: Protocols) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        offered = {name for name, _ in protocols}
        return bool(offered & self.candidate_protocols())

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError("no protocol supported by every member")
        votes = Counter(member.vote(candidates) for member in self.members.values())
        # Ties go to the choice of the earliest-joined member among the most voted (deterministic).
        best = max(votes.values())
        for member in self.members.values():
            choice = member.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable")

    def subscribed_topics(self, decode: SubscribedTopics) -> set[str] | None:
        """Topics named by consumer-protocol subscriptions, or None when they cannot be known."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = decode(member.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics
