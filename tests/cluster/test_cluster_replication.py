"""A replicated cluster of broker processes on one real ZooKeeper: topics created through the controller
with replicas on three brokers, followers copying the leader, acks=all waiting for the ISR, and the
leader killed with SIGKILL while an idempotent producer writes: every acknowledged record is read back
exactly once, in order, from the new leader."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import bootstrap, consume_all, partition_state, start_cluster
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import METADATA

pytestmark = pytest.mark.integration


def preferred_and_leader(b: BrokerProcess, topic: str) -> tuple[int, int] | None:
    """(the preferred replica: first of the assignment, the leader) of partition 0."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (t,) = r.topics
    p = next((p for p in t.partitions if p.partition_index == 0), None)
    return None if p is None or not p.replica_nodes else (p.replica_nodes[0], p.leader_id)


def wait_for_progress(acked: list[int], more: int, timeout: float, message: str) -> None:
    start = len(acked)
    wait_until(lambda: len(acked) >= start + more, timeout=timeout, message=message)


def test_rf3_topic_replicates_to_every_broker_and_acks_all_waits_for_the_isr(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("rep", 1, 3, config={"min.insync.replicas": "2"})])["rep"].result(30)

    b1 = brokers[1]
    wait_until(lambda: (s := partition_state(b1, "rep")) and s[0][0] in brokers and len(s[0][3]) == 3,
               timeout=30, message="a leader and a full ISR")
    ((leader, epoch, replicas, isr),) = partition_state(b1, "rep")
    assert replicas == [1, 2, 3] and isr == [1, 2, 3] and epoch == 0
    # every broker answers the same, once the controller's UpdateMetadata reached it
    wait_until(lambda: all(partition_state(b, "rep") == [(leader, epoch, replicas, isr)] for b in brokers.values()),
               timeout=30, message="the same metadata from every broker")

    p = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all", "enable.idempotence": True, "linger.ms": 2})
    for i in range(500):
        p.produce("rep", key=b"k%d" % i, value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    got = consume_all(bootstrap(brokers), "rep", 500)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(500)]

    # the followers have every record: with the leader's broker gone, the new leader serves them all
    brokers[leader].kill9()
    survivors = {i: b for i, b in brokers.items() if i != leader}
    any_survivor = next(iter(survivors.values()))
    wait_until(lambda: partition_state(any_survivor, "rep")[0][0] in survivors, timeout=30,
               message="a new leader elected from the ISR")
    ((new_leader, new_epoch, _, new_isr),) = partition_state(any_survivor, "rep")
    assert new_epoch > epoch and new_leader != leader and leader not in new_isr
    got = consume_all(bootstrap(survivors), "rep", 500)
    assert [m.value() for m in got] == [b"v%d" % i for i in range(500)]


def test_min_insync_replicas_refuses_acks_all_when_the_isr_is_too_small(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect, n=2)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("strict", 1, 2, config={"min.insync.replicas": "2"})])["strict"].result(30)
    wait_until(lambda: (s := partition_state(brokers[1], "strict")) and len(s[0][3]) == 2, timeout=30,
               message="a full ISR")
    ((leader, _, _, _),) = partition_state(brokers[1], "strict")
    follower = next(i for i in brokers if i != leader)
    brokers[follower].kill9()
    wait_until(lambda: (s := partition_state(brokers[leader], "strict")) and s[0][3] == [leader], timeout=40,
               message="the dead follower leaves the ISR")
    errors: list[str] = []
    p = Producer({"bootstrap.servers": brokers[leader].bootstrap, "acks": "all", "message.timeout.ms": 3000,
                  "retries": 0})
    p.produce("strict", value=b"x", partition=0, on_delivery=lambda err, _m: errors.append(err and err.name()))
    p.flush(10)
    assert errors == ["NOT_ENOUGH_REPLICAS"]
    # acks=1 does not need the ISR
    ok: list[Any] = []
    p1 = Producer({"bootstrap.servers": brokers[leader].bootstrap, "acks": 1})
    p1.produce("strict", value=b"y", partition=0, on_delivery=lambda err, _m: ok.append(err))
    p1.flush(10)
    assert ok == [None]


def test_leader_killed_twice_under_an_idempotent_acks_all_producer_loses_and_duplicates_nothing(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    brokers = start_cluster(broker_factory, zk_connect)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("safe", 1, 3, config={"min.insync.replicas": "2"})])["safe"].result(30)
    wait_until(lambda: (s := partition_state(brokers[1], "safe")) and len(s[0][3]) == 3, timeout=30,
               message="a full ISR")

    acked: list[int] = []
    failed: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values()), "acks": "all",
                      "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120000})

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                acked.append(int(msg.value()))
            else:
                failed.append(err.name())

        i = 0
        while not stop.is_set():
            p.produce("safe", value=b"%d" % i, partition=0, on_delivery=delivered)
            p.poll(0)
            i += 1
            time.sleep(0.002)
        p.flush(120)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        for _round in range(2):
            wait_for_progress(acked, 200, timeout=60, message="the producer makes progress")
            (leader, *_), = partition_state(next(b for b in brokers.values() if b.alive()), "safe")
            brokers[leader].kill9()
            wait_for_progress(acked, 200, timeout=90, message="progress after the failover")
            brokers[leader].restart()
            # a broker that just started knows no topics until the controller's UpdateMetadata: ask each
            wait_until(lambda: all((s := partition_state(b, "safe")) and len(s[0][3]) == 3 for b in brokers.values()),
                       timeout=60, message="the restarted broker rejoins the ISR")
    finally:
        stop.set()
        writer.join(150)
    assert not failed, failed[:5]
    # the auto rebalance gives leadership back to the preferred replica once it is in the ISR again
    wait_until(lambda: (pl := preferred_and_leader(brokers[1], "safe")) is not None and pl[0] == pl[1], timeout=60,
               message="leadership back on the preferred replica")
    got = consume_all(bootstrap(brokers), "safe", len(acked), timeout_s=90)
    values = [int(m.value()) for m in got]
    # exactly once, in order: the log holds every acknowledged record once, and nothing else
    assert values == sorted(set(values)), "duplicates or reordering"
    assert set(acked) <= set(values)
    assert values == list(range(len(values)))
