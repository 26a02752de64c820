"""`__consumer_offsets` (and `__transaction_state`) as a coordinator's durable store: real record batches
in real partition logs.

Each group lives in partition abs(hashCode(group)) % offsets.topic.num.partitions, as in Kafka, so a
group's records stay in order. Alone, a broker appends through UnifiedLog.append_as_leader at epoch 0
and what it appends is committed at once; on start-up every partition is read back from its log start
to rebuild the coordinator's state. In a cluster (`ReplicatedGroupStore`) appends go through the
replica manager at the partition's leader epoch and `append` hands back a wait for the ISR; a
partition is read back when this broker becomes its leader. `MemoryGroupStore` keeps the same
records in a list, for the state-machine tests.

Transactional offset commits (TxnOffsetCommit) are transactional batches of the producer that sent
them; a replay yields their records once a COMMIT marker follows, never after an ABORT, and, at the
end, those of transactions still open with the producer id (`ReplayedRecord.producer_id`), so the
coordinator keeps them pending until the marker arrives.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable, Iterable, Iterator, NamedTuple, Protocol, Sequence

from kio.schema.errors import ErrorCode

from tieredlog import errors
from tieredlog.coordinator.config import GroupConfig
from tieredlog.coordinator.contracts import CoordinatorBroker, OffsetsTopicLog, OffsetsTopicReplicas
from tieredlog.coordinator.schema import partition_for
from tieredlog.formats.errors import RecordError
from tieredlog.log.batch_reader import LogBatches
from tieredlog.log.types import AppendOrigin, TopicPartition
from tieredlog.records.batch import BatchHeader
from tieredlog.records.record import CONTROL_COMMIT, build_batch, parse_control_record

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
LEADER_EPOCH = 0  # one broker leads every partition forever


def offsets_topic_configs(config: GroupConfig) -> dict[str, str]:
    """Kafka's configs for the offsets topic: compacted, offsets.topic.segment.bytes segments."""
    return {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes)}


# Awaited after a replicated append: returns once the ISR has the records, raises the KafkaError
# (NotLeaderOrFollowerError, NotEnoughReplicasAfterAppendError, RequestTimedOutError) otherwise.
WaitForIsr = Callable[[], Awaitable[None]]


class ReplayedRecord(NamedTuple):
    key: bytes
    value: bytes | None  # None: a tombstone
    producer_id: int = -1  # >= 0: written in a transaction of this producer that is still open


class Producer(NamedTuple):
    """The transactional producer a TxnOffsetCommit's records are written for."""

    producer_id: int
    producer_epoch: int


def _batch(records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int, producer: Producer | None) -> bytearray:
    entries: list[tuple[bytes, bytes | None, list[tuple[str, bytes]], int]] = [
        (key, value, [], timestamp_ms) for key, value in records]
    if producer is None:
        return bytearray(build_batch(entries))
    # Kafka writes a transactional offset commit without a sequence: the coordinator is its only writer
    return bytearray(build_batch(entries, producer_id=producer.producer_id,
                                 producer_epoch=producer.producer_epoch, is_transactional=True))


class GroupStore(Protocol):
    """Durable log of `__consumer_offsets` records (key, value or None for a tombstone)."""

    def append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]],
               timestamp_ms: int, producer: Producer | None = None) -> WaitForIsr | None:
        """Write the records to the group's partition (in ``producer``'s open transaction when
        given); raises `tieredlog.errors.KafkaError` on failure. None when what is appended is
        committed already (one broker); in a cluster, the wait for the ISR."""

    def replay(self) -> Iterable[ReplayedRecord]:
        """Every record of every partition, in log order per partition."""


class PartitionedGroupStore(GroupStore, Protocol):
    """A store over the partitions of `__consumer_offsets`, each read back on its own (a cluster
    member loads the partitions it leads)."""

    num_partitions: int

    def partition_for(self, group_id: str) -> int: ...

    def replay_partition(self, partition: int) -> Iterable[ReplayedRecord]: ...


