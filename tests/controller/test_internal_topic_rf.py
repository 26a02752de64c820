"""Internal topics created with fewer replicas than configured reach their replication factor once
enough brokers are registered: the controller reassigns them (Kafka leaves them under-replicated until
an operator does). Broker processes on a real ZooKeeper: two brokers, ``__remote_log_metadata``
created with replication factor 2 (three configured), ``__consumer_offsets`` written with two replicas
as an older tool would have; a third broker joins and both reach three replicas, all in sync."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import partition_state
from confluent_kafka.admin import AdminClient, NewTopic
from tiered_cluster import create_topic_in_zk, tiered_member
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import BrokerInfo, ReplicaAssignment
from tieredlog.controller.context import ControllerContext
from tieredlog.controller.internal_topics import raised_replicas
from tieredlog.log.types import TopicPartition

METADATA_TOPIC = "__remote_log_metadata"
OFFSETS_TOPIC = "__consumer_offsets"
OVERRIDES = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "3"}


def full(b: BrokerProcess, topic: str, partitions: int) -> bool:
    state = partition_state(b, topic)
    return len(state) == partitions and all(replicas == isr == [1, 2, 3] and leader in replicas
                                            for leader, _epoch, replicas, isr in state)


@pytest.mark.integration
def test_under_replicated_internal_topics_are_raised_when_a_third_broker_joins(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str, tmp_path: Path) -> None:  # noqa: F811
    remote = tmp_path / "remote"
    create_topic_in_zk(zk_connect, OFFSETS_TOPIC, [2, 1], {"cleanup.policy": "compact"})
    brokers = {i: broker_factory(tiered_member(zk_connect, i, remote, OVERRIDES)) for i in (1, 2)}
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [1, 2], message="two brokers registered")
        wait_until(lambda: zk.get_controller_id() is not None, message="a controller elected")
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    admin.create_topics([NewTopic("tiered", 1, 2, config={"remote.storage.enable": "true"})])["tiered"].result(30)
    # the RLMM creates its topic with the replicas there are, and says so
    wait_until(lambda: len(partition_state(brokers[1], METADATA_TOPIC)) == 2, timeout=30,
               message=f"{METADATA_TOPIC} created")
    assert all(len(replicas) == 2 for _, _, replicas, _ in partition_state(brokers[1], METADATA_TOPIC))
    assert any("is created with replication factor 2" in b.log_text() for b in brokers.values())

    brokers[3] = broker_factory(tiered_member(zk_connect, 3, remote, OVERRIDES))
    wait_until(lambda: full(brokers[3], METADATA_TOPIC, 2), timeout=40,
               message=f"{METADATA_TOPIC} at 3 replicas, all in sync")
    wait_until(lambda: full(brokers[3], OFFSETS_TOPIC, 1), timeout=40,
               message=f"{OFFSETS_TOPIC} at 3 replicas, all in sync")
    with ZkClient(zk_connect) as zk:
        controller = brokers[zk.get_controller_id()]
    log = controller.log_text()
    for topic, config in ((METADATA_TOPIC, "remote.log.metadata.topic.replication.factor"),
                          (OFFSETS_TOPIC, "offsets.topic.replication.factor")):
        lines = [line for line in log.splitlines() if f"raising the replication factor of {topic} " in line]
        assert len(lines) == 1 and f"from 2 to 3 ({config}=3)" in lines[0], log


def _context(racks: dict[int, str | None], assignment: dict[int, tuple[int, ...]]) -> ControllerContext:
    ctx = ControllerContext()
    ctx.add_live_brokers({b: (BrokerInfo(b, (), rack), 1) for b, rack in racks.items()})
    for p, replicas in assignment.items():
        ctx.update_assignment(TopicPartition(METADATA_TOPIC, p), ReplicaAssignment(replicas))
    return ctx


def test_raised_replicas_keep_the_old_ones_and_add_on_racks_not_used_yet() -> None:
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    ctx = _context(racks, {0: (1, 2), 1: (3,), 2: (1, 3, 5)})
    raised = raised_replicas(ctx, METADATA_TOPIC, 3, random.Random(7))
    assert set(raised) == {TopicPartition(METADATA_TOPIC, 0), TopicPartition(METADATA_TOPIC, 1)}
    for tp, replicas in raised.items():
        before = ctx.replica_assignment(tp)
        assert replicas[:len(before)] == before and len(set(replicas)) == 3
    # two replicas on rack a: the third goes elsewhere; one on rack b: one on each other rack
    assert racks[raised[TopicPartition(METADATA_TOPIC, 0)][2]] in {"b", "c"}
    assert {racks[b] for b in raised[TopicPartition(METADATA_TOPIC, 1)]} == {"a", "b", "c"}


def test_raised_replicas_wait_for_brokers_and_leave_busy_topics_alone() -> None:
    assert raised_replicas(_context({1: None, 2: None}, {0: (1, 2)}), METADATA_TOPIC, 3) == {}
    assert raised_replicas(_context({1: None, 2: None, 3: None}, {0: (1,)}), METADATA_TOPIC, 2) != {}
    moving = _context({1: None, 2: None, 3: None}, {0: (1, 2)})
    moving.update_assignment(TopicPartition(METADATA_TOPIC, 1), ReplicaAssignment((2, 3), adding_replicas=(3,)))
    assert raised_replicas(moving, METADATA_TOPIC, 3) == {}
    deleting = _context({1: None, 2: None, 3: None}, {0: (1, 2)})
    deleting.topics_to_be_deleted.add(METADATA_TOPIC)
    assert raised_replicas(deleting, METADATA_TOPIC, 3) == {}
