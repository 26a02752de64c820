"""Small value types shared by the log package and everything above it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from tieredlog.formats.txn_index import AbortedTxn
    from tieredlog.log.segment import FileSlice


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        # Kafka's TopicPartition.toString, which is also the partition directory name.
        return f"{self.topic}-{self.partition}"


class SupportsBaseOffset(Protocol):
    """A segment as the log's lookups by segment read it: where it begins. Any view of a segment the log
    handed out qualifies, so a layer above that sees segments through its own narrower type can pass them
    back (the remote tier's copy task does)."""

    @property
    def base_offset(self) -> int: ...


class EpochEntry(NamedTuple):
    """Leader epoch ``epoch`` began at ``start_offset`` (one line of leader-epoch-checkpoint)."""

    epoch: int
    start_offset: int

    def __str__(self) -> str:
        return f"EpochEntry(epoch={self.epoch}, startOffset={self.start_offset})"


def parse_partition_dir(name: str) -> TopicPartition:
    """``"my-topic-3"`` -> ``TopicPartition("my-topic", 3)``.

    Topic names may contain '-', partitions may not, so split at the last one.
    """
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or not partition.isascii():
        raise ValueError(f"{name!r} is not a partition directory name (expected <topic>-<partition>)")
    return TopicPartition(topic, int(partition))


class FetchIsolation(Enum):
    """How far a read may go (Kafka's FetchIsolation)."""

    LOG_END = "log_end"  # replication and the broker's own readers of internal topics
    HIGH_WATERMARK = "high_watermark"  # read_uncommitted consumers
    TXN_COMMITTED = "txn_committed"  # read_committed consumers: up to the last stable offset


class AppendOrigin(Enum):
    """Who appends (Kafka's AppendOrigin): decides which checks a batch gets."""

    CLIENT = "client"  # a producer: no control batches, sequence checks, answered duplicates
    COORDINATOR = "coordinator"  # transaction markers and the coordinators' own records
    REPLICATION = "replication"  # a follower copying the leader's batches, offsets included


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False  # a retried idempotent batch answered with its original offsets


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    records: "FileSlice | bytes | memoryview"  # a memoryview: remote read-ahead memory, sent uncopied
    first_offset: int
    aborted_transactions: "list[AbortedTxn] | None" = None


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int | None
