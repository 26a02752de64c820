"""Fetch from followers (KIP-392): which replica a consumer should read from.

``replica.selector.class`` names the selector; Kafka's ``RackAwareReplicaSelector`` is the one
offered. Without it consumers read from leaders only (Kafka's default). The leader asks the selector
when a consumer (Fetch v11+, with its ``client.rack`` as ``rack_id``) fetches, among itself and the
followers that are in the ISR and hold the fetch offset; a follower it picks is sent back as the
``preferred_read_replica`` of an empty answer, and the consumer fetches there from then on.
"""

from __future__ import annotations

from dataclasses import dataclass

RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
# Kafka's other built-in selector: every consumer reads from the leader, as without one
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector: a replica on the client's rack, the leader if it is one of
    them, else the one furthest ahead (then the most recently caught up); the leader when the client
    names no rack or no replica is on it."""

    def select(self, client_rack: str | None, leader: ReplicaView, replicas: list[ReplicaView]) -> ReplicaView:
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack or any(r.broker_id == leader.broker_id for r in same_rack):
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms))


def replica_selector(class_name: str | None) -> RackAwareReplicaSelector | None:
    """The selector ``replica.selector.class`` names (None: leaders only); ValueError for one that is
    not offered, so the broker refuses to start rather than silently ignoring it."""
    if not class_name or class_name == LEADER_SELECTOR:
        return None
    if class_name == RACK_AWARE_REPLICA_SELECTOR:
        return RackAwareReplicaSelector()
    raise ValueError(f"replica.selector.class {class_name!r} is not available: tieredlog offers "
                     f"{RACK_AWARE_REPLICA_SELECTOR} and {LEADER_SELECTOR}")
