"""Partition leader election (Kafka's ``PartitionLeaderElectionAlgorithms`` and the ISR each strategy
leaves behind). Pure functions of the assignment, the ISR and the live brokers: no ZooKeeper, no
context; the state machine feeds them and writes their result.

Assignment order is preference order: the first replica is the preferred leader, so every strategy
scans the assignment, not the ISR. Leadership never moves outside the ISR, except by an unclean
election, which the operator allows per topic (``unclean.leader.election.enable``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import AbstractSet, Sequence

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
LEADER_DURING_DELETE = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete, sent in UpdateMetadata


class ElectionType(enum.IntEnum):
    """ElectLeaders' election_type (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectionStrategy(enum.Enum):
    """Kafka's PartitionLeaderElectionStrategy."""

    OFFLINE = "OfflinePartitionLeaderElectionStrategy"
    REASSIGN = "ReassignPartitionLeaderElectionStrategy"
    PREFERRED = "PreferredReplicaPartitionLeaderElectionStrategy"
    CONTROLLED_SHUTDOWN = "ControlledShutdownPartitionLeaderElectionStrategy"


@dataclass(frozen=True)
class ElectionResult:
    """The new leader and ISR; ``leader`` is None when the strategy found nobody (the partition keeps
    its state and stays offline, or keeps its leader for a preferred or shutdown election)."""

    leader: int | None
    isr: tuple[int, ...]
    unclean: bool = False


def offline_partition_leader_election(assignment: Sequence[int], isr: Sequence[int], live_replicas: AbstractSet[int],
                                      unclean_leader_election_enabled: bool) -> int | None:
    """The first live replica, in assignment order, that is in the ISR; without one and with unclean
    election allowed, the first live replica."""
    for replica in assignment:
        if replica in live_replicas and replica in isr:
            return replica
    if unclean_leader_election_enabled:
        for replica in assignment:
            if replica in live_replicas:
                return replica
    return None


def reassign_partition_leader_election(reassignment: Sequence[int], isr: Sequence[int],
                                       live_replicas: AbstractSet[int]) -> int | None:
    """The first live in-sync replica of the target assignment."""
    for replica in reassignment:
        if replica in live_replicas and replica in isr:
            return replica
    return None


def preferred_replica_partition_leader_election(assignment: Sequence[int], isr: Sequence[int],
                                                live_replicas: AbstractSet[int]) -> int | None:
    """The preferred (first assigned) replica, if it is live and in the ISR; nobody else."""
    if assignment and assignment[0] in live_replicas and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader_election(assignment: Sequence[int], isr: Sequence[int],
                                                  live_replicas: AbstractSet[int],
                                                  shutting_down_brokers: AbstractSet[int]) -> int | None:
    """The first live in-sync replica that is not shutting down."""
    for replica in assignment:
        if replica in live_replicas and replica in isr and replica not in shutting_down_brokers:
            return replica
    return None


def elect_for_offline(assignment: Sequence[int], isr: Sequence[int], live_replicas: AbstractSet[int],
                      unclean_leader_election_enabled: bool) -> ElectionResult:
    """Leader and ISR after an offline election (Kafka's leaderForOffline): a clean leader keeps the
    live part of the ISR; an unclean one is the ISR alone."""
    leader = offline_partition_leader_election(assignment, isr, live_replicas, unclean_leader_election_enabled)
    if leader is None:
        return ElectionResult(None, tuple(isr))
    if leader in isr:
        return ElectionResult(leader, tuple(r for r in isr if r in live_replicas))
    return ElectionResult(leader, (leader,), unclean=True)


def elect_for_reassignment(reassignment: Sequence[int], isr: Sequence[int],
                           live_replicas: AbstractSet[int]) -> ElectionResult:
    leader = reassign_partition_leader_election(reassignment, isr, live_replicas)
    return ElectionResult(leader, tuple(isr))


def elect_preferred(assignment: Sequence[int], isr: Sequence[int], live_replicas: AbstractSet[int]) -> ElectionResult:
    leader = preferred_replica_partition_leader_election(assignment, isr, live_replicas)
    return ElectionResult(leader, tuple(isr))


def elect_for_controlled_shutdown(assignment: Sequence[int], isr: Sequence[int], live_replicas: AbstractSet[int],
                                  shutting_down_brokers: AbstractSet[int]) -> ElectionResult:
    """The shutting-down brokers leave the ISR, so a later failure cannot elect them back."""
    leader = controlled_shutdown_partition_leader_election(assignment, isr, live_replicas, shutting_down_brokers)
    return ElectionResult(leader, tuple(r for r in isr if r not in shutting_down_brokers))


def isr_without_replica(leader: int, isr: Sequence[int], replica: int) -> tuple[int, tuple[int, ...]]:
    """Leader and ISR once ``replica`` goes offline (Kafka's removeReplicasFromIsr): it leaves the
    ISR unless it is the last member, kept so a clean election stays possible when it returns; if it
    was the leader the partition has none (-1) until an election finds one."""
    new_isr = tuple(isr) if len(isr) == 1 else tuple(r for r in isr if r != replica)
    return (NO_LEADER if leader == replica else leader), new_isr
