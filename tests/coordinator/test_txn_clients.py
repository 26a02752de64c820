"""Transactions end to end on one broker process, with real clients: confluent-kafka's transactional
producer and read_committed consumer, aiokafka's and kafka-python's transactional producers, a
consume-transform-produce loop killed with SIGKILL mid-transaction, zombie fencing, the coordinator
aborting a transaction past its timeout, and a broker restarted with a transaction open."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from broker_harness import REPO, BrokerProcess
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import DESCRIBE_TRANSACTIONS, LIST_OFFSETS, LIST_TRANSACTIONS

pytestmark = pytest.mark.integration

# a small __transaction_state; timed-out transactions found within a fraction of a second
OVERRIDES = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
             "group.initial.rebalance.delay.ms": "0", "remote.log.storage.system.enable": "false"}


def create_topic(b: BrokerProcess, name: str, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs or {})])[name].result(30)


def read_values(b: BrokerProcess, topic: str, isolation: str, expect: int | None = None,
                idle_s: float = 2.0) -> list[str]:
    """Every value of partition 0 from offset 0: until ``expect`` values came, or nothing new for ``idle_s``."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "reader", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.assign([CkTopicPartition(topic, 0, 0)])
    out: list[str] = []
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s and (expect is None or len(out) < expect):
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error() is None:
                    out.append(m.value().decode())
                    last = time.monotonic()
    finally:
        c.close()
    return out


def last_stable_offset(b: BrokerProcess, topic: str) -> int:
    """ListOffsets latest with isolation read_committed: the partition's LSO."""
    with KafkaClient(b.bootstrap, timeout=10) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
            version=4)
    return r.topics[0].partitions[0].offset


def describe(b: BrokerProcess, transactional_id: str):  # noqa: ANN201 - kio's TransactionState
    with KafkaClient(b.bootstrap, timeout=10) as c:
        return c.request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]}, version=0).transaction_states[0]


