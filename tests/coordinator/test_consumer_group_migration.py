"""KIP-848's online migration with confluent-kafka against a broker subprocess: two classic consumers share a
topic; one restarts with group.protocol=consumer and the group becomes a consumer group, the classic member
carrying on through JoinGroup/SyncGroup/Heartbeat served by the consumer group; when the consumer-protocol
member leaves, the group is classic again. Every record is consumed exactly once across both switches
(each member commits every record before it polls again)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import CONSUMER_GROUP_DESCRIBE

pytestmark = pytest.mark.integration

OVERRIDES = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}
PARTITIONS = 4
DEADLINE_S = 60  # a guard against hangs, not a performance threshold


def wait_for(check, what: str, timeout: float = DEADLINE_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Worker(threading.Thread):
    """One member: each record is committed before the next poll, so a partition that moves (the move is
    served inside poll) resumes right after the last record processed."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str, seen: Counter,
                 lock: threading.Lock, strategy: str = "range") -> None:
        super().__init__(daemon=True)
        config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if protocol == "classic":
            config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                           "partition.assignment.strategy": strategy})
        self.consumer = Consumer(config)
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        # the consumer's calls block while another thread polls: its assignment is followed here
        self.partitions: set[int] = set()
        self.incremental = protocol == "consumer" or strategy == "cooperative-sticky"
        self.seen, self.lock = seen, lock
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        c = self.consumer
        while not self.stopping.is_set():
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error() is not None:
                self.errors.append(str(m.error()))
                continue
            with self.lock:
                self.seen[(m.partition(), m.offset())] += 1
            try:
                c.commit(message=m, asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(f"commit: {exc}")
        c.close()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not self.incremental:
            self.partitions = set()
        self.partitions |= {tp.partition for tp in partitions}

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.partitions -= {tp.partition for tp in partitions}

    def assigned(self) -> set[int]:
        return set(self.partitions)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_group_upgraded_then_downgraded_while_consuming(broker_factory, strategy: str) -> None:  # type: ignore[no-untyped-def]
    """`range`: eager classic members (they give up everything and rejoin); `cooperative-sticky`: they
    rejoin owning their partitions and give up only what moves."""
    broker = broker_factory(OVERRIDES)
    bootstrap, topic, group = broker.bootstrap, "migrating", "migrating-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    produced = 0

    def produce(n: int) -> None:
        nonlocal produced
        for i in range(n):
            producer.produce(topic, value=b"%d" % (produced + i), partition=(produced + i) % PARTITIONS)
        assert producer.flush(30) == 0
        produced += n

    seen: Counter = Counter()
    lock = threading.Lock()

    def consumed() -> int:
        with lock:
            return len(seen)

    def describe():  # type: ignore[no-untyped-def]
        return admin.describe_consumer_groups([group])[group].result(10)

    def stable():  # type: ignore[no-untyped-def]
        desc = describe()
        return desc if str(desc.state).endswith("STABLE") else None

    classic_a = Worker(bootstrap, group, topic, "classic", seen, lock, strategy)
    classic_b = Worker(bootstrap, group, topic, "classic", seen, lock, strategy)
    classic_a.start()
    classic_b.start()
    produce(200)
    wait_for(lambda: consumed() == produced, "the classic members consuming the first records")
    wait_for(lambda: len(classic_a.assigned()) == len(classic_b.assigned()) == 2, "two classic members of two")
    assert describe().type == ConsumerGroupType.CLASSIC

    # b restarts with the consumer protocol: the classic group becomes a consumer group
    classic_b.stop()
    modern = Worker(bootstrap, group, topic, "consumer", seen, lock)
    modern.start()
    produce(200)
    wait_for(lambda: describe().type == ConsumerGroupType.CONSUMER, "the group upgraded to a consumer group")
    wait_for(lambda: len(classic_a.assigned()) == len(modern.assigned()) == 2, "the partitions shared again")
    wait_for(lambda: consumed() == produced, "every record consumed after the upgrade")
    # a cooperative member may still be finishing its revocation: the group is Reconciling until then
    desc = wait_for(stable, "a stable group")
    assert sorted(len(m.assignment.topic_partitions) for m in desc.members) == [2, 2]
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10).valid
    assert [g.group_id for g in listed] == [group]
    with KafkaClient(bootstrap) as client:  # ConsumerGroupDescribe v1: which member speaks which protocol
        described = client.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": [group],
                                                             "include_authorized_operations": False}, version=1)
    assert sorted(m.member_type for m in described.groups[0].members) == [0, 1]  # classic, consumer

    # the consumer-protocol member leaves: only a classic member is left, the group is classic again
    modern.stop()
    produce(200)
    wait_for(lambda: describe().type == ConsumerGroupType.CLASSIC, "the group downgraded to a classic group")
    wait_for(lambda: len(classic_a.assigned()) == PARTITIONS, "the classic member with every partition")
    wait_for(lambda: consumed() == produced, "every record consumed after the downgrade")
    desc = wait_for(stable, "a stable group")
    assert len(desc.members) == 1
    assert desc.partition_assignor == strategy
    classic_a.stop()

    with lock:
        assert sum(seen.values()) == produced == 600, "a record consumed twice"
        assert len(seen) == produced
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    check.close()
    assert [tp.offset for tp in committed] == [produced // PARTITIONS] * PARTITIONS
    # a commit may cross a rejoin that moved the member's generation (a cooperative member keeps consuming
    # while it rejoins): refused as Kafka refuses it, and the next commit covers the record
    errors = classic_a.errors + classic_b.errors + modern.errors
    assert not [e for e in errors if "ILLEGAL_GENERATION" not in e and "REBALANCE_IN_PROGRESS" not in e], errors
