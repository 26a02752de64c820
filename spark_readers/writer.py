"""``df.write.format("tieredlog")`` and ``writeStream.format("tieredlog")``: rows to topics, through the brokers.

The columns are those of Spark's Kafka sink (``KafkaWriter``), so a job written against
``format("kafka")`` writes the same way: ``value`` (string or binary, required), ``key`` (string or
binary), ``headers`` (``array<struct<key: string, value: binary>>``), ``partition`` (int) and ``topic``
(string); other columns are ignored, so a DataFrame read with ``format("tieredlog")`` or
``format("kafka")`` can be written back as it is. The ``topic`` option, when set, wins over the
``topic`` column, as in Spark.

Each Spark task produces its rows with its own idempotent confluent-kafka producer (``kafka.*``
options are passed to it without the prefix, as Spark passes them to its Java producer), waits for
every delivery report and fails the task on the first error, so a failed write is never reported as
done. Like Spark's Kafka sink this is at-least-once: a retried task or a failed job leaves the rows
already delivered in the topic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    Row,
    StringType,
    StructType,
)

from spark_readers.brokers import require_confluent_kafka

log = logging.getLogger(__name__)

KAFKA_PREFIX = "kafka."
COLUMNS = ("topic", "key", "value", "headers", "partition")

# What every task's producer gets unless a ``kafka.*`` option says otherwise. Idempotence (which
# implies acks=all and bounded in-flight requests) keeps the producer's own retries from duplicating
# or reordering rows within a partition. murmur2_random places keyed rows where Java clients (and so
# Spark's Kafka sink) place them, not where librdkafka's default CRC32 partitioner would.
PRODUCER_DEFAULTS: Mapping[str, str] = {
    "enable.idempotence": "true",
    "acks": "all",
    "partitioner": "murmur2_random",
}

HeaderList = list[tuple[str, bytes | None]]
# (topic, key, value, headers, partition), as confluent-kafka's produce() takes them
OutRow = tuple[str, bytes | None, bytes | None, HeaderList | None, int | None]


class WriteError(Exception):
    """A row could not be produced or was not acknowledged; the Spark task fails with this."""


@dataclass
class ProduceCommitMessage(WriterCommitMessage):
    """What one task delivered: rows and value+key bytes, and rows per ``topic-partition``."""

    rows: int = 0
    payload_bytes: int = 0
    partitions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteOptions:
    topic: str | None
    producer: dict[str, str]
    # which of COLUMNS are read from the rows (not `topic` when the option is set)
    columns: frozenset[str]


def _type_name(t: DataType) -> str:
    return t.simpleString()


def _is_headers_type(t: DataType) -> bool:
    # Spark compares catalog strings, which ignore nullability; a header value may be null.
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = t.elementType.fields
    return (len(fields) == 2 and fields[0].name == "key" and isinstance(fields[0].dataType, StringType)
            and fields[1].name == "value" and isinstance(fields[1].dataType, BinaryType))


def parse_write_options(options: Mapping[str, str], schema: StructType, overwrite: bool) -> WriteOptions:
    """Check the options and the DataFrame's schema on the driver, before any task runs.

    The messages are Spark's Kafka sink's (``KafkaWriter.validateQuery``), so a job moved between the
    two formats fails the same way.
    """
    if overwrite:
        raise ValueError("tieredlog only appends to topics: use mode('append'), not mode('overwrite')")
    producer = dict(PRODUCER_DEFAULTS)
    for k, v in options.items():
        if k.lower().startswith(KAFKA_PREFIX):
            producer[k[len(KAFKA_PREFIX):]] = v
    if "bootstrap.servers" not in producer:
        raise ValueError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer")
    topic = options.get("topic")
    if topic is not None and not topic.strip():
        raise ValueError("option 'topic' is empty")

    by_name = {f.name.lower(): f.dataType for f in schema.fields}
    if topic is None:
        if "topic" not in by_name:
            raise ValueError("topic option required when no 'topic' attribute is present. "
                             "Use the topic option for setting a topic.")
        if not isinstance(by_name["topic"], StringType):
            raise ValueError(f"topic attribute unsupported type {_type_name(by_name['topic'])}. "
                             "topic must be a(n) string")
    if "value" not in by_name:
        raise ValueError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in by_name and not isinstance(by_name[name], (StringType, BinaryType)):
            raise ValueError(f"{name} attribute unsupported type {_type_name(by_name[name])}. "
                             f"{name} must be a(n) string or binary")
    if "headers" in by_name and not _is_headers_type(by_name["headers"]):
        raise ValueError(f"headers attribute unsupported type {_type_name(by_name['headers'])}. "
                         "headers must be a(n) array<struct<key:string,value:binary>>")
    if "partition" in by_name and not isinstance(by_name["partition"], IntegerType):
        raise ValueError(f"partition attribute unsupported type {_type_name(by_name['partition'])}. "
                         "partition must be a(n) int")
    columns = frozenset(c for c in COLUMNS if c in by_name and not (c == "topic" and topic is not None))
    return WriteOptions(topic=topic, producer=producer, columns=columns)


def _to_bytes(v: object, what: str) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise WriteError(f"{what}: expected string or binary, got {type(v).__name__}")


def _headers(v: object) -> HeaderList | None:
    if v is None:
        return None
    out: HeaderList = []
    for h in v:  # type: ignore[attr-defined]  # a list of dicts (Arrow) or of Rows
        k, hv = (h["key"], h["value"])
        if k is None:
            raise WriteError("a header has a null key")
        out.append((k, _to_bytes(hv, "header value")))
    return out


def _out_row(opts: WriteOptions, get: Mapping[str, object]) -> OutRow:
    topic = opts.topic if opts.topic is not None else get["topic"]
    if topic is None:
        raise WriteError("null topic present in the data. Use the topic option for setting a default topic.")
    partition = get.get("partition")
    if partition is not None and not isinstance(partition, int):
        raise WriteError(f"partition: expected int, got {type(partition).__name__}")
    return (str(topic), _to_bytes(get.get("key"), "key"), _to_bytes(get["value"], "value"),
            _headers(get.get("headers")), partition)


def rows_from_arrow(opts: WriteOptions, batches: Iterable[pa.RecordBatch]) -> Iterator[OutRow]:
    wanted = [c for c in COLUMNS if c in opts.columns]
    for batch in batches:
        names = [n.lower() for n in batch.schema.names]
        cols = {c: batch.column(names.index(c)).to_pylist() for c in wanted}
        for i in range(batch.num_rows):
            yield _out_row(opts, {c: cols[c][i] for c in wanted})


def rows_from_spark(opts: WriteOptions, rows: Iterable[Row]) -> Iterator[OutRow]:
    wanted = [c for c in COLUMNS if c in opts.columns]
    for row in rows:
        d = {k.lower(): v for k, v in row.asDict().items()}
        yield _out_row(opts, {c: d[c] for c in wanted})


def produce(producer_config: Mapping[str, str], rows: Iterable[OutRow]) -> ProduceCommitMessage:
    """Produce ``rows`` and wait for every delivery report; raise :class:`WriteError` on any failure."""
    require_confluent_kafka()
    from confluent_kafka import KafkaError, KafkaException, Message, Producer

    result = ProduceCommitMessage()
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")
            return
        tp = f"{msg.topic()}-{msg.partition()}"
        result.rows += 1
        result.payload_bytes += len(msg.value() or b"") + len(msg.key() or b"")
        result.partitions[tp] = result.partitions.get(tp, 0) + 1

    producer = Producer(dict(producer_config))
    for topic, key, value, headers, partition in rows:
        if errors:  # stop feeding a producer that already lost a row; the task fails below
            break
        kwargs: dict[str, object] = {"key": key, "value": value, "on_delivery": on_delivery}
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)  # type: ignore[arg-type]
                break
            except BufferError:  # the local queue is full: serve delivery reports until there is room
                producer.poll(0.1)
            except KafkaException as e:
                where = topic if partition is None else f"{topic}-{partition}"
                errors.append(f"{where}: {e.args[0].str() if e.args else e}")
                break
        producer.poll(0)
    # Without a timeout flush returns once every row is acknowledged or has failed after the
    # producer's own retries (message.timeout.ms / delivery.timeout.ms), so nothing is left in doubt.
    left = producer.flush()
    if left:
        errors.append(f"{left} rows were not acknowledged")
    if errors:
        more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
        raise WriteError(f"writing to Kafka failed after {result.rows} rows were delivered: {errors[0]}{more}")
    return result


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, int]:
    done = [m for m in messages if isinstance(m, ProduceCommitMessage)]
    return sum(m.rows for m in done), sum(m.payload_bytes for m in done), len(messages) - len(done)


class TieredLogWriter(DataSourceArrowWriter):
    """Batch writer: each task produces the Arrow batches of its partition of the DataFrame."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProduceCommitMessage:
        return produce(self.options.producer, rows_from_arrow(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, size, _ = _summary(messages)
        log.info("wrote %d rows (%d bytes of keys and values) in %d tasks", rows, size, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # The rows of the tasks that succeeded stay in their topics (Kafka has no rollback outside
        # transactions); say how many, so a rerun's duplicates are expected.
        rows, _, failed = _summary(messages)
        log.warning("write failed in %d of %d tasks; %d rows were already delivered and stay in the topics",
                    failed, len(messages), rows)


class TieredLogStreamWriter(DataSourceStreamWriter):
    """Streaming writer: each micro-batch's tasks produce their rows; a failed batch is retried by Spark."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> ProduceCommitMessage:
        return produce(self.options.producer, rows_from_spark(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        rows, size, _ = _summary(messages)
        log.info("batch %d: wrote %d rows (%d bytes of keys and values)", batchId, rows, size)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        rows, _, failed = _summary(messages)
        log.warning("batch %d failed in %d of %d tasks; %d rows were already delivered and stay in the topics",
                    batchId, failed, len(messages), rows)
