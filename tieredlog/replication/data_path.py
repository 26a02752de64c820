"""What the Fetch and Produce handlers exchange with the ReplicaManager, and what it needs of the broker.

Kafka's FetchParams and the partition state of ReplicaManager.readFromLog: the API handler builds
them from the request, the ReplicaManager reads (locally, from the remote tier, or parks the fetch)
and writes each answer straight into the response's FetchPartitionData, so the record bytes (a file
region, or bytes from the remote tier) reach the encoder uncopied. An append answers a
PartitionAppendResult per partition (Kafka's PartitionResponse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Hashable, Iterable, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.errors import KafkaError, OffsetOutOfRangeError
from tieredlog.formats.errors import CorruptRecordError, InvalidRecordError
from tieredlog.log.segment import FileSlice
from tieredlog.log.types import FetchDataInfo, FetchIsolation, TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.protocol.fetch_encoder import FetchPartitionData

# fetch.max.bytes of 0 or less: no response limit
NO_RESPONSE_LIMIT = 2**31 - 1


def error_code_of(exc: BaseException) -> ErrorCode:
    """The partition's error code for a failed read or append."""
    if isinstance(exc, KafkaError):
        return exc.code
    if isinstance(exc, OSError):
        # The log turns write failures into KafkaStorageError itself; anything else from the disk is
        # still a storage error (retriable), not an unknown one.
        return ErrorCode.kafka_storage_error
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.corrupt_message
    if isinstance(exc, InvalidRecordError):
        return ErrorCode.invalid_record
    return ErrorCode.unknown_server_error


class TopicInfo(Protocol):
    @property
    def internal(self) -> bool: ...


class TopicLookup(Protocol):
    """The broker's topics: a partition's log exists only while its topic does."""

    def get_topic(self, name: str) -> TopicInfo | None: ...

    def get_partition_log(self, topic: str, partition: int) -> UnifiedLog | None: ...


@dataclass(slots=True)
class PartitionAppendResult:
    """One partition's answer to an append; ``required_offset`` is what acks=all waits for."""

    error_code: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None  # KIP-951, on NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
    record_errors: list[tuple[int, str]] | None = None  # KIP-467: (batch index, message)
    required_offset: int | None = None


# (request position, partition, records, (producer id, epoch)): an append awaiting its coordinator
Unverified = tuple[int, TopicPartition, bytes, tuple[int, int]]
LocalAppend = Callable[[TopicPartition, bytes], PartitionAppendResult]


class AppendVerification(Protocol):
    """KIP-890 part 1: a transaction's first batch on a partition is appended once its coordinator
    confirms the partition is in the transaction."""

    def producer_to_verify(self, tp: TopicPartition, records: bytes | None) -> tuple[int, int] | None: ...

    def append_verified(self, unverified: list[Unverified],
                        append: LocalAppend) -> Awaitable[dict[int, PartitionAppendResult]]: ...


class FetchPurgatory(Protocol):
    """Where fetches short of ``min_bytes`` park until an append to one of their partitions."""

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> bool: ...

    def notify(self, key: Hashable) -> None: ...


class DataPathMetrics(Protocol):
    def record_fetch(self, topic: str, nbytes: int, follower: bool) -> None: ...

    def record_produce(self, topic: str, nbytes: int, messages: int) -> None: ...


@dataclass(slots=True)
class FetchParams:
    """One Fetch request's limits. ``replica_id`` >= 0: a follower's fetch; ``client_rack`` is not
    None for a consumer's Fetch v11+ (KIP-392, "" when it names no rack)."""

    replica_id: int
    max_wait_ms: float
    min_bytes: int
    max_bytes: int
    isolation: FetchIsolation
    client_rack: str | None = None

    @property
    def follower(self) -> bool:
        return self.replica_id >= 0


class PartitionRead:
    __slots__ = ("topic", "partition", "fetch_offset", "max_bytes", "data", "remote", "current_leader_epoch",
                 "replica_log_start", "leader_end_offset", "last_fetched_epoch")

    def __init__(self, topic: str, partition: int, fetch_offset: int, max_bytes: int,
                 current_leader_epoch: int = -1, replica_log_start: int = -1, last_fetched_epoch: int = -1) -> None:
        self.topic = topic
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.data = FetchPartitionData(partition)
        self.remote = False
        self.current_leader_epoch = current_leader_epoch
        self.replica_log_start = replica_log_start  # a follower's log start offset
        self.leader_end_offset = -1  # the log end offset when a follower's fetch was first served
        self.last_fetched_epoch = last_fetched_epoch  # the epoch of the batch before fetch_offset (v12+)


def records_size(records: Any) -> int:
    if records is None:
        return 0
    if isinstance(records, (bytes, bytearray, memoryview)):
        return len(records)
    return int(records.size)


def read_size(info: FetchDataInfo) -> int:
    """What a local read counts against the fetch's byte budgets and ``min_bytes``: Kafka's slice, up
    to its max bytes, even where the bytes sent stop at the last whole batch (FileSlice.fetch_size)."""
    records = info.records
    return records.fetch_size if isinstance(records, FileSlice) else records_size(records)


def aborted_of(info: FetchDataInfo) -> list[tuple[int, int]] | None:
    if info.aborted_transactions is None:
        return None
    return [(a.producer_id, a.first_offset) for a in info.aborted_transactions]


def diverging_epoch(pr: PartitionRead, plog: UnifiedLog) -> tuple[int, int] | None:
    """KIP-320's check of a fetch naming ``last_fetched_epoch``, as Kafka's Partition.readRecords:
    (largest epoch <= it, where that epoch ends) when the fetcher's log diverges from ours before
    ``fetch_offset`` (we never had its epoch, or ours ends earlier); None when it does not.
    OffsetOutOfRangeError when we cannot tell (an epoch above all ours) or the offset is below
    the log start."""
    epoch, end_offset = plog.leader_epoch_cache.end_offset_for(pr.last_fetched_epoch, plog.log_end_offset)
    if epoch < 0 or end_offset < 0:
        raise OffsetOutOfRangeError(
            f"could not determine the end offset of the last fetched epoch {pr.last_fetched_epoch}")
    if pr.fetch_offset < plog.log_start_offset:
        raise OffsetOutOfRangeError(f"offset {pr.fetch_offset} is below the log start {plog.log_start_offset}")
    if epoch < pr.last_fetched_epoch or end_offset < pr.fetch_offset:
        return epoch, end_offset
    return None


def fill_offsets(d: FetchPartitionData, plog: UnifiedLog) -> None:
    d.high_watermark = plog.high_watermark
    d.last_stable_offset = plog.last_stable_offset
    d.log_start_offset = plog.log_start_offset
