"""A KIP-848 group in a replicated cluster (ZooKeeper, three broker processes): the leader of the group's
`__consumer_offsets` partition coordinates it; when that broker is killed, the new leader loads the group
(epochs, members, assignments) from the replicated records and the members carry on with it, consuming and
committing, and a new member resumes exactly at the committed offsets."""

from __future__ import annotations

from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, partition_state, start_cluster
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from group_harness import consume_until, find_coordinator, produce
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.coordinator.schema import partition_for

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 3
GROUP = "orders-readers"  # the same group and topic as test_cluster_groups' helpers use
TOPIC = "orders"
OVERRIDES = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "offsets.topic.replication.factor": "3",
             "group.consumer.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "20000"}


def kip848_consumer(servers: str) -> Consumer:
    c = Consumer({"bootstrap.servers": servers, "group.id": GROUP, "group.protocol": "consumer",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([TOPIC])
    return c


def commit(c: Consumer) -> bool:
    try:
        c.commit(asynchronous=False)
        return True
    except Exception as exc:  # noqa: BLE001 - _NO_OFFSET (nothing to commit) counts as done
        return "_NO_OFFSET" in str(exc) or "No offset" in str(exc)


def test_group_moves_to_the_new_coordinator(broker_factory: Callable[..., BrokerProcess],
                                            zk_connect: str) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect, n=3, overrides=OVERRIDES)
    wait_until(lambda: find_coordinator(brokers[1], GROUP)[0] == 0, timeout=30, message="a group coordinator")
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
    wait_until(lambda: [isr for *_, isr in partition_state(brokers[1], TOPIC)] == [[1, 2, 3]] * 3,
               timeout=30, message="every partition with a full ISR")
    produce(bootstrap(brokers), range(300))
    members = [kip848_consumer(bootstrap(brokers)) for _ in range(2)]
    got: dict[tuple[int, int], bytes] = {}
    consume_until(members, got, {b"%d" % i for i in range(300)}, timeout=90)
    wait_until(lambda: all(commit(c) for c in members), timeout=30, message="the first commits accepted")

    home = partition_for(GROUP, OFFSETS_PARTITIONS)
    wait_until(lambda: partition_state(brokers[1], "__consumer_offsets")[home][3] == [1, 2, 3], timeout=30,
               message="the group's partition with a full ISR")
    coordinator, epoch, _, _ = partition_state(brokers[1], "__consumer_offsets")[home]

    seen: list[object] = []

    def balanced() -> bool:
        # the second member may join after the first consumed everything: wait for its share (the
        # clients take their assignments in poll)
        for c in members:
            c.poll(0.05)
        group = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
        seen[:] = [group]
        return sorted(len(m.assignment.topic_partitions) for m in group.members) == [1, 2]

    wait_until(balanced, timeout=60, message="both members assigned")
    before = seen[0]

    brokers[coordinator].kill9()
    survivors = {i: b for i, b in brokers.items() if i != coordinator}
    some = next(iter(survivors.values()))
    wait_until(lambda: (s := partition_state(some, "__consumer_offsets")) and s[home][0] in survivors
               and s[home][1] > epoch, timeout=60, message="a new leader of the group's partition")

    produce(bootstrap(survivors), range(300, 400))
    consume_until(members, got, {b"%d" % i for i in range(300, 400)}, timeout=90)
    wait_until(lambda: all(commit(c) for c in members), timeout=60, message="commits accepted by the new coordinator")
    admin = AdminClient({"bootstrap.servers": bootstrap(survivors)})
    after = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
    # the same members, loaded by the new coordinator from the replicated records
    assert sorted(m.member_id for m in after.members) == sorted(m.member_id for m in before.members)
    for c in members:
        c.close()

    produce(bootstrap(survivors), range(400, 450))
    late = kip848_consumer(bootstrap(survivors))
    try:
        seen: dict[tuple[int, int], bytes] = {}
        consume_until([late], seen, {b"%d" % i for i in range(400, 450)}, timeout=90)
    finally:
        late.close()
    assert sorted(int(v) for v in seen.values()) == list(range(400, 450))
