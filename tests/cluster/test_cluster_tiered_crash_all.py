"""Every broker of a tiered cluster killed at once (kill -9, as when the process that runs them all
dies), then restarted: the tiered partition's leader may first try to load its ``__remote_log_metadata``
partition while that partition has no leader yet. The load fails; it must be tried again until it
succeeds (as Kafka's consumer task keeps polling), or the remote tier of the partition stays unreadable
and consumers of offset 0 get empty fetches forever."""

from __future__ import annotations

import concurrent.futures
import uuid
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import consume_all, partition_state
from tiered_cluster import (
    EARLIEST_LOCAL,
    METADATA_TOPIC,
    create_topic_in_zk,
    list_offset,
    produce_values,
    segment_bytes_for,
    tiered_member,
    value,
    wait_tiered_up_to,
)
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import TopicAssignment

pytestmark = pytest.mark.integration

TOPIC = "crashed"
RECORDS = 8
# the metadata partitions stay on broker 3 alone; the metadata client gives up on a partition without a
# leader after 2 s
QUICK_METADATA = {"rlmm.config.remote.log.metadata.topic.replication.factor": "1",
                  "rlmm.config.remote.log.metadata.common.client.request.timeout.ms": "2000",
                  "rlmm.config.remote.log.metadata.initialization.retry.max.timeout.ms": "2000"}


def test_a_cluster_killed_at_once_reads_its_remote_tier_after_restart(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    # written to ZooKeeper before any broker starts, as Kafka's old tools did: the metadata partitions
    # live on broker 3 only, the tiered partition is led by broker 1
    with ZkClient(zk_connect) as zk:
        zk.set_topic_config(METADATA_TOPIC, {"retention.ms": "-1", "cleanup.policy": "delete",
                                             "remote.storage.enable": "false"})
        zk.create_topic_assignment(METADATA_TOPIC, TopicAssignment.of({0: [3], 1: [3]}, uuid.uuid4()))
    create_topic_in_zk(zk_connect, TOPIC, [1, 2, 3], {
        "remote.storage.enable": "true", "segment.bytes": str(segment_bytes_for(2)), "local.retention.bytes": "1"})
    # broker 3 first: the others' first loads of the metadata partitions find their leader
    brokers = {i: broker_factory(tiered_member(zk_connect, i, remote, QUICK_METADATA)) for i in (3, 1, 2)}
    servers = ",".join(b.bootstrap for b in brokers.values())
    # led by broker 3 at first, by broker 1 after the preferred-leader election
    wait_until(lambda: [(x[0], x[3]) for x in partition_state(brokers[1], TOPIC)] == [(1, [1, 2, 3])], timeout=60,
               message="the tiered partition led by broker 1 and in sync")
    produce_values(servers, TOPIC, [value(o) for o in range(RECORDS)])
    leader = brokers[1]
    wait_tiered_up_to(leader, TOPIC, 3)
    wait_until(lambda: list_offset(leader, TOPIC, EARLIEST_LOCAL)[1] > 0, timeout=30,
               message="offset 0 is only in the remote tier")

    for b in brokers.values():
        b.kill9()
    logged = {i: len(b.log_text()) for i, b in brokers.items()}
    # brokers 1 and 2 come back first: the new leader's first load of the metadata partition finds no
    # leader for it and gives up
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda b: b.start(timeout=60), (brokers[1], brokers[2])))
    wait_until(lambda: any("not loaded yet" in brokers[i].log_text()[logged[i]:] for i in (1, 2)), timeout=60,
               message="the leader failed to load the metadata partition")
    brokers[3].start(timeout=60)

    got = consume_all(servers, TOPIC, RECORDS, timeout_s=60)
    assert [m.offset() for m in got] == list(range(RECORDS))
    assert [m.value() for m in got] == [value(o) for o in range(RECORDS)]

