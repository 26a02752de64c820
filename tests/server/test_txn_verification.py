"""KIP-890 part 1 on the wire: a partition leader verifies a transaction's first batch with the
transaction coordinator (`transaction.partition.verification.enable`, on by default). A transactional
Produce to a partition the transaction never added is refused with Kafka's error for the request's
version (INVALID_TXN_STATE with "Partition was not added to the transaction" through v10,
TRANSACTION_ABORTABLE from v11), and so is a late batch of a transaction already committed: no
transaction is left open on the partition and its LSO is not held back. One broker, then two brokers
with the coordinator on the other one (AddPartitionsToTxn v5 `verify_only` between them)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from cluster_harness import member, partition_state
from helpers import wait_for
from kio.schema.errors import ErrorCode
from txn_helpers import create_topic
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import (
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    PRODUCE,
)
from tieredlog.records.record import build_batch
from tieredlog.server.txn_verification import AddPartitionsToTxnManager, VerificationGuards

pytestmark = pytest.mark.integration

SMALL = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1",
         "remote.log.storage.system.enable": "false"}


class Txn:
    """A transactional producer spoken to by hand: its id, producer id, epoch and sequences."""

    def __init__(self, coordinator: str, transactional_id: str) -> None:
        self.coordinator = coordinator
        self.id = transactional_id
        with KafkaClient(coordinator, timeout=10) as c:
            r = _retry(lambda: c.request(INIT_PRODUCER_ID, {"transactional_id": transactional_id,
                                                            "transaction_timeout": 60000}, version=4))
        assert r.error_code == ErrorCode.none, r
        self.producer_id, self.epoch = int(r.producer_id), int(r.producer_epoch)
        self.sequences: dict[tuple[str, int], int] = {}

    def add(self, topic: str, partition: int) -> None:
        with KafkaClient(self.coordinator, timeout=10) as c:
            r = _retry(lambda: c.request(ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": self.id, "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]}, version=3)
                .results_by_topic_v3_and_below[0].results_by_partition[0], code="partition_error_code")
        assert r.partition_error_code == ErrorCode.none, r

    def verify(self, topic: str, partitions: list[int], version: int) -> dict[int, ErrorCode]:
        """AddPartitionsToTxn in the brokers' form with verify_only: each partition's answer."""
        with KafkaClient(self.coordinator, timeout=10) as c:
            r = c.request(ADD_PARTITIONS_TO_TXN, {"transactions": [{
                "transactional_id": self.id, "producer_id": self.producer_id, "producer_epoch": self.epoch,
                "verify_only": True, "topics": [{"name": topic, "partitions": partitions}]}]}, version=version)
        assert r.error_code == ErrorCode.none
        return {p.partition_index: p.partition_error_code
                for p in r.results_by_transaction[0].topic_results[0].results_by_partition}

    def produce(self, leader: str, topic: str, partition: int, version: int = 9) -> Any:
        """One transactional batch of two records; the partition's Produce answer."""
        seq = self.sequences.get((topic, partition), 0)
        batch = build_batch([(None, b"v%d" % i, [], int(time.time() * 1000)) for i in range(2)],
                            producer_id=self.producer_id, producer_epoch=self.epoch, base_sequence=seq,
                            is_transactional=True)
        with KafkaClient(leader, timeout=10) as c:
            r = c.request(PRODUCE, {"transactional_id": self.id, "acks": -1, "timeout": 10000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}, version=version)
        p = r.responses[0].partition_responses[0]
        if p.error_code == ErrorCode.none:
            self.sequences[(topic, partition)] = seq + 2
        return p

    def commit(self) -> None:
        with KafkaClient(self.coordinator, timeout=10) as c:
            r = c.request(END_TXN, {"transactional_id": self.id, "producer_id": self.producer_id,
                                    "producer_epoch": self.epoch, "committed": True}, version=3)
        assert r.error_code == ErrorCode.none, r


