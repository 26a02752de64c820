"""Committed offsets expire in a real broker (offsets.retention.minutes at its minimum of 1): a
confluent-kafka consumer group commits, closes, and a minute later OffsetFetch has nothing for the group,
before and after a restart."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "offsets.retention.minutes": "1",
    "offsets.retention.check.interval.ms": "1000",
}
# Guards against hangs, not performance thresholds: a minute of retention plus a check interval.
EXPIRY_DEADLINE_S = 120
DEADLINE_S = 60
TOPIC, GROUP, PARTITIONS, RECORDS = "expiring", "expiring-group", 2, 5


def consumer(bootstrap: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
    })


def committed(bootstrap: str) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch), by partition; OFFSET_INVALID when there is none.
    The consumer never subscribes, so it does not join the group."""
    c = consumer(bootstrap)
    try:
        got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def test_a_closed_groups_offsets_expire_and_stay_gone_after_a_restart(broker_factory):
    b = broker_factory(OVERRIDES)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(TOPIC, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0

    c = consumer(b.bootstrap)
    c.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + DEADLINE_S
    while seen < PARTITIONS * RECORDS and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += 1
    assert seen == PARTITIONS * RECORDS, b.log_text()
    c.commit(asynchronous=False)
    c.close()  # LeaveGroup: the group is Empty from now on
    assert committed(b.bootstrap) == {p: RECORDS for p in range(PARTITIONS)}

    deadline = time.monotonic() + EXPIRY_DEADLINE_S
    offsets = committed(b.bootstrap)
    while offsets != {p: OFFSET_INVALID for p in range(PARTITIONS)} and time.monotonic() < deadline:
        time.sleep(1)
        offsets = committed(b.bootstrap)
    assert offsets == {p: OFFSET_INVALID for p in range(PARTITIONS)}, b.log_text()
    assert f"Removed {PARTITIONS} expired offsets" in b.log_text()
    # no offsets left: the group is Dead, so no longer listed
    listed = admin.list_consumer_groups().result(30)
    assert GROUP not in {g.group_id for g in listed.valid}

    b.restart()  # __consumer_offsets is read back: the tombstones keep the offsets and the group gone
    assert committed(b.bootstrap) == {p: OFFSET_INVALID for p in range(PARTITIONS)}
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    listed = admin.list_consumer_groups().result(30)
    assert GROUP not in {g.group_id for g in listed.valid}
