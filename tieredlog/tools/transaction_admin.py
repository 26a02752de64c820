"""What `tieredlog transactions` asks of a cluster, the way Kafka's Admin client asks it (KIP-664):
describeProducers, listTransactions, describeTransactions and abortTransaction, over the blocking
client of tieredlog.clients.blocking, so it works against any Kafka-compatible cluster.

Routing as Kafka's admin handlers do it:

- DescribeProducers (61) goes to each partition's leader from Metadata, or to one named broker (which
  answers from its own replica, follower or not);
- ListTransactions (66) goes to every broker Metadata lists: each one's transaction coordinator
  answers for the transactional ids it owns;
- DescribeTransactions (65) goes to each transactional id's coordinator, found with FindCoordinator
  (key type TRANSACTION, batched from v4);
- abortTransaction is a WriteTxnMarkers (27, v1+) with one ABORT marker, sent to the partition's
  leader as if from the transaction's coordinator.

Errors Kafka's handlers retry (a leader or a coordinator moving, a coordinator still loading) are
retried here too, for up to ``retry_for_s``; the others end the call with an AdminApiError.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient, KafkaProtocolError
from tieredlog.clients.node_clients import BlockingNodeClients
from tieredlog.clients.retry import retry_until
from tieredlog.clients.routing import COORDINATOR_RETRIABLE, CoordinatorType, find_coordinators
from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import (
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    FIND_COORDINATOR,
    LIST_TRANSACTIONS,
    WRITE_TXN_MARKERS,
    api_name,
)
from tieredlog.protocol.codec import encode_request
from tieredlog.tools.cluster_admin import ClusterView, Node, describe_cluster, exception_message
from tieredlog.tools.command_config import ClientSettings
from tieredlog.tools.describe_transactions_wire import decode_describe_transactions

T = TypeVar("T")

RETRY_FOR_S = 30.0
RETRY_BACKOFF_S = 0.2
# Kafka's WriteTxnMarkers v0 is the same request as v1 but kio has no v0 schema: v1 is the floor.
WRITE_TXN_MARKERS_MIN_VERSION = 1

# What Kafka's admin handlers answer by looking again (the leader or coordinator moved, or is loading)
RETRIABLE = COORDINATOR_RETRIABLE | {
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.network_exception,
}


class TransactionState(str, enum.Enum):
    """Kafka's org.apache.kafka.clients.admin.TransactionState: the names the coordinator reports."""

    ONGOING = "Ongoing"
    PREPARE_ABORT = "PrepareAbort"
    PREPARE_COMMIT = "PrepareCommit"
    COMPLETE_ABORT = "CompleteAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    EMPTY = "Empty"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    UNKNOWN = "Unknown"

    @classmethod
    def parse(cls, name: str) -> "TransactionState":
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN  # a state newer than this tool

    def __str__(self) -> str:
        return self.value


class AdminApiError(Exception):
    """A request the cluster refused: Kafka's ApiException of ``code``, with the broker's message or
    the error's own description."""

    def __init__(self, code: ErrorCode, message: str | None = None, *, retriable: bool | None = None) -> None:
        super().__init__(exception_message(code, message))
        self.code = code
        self.retriable = code in RETRIABLE if retriable is None else retriable


