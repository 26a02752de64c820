"""A compacted tiered partition in a cluster: a brand-new follower rebuilt from a remote tier whose
segments the leader has already replaced by compacted copies, then leading, serves the same key ->
latest value view from offset 0 as a replay of everything acknowledged, and its remote cleaner goes on
from the clean offset the old leader kept in the tier (real broker processes, ZooKeeper, confluent-kafka)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, partition_state
from compaction_harness import TOPIC, WAIT_S, consume, kept_cleaner_offset, local_log_start, produce
from tiered_cluster import create_metadata_topic, create_topic_in_zk, tiered_member, wait_metadata_isr
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

pytestmark = pytest.mark.integration


def wait_state(b: BrokerProcess, leader: int, isr: list[int]) -> None:
    wait_until(lambda: (s := partition_state(b, TOPIC)) and s[0][0] == leader and s[0][3] == sorted(isr),
               timeout=WAIT_S, message=f"leader {leader} with ISR {isr}")


def test_a_follower_rebuilt_from_a_compacted_remote_tier_serves_the_same_view(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    conf = {"auto.leader.rebalance.enable": "false", "log.cleaner.backoff.ms": "200"}
    b1 = broker_factory(tiered_member(zk_connect, 1, remote, conf))
    b2 = broker_factory(tiered_member(zk_connect, 2, remote, conf))
    create_metadata_topic(bootstrap({1: b1, 2: b2}), replication_factor=2)
    wait_metadata_isr(b1, [1, 2])
    b2.stop()  # a brand-new replica of the topic when it comes back
    create_topic_in_zk(zk_connect, TOPIC, [1, 2], {
        "cleanup.policy": "compact", "remote.storage.enable": "true", "segment.bytes": "16384",
        "local.retention.ms": "500", "min.cleanable.dirty.ratio": "0.01", "min.insync.replicas": "1"})
    wait_state(b1, 1, [1])
    expected, _ = produce(b1, seed=3, transactions=False, records=1500)
    wait_until(lambda: local_log_start(b1) > 0, timeout=WAIT_S, message="nothing only in the remote tier")
    wait_until(lambda: "compacted remote segment" in b1.log_text(), timeout=WAIT_S, message="no replacement")

    b2.start()
    wait_state(b1, 1, [1, 2])
    assert "rebuilt from the remote tier" in b2.log_text()
    assert local_log_start(b2) > 0
    wait_until(lambda: kept_cleaner_offset(remote), timeout=WAIT_S, message="no cleaner offset kept in the tier")
    b1.stop()
    kept = kept_cleaner_offset(remote)
    wait_state(b2, 2, [2])
    # the new leader's remote cleaner goes on from where the old leader's stopped
    wait_until(lambda: f"clean up to offset {kept} (kept by the last leader)" in b2.log_text(), timeout=WAIT_S,
               message=f"the new leader did not take the kept cleaner offset {kept}")
    view, offsets = consume(b2)
    assert view == expected and offsets == sorted(set(offsets))
