"""Partition reassignment across real broker processes on one real ZooKeeper: a partition with data on
brokers [1,2] moved to [2,3] with AlterPartitionReassignments sent to the controller. Broker 3 copies
the log from the leader, joins the ISR, the controller completes the move, and broker 1's copy is
deleted from disk."""

from __future__ import annotations

import uuid
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import consume_all, controller_of, member, partition_state
from confluent_kafka import Producer
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import TopicAssignment
from tieredlog.protocol.api import ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS

pytestmark = pytest.mark.integration


def test_a_partition_with_data_moves_from_1_2_to_2_3(broker_factory: Callable[..., BrokerProcess],
                                                     zk_connect: str) -> None:  # noqa: F811
    # deleted partition directories go after 0.2 s, not Kafka's minute; the last broker standing stops
    # without waiting 3 x 5 s for a controlled shutdown that has nowhere to move its leadership
    overrides = {"log.segment.delete.delay.ms": "200", "controlled.shutdown.retry.backoff.ms": "200"}
    brokers = {i: broker_factory({**member(zk_connect, i), **overrides}) for i in (1, 2, 3)}
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [1, 2, 3], timeout=30, message="every broker registered")
        # a chosen placement, written as a broker writes a new topic; the controller creates the partition
        zk.set_topic_config("moving", {})
        zk.create_topic_assignment("moving", TopicAssignment.of({0: [1, 2]}, uuid.uuid4()))
    wait_until(lambda: all(partition_state(b, "moving")[:1] == [(1, 0, [1, 2], [1, 2])] for b in brokers.values()),
               timeout=30, message="moving-0 led by 1 with ISR 1,2 on every broker")
    values = [b"m%d" % i for i in range(300)]
    p = Producer({"bootstrap.servers": brokers[1].bootstrap, "acks": "all", "linger.ms": 2})
    for v in values:
        p.produce("moving", value=v, partition=0)
    assert p.flush(30) == 0
    assert (brokers[1].data_dir / "moving-0").is_dir()

    controller = brokers[controller_of(brokers[1])]
    with KafkaClient(controller.bootstrap, timeout=30) as c:
        r = c.request(ALTER_PARTITION_REASSIGNMENTS, {"timeout_ms": 30000, "topics": [
            {"name": "moving", "partitions": [{"partition_index": 0, "replicas": [2, 3]}]}]}, version=0)
    assert r.error_code == 0
    assert [(t.name, p.partition_index, p.error_code) for t in r.responses for p in t.partitions] == [("moving", 0, 0)]

    wait_until(lambda: all(partition_state(b, "moving")[:1] and partition_state(b, "moving")[0][2:] == ([2, 3], [2, 3])
                           for b in brokers.values()), timeout=60, message="replicas and ISR 2,3 on every broker")
    with KafkaClient(controller.bootstrap, timeout=30) as c:
        listed = c.request(LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": 30000, "topics": None}, version=0)
    assert listed.error_code == 0 and list(listed.topics) == []
    # broker 1's copy: renamed "-delete" at the StopReplica, then removed
    wait_until(lambda: not [d for d in brokers[1].data_dir.iterdir() if d.name.startswith("moving-0")], timeout=30,
               message="broker 1's moving-0 directory removed")
    assert (brokers[3].data_dir / "moving-0").is_dir()

    # broker 3 has every record: with broker 2 stopped it leads and serves them all
    brokers[2].stop()  # a controlled shutdown moves the leadership to 3 at once
    wait_until(lambda: partition_state(brokers[3], "moving")[0][0] == 3, timeout=40, message="broker 3 leads moving-0")
    got = consume_all(brokers[3].bootstrap, "moving", len(values))
    assert [m.value() for m in got] == values