@dataclass(frozen=True, slots=True)
class ProducerState:
    """Kafka's admin ProducerState: -1 coordinator epoch and start offset read as absent."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    current_transaction_start_offset: int | None

    @classmethod
    def from_wire(cls, s: Any) -> "ProducerState":
        return cls(int(s.producer_id), int(s.producer_epoch), int(s.last_sequence), int(s.last_timestamp),
                   None if s.coordinator_epoch < 0 else int(s.coordinator_epoch),
                   None if s.current_txn_start_offset < 0 else int(s.current_txn_start_offset))


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: TransactionState


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator_id: int
    state: TransactionState
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class AbortTransactionSpec:
    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __str__(self) -> str:  # Kafka's AbortTransactionSpec.toString
        return (f"AbortTransactionSpec(topicPartition={self.topic_partition}, producerId={self.producer_id}, "
                f"producerEpoch={self.producer_epoch}, coordinatorEpoch={self.coordinator_epoch})")


@dataclass(frozen=True, slots=True)
class ListTransactionsFilter:
    """ListTransactions' filters (Kafka's ListTransactionsOptions): empty or -1 means any."""

    states: tuple[TransactionState, ...] = ()
    producer_ids: tuple[int, ...] = ()
    duration_ms: int = -1  # KIP-994, ListTransactions v1
    transactional_id_pattern: str | None = None  # KIP-1152, ListTransactions v2

    @property
    def min_version(self) -> int:
        if self.transactional_id_pattern:
            return 2
        return 1 if self.duration_ms >= 0 else 0


class Admin(Protocol):
    """The calls the transactions tool makes (TransactionsAdmin; tests give their own answers)."""

    def cluster(self, topics: Iterable[str] | None = None) -> ClusterView: ...

    def describe_producers(self, partitions: Iterable[TopicPartition],
                           broker_id: int | None = None) -> dict[TopicPartition, list[ProducerState]]: ...

    def list_transactions(self, filters: ListTransactionsFilter) -> dict[int, list[TransactionListing] | AdminApiError]: ...

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription | AdminApiError]: ...

    def abort_transaction(self, spec: AbortTransactionSpec) -> None: ...


class TransactionsAdmin:
    """The real Admin: one connection to the bootstrap broker (opened on first use) and one to each
    broker a request is routed to."""

    def __init__(self, bootstrap: str, *, client_id: str = "tieredlog-transactions", timeout_s: float = 30.0,
                 retry_for_s: float = RETRY_FOR_S, settings: ClientSettings | None = None) -> None:
        self.bootstrap = bootstrap
        self.settings = settings or ClientSettings()  # --command-config: TLS and SASL of every connection
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self._bootstrap: KafkaClient | None = None
        self._nodes: dict[int, Node] = {}
        self._clients = BlockingNodeClients(self._node_client)
        self._correlation = 0

    def __enter__(self) -> "TransactionsAdmin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._bootstrap is not None:
            self._bootstrap.close()
        self._bootstrap = None
        self._clients.close()

    # ---- connections --------------------------------------------------------------------------------

    def _any(self) -> KafkaClient:
        if self._bootstrap is None:
            self._bootstrap = self.settings.client(self.bootstrap, self.client_id, self.timeout_s).connect()
        return self._bootstrap

    def _client(self, node_id: int) -> KafkaClient:
        return self._clients.get(node_id)

    def _node_client(self, node_id: int) -> KafkaClient:
        node = self._nodes.get(node_id)
        if node is None:
            self.cluster([])
            node = self._nodes.get(node_id)
        if node is None:
            raise AdminApiError(ErrorCode.broker_not_available, f"Broker {node_id} is not in the cluster")
        return self.settings.client(node.address, self.client_id, self.timeout_s)

    def _version(self, client: KafkaClient, api_key: int, who: str, minimum: int = 0) -> int:
        """The newest version of ``api_key`` both sides speak; UNSUPPORTED_VERSION when there is none from
        ``minimum`` up (Kafka's UnsupportedVersionException)."""
        try:
            version = client.version_for(api_key)
        except KafkaProtocolError:
            version = -1
        if version < minimum:
            needs = f" v{minimum} or later" if minimum else ""
            raise AdminApiError(ErrorCode.unsupported_version, f"{who} does not serve {api_name(api_key)}{needs}",
                                retriable=False)
        return version

    def _forget(self) -> None:
        """After a broken connection: reconnect on the next attempt."""
        self.close()

    def _retrying(self, attempt: Callable[[], T]) -> T:
        def once() -> T:
            try:
                return attempt()
            except OSError as exc:  # ConnectionError and socket timeouts included
                self._forget()
                raise AdminApiError(ErrorCode.network_exception, str(exc)) from exc

        try:
            return retry_until(once, timeout_s=self.retry_for_s, backoff_s=RETRY_BACKOFF_S,
                               retriable=lambda exc: isinstance(exc, AdminApiError) and exc.retriable)
        except AdminApiError as exc:
            if not exc.retriable:
                raise
            raise AdminApiError(exc.code, f"{exc} (still so after {self.retry_for_s:g} s)", retriable=False) from None

    def cluster(self, topics: Iterable[str] | None = None) -> ClusterView:
        view = describe_cluster(self._any(), topics)
        self._nodes.update(view.brokers)
        return view

    # ---- DescribeProducers ----------------------------------------------------------------------------

    def _leader_of(self, tp: TopicPartition, view: ClusterView) -> int:
        t = view.topics.get(tp.topic)
        if t is None or t.error_code == ErrorCode.unknown_topic_or_partition:
            raise AdminApiError(ErrorCode.unknown_topic_or_partition, f"Topic {tp.topic} does not exist",
                                retriable=False)
        if t.error_code != ErrorCode.none:
            raise AdminApiError(t.error_code)
        p = next((p for p in t.partitions if p.partition == tp.partition), None)
        if p is None:
            raise AdminApiError(ErrorCode.unknown_topic_or_partition, f"Partition {tp} does not exist",
                                retriable=False)
        if p.leader < 0 or p.leader not in view.brokers:
            raise AdminApiError(ErrorCode.leader_not_available, f"Partition {tp} has no leader")
        return p.leader

    def describe_producers(self, partitions: Iterable[TopicPartition],
                           broker_id: int | None = None) -> dict[TopicPartition, list[ProducerState]]:
        wanted = list(dict.fromkeys(partitions))
        found: dict[TopicPartition, list[ProducerState]] = {}

        def attempt() -> dict[TopicPartition, list[ProducerState]]:
            pending = [tp for tp in wanted if tp not in found]
            view = self.cluster(sorted({tp.topic for tp in pending}))
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                by_node.setdefault(broker_id if broker_id is not None else self._leader_of(tp, view), []).append(tp)
            moved: list[TopicPartition] = []
            for node_id, tps in sorted(by_node.items()):
                topics: dict[str, list[int]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(tp.partition)
                answer = self._client(node_id).request(DESCRIBE_PRODUCERS, {"topics": [
                    {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
                for t in answer.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code == ErrorCode.none:
                            found[tp] = [ProducerState.from_wire(s) for s in p.active_producers]
                        elif broker_id is not None and p.error_code == ErrorCode.not_leader_or_follower:
                            raise AdminApiError(p.error_code, f"Failed to describe active producers for partition "
                                                              f"{tp} on brokerId {broker_id}", retriable=False)
                        elif p.error_code in RETRIABLE:
                            moved.append(tp)
                        else:
                            raise AdminApiError(p.error_code, p.error_message, retriable=False)
            if moved:
                raise AdminApiError(ErrorCode.not_leader_or_follower,
                                    f"the leader of {', '.join(map(str, moved))} moved")
            return {tp: found[tp] for tp in wanted}

        return self._retrying(attempt)

    # ---- ListTransactions -----------------------------------------------------------------------------

    def _list_on(self, node_id: int, filters: ListTransactionsFilter) -> list[TransactionListing]:
        client = self._client(node_id)
        version = self._version(client, LIST_TRANSACTIONS, f"Broker {node_id}", filters.min_version)
        answer = client.request(LIST_TRANSACTIONS, {
            "state_filters": [s.value for s in filters.states], "producer_id_filters": list(filters.producer_ids),
            "duration_filter": filters.duration_ms, "transactional_id_pattern": filters.transactional_id_pattern,
        }, version=version)
        if answer.error_code != ErrorCode.none:
            # as Kafka's ListTransactionsHandler: only a coordinator still loading is asked again
            raise AdminApiError(answer.error_code,
                                retriable=answer.error_code == ErrorCode.coordinator_load_in_progress)
        return [TransactionListing(s.transactional_id, int(s.producer_id), TransactionState.parse(s.transaction_state))
                for s in answer.transaction_states]

    def list_transactions(self, filters: ListTransactionsFilter) -> dict[int, list[TransactionListing] | AdminApiError]:
        """Every broker's answer (Kafka's allByBrokerId), or why that broker could not give one."""
        brokers = self._retrying(lambda: sorted(self.cluster([]).brokers))
        out: dict[int, list[TransactionListing] | AdminApiError] = {}
        for node_id in brokers:
            try:
                out[node_id] = self._retrying(functools.partial(self._list_on, node_id, filters))
            except AdminApiError as exc:
                out[node_id] = exc
        return out

    # ---- FindCoordinator + DescribeTransactions -------------------------------------------------------

    def _find_coordinators(self, keys: list[str]) -> dict[str, int | AdminApiError]:
        client = self._any()
        version = self._version(client, FIND_COORDINATOR, "The bootstrap broker")
        out: dict[str, int | AdminApiError] = {}
        for c in find_coordinators(client, CoordinatorType.TRANSACTION, keys, version=version):
            if c.error_code != ErrorCode.none:
                out[c.key] = AdminApiError(c.error_code, c.error_message)
            else:
                self._nodes[c.node_id] = Node(c.node_id, c.host, c.port, None)
                out[c.key] = c.node_id
        return out

    def _next_correlation(self) -> int:
        self._correlation += 1
        return self._correlation

    def _describe_on(self, node_id: int, ids: list[str]) -> list[dict[str, Any]]:
        """DescribeTransactions decoded by hand: Kafka answers a start time of -1 for a transaction that
        has not begun, which kio's reader refuses."""
        client = self._client(node_id)
        version = self._version(client, DESCRIBE_TRANSACTIONS, f"Coordinator {node_id}")
        cid = self._next_correlation()
        client.send_raw(encode_request(DESCRIBE_TRANSACTIONS, version, cid, client.client_id,
                                       {"transactional_ids": ids}))
        got, states = decode_describe_transactions(client.recv_frame())
        if got != cid:
            raise KafkaProtocolError(f"correlation id {got} does not match request {cid}")
        return states

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription | AdminApiError]:
        ids = list(dict.fromkeys(transactional_ids))
        out: dict[str, TransactionDescription | AdminApiError] = {}

        def attempt() -> None:
            pending = [i for i in ids if i not in out]
            by_node: dict[int, list[str]] = {}
            retry: AdminApiError | None = None
            for key, where in self._find_coordinators(pending).items():
                if isinstance(where, AdminApiError):
                    if where.retriable:
                        retry = where
                    else:
                        out[key] = where
                else:
                    by_node.setdefault(where, []).append(key)
            for node_id, keys in sorted(by_node.items()):
                for s in self._describe_on(node_id, keys):
                    code = ErrorCode(s["error_code"])
                    if code == ErrorCode.none:
                        out[s["transactional_id"]] = TransactionDescription(
                            node_id, TransactionState.parse(s["transaction_state"]), s["producer_id"],
                            s["producer_epoch"], s["transaction_timeout_ms"],
                            None if s["transaction_start_time_ms"] < 0 else s["transaction_start_time_ms"],
                            frozenset(TopicPartition(t, p) for t, ps in s["topics"] for p in ps))
                    elif code in RETRIABLE:
                        retry = AdminApiError(code)
                    else:
                        out[s["transactional_id"]] = AdminApiError(code)
            if retry is not None:
                raise retry

        try:
            self._retrying(attempt)
        except AdminApiError as exc:
            for i in ids:
                out.setdefault(i, exc)
        return {i: out[i] for i in ids}

    # ---- WriteTxnMarkers ------------------------------------------------------------------------------

    def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        tp = spec.topic_partition

        def attempt() -> None:
            client = self._client(self._leader_of(tp, self.cluster([tp.topic])))
            version = self._version(client, WRITE_TXN_MARKERS, f"The leader of {tp}", WRITE_TXN_MARKERS_MIN_VERSION)
            answer = client.request(WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch,
                "transaction_result": False,  # ABORT
                "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
                "coordinator_epoch": spec.coordinator_epoch,
            }]}, version=version)
            codes = [p.error_code for m in answer.markers for t in m.topics if t.name == tp.topic
                     for p in t.partitions if p.partition_index == tp.partition]
            if not codes:
                raise AdminApiError(ErrorCode.unknown_server_error,
                                    f"WriteTxnMarkers response did not include {tp}", retriable=False)
            _abort_result(spec, codes[0])

        self._retrying(attempt)


def _abort_result(spec: AbortTransactionSpec, code: ErrorCode) -> None:
    """Kafka's AbortTransactionHandler.handleError: a moved leader is looked up again."""
    if code == ErrorCode.none:
        return
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
        raise AdminApiError(code, retriable=True)
    if code == ErrorCode.cluster_authorization_failed:
        message = f"WriteTxnMarkers request with {spec} failed due to cluster authorization error"
    elif code == ErrorCode.invalid_producer_epoch:
        message = f"WriteTxnMarkers request with {spec} failed due an invalid producer epoch"
    elif code == ErrorCode.transaction_coordinator_fenced:
        message = (f"Failed to abort transaction {spec} on partition {spec.topic_partition} due to coordinator "
                   "epoch fencing")
    else:
        message = (f"WriteTxnMarkers request with {spec} failed due to unexpected error: "
                   f"{exception_message(code, None)}")
    raise AdminApiError(code, message, retriable=False)


def flatten(listings: Mapping[int, list[TransactionListing] | AdminApiError]) -> list[TransactionListing]:
    return [t for v in listings.values() if not isinstance(v, AdminApiError) for t in v]
