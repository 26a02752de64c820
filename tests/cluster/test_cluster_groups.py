"""Consumer groups in a replicated cluster of broker processes on one real ZooKeeper: the first
FindCoordinator creates `__consumer_offsets` through the controller with replication factor 3, the
leader of the group's partition coordinates it, commits wait for the ISR; the coordinator's broker is
killed with SIGKILL, the group finds the new leader of its partition, and its committed offsets
survive: a new consumer resumes exactly where the group committed, with no re-delivery."""

from __future__ import annotations

from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, member, partition_state, start_cluster
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from group_harness import TOPIC, consume_until, find_coordinator, produce
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient
from tieredlog.coordinator.schema import partition_for

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 3
COORDINATOR_NOT_AVAILABLE = 15
GROUP = "orders-readers"


# a small __consumer_offsets, on every broker of the cluster
GROUP_OVERRIDES = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "offsets.topic.replication.factor": "3",
                   "group.initial.rebalance.delay.ms": "1000"}


def group_consumer(servers: str) -> Consumer:
    return Consumer({"bootstrap.servers": servers, "group.id": GROUP, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                     "heartbeat.interval.ms": 500, "topic.metadata.refresh.interval.ms": 1000})


def commit(c: Consumer) -> bool:
    try:
        c.commit(asynchronous=False)
        return True
    except KafkaException as exc:
        if exc.args[0].code() == -191:  # _NO_OFFSET: this member has nothing to commit
            return True
        return False


def test_group_commits_survive_the_coordinator_broker_killed(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    # two brokers are fewer than the offsets topic's replication factor: no coordinator, no topic yet
    brokers = start_cluster(broker_factory, zk_connect, n=2, overrides=GROUP_OVERRIDES)
    assert find_coordinator(brokers[1], GROUP) == (COORDINATOR_NOT_AVAILABLE, -1)
    with ZkClient(zk_connect) as zk:
        assert "__consumer_offsets" not in zk.get_all_topics()
    brokers[3] = broker_factory(member(zk_connect, 3, GROUP_OVERRIDES))
    # the first FindCoordinator with three brokers registered creates the topic; then its leader answers
    wait_until(lambda: find_coordinator(brokers[3], GROUP)[0] == 0, timeout=30,
               message="a coordinator once the third broker registered")
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
    wait_until(lambda: [isr for *_, isr in partition_state(brokers[1], TOPIC)] == [[1, 2, 3]] * 3,
               timeout=30, message="every orders partition with a full ISR")
    produce(bootstrap(brokers), range(300))

    first = [group_consumer(bootstrap(brokers)) for _ in range(2)]
    for c in first:
        c.subscribe([TOPIC])
    got: dict[tuple[int, int], bytes] = {}
    consume_until(first, got, {b"%d" % i for i in range(300)}, timeout=90)
    wait_until(lambda: all(commit(c) for c in first), timeout=30, message="the first commits accepted")

    # __consumer_offsets was created through the controller with RF 3; the group lives in one partition
    offsets_state = partition_state(brokers[1], "__consumer_offsets")
    assert len(offsets_state) == OFFSETS_PARTITIONS
    assert all(replicas == [1, 2, 3] for _, _, replicas, _ in offsets_state)
    home = partition_for(GROUP, OFFSETS_PARTITIONS)
    wait_until(lambda: partition_state(brokers[1], "__consumer_offsets")[home][3] == [1, 2, 3], timeout=30,
               message="the group's partition with a full ISR")
    coordinator, epoch, _, _ = partition_state(brokers[1], "__consumer_offsets")[home]
    # every broker names the same coordinator: the leader of the group's partition
    assert {find_coordinator(b, GROUP) for b in brokers.values()} == {(0, coordinator)}

    brokers[coordinator].kill9()
    survivors = {i: b for i, b in brokers.items() if i != coordinator}
    some = next(iter(survivors.values()))
    wait_until(lambda: (s := partition_state(some, "__consumer_offsets")) and s[home][0] in survivors
               and s[home][1] > epoch, timeout=60, message="a new leader of the group's partition")
    new_coordinator = partition_state(some, "__consumer_offsets")[home][0]
    wait_until(lambda: all(find_coordinator(b, GROUP) == (0, new_coordinator) for b in survivors.values()),
               timeout=30, message="FindCoordinator names the new leader")

    # the members carry on with the new coordinator: they consume what is new and commit it there
    produce(bootstrap(survivors), range(300, 400))
    consume_until(first, got, {b"%d" % i for i in range(300, 400)}, timeout=90)
    wait_until(lambda: all(commit(c) for c in first), timeout=60, message="commits accepted by the new coordinator")
    for c in first:
        c.close()

    # a new member resumes at the committed offsets: exactly the records produced since, nothing again
    produce(bootstrap(survivors), range(400, 450))
    late = group_consumer(bootstrap(survivors))
    late.subscribe([TOPIC])
    try:
        seen: dict[tuple[int, int], bytes] = {}
        consume_until([late], seen, {b"%d" % i for i in range(400, 450)}, timeout=90)
    finally:
        late.close()
    # a committed offset too low would have replayed older records first, in their partition's order
    assert sorted(int(v) for v in seen.values()) == list(range(400, 450))
