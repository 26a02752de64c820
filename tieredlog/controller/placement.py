"""Replica placement for new topics and partitions (Kafka's ``AdminUtils.assignReplicasToBrokers``).

Pure functions: the controller, CreateTopics, CreatePartitions and topic auto-creation all call
``assign_replicas`` with the live brokers and their racks.

Goals, in Kafka's order: spread the replicas evenly over the brokers; put the replicas of one
partition on distinct brokers; with racks, put them on distinct racks where possible. The first
replica (the preferred leader) of consecutive partitions walks round the broker list from a random
start, so leadership is spread too; the followers sit at a shift from it that grows by one after
every full round, so two partitions rarely share the same follower set.
"""

from __future__ import annotations

import enum
import random
from typing import Mapping

from tieredlog.errors import InvalidPartitionsError, InvalidReplicationFactorError, UnknownServerError


class AdminOperationError(UnknownServerError):
    """Kafka's AdminOperationException: a request it cannot serve that has no protocol error of its own
    (clients see UNKNOWN_SERVER_ERROR with this message)."""


class RackAwareMode(enum.Enum):
    """Kafka's RackAwareMode."""

    DISABLED = "disabled"  # ignore racks
    ENFORCED = "enforced"  # racks on every broker or on none, else refuse (CreateTopics)
    SAFE = "safe"  # racks when every broker has one, else rack-unaware


def assign_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int, *,
                    start_partition: int = 0, fixed_start_index: int = -1, start_partition_id: int = -1,
                    rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """partition id -> replicas, first replica the preferred leader.

    ``brokers``: broker id -> rack (None: no rack). ``start_partition_id`` (Kafka's name; -1 unset) or
    ``start_partition``: the first partition id to assign, the current partition count when
    partitions are added. ``fixed_start_index`` >= 0 replaces both random starts (the index of the
    first replica of the first partition in the broker list, and the first follower shift); Kafka
    passes the index of partition 0's leader when partitions are added, to continue its layout."""
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rng = rng or random.Random()
    first_id = start_partition_id if start_partition_id >= 0 else max(0, start_partition)
    racks = {b: r for b, r in brokers.items() if r is not None}
    if rack_aware_mode is RackAwareMode.DISABLED or not racks:
        return _rack_unaware(sorted(brokers), partitions, replication_factor, fixed_start_index, first_id, rng)
    if len(racks) != len(brokers):
        if rack_aware_mode is RackAwareMode.SAFE:
            return _rack_unaware(sorted(brokers), partitions, replication_factor, fixed_start_index, first_id, rng)
        raise AdminOperationError("Not all brokers have rack information for replica rack aware assignment.")
    return _rack_aware(racks, partitions, replication_factor, fixed_start_index, first_id, rng)


def _replica_index(first_replica_index: int, shift: int, replica_index: int, n_brokers: int) -> int:
    # 1 + ... keeps a follower off the leader's broker; the modulo keeps it within one round
    step = 1 + (shift + replica_index) % (n_brokers - 1)
    return (first_replica_index + step) % n_brokers


def _starts(n: int, fixed_start_index: int, rng: random.Random) -> tuple[int, int]:
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    return rng.randrange(n), rng.randrange(n)


def _rack_unaware(broker_list: list[int], partitions: int, replication_factor: int, fixed_start_index: int,
                  first_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    n = len(broker_list)
    start_index, shift = _starts(n, fixed_start_index, rng)
    out: dict[int, list[int]] = {}
    partition_id = first_partition_id
    for _ in range(partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        replicas = [broker_list[first]]
        replicas += [broker_list[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        out[partition_id] = replicas
        partition_id += 1
    return out


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """The brokers ordered so consecutive ones sit on different racks: one broker from each rack in
    turn (racks in name order, brokers of a rack in id order), e.g. racks {0: r1, 1: r3, 2: r3, 3: r2,
    4: r2, 5: r1} -> [0, 3, 1, 5, 4, 2]."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    position = 0
    while len(out) < len(racks):
        for queue in queues:
            if position < len(queue):
                out.append(queue[position])
        position += 1
    return out


def _rack_aware(racks: Mapping[int, str], partitions: int, replication_factor: int, fixed_start_index: int,
                first_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    n_racks = len(set(racks.values()))
    start_index, shift = _starts(n, fixed_start_index, rng)
    out: dict[int, list[int]] = {}
    partition_id = first_partition_id
    for _ in range(partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                rack = racks[broker]
                k += 1
                # a rack (or broker) already holding a replica is skipped while another has none
                if (rack not in racks_used or len(racks_used) == n_racks) and \
                        (broker not in brokers_used or len(brokers_used) == n):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[partition_id] = replicas
        partition_id += 1
    return out
