"""Pure parts of the controller: replica placement (Kafka's documented layouts), the leader
election strategies and the replica sets of a reassignment. No ZooKeeper, no threads."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tieredlog.cluster.znodes import ReplicaAssignment
from tieredlog.controller import election
from tieredlog.controller.placement import AdminOperationError, RackAwareMode, assign_replicas, rack_alternated_brokers
from tieredlog.controller.reassignment import origin_replicas, reassign_to, target_replicas
from tieredlog.errors import InvalidPartitionsError, InvalidReplicationFactorError

# ---- placement -----------------------------------------------------------------------------------------


def test_replication_factor_larger_than_brokers_is_kafkas_message() -> None:
    with pytest.raises(InvalidReplicationFactorError, match=r"^Replication factor: 3 larger than available brokers: 1\.$"):
        assign_replicas({0: None}, 1, 3)
    with pytest.raises(InvalidReplicationFactorError, match="must be larger than 0"):
        assign_replicas({0: None}, 1, 0)
    with pytest.raises(InvalidPartitionsError, match="must be larger than 0"):
        assign_replicas({0: None}, 0, 1)


def test_rack_unaware_round_robin_with_growing_shift() -> None:
    got = assign_replicas({b: None for b in range(5)}, 10, 3, fixed_start_index=0)
    # leaders walk round the brokers; followers sit at shift 1, 2 in the first round, 2, 3 in the second
    assert got[0] == [0, 1, 2]
    assert got[1] == [1, 2, 3]
    assert got[4] == [4, 0, 1]
    assert got[5] == [0, 2, 3]
    assert got[9] == [4, 1, 2]
    for replicas in got.values():
        assert len(set(replicas)) == 3
    assert Counter(r[0] for r in got.values()) == {b: 2 for b in range(5)}
    assert Counter(b for r in got.values() for b in r) == {b: 6 for b in range(5)}


def test_random_start_and_added_partitions_continue_the_layout() -> None:
    brokers = {b: None for b in (3, 7, 9)}
    got = assign_replicas(brokers, 6, 2, rng=random.Random(7))
    assert sorted(got) == list(range(6)) and all(len(set(r)) == 2 and set(r) <= set(brokers) for r in got.values())
    more = assign_replicas(brokers, 2, 2, start_partition_id=6, fixed_start_index=0)
    assert sorted(more) == [6, 7]
    assert assign_replicas(brokers, 2, 2, start_partition=6, fixed_start_index=0) == more


def test_rack_alternated_list_is_kafkas_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_assignment_is_kafkas_documented_example() -> None:
    racks: dict[int, str | None] = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas(racks, 6, 3, fixed_start_index=0)
    assert got == {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3]}
    for replicas in got.values():
        assert len({racks[b] for b in replicas}) == 3


def test_rack_aware_spreads_over_racks_when_the_factor_exceeds_them() -> None:
    racks: dict[int, str | None] = {0: "a", 1: "a", 2: "b", 3: "b"}
    for replicas in assign_replicas(racks, 8, 3, rng=random.Random(1)).values():
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


def test_partial_racks_refused_unless_safe_or_disabled() -> None:
    racks: dict[int, str | None] = {0: "a", 1: None, 2: "b"}
    with pytest.raises(AdminOperationError, match="Not all brokers have rack information"):
        assign_replicas(racks, 3, 2)
    for mode in (RackAwareMode.SAFE, RackAwareMode.DISABLED):
        assert assign_replicas(racks, 3, 2, fixed_start_index=0, rack_aware_mode=mode) == {0: [0, 1], 1: [1, 2], 2: [2, 0]}


# ---- elections -----------------------------------------------------------------------------------------


def test_offline_election_prefers_assignment_order_within_the_isr() -> None:
    r = election.elect_for_offline([1, 2, 3], isr=[3, 2], live_replicas={2, 3}, unclean_leader_election_enabled=False)
    assert r == election.ElectionResult(2, (3, 2))
    r = election.elect_for_offline([1, 2, 3], isr=[1, 2, 3], live_replicas={3}, unclean_leader_election_enabled=False)
    assert r == election.ElectionResult(3, (3,))


def test_offline_election_unclean_only_when_allowed() -> None:
    clean = election.elect_for_offline([1, 2, 3], isr=[1], live_replicas={2, 3}, unclean_leader_election_enabled=False)
    assert clean.leader is None and clean.isr == (1,)
    unclean = election.elect_for_offline([1, 2, 3], isr=[1], live_replicas={3, 2}, unclean_leader_election_enabled=True)
    assert unclean == election.ElectionResult(2, (2,), unclean=True)
    nobody = election.elect_for_offline([1, 2], isr=[1], live_replicas=set(), unclean_leader_election_enabled=True)
    assert nobody.leader is None


def test_preferred_election_only_elects_the_first_replica() -> None:
    assert election.elect_preferred([2, 1], isr=[1, 2], live_replicas={1, 2}) == election.ElectionResult(2, (1, 2))
    assert election.elect_preferred([2, 1], isr=[1], live_replicas={1, 2}).leader is None
    assert election.elect_preferred([2, 1], isr=[1, 2], live_replicas={1}).leader is None


def test_reassignment_election_uses_the_target_replicas() -> None:
    assert election.elect_for_reassignment([4, 5], isr=[1, 5, 4], live_replicas={1, 4, 5}).leader == 4
    assert election.elect_for_reassignment([4, 5], isr=[1], live_replicas={1, 4, 5}).leader is None


def test_controlled_shutdown_election_drops_shutting_down_brokers_from_the_isr() -> None:
    r = election.elect_for_controlled_shutdown([1, 2, 3], isr=[1, 2, 3], live_replicas={1, 2, 3}, shutting_down_brokers={1})
    assert r == election.ElectionResult(2, (2, 3))
    stuck = election.elect_for_controlled_shutdown([1, 2], isr=[1], live_replicas={1, 2}, shutting_down_brokers={1})
    assert stuck.leader is None


def test_offline_replica_leaves_the_isr_except_the_last_member() -> None:
    assert election.isr_without_replica(1, [1, 2, 3], 2) == (1, (1, 3))
    assert election.isr_without_replica(1, [1, 2], 1) == (-1, (2,))
    assert election.isr_without_replica(1, [1], 1) == (-1, (1,))


# ---- reassignment: RS = TRS + ORS, AR = TRS - ORS, RR = ORS - TRS ----------------------------------------------


def test_reassign_to_lists_the_target_first_and_keeps_the_original_replicas_of_a_replaced_move() -> None:
    moving = reassign_to(ReplicaAssignment((1, 2, 3)), (4, 5, 6))
    assert moving == ReplicaAssignment((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert (origin_replicas(moving), target_replicas(moving)) == ((1, 2, 3), (4, 5, 6))
    # a new target: the original replicas are still [1,2,3]; 5 and 6 are not wanted any more
    assert reassign_to(moving, (4, 1)) == ReplicaAssignment((4, 1, 2, 3), (4,), (2, 3))
    # a cancellation is a move back to the original replicas: nothing added, nothing removed
    assert reassign_to(moving, origin_replicas(moving)) == ReplicaAssignment((1, 2, 3))
    # a smaller replication factor only removes
    assert reassign_to(ReplicaAssignment((1, 2, 3)), (2, 1)) == ReplicaAssignment((2, 1, 3), (), (3,))
