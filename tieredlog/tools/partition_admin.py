"""What the console producer and consumer, `get-offsets`, `log-dirs` and `topics describe` ask of each
partition's leader: ListOffsets, Produce, Fetch and DescribeLogDirs, routed as Kafka's clients route
them (the leader Metadata names, asked again when it moved), over the blocking client of
tieredlog.clients.blocking with ``--command-config``'s security on every connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from kio.schema.errors import ErrorCode

from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import DESCRIBE_LOG_DIRS, FETCH, LIST_OFFSETS, PRODUCE
from tieredlog.tools.command_config import ClientSettings
from tieredlog.tools.consumer_groups import GroupsAdmin
from tieredlog.tools.transaction_admin import AdminApiError

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest)
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405, v8
LATEST_TIERED = -5  # KIP-1005, v9
_MIN_LIST_OFFSETS_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}

# Fixed versions every tieredlog broker and Kafka since 2.4 serve: Fetch by topic name, Produce v8
FETCH_VERSION = 12
PRODUCE_VERSION = 8
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    error_code: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset) of aborted transactions (read_committed)


class PartitionAdmin(GroupsAdmin):
    """GroupsAdmin's connections and retries, plus the per-partition data requests of the client tools."""

    def __init__(self, bootstrap: str, *, client_id: str = "tieredlog-tools", timeout_s: float = 30.0,
                 settings: ClientSettings | None = None) -> None:
        super().__init__(bootstrap, timeout_s=timeout_s, settings=settings)
        self.client_id = client_id

    def __enter__(self) -> "PartitionAdmin":
        return self

    def leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        wanted = list(partitions)
        view = self.cluster(sorted({tp.topic for tp in wanted}))
        return {tp: self._leader_of(tp, view) for tp in wanted}

    def current_leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """``leaders``, asked again while a partition has none (an election under way)."""
        wanted = list(partitions)
        return self._retrying(lambda: self.leaders(wanted))

    def reconnect(self) -> None:
        """After a connection failed: every connection is opened again on its next use."""
        self._forget()

    def offsets_for(self, timestamps: dict[TopicPartition, int],
                    isolation_level: int = READ_UNCOMMITTED) -> dict[TopicPartition, tuple[int, int]]:
        """(offset, timestamp) per partition for its ListOffsets timestamp, from its leader: -1 offset
        when no record qualifies. The newest version both sides speak, at least the one the special
        timestamps need (UNSUPPORTED_VERSION otherwise, as Kafka's admin client)."""
        found: dict[TopicPartition, tuple[int, int]] = {}
        minimum = max((_MIN_LIST_OFFSETS_VERSION.get(ts, 0) for ts in timestamps.values()), default=0)

        def attempt() -> dict[TopicPartition, tuple[int, int]]:
            pending = [tp for tp in timestamps if tp not in found]
            by_node: dict[int, dict[str, list[dict[str, int]]]] = {}
            for tp, node_id in self.leaders(pending).items():
                by_node.setdefault(node_id, {}).setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "current_leader_epoch": -1, "timestamp": timestamps[tp]})
            moved = []
            for node_id, topics in sorted(by_node.items()):
                client = self._client(node_id)
                version = self._version(client, LIST_OFFSETS, f"Broker {node_id}", minimum)
                r = client.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": isolation_level, "topics": [
                    {"name": n, "partitions": ps} for n, ps in topics.items()]}, version=version)
                for t in r.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code == ErrorCode.none:
                            found[tp] = (int(p.offset), int(p.timestamp))
                        elif AdminApiError(p.error_code).retriable:
                            moved.append(tp)
                        else:
                            raise AdminApiError(p.error_code, f"ListOffsets of {tp}", retriable=False)
            if moved:
                raise AdminApiError(ErrorCode.not_leader_or_follower, f"the leader of {moved[0]} moved")
            return {tp: found[tp] for tp in timestamps}

        return self._retrying(attempt)

    def produce(self, tp: TopicPartition, batch: bytes, acks: int, timeout_ms: int) -> int:
        """Append one batch to ``tp`` through its leader; its base offset (-1 with acks=0). A leader that
        moved is looked up again; any other error raises AdminApiError."""
        def attempt() -> int:
            node_id = self.leaders([tp])[tp]
            r = self._client(node_id).request(PRODUCE, {
                "transactional_id": None, "acks": acks, "timeout": timeout_ms,
                "topic_data": [{"name": tp.topic, "partition_data": [{"index": tp.partition, "records": batch}]}],
            }, version=PRODUCE_VERSION, expect_response=acks != 0)
            if r is None:
                return -1
            p = r.responses[0].partition_responses[0]
            if p.error_code != ErrorCode.none:
                raise AdminApiError(p.error_code, p.error_message)
            return int(p.base_offset)

        return self._retrying(attempt)

    def fetch(self, node_id: int, positions: dict[TopicPartition, int], *, max_wait_ms: int,
              isolation_level: int, max_bytes: int = 50 * 1024 * 1024,
              partition_max_bytes: int = 1024 * 1024) -> dict[TopicPartition, FetchedPartition]:
        """One Fetch of ``positions`` (all led by ``node_id``), as a consumer; errors are the caller's."""
        topics: dict[str, list[dict[str, int]]] = {}
        for tp, offset in positions.items():
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": partition_max_bytes})
        r = self._client(node_id).request(FETCH, {
            "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": n, "partitions": ps} for n, ps in topics.items()],
        }, version=FETCH_VERSION)
        if r.error_code != ErrorCode.none:
            raise AdminApiError(r.error_code)
        return {TopicPartition(t.topic, p.partition_index): FetchedPartition(
                    ErrorCode(p.error_code), int(p.high_watermark), int(p.log_start_offset), bytes(p.records or b""),
                    tuple((int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions or ()))
                for t in r.responses for p in t.partitions}

    def describe_log_dirs(self, node_id: int, topics: dict[str, list[int]] | None) -> Any:
        """DescribeLogDirs of one broker (``topics`` None: every partition it holds)."""
        body = {"topics": None if topics is None else [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        r = self._client(node_id).request(DESCRIBE_LOG_DIRS, body)
        if r.error_code != ErrorCode.none:
            raise AdminApiError(r.error_code, f"DescribeLogDirs of broker {node_id}", retriable=False)
        return r
