"""Real PySpark (local[2], Java 17) writing DataFrames to a real broker with ``format("tieredlog")``.

Rows are consumed back with confluent-kafka and compared row for row; a tiered topic is read from the
broker's remote tier with ``spark.read.format("tieredlog")`` and written to another topic (topic ->
Spark -> topic); a streaming query writes with ``writeStream.format("tieredlog")``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for
from spark_harness import spark  # noqa: F401  (fixture)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS
from tieredlog.rlmm.partitioner import murmur2, to_positive

pytestmark = pytest.mark.integration

LATEST_TIERED = -5  # ListOffsets timestamp for the highest offset in remote storage (KIP-1005)
HEADERS_TYPE = "array<struct<key:string,value:binary>>"

# (key, value, headers, partition) as a consumer sees them
Got = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...] | None, int]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # The default remote tier (a LocalTieredStorage folder under the log dir) is what the tiered
    # round trip reads; the short intervals make segments tier within a second.
    b = BrokerProcess(tmp_path_factory.mktemp("spark-write") / "data", {
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
    }).start()
    try:
        yield b
    finally:
        b.stop()


def create(bootstrap: str, topic: str, partitions: int, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(30)


def consume(bootstrap: str, topic: str, partitions: int, count: int) -> dict[int, list[Got]]:
    """Every partition from offset 0, ``count`` records in all, each partition's in offset order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-write-test", "enable.auto.commit": False,
                  "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[Got]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 30
    n = 0
    try:
        while n < count and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                assert m.offset() == len(out[m.partition()])  # nothing skipped, nothing twice
                h = m.headers()
                out[m.partition()].append((m.key(), m.value(), tuple(h) if h else None, m.partition()))
                n += 1
        # anything more than the DataFrame's rows (a duplicate) would show up within a short wait
        extra = c.consume(100, 0.5)
    finally:
        c.close()
    assert n == count and not extra, (n, count, len(extra))
    return out


