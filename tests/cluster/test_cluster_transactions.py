"""Transactions in a replicated cluster of broker processes on one real ZooKeeper: the first
transactional FindCoordinator creates `__transaction_state` through the controller, the leader of the
id's partition coordinates it and writes its markers to partition leaders on other brokers; the
coordinator's broker is killed with SIGKILL while a transaction is open, and the next coordinator (the
new leader of that partition) loads the state, aborts the open transaction when the producer comes
back, and the producer carries on. Producer ids come from ZooKeeper: no two brokers hand out the same."""

from __future__ import annotations

from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, partition_state, start_cluster
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.coordinator.schema import partition_for
from tieredlog.protocol.api import FIND_COORDINATOR, INIT_PRODUCER_ID

pytestmark = pytest.mark.integration

TXN_PARTITIONS = 3
TOPIC = "payments"
TXN_ID = "payments-writer"
OVERRIDES = {"transaction.state.log.num.partitions": str(TXN_PARTITIONS),
             "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
             "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3"}


def coordinator_of(b: BrokerProcess, transactional_id: str) -> tuple[int, int]:
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(FIND_COORDINATOR, {"key": transactional_id, "key_type": 1}, version=3)
    return r.error_code, r.node_id


def read_committed(servers: str, expect: int, timeout_s: float = 30) -> list[bytes]:
    c = Consumer({"bootstrap.servers": servers, "group.id": "audit", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    c.assign([CkTopicPartition(TOPIC, p, 0) for p in range(3)])
    out: list[bytes] = []
    try:
        wait_until(lambda: out.extend(m.value() for m in c.consume(500, 0.3) if m.error() is None) or len(out) >= expect,
                   timeout=timeout_s, message=f"{expect} committed records")
        for m in c.consume(500, 1.0):  # nothing more arrives: aborted records stay hidden
            if m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return out


def test_transactions_across_brokers_survive_the_coordinator_killed(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect, n=3, overrides=OVERRIDES)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
    wait_until(lambda: [isr for *_, isr in partition_state(brokers[1], TOPIC)] == [[1, 2, 3]] * 3, timeout=30,
               message="every partition with a full ISR")
    leaders = {leader for leader, *_ in partition_state(brokers[1], TOPIC)}
    assert len(leaders) > 1, "the partitions are led by several brokers"

    # producer ids come from one ZooKeeper block counter: each broker's first id is in its own block
    first_ids = set()
    for b in brokers.values():
        with KafkaClient(b.bootstrap, timeout=10) as c:
            r = c.request(INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60000}, version=4)
        first_ids.add(r.producer_id // 1000)
    assert len(first_ids) == 3

    p = Producer({"bootstrap.servers": bootstrap(brokers), "transactional.id": TXN_ID, "linger.ms": 2})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(30):
        p.produce(TOPIC, value=b"committed-%d" % i, partition=i % 3)
    p.commit_transaction(60)
    assert sorted(read_committed(bootstrap(brokers), 30)) == sorted(b"committed-%d" % i for i in range(30))

    # __transaction_state was created with RF 3; the id's partition leader is its coordinator
    home = partition_for(TXN_ID, TXN_PARTITIONS)
    state = partition_state(brokers[1], "__transaction_state")
    assert len(state) == TXN_PARTITIONS and all(replicas == [1, 2, 3] for _, _, replicas, _ in state)
    coordinator, epoch = state[home][0], state[home][1]
    assert {coordinator_of(b, TXN_ID) for b in brokers.values()} == {(0, coordinator)}

    p.begin_transaction()
    for i in range(9):
        p.produce(TOPIC, value=b"doomed-%d" % i, partition=i % 3)
    p.flush(30)  # in every partition's log, not committed
    brokers[coordinator].kill9()
    survivors = {i: b for i, b in brokers.items() if i != coordinator}
    some = next(iter(survivors.values()))
    wait_until(lambda: (s := partition_state(some, "__transaction_state")) and s[home][0] in survivors
               and s[home][1] > epoch, timeout=60, message="a new leader of the id's partition")
    wait_until(lambda: coordinator_of(some, TXN_ID)[0] == 0, timeout=30, message="the new coordinator found")

    # a new instance of the application: the open transaction is aborted, then it writes its own
    successor = Producer({"bootstrap.servers": bootstrap(survivors), "transactional.id": TXN_ID, "linger.ms": 2})
    successor.init_transactions(60)
    successor.begin_transaction()
    for i in range(6):
        successor.produce(TOPIC, value=b"after-%d" % i, partition=i % 3)
    successor.commit_transaction(60)
    got = read_committed(bootstrap(survivors), 36)
    assert sorted(got) == sorted([b"committed-%d" % i for i in range(30)] + [b"after-%d" % i for i in range(6)])
