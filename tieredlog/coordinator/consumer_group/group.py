"""A KIP-848 consumer group: its epochs, members and target assignment.

The group epoch moves whenever what the assignment depends on changes (a member joins or leaves, a
subscription or the partition count of a subscribed topic changes); the target assignment is then
computed again and stamped with that epoch (the assignment epoch). Each member converges to its part of
the target on its own, one heartbeat at a time (reconciliation.py).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from tieredlog.coordinator.consumer_group.assignors import Partitions
from tieredlog.coordinator.consumer_group.member import ConsumerMember, MemberState
from tieredlog.coordinator.consumer_group.records import ResolvedRegex
from tieredlog.coordinator.timer import Cancellable


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    # topic id -> (name, partition count) of every topic some member subscribes to
    subscription_metadata: dict[uuid.UUID, tuple[str, int]] = field(default_factory=dict)
    # the topics each subscribed regex matches (ConsumerGroupRegularExpression records)
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    # the resolution of the regexes waiting for a later loop turn (Kafka's executor task of the group)
    regex_refresh: Cancellable | None = None
    # the topic names the regexes were last resolved against, as a hash: new topics ask for a refresh
    regex_topics_fingerprint: int | None = None
    # when a heartbeat last looked for new topics (wall clock ms): at most once an interval
    regex_checked_ms: int = 0
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def member_by_instance_id(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def owners(self) -> dict[tuple[uuid.UUID, int], str]:
        """Who holds each partition now, assigned or still to revoke: a partition can go to its next
        member only once nobody holds it."""
        out: dict[tuple[uuid.UUID, int], str] = {}
        for m in self.members.values():
            for source in (m.assigned, m.pending_revocation):
                for t, ps in source.items():
                    for p in ps:
                        out[(t, p)] = m.member_id
        return out

    def subscribed_topic_names(self) -> set[str]:
        return {name for name, _ in self.subscription_metadata.values()}