def writer(df, bootstrap: str, **options: str):
    w = df.write.format("tieredlog").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_rows_with_keys_headers_and_partitions_consumed_back(spark, kafka: BrokerProcess) -> None:
    topic, n = "w-rows", 400
    create(kafka.bootstrap, topic, 3)
    rows = []
    for i in range(n):
        key = None if i % 5 == 0 else b"key-%d" % i
        headers = None if i % 3 == 0 else [("i", b"%d" % i), ("null", None), ("empty", b"")][: i % 4]
        partition = None if i % 7 == 0 else i % 3  # null: the producer's partitioner places the row
        rows.append((key, f"value-{i}-é" * (1 + i % 4), headers, partition))
    df = spark.createDataFrame(rows, f"key binary, value string, headers {HEADERS_TYPE}, partition int")
    tasks = df.rdd.getNumPartitions()
    assert tasks == 2  # two tasks produce concurrently, each with its own producer
    writer(df, kafka.bootstrap, topic=topic).save()

    got = consume(kafka.bootstrap, topic, 3, n)
    expected: dict[int, Got] = {}
    for i, (key, value, headers, partition) in enumerate(rows):
        expected[i] = (key, value.encode(), tuple(headers) if headers else None, partition)
    index = {e[1]: i for i, e in expected.items()}
    seen = set()
    for p, records in got.items():
        per_task: dict[int, list[int]] = {}
        for key, value, headers, partition in records:
            i = index[value]
            e = expected[i]
            assert (key, value, headers) == e[:3]
            if e[3] is not None:
                assert partition == e[3]
            elif key is not None:  # placed by the key's hash as the Java producer (Spark's sink) does
                assert partition == to_positive(murmur2(key)) % 3
            seen.add(i)
            per_task.setdefault(i * tasks // n, []).append(i)  # createDataFrame slices rows in order
        # each task's rows keep their DataFrame order within a partition
        assert all(ids == sorted(ids) for ids in per_task.values()), p
    assert seen == set(range(n))


def test_topic_column_writes_two_topics(spark, kafka: BrokerProcess) -> None:
    create(kafka.bootstrap, "w-left", 1)  # one task below: the rows keep their order
    create(kafka.bootstrap, "w-right", 1)
    rows = [("w-left" if i % 2 else "w-right", b"v%d" % i) for i in range(100)]
    df = spark.createDataFrame(rows, "topic string, value binary").coalesce(1)
    writer(df, kafka.bootstrap).save()
    for topic, parity in (("w-left", 1), ("w-right", 0)):
        got = consume(kafka.bootstrap, topic, 1, 50)[0]
        assert [g[1] for g in got] == [b"v%d" % i for i in range(100) if i % 2 == parity]
        assert {g[0] for g in got} == {None}
    # the topic option, when set, wins over the column, as in Spark's Kafka sink
    create(kafka.bootstrap, "w-over", 1)
    writer(df, kafka.bootstrap, topic="w-over").save()
    assert [g[1] for g in consume(kafka.bootstrap, "w-over", 1, 100)[0]] == [b"v%d" % i for i in range(100)]


def test_schema_errors_fail_before_any_task(spark, kafka: BrokerProcess) -> None:
    from pyspark.errors import PySparkException
    from pyspark.sql.utils import CapturedException

    failures = (PySparkException, CapturedException)
    df = spark.createDataFrame([(b"k", 1)], "key binary, v int")
    with pytest.raises(failures, match="Required attribute 'value' not found"):
        writer(df, kafka.bootstrap, topic="w-never").save()
    with pytest.raises(failures, match="value attribute unsupported type int"):
        writer(df.withColumnRenamed("v", "value"), kafka.bootstrap, topic="w-never").save()
    with pytest.raises(failures, match="topic option required when no 'topic' attribute is present"):
        writer(df.withColumnRenamed("v", "value").selectExpr("CAST(value AS STRING) AS value"),
               kafka.bootstrap).save()
    with pytest.raises(failures, match="partition attribute unsupported type bigint"):
        writer(spark.createDataFrame([("x", 1)], "value string, partition long"), kafka.bootstrap,
               topic="w-never").save()
    with pytest.raises(failures, match="kafka.bootstrap.servers"):
        spark.createDataFrame([("x",)], "value string").write.format("tieredlog").mode("append") \
            .option("topic", "w-never").save()


def test_delivery_error_fails_the_job(spark, kafka: BrokerProcess) -> None:
    create(kafka.bootstrap, "w-small", 1)
    df = spark.createDataFrame([("ok", 0), ("nowhere", 5)], "value string, partition int").coalesce(1)
    with pytest.raises(Exception, match="writing to Kafka failed") as e:
        writer(df, kafka.bootstrap, topic="w-small").save()
    assert "w-small-5" in str(e.value)


def test_tiered_topic_to_spark_to_topic(spark, kafka: BrokerProcess) -> None:
    src, dst, n = "w-src", "w-dst", 1500
    create(kafka.bootstrap, src, 2, **{"remote.storage.enable": "true", "segment.bytes": "8000",
                                       "local.retention.bytes": "1"})
    create(kafka.bootstrap, dst, 2)
    # small batches, so the records fill several segments (a batch never straddles two)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "batch.size": 2048})
    for i in range(n):
        p.produce(src, key=None if i % 4 == 0 else b"k%d" % i, value=b"payload-%d" % i, partition=i % 2,
                  headers=None if i % 3 == 0 else [("i", b"%d" % i)])
        p.poll(0)
    assert p.flush(30) == 0
    del p  # librdkafka would keep reconnecting to the stopped broker after the module

    def tiered_ends() -> dict[int, int] | None:
        with KafkaClient(kafka.bootstrap) as c:
            r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": src, "partitions": [{"partition_index": q, "timestamp": LATEST_TIERED,
                                              "current_leader_epoch": -1} for q in range(2)]}]})
        ends = {q.partition_index: q.offset + 1 for q in r.topics[0].partitions}
        return ends if all(e > 100 for e in ends.values()) else None

    ends = wait_for(tiered_ends, "segments of both partitions tiered", 60)
    df = (spark.read.format("tieredlog").option("path", (kafka.data_dir / "remote-storage").as_uri())
          .option("topic", src).option("includeHeaders", "true")
          .option("endingOffsets", json.dumps({src: {str(q): e for q, e in ends.items()}})).load())
    # One task per partition, in offset order, keeps each partition's order in the copy; the
    # `partition` column of the read sends each row to the same partition number.
    writer(df.repartition(2, "partition").sortWithinPartitions("offset"), kafka.bootstrap, topic=dst).save()

    got = consume(kafka.bootstrap, dst, 2, sum(ends.values()))
    for q in range(2):
        want = [(None if i % 4 == 0 else b"k%d" % i, b"payload-%d" % i,
                 None if i % 3 == 0 else (("i", b"%d" % i),), q) for i in range(q, n, 2)][: ends[q]]
        assert got[q] == want


def test_streaming_writer(spark, kafka: BrokerProcess, tmp_path: Path) -> None:
    topic = "w-stream"
    create(kafka.bootstrap, topic, 1)
    src = tmp_path / "in"
    src.mkdir()
    for f in range(3):
        (src / f"part-{f}.json").write_text("".join(json.dumps({"k": f"k{f}-{i}", "v": f"v{f}-{i}"}) + "\n"
                                                    for i in range(20)))
    stream = (spark.readStream.schema("k string, v string").option("maxFilesPerTrigger", 1).json(str(src))
              .selectExpr("k AS key", "v AS value"))
    query = (stream.writeStream.format("tieredlog").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("topic", topic).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(60)
    assert query.exception() is None
    got = consume(kafka.bootstrap, topic, 1, 60)[0]
    assert sorted((g[0], g[1]) for g in got) == sorted(
        (f"k{f}-{i}".encode(), f"v{f}-{i}".encode()) for f in range(3) for i in range(20))
