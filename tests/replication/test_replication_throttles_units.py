"""Unit tests of the KIP-73 replication quotas and KIP-392's rack-aware replica selector (pure
classes; the cluster behaviour is in tests/cluster/test_cluster_follower_fetch.py)."""

from __future__ import annotations

import pytest

from tieredlog.log.config import LONG_MAX, ConfigError, LogConfig, parse_throttled_replicas
from tieredlog.log.types import TopicPartition
from tieredlog.replication.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_REPLICA_SELECTOR,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector,
)
from tieredlog.replication.replication_quota import FOLLOWER, LEADER, ReplicationQuotaManager

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_throttled_replica_lists_parse_as_kafka_reads_them() -> None:
    name = "leader.replication.throttled.replicas"
    assert parse_throttled_replicas(name, "0:1, 1:2,") == frozenset({(0, 1), (1, 2)})
    assert parse_throttled_replicas(name, " * ") == "*"
    assert parse_throttled_replicas(name, "") == frozenset()
    for bad in ("0-1", "0:a", "*,0:1", ":1"):
        with pytest.raises(ConfigError, match=r"must be the literal '\*' or a list of replicas in the following format"):
            parse_throttled_replicas(name, bad)


def test_a_partition_is_throttled_on_the_side_and_broker_its_topic_names() -> None:
    config = LogConfig(leader_replication_throttled_replicas="0:1,1:2", follower_replication_throttled_replicas="*")
    leader_on_1 = ReplicationQuotaManager(LEADER, 1, 1000)
    assert leader_on_1.is_throttled(TP0, config) and not leader_on_1.is_throttled(TP1, config)
    assert ReplicationQuotaManager(LEADER, 2, 1000).is_throttled(TP1, config)
    assert ReplicationQuotaManager(FOLLOWER, 3, 1000).is_throttled(TP1, config)
    assert not ReplicationQuotaManager(FOLLOWER, 3, 1000).is_throttled(TP1, LogConfig())


def test_only_out_of_sync_throttled_replicas_wait_and_only_while_the_quota_is_spent() -> None:
    config = LogConfig(follower_replication_throttled_replicas="*")
    q = ReplicationQuotaManager(FOLLOWER, 1, rate=1000, window_size_seconds=1.0)
    assert not q.should_throttle(TP0, config, in_sync=False)  # a window's worth is allowed at once
    q.record(1500)
    assert q.is_quota_exceeded() and q.throttle_time_ms() > 0
    assert q.should_throttle(TP0, config, in_sync=False)
    assert not q.should_throttle(TP0, config, in_sync=True)  # an in-sync replica never waits
    assert not q.should_throttle(TP0, LogConfig(), in_sync=False)  # nor one its topic does not name
    assert (q.bytes_throttled_total, q.throttled_fetches) == (1500, 1)
    q.update_quota(LONG_MAX)  # the throttle removed (--verify)
    assert q.rate == LONG_MAX and not q.should_throttle(TP0, config, in_sync=False)


def test_the_rack_aware_selector_picks_as_kafkas() -> None:
    s = RackAwareReplicaSelector()
    leader = ReplicaView(1, "a", 100, 0)
    behind = ReplicaView(2, "b", 90, 0)
    ahead_stale = ReplicaView(3, "b", 100, 5000)
    ahead_fresh = ReplicaView(4, "b", 100, 10)
    replicas = [leader, behind, ahead_stale, ahead_fresh]
    assert s.select(None, leader, replicas) is leader
    assert s.select("", leader, replicas) is leader
    assert s.select("a", leader, replicas) is leader  # the leader is on the client's rack
    assert s.select("c", leader, replicas) is leader  # no replica there
    # furthest ahead, then the most recently caught up
    assert s.select("b", leader, replicas) is ahead_fresh
    assert s.select("b", leader, [leader, behind]) is behind


def test_replica_selector_class_names_what_is_offered() -> None:
    assert replica_selector(None) is None and replica_selector("") is None
    assert replica_selector(LEADER_SELECTOR) is None
    assert isinstance(replica_selector(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)
    with pytest.raises(ValueError, match="com.example.Mine"):
        replica_selector("com.example.Mine")
