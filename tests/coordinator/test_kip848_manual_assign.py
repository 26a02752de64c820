"""Offset commits of a consumer that assigned its partitions itself, with confluent-kafka's
`group.protocol=consumer`: librdkafka commits with member epoch -1 and the member id it made up. Kafka
takes such a commit while the group has no member (creating the "simple" group when there is none) and
refuses it with UNKNOWN_MEMBER_ID while the group has consumer-protocol members."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

OVERRIDES = {"offsets.topic.num.partitions": "1", "group.consumer.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):  # type: ignore[no-untyped-def]
    from broker_harness import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("kip848-assign") / "data", OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("manual", num_partitions=2, replication_factor=1)])["manual"].result(30)
        yield b.bootstrap
    finally:
        b.stop()


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})


def test_manual_assign_commit_to_a_group_without_members(bootstrap: str) -> None:
    c = consumer(bootstrap, "manual-assign")
    try:
        partitions = [TopicPartition("manual", 0, 7), TopicPartition("manual", 1, 11)]
        c.assign(partitions)
        done = c.commit(offsets=partitions, asynchronous=False)
        assert [(tp.partition, tp.offset, tp.error) for tp in done] == [(0, 7, None), (1, 11, None)]
        # the group now exists and holds the offsets; a second commit to it is taken too
        c.commit(offsets=[TopicPartition("manual", 0, 8)], asynchronous=False)
        got = c.committed([TopicPartition("manual", 0), TopicPartition("manual", 1)], timeout=10)
        assert [(tp.partition, tp.offset) for tp in got] == [(0, 8), (1, 11)]
    finally:
        c.close()


def test_manual_assign_commit_to_a_group_with_members_is_refused(bootstrap: str) -> None:
    group = "manual-with-member"
    member = consumer(bootstrap, group)
    standalone = consumer(bootstrap, group)
    try:
        member.subscribe(["manual"])
        deadline = time.monotonic() + 60
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment(), "the subscribed member got no partitions"
        standalone.assign([TopicPartition("manual", 0)])
        with pytest.raises(KafkaException) as refused:
            standalone.commit(offsets=[TopicPartition("manual", 0, 5)], asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
        got = standalone.committed([TopicPartition("manual", 0)], timeout=10)
        assert got[0].offset != 5
    finally:
        standalone.close()
        member.close()