class MemoryGroupStore:
    """Keeps the records in a list: for a coordinator without durable offsets and for state-machine tests."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []

    def append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]],
               timestamp_ms: int, producer: Producer | None = None) -> WaitForIsr | None:
        self.records.extend((group_id, key, value) for key, value in records)
        return None

    def replay(self) -> Iterable[ReplayedRecord]:
        return [ReplayedRecord(key, value) for _, key, value in self.records]


def store_error_code(exc: Exception, group_metadata: bool = False) -> ErrorCode:
    """Kafka's mapping of a failed `__consumer_offsets` append to what the group client should see.
    ``group_metadata``: the append of a generation's assignment (SyncGroup), where Kafka answers a
    timed-out wait for the ISR with REBALANCE_IN_PROGRESS (the members join again) rather than
    COORDINATOR_NOT_AVAILABLE."""
    if not isinstance(exc, errors.KafkaError):
        log.error("__consumer_offsets append failed", exc_info=exc)
        return ErrorCode.unknown_server_error
    if group_metadata and isinstance(exc, errors.RequestTimedOutError):
        return ErrorCode.rebalance_in_progress
    if isinstance(exc, (errors.NotEnoughReplicasError, errors.NotEnoughReplicasAfterAppendError,
                        errors.RequestTimedOutError, errors.UnknownTopicOrPartitionError)):
        return ErrorCode.coordinator_not_available
    if isinstance(exc, (errors.NotLeaderOrFollowerError, errors.KafkaStorageError)):
        # A full or failed log dir: Kafka sends the client to look for the coordinator again.
        return ErrorCode.not_coordinator
    if isinstance(exc, (errors.MessageTooLargeError, errors.RecordListTooLargeError,
                        errors.InvalidFetchSizeError)):
        return ErrorCode.invalid_commit_offset_size
    return ErrorCode.unknown_server_error


class LogGroupStore:
    def __init__(self, get_log: Callable[[int], OffsetsTopicLog | None], num_partitions: int, *,
                 topic: str = OFFSETS_TOPIC):
        """`get_log(partition)` returns the UnifiedLog of that partition of ``topic``."""
        self._get_log = get_log
        self.num_partitions = num_partitions
        self.topic = topic

    @classmethod
    def open(cls, broker: CoordinatorBroker, config: GroupConfig) -> "LogGroupStore":
        """The store over the broker's `__consumer_offsets`, created first when missing."""
        topic = broker.create_internal_topic(OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                                             offsets_topic_configs(config))
        # An existing topic keeps its partition count: the group -> partition mapping must not move.
        return cls(lambda p: broker.get_partition_log(OFFSETS_TOPIC, p), topic.partitions)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]],
               timestamp_ms: int, producer: Producer | None = None) -> WaitForIsr | None:
        if not records:
            return None
        plog = self._get_log(self.partition_for(group_id))
        if plog is None:
            raise errors.CoordinatorNotAvailableError(f"{self.topic} partition for {group_id} has no log")
        plog.append_as_leader(_batch(records, timestamp_ms, producer), LEADER_EPOCH, AppendOrigin.COORDINATOR)
        # A single replica is the whole ISR: what is appended is committed.
        plog.update_high_watermark(plog.log_end_offset)
        return None

    def replay(self) -> Iterator[ReplayedRecord]:
        for partition in range(self.num_partitions):
            yield from self.replay_partition(partition)

    def replay_partition(self, partition: int) -> Iterator[ReplayedRecord]:
        """Every record of one partition, from its log start to its log end (reads the disk: call it
        off the event loop once requests are served)."""
        plog = self._get_log(partition)
        if plog is not None:
            yield from self._replay_partition(partition, plog)

    def _replay_partition(self, partition: int, plog: OffsetsTopicLog) -> Iterator[ReplayedRecord]:
        end = plog.log_end_offset
        open_txns: dict[int, list[ReplayedRecord]] = {}  # producer id -> records of its open transaction
        skipped: list[tuple[int, RecordError]] = []  # (offset near which, why)
        stopped: tuple[int, Exception] | None = None

        def corrupt(offset: int, header: BatchHeader | None, exc: RecordError) -> None:
            # A bad batch is skipped (Kafka's load would stop there and lose every later commit).
            skipped.append((offset, exc))

        batches = LogBatches(plog, plog.log_start_offset, end_offset=end, on_corrupt=corrupt)
        try:
            for header, records in batches:
                if header.is_control:
                    done = open_txns.pop(header.producer_id, [])
                    if records and parse_control_record(records[0]).type == CONTROL_COMMIT:
                        yield from done
                    continue
                out = [ReplayedRecord(bytes(r.key), None if r.value is None else bytes(r.value))
                       for r in records if r.key is not None]
                if header.is_transactional:
                    open_txns.setdefault(header.producer_id, []).extend(out)
                else:
                    yield from out
        except (OSError, errors.KafkaError, RecordError) as exc:
            # the groups of this partition load up to here; the broker still starts
            stopped = (batches.offset, exc)
        else:
            if batches.offset < end and skipped:
                stopped = skipped[-1]
        if skipped or stopped:
            # one line per partition, however much of it is damaged
            parts = []
            if skipped:
                parts.append(f"skipped {len(skipped)} corrupt batch(es), the first near offset {skipped[0][0]}: {skipped[0][1]}")
            if stopped:
                parts.append(f"stopped at offset {stopped[0]} of {end}: {stopped[1]}")
            log.error("%s-%d: loading %s", self.topic, partition, "; ".join(parts))
        for pid, pending in open_txns.items():
            yield from (r._replace(producer_id=pid) for r in pending)


class ReplicatedGroupStore(LogGroupStore):
    """`__consumer_offsets` in a cluster: appends go to the partition's leader through the replica
    manager, at its leader epoch, with acks=-1; `append` returns the wait for the ISR, which the
    coordinator awaits before it answers (Kafka's appendRecords with offsets.commit.timeout.ms).
    The partition count is the topic's, known once its metadata arrives (`num_partitions` is set then)."""

    def __init__(self, get_log: Callable[[int], OffsetsTopicLog | None], num_partitions: int,
                 replicas: OffsetsTopicReplicas, *, commit_timeout_ms: int,
                 on_appended: Callable[[TopicPartition], None] = lambda tp: None, topic: str = OFFSETS_TOPIC):
        """``on_appended(tp)`` wakes the followers' fetches parked at the log end, so the ISR catches up
        now rather than at the end of their replica.fetch.wait.max.ms."""
        super().__init__(get_log, num_partitions, topic=topic)
        self._replicas = replicas
        self._timeout_s = commit_timeout_ms / 1000
        self._on_appended = on_appended

    def append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]],
               timestamp_ms: int, producer: Producer | None = None) -> WaitForIsr | None:
        if not records:
            return None
        tp = TopicPartition(self.topic, self.partition_for(group_id))
        info = self._replicas.append_to_leader(tp, _batch(records, timestamp_ms, producer), -1, AppendOrigin.COORDINATOR)
        self._on_appended(tp)
        required = info.last_offset + 1
        replicas, timeout_s = self._replicas, self._timeout_s

        async def wait_for_isr() -> None:
            error = await replicas.wait_for_acks(tp, required, timeout_s)
            if error is not None:
                raise error(f"{tp}: the ISR did not acknowledge offset {required - 1}")

        return wait_for_isr
