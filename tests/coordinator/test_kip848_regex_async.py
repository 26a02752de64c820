"""KIP-848 regex subscriptions resolved as Kafka 4 resolves them: a regex new to the group is resolved
after the heartbeat that brings it (Kafka's executor), so that heartbeat's assignment holds the literal
topics only; the resolution's landing bumps the group epoch and a later heartbeat brings the regex's
topics. Over the wire (the first heartbeat seen exactly) and with confluent-kafka's
`group.protocol=consumer` (the literal topic assigned before the regex's)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, METADATA

pytestmark = pytest.mark.integration

TOPICS = {"literal": 2, "prefix-a": 2, "prefix-b": 1}
DEADLINE_S = 30  # a guard against hangs, not a performance threshold


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):  # type: ignore[no-untyped-def]
    from broker_harness import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("kip848-regex") / "data", {
        "offsets.topic.num.partitions": "1", "group.consumer.heartbeat.interval.ms": "500"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(n, num_partitions=p, replication_factor=1)
                                      for n, p in TOPICS.items()]).values():
            f.result(30)
        yield b.bootstrap
    finally:
        b.stop()


def topic_ids(c: KafkaClient) -> dict[uuid.UUID, str]:
    r = c.request(METADATA, {"topics": [{"name": n, "topic_id": None} for n in TOPICS],
                             "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
                  version=12)
    return {t.topic_id: t.name for t in r.topics}


def heartbeat(c: KafkaClient, member: str, epoch: int, **fields: Any) -> Any:
    body = {"group_id": "regex-wire", "member_id": member, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None, **fields}
    r = c.request(CONSUMER_GROUP_HEARTBEAT, body, version=1)
    assert r.error_code.value == 0, r
    return r


def group_epoch(c: KafkaClient) -> int:
    d = c.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": ["regex-wire"], "include_authorized_operations": False},
                  version=1)
    return d.groups[0].group_epoch


def test_first_heartbeat_gets_the_literal_topics_and_the_regex_follows(bootstrap: str) -> None:
    with KafkaClient(bootstrap) as c:
        names = topic_ids(c)

        def assigned(r: Any) -> dict[str, list[int]]:
            return {names[t.topic_id]: sorted(t.partitions) for t in r.assignment.topic_partitions}

        first = heartbeat(c, "m1", 0, subscribed_topic_names=["literal"], subscribed_topic_regex="prefix-.*",
                          topic_partitions=[])
        assert assigned(first) == {"literal": [0, 1]}
        epoch = first.member_epoch
        deadline = time.monotonic() + DEADLINE_S
        while group_epoch(c) == epoch and time.monotonic() < deadline:
            time.sleep(0.05)
        # the resolution landed without any heartbeat: a new group epoch
        assert group_epoch(c) == epoch + 1
        owned = [{"topic_id": t.topic_id, "partitions": t.partitions} for t in first.assignment.topic_partitions]
        later = heartbeat(c, "m1", epoch, topic_partitions=owned)
        assert later.member_epoch == epoch + 1
        assert assigned(later) == {"literal": [0, 1], "prefix-a": [0, 1], "prefix-b": [0]}
        # a second member with the same, already resolved regex: a rebalance at once, no new resolution
        second = heartbeat(c, "m2", 0, subscribed_topic_regex="prefix-.*", topic_partitions=[])
        assert second.member_epoch == epoch + 2
        assert group_epoch(c) == epoch + 2


def test_confluent_consumer_gets_the_literal_topic_first(bootstrap: str) -> None:
    assignments: list[set[str]] = []
    done = threading.Event()

    def on_assign(_consumer: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
        assignments.append({tp.topic for tp in partitions})
        if {t for a in assignments for t in a} == set(TOPICS):
            done.set()

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "regex-confluent", "group.protocol": "consumer",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["^prefix-.*", "literal"], on_assign=on_assign)
        deadline = time.monotonic() + DEADLINE_S
        while not done.is_set() and time.monotonic() < deadline:
            c.poll(0.2)
        assert done.is_set(), assignments
        assert assignments[0] == {"literal"}
        assert {t for a in assignments[1:] for t in a} == {"prefix-a", "prefix-b"}
        assert {(tp.topic, tp.partition) for tp in c.assignment()} == \
            {(n, p) for n, count in TOPICS.items() for p in range(count)}
    finally:
        c.close()
