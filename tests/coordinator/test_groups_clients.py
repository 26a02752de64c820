"""Consumer groups with real clients (confluent-kafka, kafka-python, aiokafka) against a broker subprocess."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
}
# A guard against hangs, not a performance threshold.
DEADLINE_S = 60


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(30)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> set[tuple[int, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap})
    sent = set()
    for p in range(partitions):
        for i in range(per_partition):
            value = f"{tag}-{p}-{i}".encode()
            producer.produce(topic, value=value, partition=p)
            sent.add((p, value))
    assert producer.flush(30) == 0
    return sent


def confluent_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "max.poll.interval.ms": 20000,
        "partition.assignment.strategy": "range",
    })
    c.subscribe([topic])
    return c


class Member:
    """One consumer of the group; commits every batch it processes before polling again."""

    def __init__(self, consumer: Consumer, seen: Counter):
        self.consumer = consumer
        self.seen = seen

    def step(self) -> None:
        msgs = self.consumer.consume(num_messages=50, timeout=0.1)
        good = [m for m in msgs if m.error() is None]
        for m in good:
            self.seen[(m.partition(), m.value())] += 1
        if good:
            last: dict[int, int] = {}
            for m in good:
                last[m.partition()] = max(last.get(m.partition(), -1), m.offset())
            topic = good[0].topic()
            self.consumer.commit(
                offsets=[TopicPartition(topic, p, o + 1) for p, o in last.items()], asynchronous=False
            )

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(members: list[Member], condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}: {[sorted(m.owned()) for m in members]}"
        for m in members:
            m.step()


def each_partition_owned_once(members: list[Member], partitions: int) -> bool:
    owned = [m.owned() for m in members]
    if any(not o for o in owned):
        return False
    flat = [p for o in owned for p in o]
    return sorted(flat) == list(range(partitions))


def test_confluent_group_of_three_rebalances_on_join_and_leave(broker_factory):
    b = broker_factory(OVERRIDES)
    topic, group, partitions = "orders", "g-three", 6
    create_topic(b.bootstrap, topic, partitions)
    sent = produce(b.bootstrap, topic, partitions, 30, "a")
    seen: Counter = Counter()

    first = Member(confluent_consumer(b.bootstrap, group, topic), seen)
    poll_until([first], lambda: first.owned() == set(range(partitions)), "the first member to own everything")
    poll_until([first], lambda: len(seen) >= 40, "some records consumed by the first member")

    members = [first] + [Member(confluent_consumer(b.bootstrap, group, topic), seen) for _ in range(2)]
    poll_until(members, lambda: each_partition_owned_once(members, partitions), "a 3-way split after joins")
    assert [len(m.owned()) for m in members] == [2, 2, 2]

    sent |= produce(b.bootstrap, topic, partitions, 30, "b")
    leaving = members.pop()
    poll_until(members + [leaving], lambda: len(seen) >= 200, "progress before a member leaves")
    leaving.consumer.close()  # LeaveGroup: the others rebalance at once
    poll_until(members, lambda: each_partition_owned_once(members, partitions), "a 2-way split after the leave")
    poll_until(members, lambda: len(seen) == len(sent), "every record consumed")
    assert set(seen) == sent
    duplicates = {k: n for k, n in seen.items() if n != 1}
    assert duplicates == {}, f"consumed more than once: {list(duplicates)[:5]}"

    committed = members[0].consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    assert [tp.offset for tp in committed] == [60] * partitions
    for m in members:
        m.consumer.close()


def test_committed_offsets_survive_a_broker_restart(broker_factory):
    b = broker_factory(OVERRIDES)
    topic, group = "resume", "g-resume"
    create_topic(b.bootstrap, topic, 2)
    sent = produce(b.bootstrap, topic, 2, 20, "r")
    seen: Counter = Counter()
    member = Member(confluent_consumer(b.bootstrap, group, topic), seen)
    poll_until([member], lambda: len(seen) >= 15, "the first records")
    before = member.consumer.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
    member.consumer.close()
    first_life = set(seen)

    b.restart()

    consumer = confluent_consumer(b.bootstrap, group, topic)
    after = consumer.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
    assert [tp.offset for tp in after] == [tp.offset for tp in before]
    # a partition nothing was read from yet has no commit (OFFSET_INVALID, -1001)
    assert sum(max(tp.offset, 0) for tp in after) == len(first_life)
    member = Member(consumer, seen)
    poll_until([member], lambda: len(seen) == len(sent), "the rest after the restart")
    assert set(seen) == sent and max(seen.values()) == 1  # resumed exactly where it committed
    consumer.close()


def test_kafka_python_group_consumes_and_commits(broker_factory):
    """kafka-python members join, consume, commit, leave, and a later member resumes from the commits.

    The members run one after the other. With two kafka-python 3.0.12 consumers polling at once on a
    loaded 2-core machine, one of them now and then hangs inside the client itself (its poll thread
    waits forever on its own network thread while that thread idles in select; seen with py-spy), so
    concurrent rebalancing is proven with confluent-kafka above and aiokafka below instead.
    """
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    b = broker_factory(OVERRIDES)
    topic, group = "kp-topic", "kp-group"
    create_topic(b.bootstrap, topic, 4)

    def produce_range(lo: int, hi: int) -> None:
        producer = KafkaProducer(bootstrap_servers=b.bootstrap)
        for i in range(lo, hi):
            producer.send(topic, value=f"kp-{i}".encode(), partition=i % 4)
        producer.flush(30)
        producer.close()

    def member() -> KafkaConsumer:
        return KafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300)

    def consume(c: KafkaConsumer, want: int) -> Counter:
        values: Counter = Counter()
        deadline = time.monotonic() + DEADLINE_S  # a guard against hangs, not a threshold
        while sum(values.values()) < want:
            assert time.monotonic() < deadline, f"kafka-python consumed {sum(values.values())} of {want}"
            batch = c.poll(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    values[r.value] += 1
            if batch:
                c.commit()
        return values

    produce_range(0, 40)
    first = member()
    try:
        seen = consume(first, 40)
        assert set(seen) == {f"kp-{i}".encode() for i in range(40)} and max(seen.values()) == 1
        assert sorted(p.partition for p in first.assignment()) == [0, 1, 2, 3]
        assert {p: first.committed(KTP(topic, p)) for p in range(4)} == {p: 10 for p in range(4)}
    finally:
        first.close()  # LeaveGroup

    produce_range(40, 48)
    second = member()
    try:
        seen = consume(second, 8)
        # resumed from the first member's commits: only the new records, each once
        assert set(seen) == {f"kp-{i}".encode() for i in range(40, 48)} and max(seen.values()) == 1
        assert {p: second.committed(KTP(topic, p)) for p in range(4)} == {p: 12 for p in range(4)}
    finally:
        second.close()


def test_aiokafka_group_consumes_and_commits(broker_factory):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    b = broker_factory(OVERRIDES)
    topic, group = "aio-topic", "aio-group"
    create_topic(b.bootstrap, topic, 3)

    async def main() -> tuple[Counter, dict[int, int]]:
        producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap)
        await producer.start()
        for i in range(30):
            await producer.send_and_wait(topic, f"aio-{i}".encode(), partition=i % 3)
        await producer.stop()

        consumers = [
            AIOKafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300)
            for _ in range(2)
        ]
        for c in consumers:
            await c.start()
        values: Counter = Counter()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        try:
            while sum(values.values()) < 30 or sum(len(c.assignment()) for c in consumers) != 3 \
                    or any(not c.assignment() for c in consumers):
                assert loop.time() < deadline, f"aiokafka consumed {sum(values.values())}"
                for c in consumers:
                    batch = await c.getmany(timeout_ms=100)
                    for records in batch.values():
                        for r in records:
                            values[r.value] += 1
                    if batch:
                        await c.commit()
            committed = {p: await consumers[0].committed(ATP(topic, p)) for p in range(3)}
        finally:
            for c in consumers:
                await c.stop()
        return values, committed

    values, committed = asyncio.run(main())
    assert set(values) == {f"aio-{i}".encode() for i in range(30)} and max(values.values()) == 1
    assert committed == {p: 10 for p in range(3)}


def test_admin_client_lists_describes_and_deletes_groups(broker_factory):
    b = broker_factory(OVERRIDES)
    topic = "admin-topic"
    create_topic(b.bootstrap, topic, 2)
    produce(b.bootstrap, topic, 2, 5, "x")
    seen: Counter = Counter()
    member = Member(confluent_consumer(b.bootstrap, "admin-live", topic), seen)
    poll_until([member], lambda: len(seen) == 10, "records for the admin test")

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    listed = admin.list_consumer_groups().result(30)
    states = {g.group_id: g.state.name for g in listed.valid}
    assert states.get("admin-live") == "STABLE"
    desc = admin.describe_consumer_groups(["admin-live"])["admin-live"].result(30)
    assert len(desc.members) == 1 and {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1}

    with pytest.raises(KafkaException) as err:
        admin.delete_consumer_groups(["admin-live"])["admin-live"].result(30)
    assert "NON_EMPTY_GROUP" in str(err.value)
    member.consumer.close()
    admin.delete_consumer_groups(["admin-live"])["admin-live"].result(30)
    assert "admin-live" not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}


class Callbacks:
    """Counts the rebalance callbacks librdkafka runs on one consumer."""

    def __init__(self) -> None:
        self.assigned = 0
        self.revoked = 0

    def on_assign(self, consumer, partitions) -> None:
        self.assigned += 1

    def on_revoke(self, consumer, partitions) -> None:
        self.revoked += 1


def static_consumer(bootstrap: str, group: str, topic: str, instance: str, callbacks: Callbacks) -> Consumer:
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.instance.id": instance,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "max.poll.interval.ms": 20000,
        "partition.assignment.strategy": "range",
    })
    c.subscribe([topic], on_assign=callbacks.on_assign, on_revoke=callbacks.on_revoke)
    return c


def test_static_member_restarted_within_its_session_keeps_its_partitions(broker_factory):
    b = broker_factory(OVERRIDES)
    topic, group, partitions = "static-topic", "g-static", 4
    create_topic(b.bootstrap, topic, partitions)
    produce(b.bootstrap, topic, partitions, 5, "s")
    seen: Counter = Counter()
    calls = {"a": Callbacks(), "b": Callbacks()}
    a = Member(static_consumer(b.bootstrap, group, topic, "a", calls["a"]), seen)
    poll_until([a], lambda: a.owned() == set(range(partitions)), "the first static member to own everything")
    first_b = Member(static_consumer(b.bootstrap, group, topic, "b", calls["b"]), seen)
    poll_until([a, first_b], lambda: each_partition_owned_once([a, first_b], partitions), "a 2-way split")
    a_owned, b_owned = a.owned(), first_b.owned()
    a_calls = (calls["a"].assigned, calls["a"].revoked)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    before = admin.describe_consumer_groups([group])[group].result(30)
    old_ids = {m.group_instance_id: m.member_id for m in before.members}
    assert set(old_ids) == {"a", "b"}

    # A static member sends no LeaveGroup on close: the broker keeps its place for session.timeout.ms.
    first_b.consumer.close()
    restarted_calls = Callbacks()
    restarted = Member(static_consumer(b.bootstrap, group, topic, "b", restarted_calls), seen)
    poll_until([a, restarted], lambda: restarted.owned() == b_owned, "the restarted member's old partitions")
    # a few heartbeats more: a rebalance, had one started, would reach the other member with them
    end = time.monotonic() + 2
    while time.monotonic() < end:
        a.step()
        restarted.step()
    assert a.owned() == a_owned and (calls["a"].assigned, calls["a"].revoked) == a_calls
    assert restarted.owned() == b_owned and (restarted_calls.assigned, restarted_calls.revoked) == (1, 0)

    after = admin.describe_consumer_groups([group])[group].result(30)
    new_ids = {m.group_instance_id: m.member_id for m in after.members}
    assert after.state.name == "STABLE" and set(new_ids) == {"a", "b"}
    assert new_ids["a"] == old_ids["a"] and new_ids["b"] != old_ids["b"]
    for m in (a, restarted):
        m.consumer.close()


def test_aiokafka_static_member_restarted_keeps_its_partitions(broker_factory):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener

    b = broker_factory(OVERRIDES)
    topic, group, partitions = "aio-static", "aio-static-group", 4
    create_topic(b.bootstrap, topic, partitions)

    class Listener(ConsumerRebalanceListener):
        def __init__(self) -> None:
            self.assigned = self.revoked = 0

        async def on_partitions_revoked(self, revoked) -> None:
            self.revoked += 1

        async def on_partitions_assigned(self, assigned) -> None:
            self.assigned += 1

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def member(instance: str, listener: Listener) -> AIOKafkaConsumer:
            c = AIOKafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, group_instance_id=instance,
                                 session_timeout_ms=6000, heartbeat_interval_ms=300, enable_auto_commit=False)
            c.subscribe([topic], listener=listener)
            await c.start()
            return c

        async def until(condition, consumers, what: str) -> None:
            deadline = loop.time() + DEADLINE_S  # a guard against hangs, not a threshold
            while not condition():
                assert loop.time() < deadline, f"gave up waiting for {what}"
                for c in consumers:
                    await c.getmany(timeout_ms=100)

        def split(*consumers: AIOKafkaConsumer) -> bool:
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))

        la, lb = Listener(), Listener()
        a, first_b = await member("a", la), await member("b", lb)
        # aiokafka calls on_partitions_revoked before every join, so equal counts mean no rebalance is half done
        def settled() -> bool:
            return la.assigned == la.revoked and lb.assigned == lb.revoked

        await until(lambda: split(a, first_b) and settled(), [a, first_b], "a settled 2-way split")
        a_owned, b_owned = a.assignment(), first_b.assignment()
        a_calls = (la.assigned, la.revoked)
        await first_b.stop()  # a static member: no LeaveGroup
        lr = Listener()
        restarted = await member("b", lr)
        try:
            await until(lambda: restarted.assignment() == b_owned, [a, restarted], "the restarted member's partitions")
            end = loop.time() + 2  # a few heartbeats more: a rebalance would reach the other member with them
            while loop.time() < end:
                for c in (a, restarted):
                    await c.getmany(timeout_ms=100)
            assert a.assignment() == a_owned and (la.assigned, la.revoked) == a_calls
            assert restarted.assignment() == b_owned and lr.assigned == 1
        finally:
            for c in (a, restarted):
                await c.stop()

    asyncio.run(main())
