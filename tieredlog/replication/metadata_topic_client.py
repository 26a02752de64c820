"""``__remote_log_metadata`` of a ZooKeeper cluster, read and written as a Kafka client.

In a cluster the topic is an ordinary replicated topic whose partitions are led by different
brokers, so the topic-based RLMM cannot use this broker's own logs (``LogMetadataTopic``): it
produces to and fetches from each partition's leader over the Kafka protocol, as Kafka's
``ProducerManager`` / ``ConsumerManager`` do. ``ReplicatedMetadataTopic`` is that
``tieredlog.rlmm.topic.MetadataTopic``.

- Every method blocks and is called from many worker threads at once (RLM copier, expiration and
  reader threads, the RLMM loader). There is one ``BlockingNodeConnection`` per leader endpoint, each used under
  its own lock, so the requests to one broker go one at a time over one connection; a connection that
  fails is closed and opened again by the next request.
- Leaders come from ``MetadataTopicRouting`` (the broker's metadata cache). A request answered
  NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT (and the other
  errors a leader change or a starting broker gives), or a connection that fails, asks the routing
  again and retries after ``retry_backoff_s``, until ``request_timeout_s`` after the call began:
  then ``TimeoutError``. Other error codes raise ``MetadataTopicError`` at once.
- ``append`` is acks=-1 (the ISR has the record when it returns). A retried Produce may append the
  record twice (no idempotent producer); the RLMM's state machine drops the repeated event.
- ``read`` fetches as a consumer (read_uncommitted, so up to the high watermark). Its time limit
  applies to each Fetch round, not to the whole read: a long replay is not cut short.
- ``end_offset`` is the high watermark, remembered from the last Fetch or ListOffsets of the partition
  for ``end_offset_max_age_s`` (the RLMM asks before every query).

Request versions are fixed, ones every tieredlog broker serves: Produce v9, Fetch v12 (topic names),
ListOffsets v7.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterator, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from tieredlog.clients.node_clients import PLAINTEXT, BlockingNodeConnection, ListenerSecurity
from tieredlog.clients.routing import Retry, call_leader
from tieredlog.clients.versions import format_address
from tieredlog.formats.errors import RecordError
from tieredlog.protocol.api import FETCH, LIST_OFFSETS, PRODUCE
from tieredlog.records.record import build_batch, iter_batches_records
from tieredlog.rlmm.api import RemoteLogMetadataManagerFatalError
from tieredlog.rlmm.topic import METADATA_TOPIC

log = logging.getLogger(__name__)

PRODUCE_VERSION = 9
FETCH_VERSION = 12
LIST_OFFSETS_VERSION = 7
FETCH_MAX_BYTES = 8 * 1024 * 1024
FETCH_PARTITION_MAX_BYTES = 1024 * 1024  # at least one whole batch comes back however large (KIP-74)
LATEST_TIMESTAMP = -1

# Answers that mean "ask again, perhaps of another broker": a leader change, a broker that does not
# know the partition yet, an ISR too small for acks=-1 for now.
RETRIABLE_ERRORS = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.replica_not_available,
    ErrorCode.kafka_storage_error,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.network_exception,
})

T = TypeVar("T")


class MetadataTopicRouting(Protocol):
    """What the client needs of the broker (the broker's implementation lives in tieredlog/server/)."""

    def leader_endpoint(self, partition: int) -> tuple[str, int] | None:
        """host, port of the current leader of __remote_log_metadata-<partition> (inter-broker
        listener); None when unknown/offline. Thread safe, cheap, never blocks."""

    def create_topic(self, num_partitions: int, configs: dict[str, str]) -> int:
        """Create __remote_log_metadata if missing (the broker picks the replication factor) and
        block until every partition has a leader; return the topic's partition count. Blocking;
        called from worker threads, never the event loop. May raise (retried by the RLMM)."""


class MetadataTopicError(Exception):
    """A leader answered an error that retrying does not cure."""

    def __init__(self, message: str, error_code: ErrorCode) -> None:
        super().__init__(message)
        self.error_code = error_code


class ReplicatedMetadataTopic:
    """``tieredlog.rlmm.topic.MetadataTopic`` over the Kafka protocol, as a client of each
    partition's leader (see the module docstring)."""

    def __init__(
        self,
        routing: MetadataTopicRouting,
        *,
        client_id: str,
        request_timeout_s: float = 30.0,
        retry_backoff_s: float = 0.1,
        end_offset_max_age_s: float = 0.2,
        retention_ms: int = -1,
        security: ListenerSecurity = PLAINTEXT,
    ) -> None:
        """``security``: TLS to the leaders' listener (its protocol is SSL or SASL_SSL) and the login
        there (SASL_PLAINTEXT or SASL_SSL)."""
        self._routing = routing
        self._security = security
        self._client_id = client_id
        self._request_timeout_s = request_timeout_s
        self._retry_backoff_s = retry_backoff_s
        self._end_offset_max_age_s = end_offset_max_age_s
        self._retention_ms = retention_ms
        self._lock = threading.Lock()  # guards the maps below
        self._connections: dict[tuple[str, int], BlockingNodeConnection] = {}
        self._ends: dict[int, tuple[int, float]] = {}  # partition -> (high watermark, monotonic time learned)
        self._reported: dict[tuple[int, str], int] = {}  # (partition, what) -> offset last logged
        self._closed = False

    # -- MetadataTopic ------------------------------------------------------------------------------

    def ensure_created(self, num_partitions: int) -> None:
        configs = {
            "retention.ms": str(self._retention_ms),
            "cleanup.policy": "delete",
            "remote.storage.enable": "false",
        }
        actual = self._routing.create_topic(num_partitions, configs)
        if actual != num_partitions:
            raise RemoteLogMetadataManagerFatalError(
                f"{METADATA_TOPIC} has {actual} partitions, remote.log.metadata.topic.num.partitions is {num_partitions}"
            )

    def append(self, partition: int, value: bytes) -> int:
        batch = build_batch([(None, value)])

        def attempt(endpoint: tuple[str, int], deadline: float) -> int | Retry:
            remaining = deadline - time.monotonic()
            # the broker gives up waiting for the ISR a little before we stop waiting for its answer
            wait_ms = max(int(remaining * 800), 1)
            r = self._request(endpoint, PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout": wait_ms,
                "topic_data": [{"name": METADATA_TOPIC, "partition_data": [{"index": partition, "records": batch}]}],
            }, PRODUCE_VERSION, deadline)
            p = r.responses[0].partition_responses[0]
            code = ErrorCode(p.error_code)
            if code != ErrorCode.none:
                return self._failed("produce to", partition, endpoint, code, p.error_message)
            return int(p.base_offset)

        return self._with_leader(partition, "append to", attempt)

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes]]:
        offset = from_offset
        while True:
            p = self._fetch_round(partition, offset)
            code = ErrorCode(p.error_code)
            if code == ErrorCode.offset_out_of_range:
                start = int(p.log_start_offset)
                if offset < start:
                    # retention deleted the records below the leader's log start: go on from there
                    if self._report_once(partition, "log start", start):
                        log.warning("%s-%d: offset %d is below the leader's log start offset %d; reading from there",
                                    METADATA_TOPIC, partition, offset, start)
                    offset = start
                    continue
                return  # past the leader's end (a new leader not caught up yet): the next read tries again
            hw = int(p.high_watermark)
            if offset >= hw:
                return
            records: list[tuple[int, bytes]] = []
            next_offset = offset
            corrupt: RecordError | None = None
            try:
                for header, batch_records in iter_batches_records(p.records or b"", stop_at_partial=True):
                    if header.next_offset <= next_offset:
                        continue
                    if not header.is_control:
                        for record in batch_records:
                            if record.offset >= next_offset and record.value is not None:
                                records.append((record.offset, bytes(record.value)))
                    next_offset = header.next_offset
            except RecordError as exc:
                corrupt = exc
            yield from records
            if corrupt is not None:
                # one line per place: the RLMM tries again from here on its next catch-up
                if self._report_once(partition, "corrupt", next_offset):
                    log.error("%s-%d: corrupt batch at offset %d: %s", METADATA_TOPIC, partition, next_offset, corrupt)
                return
            if next_offset == offset:
                # no whole batch below the high watermark (never from a tieredlog leader, which answers
                # at least one): not a state to spin in; the RLMM tries again later
                if self._report_once(partition, "empty", offset):
                    log.error("%s-%d: the leader returned no batch at offset %d (high watermark %d)",
                              METADATA_TOPIC, partition, offset, hw)
                return
            offset = next_offset

    def end_offset(self, partition: int) -> int:
        with self._lock:
            cached = self._ends.get(partition)
        if cached is not None and time.monotonic() - cached[1] < self._end_offset_max_age_s:
            return cached[0]

        def attempt(endpoint: tuple[str, int], deadline: float) -> int | Retry:
            r = self._request(endpoint, LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": 0, "topics": [{"name": METADATA_TOPIC, "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}]}],
            }, LIST_OFFSETS_VERSION, deadline)
            p = r.topics[0].partitions[0]
            code = ErrorCode(p.error_code)
            if code != ErrorCode.none:
                return self._failed("list offsets of", partition, endpoint, code, None)
            return int(p.offset)

        hw = self._with_leader(partition, "end offset of", attempt)
        self._learn_end(partition, hw)
        return hw

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = list(self._connections.values())
            self._connections.clear()
        for conn in connections:
            # a request in flight fails at once (its socket is cut under it) rather than wait for its answer
            conn.close()

    # -- internals ----------------------------------------------------------------------------------

    def _fetch_round(self, partition: int, offset: int) -> Any:
        """One Fetch at ``offset``: the partition's answer, with no error or OFFSET_OUT_OF_RANGE."""

        def attempt(endpoint: tuple[str, int], deadline: float) -> Any:
            r = self._request(endpoint, FETCH, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": FETCH_MAX_BYTES,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                    "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                    "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": FETCH_PARTITION_MAX_BYTES,
                }]}],
            }, FETCH_VERSION, deadline)
            top = ErrorCode(r.error_code)
            if top != ErrorCode.none:
                return self._failed("fetch from", partition, endpoint, top, None)
            p = r.responses[0].partitions[0]
            code = ErrorCode(p.error_code)
            if code == ErrorCode.none:
                self._learn_end(partition, int(p.high_watermark))
                return p
            if code == ErrorCode.offset_out_of_range:
                return p
            return self._failed("fetch from", partition, endpoint, code, None)

        return self._with_leader(partition, "fetch from", attempt)

    def _failed(self, what: str, partition: int, endpoint: tuple[str, int], code: ErrorCode,
                message: str | None) -> Retry:
        reason = f"{format_address(endpoint)} answered {code.name}" + (f" ({message})" if message else "")
        if code in RETRIABLE_ERRORS:
            return Retry(reason)
        raise MetadataTopicError(f"{what} {METADATA_TOPIC}-{partition}: {reason}", code)

    def _learn_end(self, partition: int, hw: int) -> None:
        with self._lock:
            self._ends[partition] = (hw, time.monotonic())

    def _report_once(self, partition: int, what: str, offset: int) -> bool:
        with self._lock:
            if self._reported.get((partition, what)) == offset:
                return False
            self._reported[(partition, what)] = offset
            return True

    def _with_leader(self, partition: int, what: str,
                     attempt: Callable[[tuple[str, int], float], T | Retry]) -> T:
        """Run ``attempt(leader endpoint, deadline)`` until it gives an answer, asking the routing for
        the leader before each try; TimeoutError once request_timeout_s have passed."""
        return call_leader(lambda: self._routing.leader_endpoint(partition), attempt,
                           what=f"{what} {METADATA_TOPIC}-{partition}", timeout_s=self._request_timeout_s,
                           backoff_s=self._retry_backoff_s, check_open=self._check_open)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{METADATA_TOPIC} client {self._client_id} is closed")

    def _connection(self, endpoint: tuple[str, int]) -> BlockingNodeConnection:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{METADATA_TOPIC} client {self._client_id} is closed")
            conn = self._connections.get(endpoint)
            if conn is None:
                conn = self._connections[endpoint] = BlockingNodeConnection(
                    endpoint, client_id=self._client_id, security=self._security)
            return conn

    def _request(self, endpoint: tuple[str, int], api_key: int, body: dict, version: int, deadline: float) -> Any:
        """One request to ``endpoint`` over its connection (opened if needed), answered before
        ``deadline`` or TimeoutError; any failure closes the connection (a late answer would be read
        as the next request's)."""
        conn = self._connection(endpoint)
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not conn.lock.acquire(timeout=remaining):
            raise TimeoutError(f"the connection to {format_address(endpoint)} stayed busy")
        try:
            if self._closed:
                raise RuntimeError(f"{METADATA_TOPIC} client {self._client_id} is closed")
            return conn.request(api_key, body, version, max(deadline - time.monotonic(), 0.001))
        finally:
            conn.lock.release()
