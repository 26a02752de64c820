"""KIP-890 part 1: a partition leader verifies with the transaction coordinator that a producer's
partition is in its transaction before appending the transaction's first batch there
(`transaction.partition.verification.enable`, Kafka's ReplicaManager and AddPartitionsToTxnManager).

Without it, a batch that reaches a partition after its transaction ended (a late retry) or one the
producer never added starts a transaction no marker will ever close: the LSO stays put and tiering
stops (the "hanging transaction").

- `VerificationGuards`: per (partition, producer id), the produces waiting for a verification, in
  request order (pipelined requests of one connection run concurrently here, where Kafka serves them
  one by one), and a guard token a transaction marker replaces: a verification answered before a
  marker landed no longer admits a batch after it (Kafka's VerificationGuard).
- `AddPartitionsToTxnManager`: asks the coordinator. Alone, or when this broker coordinates the id,
  the coordinator answers in memory; otherwise AddPartitionsToTxn v4+ with `verify_only` goes to the
  coordinator's broker, one request in flight per broker with whatever queued meanwhile batched into
  the next one.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.clients.errors import KafkaProtocolError
from tieredlog.coordinator.schema import partition_for
from tieredlog.coordinator.transaction.coordinator import TRANSACTION_STATE_TOPIC
from tieredlog.protocol.api import ADD_PARTITIONS_TO_TXN
from tieredlog.server.txn_markers import PeerServer, broker_connections
from tieredlog.server.txn_requests import FIRST_BROKER_VERSION

if TYPE_CHECKING:
    from tieredlog.coordinator.transaction.coordinator import TransactionCoordinator
    from tieredlog.server.topic_store import TopicMetadata

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass
class _Waiting:
    guard: object = field(default_factory=object)
    tail: asyncio.Future | None = None  # done once the newest produce in line appended (or gave up)


class VerificationGuards:
    """The produces of one (partition, producer id) awaiting verification, and their guard."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[TopicPartition, int], _Waiting] = {}

    def enter(self, tp: TopicPartition, producer_id: int) -> tuple[asyncio.Future | None, asyncio.Future]:
        """Take a place in line: (the previous produce's completion or None, this one's)."""
        w = self._waiting.setdefault((tp, producer_id), _Waiting())
        previous = w.tail if w.tail is not None and not w.tail.done() else None
        mine: asyncio.Future = asyncio.get_running_loop().create_future()
        w.tail = mine
        return previous, mine

    def leave(self, tp: TopicPartition, producer_id: int, mine: asyncio.Future) -> None:
        if not mine.done():
            mine.set_result(None)
        w = self._waiting.get((tp, producer_id))
        if w is not None and w.tail is mine:
            del self._waiting[(tp, producer_id)]  # nobody behind: nothing to guard any more

    def guard(self, tp: TopicPartition, producer_id: int) -> object | None:
        w = self._waiting.get((tp, producer_id))
        return None if w is None else w.guard

    def marker_written(self, tp: TopicPartition, producer_id: int) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` reached ``tp``: verifications answered before it are void."""
        w = self._waiting.get((tp, producer_id))
        if w is not None:
            w.guard = object()

    def __len__(self) -> int:
        return len(self._waiting)


@dataclass
class _Verification:
    producer_id: int
    producer_epoch: int
    partitions: set[TopicPartition]
    waiters: list[asyncio.Future] = field(default_factory=list)


def _fail(v: _Verification, code: ErrorCode) -> None:
    for fut in v.waiters:
        if not fut.done():
            fut.set_result({tp: code for tp in v.partitions})


class VerificationManagerServer(PeerServer, Protocol):
    """What asking a transaction's coordinator needs of the broker."""

    @property
    def transaction_coordinator(self) -> TransactionCoordinator | None: ...

    def get_topic(self, name: str) -> TopicMetadata | None: ...


class AddPartitionsToTxnManager:
    def __init__(self, broker: VerificationManagerServer) -> None:
        self._broker = broker
        self._connections = broker_connections(broker, "txn-verification")
        self._queued: dict[int, dict[str, _Verification]] = {}  # coordinator's broker -> transactional id -> ...
        self._senders: dict[int, asyncio.Task] = {}

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """The partitions that are not in the transaction, or could not be verified, with the error
        (Kafka's codes before the produce path translates them); empty when all are in it."""
        node, code = self._coordinator_node(transactional_id)
        if code != ErrorCode.none:
            return {tp: code for tp in partitions}
        if node is None:
            coordinator = self._broker.transaction_coordinator
            if coordinator is None:
                return {tp: ErrorCode.coordinator_not_available for tp in partitions}
            answer = coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
            return _unverified(answer)
        return await self._enqueue(node, transactional_id, producer_id, producer_epoch, partitions)

    def _coordinator_node(self, transactional_id: str) -> tuple[int | None, ErrorCode]:
        """(the coordinator's broker, or None for this one; the error when there is none)."""
        broker = self._broker
        node = broker.cluster_node
        if node is None:
            return None, ErrorCode.none
        topic = broker.get_topic(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return None, ErrorCode.coordinator_not_available  # no transaction can have started
        pm = node.metadata.partition(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, topic.partitions))
        if pm is None or pm.leader < 0:
            return None, ErrorCode.coordinator_not_available
        return (None if pm.leader == broker.node_id else pm.leader), ErrorCode.none

    async def _enqueue(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        queued = self._queued.setdefault(node, {})
        existing = queued.get(transactional_id)
        if existing is not None and (existing.producer_id, existing.producer_epoch) == (producer_id, producer_epoch):
            # the same transaction from two produces (pipelined, or two partitions): one question
            existing.partitions |= partitions
            existing.waiters.append(fut)
        else:
            if existing is not None:
                # as Kafka: the lower epoch is fenced; an equal one (another producer id) is told to retry
                if existing.producer_epoch > producer_epoch:
                    return {tp: ErrorCode.invalid_producer_epoch for tp in partitions}
                _fail(existing, ErrorCode.invalid_producer_epoch if existing.producer_epoch < producer_epoch
                      else ErrorCode.network_exception)
            queued[transactional_id] = _Verification(producer_id, producer_epoch, set(partitions), [fut])
        if node not in self._senders:
            task = asyncio.get_running_loop().create_task(self._send_loop(node), name=f"txn-verification-{node}")
            self._senders[node] = task
        answer: dict[TopicPartition, ErrorCode] = await fut
        return {tp: code for tp, code in answer.items() if tp in partitions}

    async def _send_loop(self, node: int) -> None:
        try:
            while self._queued.get(node):
                batch = self._queued.pop(node)
                try:
                    answers = await self._send(node, batch)
                except asyncio.CancelledError:  # shutting down: the waiting produces are answered
                    for v in batch.values():
                        _fail(v, ErrorCode.network_exception)
                    raise
                except Exception:  # noqa: BLE001 - every waiter must be answered
                    log.exception("AddPartitionsToTxn to broker %d failed", node)
                    answers = {tid: {tp: ErrorCode.network_exception for tp in v.partitions} for tid, v in batch.items()}
                for tid, v in batch.items():
                    answer = answers.get(tid, {})
                    for fut in v.waiters:
                        if not fut.done():
                            fut.set_result(answer)
        finally:
            del self._senders[node]

    async def _send(self, node: int, batch: dict[str, _Verification]) -> dict[str, dict[TopicPartition, ErrorCode]]:
        timeout_s = self._broker.config["request.timeout.ms"] / 1000
        transactions = []
        for tid, v in batch.items():
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(v.partitions):
                by_topic.setdefault(topic, []).append(p)
            transactions.append({"transactional_id": tid, "producer_id": v.producer_id,
                                 "producer_epoch": v.producer_epoch, "verify_only": True,
                                 "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})

        def everyone(code: ErrorCode) -> dict[str, dict[TopicPartition, ErrorCode]]:
            return {tid: {tp: code for tp in v.partitions} for tid, v in batch.items()}

        try:
            conn = await self._connections.get(node, timeout_s)
            version = conn.version_for(ADD_PARTITIONS_TO_TXN)
            if version < FIRST_BROKER_VERSION:
                raise KafkaProtocolError("no verification")
            resp = await conn.request(ADD_PARTITIONS_TO_TXN, {"transactions": transactions}, version=version,
                                      timeout_s=timeout_s)
        except KafkaProtocolError:
            # as Kafka: a coordinator that cannot verify (an older broker) lets the produce through
            log.warning("broker %d does not serve AddPartitionsToTxn v%d+; appending without verification", node,
                        FIRST_BROKER_VERSION)
            return {tid: {} for tid in batch}
        except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
            log.warning("AddPartitionsToTxn to broker %d failed: %s", node, exc)
            await self._connections.drop(node)
            return everyone(ErrorCode.network_exception)
        top = ErrorCode(resp.error_code)
        if top != ErrorCode.none:
            log.error("AddPartitionsToTxn to broker %d answered %s", node, top.name)
            # the producer must not see the inter-broker authorization failure
            return everyone(ErrorCode.invalid_txn_state if top == ErrorCode.cluster_authorization_failed else top)
        out: dict[str, dict[TopicPartition, ErrorCode]] = {}
        for r in resp.results_by_transaction:
            answer = {(t.name, p.partition_index): ErrorCode(p.partition_error_code)
                      for t in r.topic_results for p in t.results_by_partition}
            out[r.transactional_id] = _unverified(answer)
        return out

    async def close(self) -> None:
        for task in list(self._senders.values()):
            task.cancel()
        for queued in self._queued.values():
            for v in queued.values():
                _fail(v, ErrorCode.network_exception)
        self._queued.clear()
        await self._connections.close()


def _unverified(answer: dict[TopicPartition, ErrorCode]) -> dict[TopicPartition, ErrorCode]:
    # producers expect INVALID_PRODUCER_EPOCH here, as Kafka's manager answers them
    return {tp: ErrorCode.invalid_producer_epoch if code == ErrorCode.producer_fenced else code
            for tp, code in answer.items() if code != ErrorCode.none}
