"""The brokers' tail of a topic (``kafka.bootstrap.servers``): offsets that are not in the remote tier yet.

The driver asks the brokers (confluent-kafka's AdminClient: Metadata and ListOffsets) which partitions a
topic has and where each one starts and ends, the end being the high watermark, or the last stable
offset with ``kafka.isolation.level=read_committed``, as a consumer of that level sees it. Each executor
task then reads one offset range of one partition with its own consumer: ``assign`` at the first offset,
``consume`` until the range's end, one Arrow batch per ``consume`` call. With read_committed the
consumer drops aborted records and markers itself, so a range may end on offsets that never come; the
partition-EOF event (raised at the high watermark, or at the last stable offset for read_committed) at
or past the range's end says it is done.

``kafka.*`` options (prefix removed) configure both clients, in librdkafka's names; the consumer's group
is never joined nor committed to (``assign``, ``enable.auto.commit=false``), as Spark's Kafka source
uses its consumers.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping

import pyarrow as pa

from spark_readers.decoder import HEADER_TYPE, HEADERS_TYPE, TIMESTAMP_TYPE, kafka_schema

if TYPE_CHECKING:
    from confluent_kafka import Message
    from confluent_kafka.admin import OffsetSpec

_BATCH = 10_000


class BrokerError(Exception):
    """The brokers cannot answer or serve a range; names the partition and offsets, never a secret."""


def require_confluent_kafka() -> None:
    """Fail in one line naming the extra to install when confluent-kafka is missing. It is imported only
    where the brokers are talked to, so the planner (``TailTask``) and ``tieredlog export``, which read the
    remote tier alone, work on the base install."""
    try:
        import confluent_kafka  # noqa: F401
    except ModuleNotFoundError:
        raise ModuleNotFoundError("reading from or writing to the brokers (kafka.bootstrap.servers) needs "
                                  "confluent-kafka: pip install 'tieredlog[spark]'") from None


@dataclass(frozen=True, slots=True)
class TailTask:
    """Offsets ``[from_offset, to_offset)`` of one partition, read from the brokers. Picklable."""

    topic: str
    partition: int
    from_offset: int
    to_offset: int


class Brokers:
    """The driver's view of the brokers: topics, partitions, and each partition's first and end offsets."""

    def __init__(self, config: Mapping[str, str], read_committed: bool, timeout_s: float) -> None:
        require_confluent_kafka()
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient(dict(config))
        self._isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        self._timeout = timeout_s
        self._partitions: dict[str, list[int]] | None = None

    def topics(self) -> list[str]:
        return sorted(t for t in self._metadata() if not t.startswith("__"))

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions ([] for a topic the brokers do not have)."""
        return self._metadata().get(topic, [])

    def bounds(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """Partition -> (log start offset, end): ListOffsets earliest and latest at this isolation level."""
        from confluent_kafka.admin import OffsetSpec

        out: dict[int, tuple[int, int]] = {}
        earliest = self._list(topic, partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        latest = self._list(topic, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        for p in partitions:
            out[p] = (earliest[p], latest[p])
        return out

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The earliest offset whose timestamp is at or after ``timestamp_ms``; None when none is."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list(topic, [partition], OffsetSpec.for_timestamp(timestamp_ms))[partition]
        return None if found < 0 else found

    def _list(self, topic: str, partitions: list[int], spec: OffsetSpec) -> dict[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        request = {TopicPartition(topic, p): spec for p in partitions}
        try:
            futures = self._admin.list_offsets(request, isolation_level=self._isolation,
                                               request_timeout=self._timeout)
            return {tp.partition: f.result().offset for tp, f in futures.items()}
        except KafkaException as exc:
            raise BrokerError(f"cannot list the offsets of {topic} on the brokers: {exc.args[0]}") from None

    def _metadata(self) -> dict[str, list[int]]:
        from confluent_kafka import KafkaException

        if self._partitions is None:
            try:
                md = self._admin.list_topics(timeout=self._timeout)
            except KafkaException as exc:
                raise BrokerError(f"cannot reach the brokers (kafka.bootstrap.servers): {exc.args[0]}") from None
            self._partitions = {name: sorted(t.partitions) for name, t in md.topics.items() if t.error is None}
        return self._partitions


def consumer_config(config: Mapping[str, str], read_committed: bool) -> dict[str, str]:
    return {**config, "group.id": f"tieredlog-spark-{uuid.uuid4()}", "enable.auto.commit": "false",
            "enable.partition.eof": "true", "auto.offset.reset": "error",
            "isolation.level": "read_committed" if read_committed else "read_uncommitted"}


def read_tail(config: Mapping[str, str], task: TailTask, include_headers: bool,
              timeout_ms: int) -> Iterator[pa.RecordBatch]:
    """The records of ``task``'s range as the consumer returns them, in the data source's schema, one
    Arrow batch per ``consume`` call. Fails when ``timeout_ms`` pass without the range moving on."""
    require_confluent_kafka()
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    eof = KafkaError._PARTITION_EOF
    name = f"{task.topic}-{task.partition}"
    consumer = Consumer(dict(config))
    try:
        consumer.assign([TopicPartition(task.topic, task.partition, task.from_offset)])
        position = task.from_offset
        deadline = time.monotonic() + timeout_ms / 1000
        done = task.from_offset >= task.to_offset
        while not done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(f"{name}: offsets {position}..{task.to_offset - 1} not read from the brokers "
                                  f"within kafkaConsumer.pollTimeoutMs={timeout_ms}")
            records: list[Message] = []
            for m in consumer.consume(_BATCH, min(remaining, 1.0)):
                done = _take(m, task, name, eof)
                if done:
                    break
                if m.error() is None:
                    records.append(m)
                # else an EOF below the range's end: more is coming
            if records:
                position = _offset(records[-1]) + 1
                deadline = time.monotonic() + timeout_ms / 1000
                yield _batch(task, records, include_headers)
    finally:
        consumer.close()


def _take(m: Message, task: TailTask, name: str, eof: int) -> bool:
    """Whether ``m`` ends the range: a record at or past its end, or the partition's EOF (``eof``) there."""
    err = m.error()
    if err is None or err.code() == eof:
        return _offset(m) >= task.to_offset
    raise BrokerError(f"{name}: reading offsets {task.from_offset}..{task.to_offset - 1} from the brokers: "
                      f"{err.str()}")


def _headers(m: Message) -> list[tuple[str, bytes | None]]:
    # librdkafka hands headers over as a list of (name, value) pairs, or None
    return list(m.headers() or [])  # type: ignore[arg-type]


def _offset(m: Message) -> int:
    offset = m.offset()
    if offset is None:  # only a message that is not a record or an EOF has none
        raise BrokerError(f"{m.topic()}-{m.partition()}: the consumer returned a message without an offset")
    return offset


def _batch(task: TailTask, records: list[Message], include_headers: bool) -> pa.RecordBatch:
    count = len(records)
    stamps = [m.timestamp() for m in records]
    columns = [
        pa.array([m.key() for m in records], pa.binary()),
        pa.array([m.value() for m in records], pa.binary()),
        pa.repeat(pa.scalar(task.topic, pa.string()), count),
        pa.repeat(pa.scalar(task.partition, pa.int32()), count),
        pa.array([_offset(m) for m in records], pa.int64()),
        pa.array([ts * 1000 for _, ts in stamps], pa.int64()).cast(TIMESTAMP_TYPE),
        # librdkafka's CreateTime is 1, Kafka's TimestampType.id 0
        pa.array([ts_type - 1 for ts_type, _ in stamps], pa.int32()),
    ]
    if include_headers:
        # null, not [], for a record without headers, as the remote tier's rows
        items = [[{"key": k, "value": v} for k, v in _headers(m)] or None for m in records]
        columns.append(pa.array(items, pa.list_(pa.field("element", HEADER_TYPE))).cast(HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=kafka_schema(include_headers))