def _retry(call: Callable[[], Any], code: str = "error_code") -> Any:
    """The coordinator answers retriable errors while __transaction_state loads."""
    retriable = {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                 ErrorCode.not_coordinator, ErrorCode.concurrent_transactions}
    deadline = time.monotonic() + 30
    while True:
        r = call()
        if getattr(r, code) not in retriable or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def offsets(leader: str, topic: str, partition: int) -> tuple[int, int]:
    """(log end offset, last stable offset) of the partition."""
    out = []
    with KafkaClient(leader, timeout=10) as c:
        for isolation in (0, 1):
            r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                "timestamp": -1}]}]}, version=4)
            out.append(int(r.topics[0].partitions[0].offset))
    return out[0], out[1]


def test_a_transactional_produce_to_a_partition_never_added_is_refused(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(SMALL)
    create_topic(b.bootstrap, "ver", partitions=2)
    t = Txn(b.bootstrap, "ver-writer")
    t.add("ver", 0)

    # the leader asks the coordinator (here: itself) before the transaction's first batch lands
    refused = t.produce(b.bootstrap, "ver", 1, version=9)
    assert (refused.error_code, refused.error_message) == (ErrorCode.invalid_txn_state,
                                                           "Partition was not added to the transaction")
    assert t.produce(b.bootstrap, "ver", 1, version=11).error_code == ErrorCode.transaction_abortable
    assert offsets(b.bootstrap, "ver", 1) == (0, 0)  # nothing appended, nothing held open
    assert t.produce(b.bootstrap, "ver", 0).error_code == ErrorCode.none
    assert t.produce(b.bootstrap, "ver", 0).error_code == ErrorCode.none  # in the transaction now: no question
    assert offsets(b.bootstrap, "ver", 0) == (4, 0)

    # the coordinator's own answers in the brokers' form: v5 knows TRANSACTION_ABORTABLE, v4 does not
    assert t.verify("ver", [0, 1], version=5) == {0: ErrorCode.none, 1: ErrorCode.transaction_abortable}
    assert t.verify("ver", [0, 1], version=4) == {0: ErrorCode.none, 1: ErrorCode.invalid_txn_state}

    t.commit()
    wait_until(lambda: offsets(b.bootstrap, "ver", 0) == (5, 5), message="the COMMIT marker written, LSO at the end")
    # a late batch of the committed transaction (a retry, say) would open a transaction nothing ends:
    # the hanging transaction KIP-890 prevents. It is refused and the LSO stays at the log end.
    late = t.produce(b.bootstrap, "ver", 0)
    assert late.error_code == ErrorCode.invalid_txn_state
    assert offsets(b.bootstrap, "ver", 0) == (5, 5)


def test_verification_off_appends_as_before(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory({**SMALL, "transaction.partition.verification.enable": "false"})
    create_topic(b.bootstrap, "nover")
    t = Txn(b.bootstrap, "nover-writer")
    assert t.produce(b.bootstrap, "nover", 0).error_code == ErrorCode.none
    assert offsets(b.bootstrap, "nover", 0) == (2, 0)  # a transaction its coordinator knows nothing of


def test_the_leader_verifies_with_a_coordinator_on_another_broker(
        broker_factory: Callable[..., BrokerProcess], zk_connect: str) -> None:  # noqa: F811
    overrides = {**SMALL, "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
                 "controlled.shutdown.enable": "false"}
    brokers = {i: broker_factory(member(zk_connect, i, overrides)) for i in (1, 2)}
    with ZkClient(zk_connect) as zk:
        wait_until(lambda: zk.get_all_broker_ids() == [1, 2], message="both brokers registered")

    def find() -> int:
        with KafkaClient(brokers[1].bootstrap, timeout=10) as c:
            r = c.request(FIND_COORDINATOR, {"key": "far-writer", "key_type": 1}, version=3)
        return int(r.node_id) if r.error_code == ErrorCode.none else -1

    wait_until(lambda: find() > 0, timeout=30, message="a transaction coordinator")
    coordinator = find()
    leader = 3 - coordinator
    create_topic(brokers[1].bootstrap, "far", assignment=[[leader], [leader]])
    wait_until(lambda: [s[0] for s in partition_state(brokers[coordinator], "far")] == [leader, leader],
               timeout=30, message="'far' led by the other broker in the coordinator's metadata")
    t = Txn(brokers[coordinator].bootstrap, "far-writer")
    t.add("far", 0)

    there = brokers[leader].bootstrap
    # the leader serves its replicas once the controller's LeaderAndIsr reached it (a client retries meanwhile)
    appended = wait_for(lambda: (r := t.produce(there, "far", 0)).error_code not in (
        ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower) and r,
        what="the leader serving 'far'", interval_s=0.2)
    assert appended.error_code == ErrorCode.none
    refused = t.produce(there, "far", 1)
    assert (refused.error_code, refused.error_message) == (ErrorCode.invalid_txn_state,
                                                           "Partition was not added to the transaction")
    t.commit()
    wait_until(lambda: offsets(there, "far", 0) == (3, 3), message="the COMMIT marker on the other broker")
    assert offsets(there, "far", 1) == (0, 0)


def test_the_brokers_form_needs_cluster_action(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory({**SMALL, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with KafkaClient(b.bootstrap, timeout=10) as c:  # User:ANONYMOUS, granted nothing
        v5 = c.request(ADD_PARTITIONS_TO_TXN, {"transactions": [{
            "transactional_id": "t", "producer_id": 1, "producer_epoch": 0, "verify_only": True,
            "topics": [{"name": "x", "partitions": [0]}]}]}, version=5)
        v3 = c.request(ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": "t", "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": "x", "partitions": [0]}]}, version=3)
    assert (v5.error_code, v5.results_by_transaction) == (ErrorCode.cluster_authorization_failed, ())
    assert v3.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
        ErrorCode.transactional_id_authorization_failed


def test_guards_keep_one_producers_produces_in_order_and_a_marker_voids_a_verification() -> None:
    async def run() -> None:
        guards = VerificationGuards()
        tp = ("t", 0)
        first_prev, first = guards.enter(tp, 7)
        second_prev, second = guards.enter(tp, 7)
        assert first_prev is None and second_prev is first  # the second waits for the first
        asked = guards.guard(tp, 7)
        guards.marker_written(tp, 7)  # the transaction ended while the coordinator answered
        assert guards.guard(tp, 7) is not asked
        assert guards.guard(tp, 8) is None  # another producer's line is its own
        guards.leave(tp, 7, first)
        assert second_prev.done() and len(guards) == 1
        guards.leave(tp, 7, second)
        assert len(guards) == 0 and guards.guard(tp, 7) is None

    asyncio.run(run())


def test_the_manager_batches_per_coordinator_broker_one_request_in_flight() -> None:
    class Recording(AddPartitionsToTxnManager):
        def __init__(self) -> None:
            super().__init__(None)  # type: ignore[arg-type]  # _send is replaced: no broker is asked
            self.sent: list[dict[str, tuple[int, int, set]]] = []
            self.release = asyncio.Event()

        async def _send(self, node: int, batch: dict) -> dict:
            self.sent.append({tid: (v.producer_id, v.producer_epoch, set(v.partitions)) for tid, v in batch.items()})
            await self.release.wait()
            return {tid: {tp: ErrorCode.transaction_abortable for tp in v.partitions if tp[1] == 9}
                    for tid, v in batch.items()}

    async def run() -> None:
        m = Recording()
        first = asyncio.ensure_future(m._enqueue(2, "a", 1, 0, {("t", 0)}))
        await asyncio.sleep(0)  # in flight now
        same = [asyncio.ensure_future(m._enqueue(2, "a", 1, 0, {("t", p)})) for p in (1, 9)]
        fenced = asyncio.ensure_future(m._enqueue(2, "b", 5, 3, {("t", 2)}))
        await asyncio.sleep(0)
        newer = asyncio.ensure_future(m._enqueue(2, "b", 5, 4, {("t", 3)}))
        older = await m._enqueue(2, "b", 5, 2, {("t", 4)})
        assert older == {("t", 4): ErrorCode.invalid_producer_epoch}  # answered at once, never sent
        assert await fenced == {("t", 2): ErrorCode.invalid_producer_epoch}
        m.release.set()
        assert await first == {} and [await f for f in same] == [{}, {("t", 9): ErrorCode.transaction_abortable}]
        assert await newer == {}
        # one request in flight; what queued meanwhile went in the next, the same transaction's merged
        assert m.sent == [{"a": (1, 0, {("t", 0)})}, {"a": (1, 0, {("t", 1), ("t", 9)}), "b": (5, 4, {("t", 3)})}]

    asyncio.run(run())