def txn_producer(b: BrokerProcess, transactional_id: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": transactional_id, "linger.ms": 2, **extra})
    p.init_transactions(30)
    return p


def test_committed_records_are_visible_aborted_never_across_segment_rolls(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b, "ledger", {"segment.bytes": "2048"})
    p = txn_producer(b, "ledger-writer")
    committed, aborted = [], []
    for t in range(12):
        p.begin_transaction()
        values = [f"t{t}-r{i}-" + "x" * 80 for i in range(15)]  # about one transaction per segment
        for v in values:
            p.produce("ledger", value=v.encode())
        if t % 3 == 1:
            p.flush(30)  # in the log before the abort: only then is there anything to hide
            p.abort_transaction(30)
            aborted += values
        else:
            p.commit_transaction(30)
            committed += values
    plain = Producer({"bootstrap.servers": b.bootstrap})
    plain.produce("ledger", value=b"tail")  # outside any transaction, after them
    plain.flush(30)
    committed.append("tail")

    assert read_values(b, "ledger", "read_committed", expect=len(committed)) == committed
    everything = read_values(b, "ledger", "read_uncommitted", expect=len(committed) + len(aborted))
    assert sorted(everything) == sorted(committed + aborted)
    segments = list((b.data_dir / "ledger-0").glob("*.log"))
    assert len(segments) > 3, "the transactions span several segments"
    # the aborted ranges are in the transaction indexes of the segments that hold their markers
    assert sum(f.stat().st_size for f in (b.data_dir / "ledger-0").glob("*.txnindex")) == 4 * 34
    assert last_stable_offset(b, "ledger") == len(committed) + len(aborted) + 12  # one marker per transaction


def test_a_second_producer_with_the_same_id_fences_the_first(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b, "fenced")
    zombie = txn_producer(b, "shared-id")
    zombie.begin_transaction()
    zombie.produce("fenced", value=b"zombie")
    zombie.flush(30)
    successor = txn_producer(b, "shared-id")  # aborts the zombie's open transaction first
    successor.begin_transaction()
    successor.produce("fenced", value=b"successor")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as err:
        zombie.produce("fenced", value=b"late")
        zombie.commit_transaction(30)
    assert err.value.args[0].fatal(), err.value.args[0]
    assert read_values(b, "fenced", "read_committed", expect=1) == ["successor"]
    state = describe(b, "shared-id")
    assert (state.error_code, state.transaction_state) == (0, "CompleteCommit")


def test_the_coordinator_aborts_a_transaction_open_past_its_timeout(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b, "slow")
    p = txn_producer(b, "forgetful", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    for i in range(5):
        p.produce("slow", value=b"open-%d" % i)
    p.flush(30)
    assert last_stable_offset(b, "slow") == 0  # the open transaction holds read_committed back
    wait_for(lambda: describe(b, "forgetful").transaction_state == "CompleteAbort", "the timed-out transaction aborted",
             timeout_s=20)
    assert last_stable_offset(b, "slow") == 6  # five records and the abort marker
    plain = Producer({"bootstrap.servers": b.bootstrap})
    plain.produce("slow", value=b"after")
    plain.flush(30)
    assert read_values(b, "slow", "read_committed", expect=1) == ["after"]
    with pytest.raises(KafkaException):
        p.commit_transaction(30)  # its epoch was bumped by the abort: fenced
    with KafkaClient(b.bootstrap, timeout=10) as c:
        listed = c.request(LIST_TRANSACTIONS, {"state_filters": ["CompleteAbort"], "producer_id_filters": []},
                           version=0)
    assert [t.transactional_id for t in listed.transaction_states] == ["forgetful"]


def test_a_broker_restarted_with_a_transaction_open_keeps_its_state_and_lso(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b, "durable")
    plain = Producer({"bootstrap.servers": b.bootstrap})
    plain.produce("durable", value=b"before")
    plain.flush(30)
    p = txn_producer(b, "survivor")
    p.begin_transaction()
    for i in range(3):
        p.produce("durable", value=b"in-txn-%d" % i)
    p.flush(30)
    before = describe(b, "survivor")
    assert before.transaction_state == "Ongoing" and [t.topic for t in before.topics] == ["durable"]

    b.restart()
    after = describe(b, "survivor")
    assert (after.transaction_state, after.producer_id, after.producer_epoch) == \
        ("Ongoing", before.producer_id, before.producer_epoch)
    assert last_stable_offset(b, "durable") == 1  # the open transaction starts at offset 1
    assert read_values(b, "durable", "read_committed", idle_s=1.0) == ["before"]
    p.commit_transaction(60)  # the same producer finishes it against the restarted broker
    assert read_values(b, "durable", "read_committed", expect=4) == ["before", "in-txn-0", "in-txn-1", "in-txn-2"]


def test_consume_transform_produce_killed_mid_transaction_outputs_each_input_once(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b, "input")
    create_topic(b, "output")
    total = 60
    src = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(total):
        src.produce("input", value=b"%d" % i)
    src.flush(30)
    app = [sys.executable, str(REPO / "tests" / "harness" / "txn_pipeline.py"), b.bootstrap, "input", "output", "etl-app", "etl",
           str(total)]
    crashing = subprocess.Popen([*app, "3"], stdout=subprocess.PIPE, text=True)
    try:
        assert crashing.stdout is not None
        assert crashing.stdout.readline().strip() == "CRASHPOINT"
    finally:
        crashing.kill()  # SIGKILL, with a transaction open and its outputs in the log
        crashing.wait()
    assert len(read_values(b, "output", "read_uncommitted", idle_s=1.0)) > 3 * 7, "the open transaction's outputs"
    done = subprocess.run(app, capture_output=True, text=True, timeout=180)
    assert done.stdout.split()[:2] == ["DONE", str(total)], done.stdout + done.stderr
    outputs = read_values(b, "output", "read_committed", expect=total)
    assert sorted(outputs) == sorted(f"out-{i}" for i in range(total))  # each exactly once


def test_kafka_python_and_aiokafka_transactional_producers(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b, "pythonic")
    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="kafka-python-txn")
    kp.init_transactions()
    kp.begin_transaction()
    kp.send("pythonic", b"kp-committed")
    kp.commit_transaction()
    kp.begin_transaction()
    kp.send("pythonic", b"kp-aborted")
    kp.flush()
    kp.abort_transaction()
    kp.close()

    async def with_aiokafka() -> None:
        from aiokafka import AIOKafkaProducer

        ap = AIOKafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="aiokafka-txn")
        await ap.start()
        try:
            async with ap.transaction():
                await ap.send_and_wait("pythonic", b"aio-committed")
            await ap.begin_transaction()
            await ap.send_and_wait("pythonic", b"aio-aborted")
            await ap.abort_transaction()
        finally:
            await ap.stop()

    asyncio.run(with_aiokafka())
    assert read_values(b, "pythonic", "read_committed", expect=2) == ["kp-committed", "aio-committed"]
    assert sorted(read_values(b, "pythonic", "read_uncommitted", expect=4)) == \
        ["aio-aborted", "aio-committed", "kp-aborted", "kp-committed"]


def test_transaction_state_lives_in_its_internal_topic(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(OVERRIDES)
    create_topic(b, "audited")
    p = txn_producer(b, "audited-writer")
    p.begin_transaction()
    p.produce("audited", value=b"x")
    p.commit_transaction(30)
    dirs = sorted(d.name for d in Path(b.data_dir).glob("__transaction_state-*"))
    assert dirs == ["__transaction_state-0", "__transaction_state-1", "__transaction_state-2"]
    # clients may not write to it
    failures: list[object] = []
    rogue = Producer({"bootstrap.servers": b.bootstrap, "message.send.max.retries": 0})
    rogue.produce("__transaction_state", value=b"forged", on_delivery=lambda err, msg: failures.append(err))
    rogue.flush(10)
    assert len(failures) == 1 and failures[0] is not None
