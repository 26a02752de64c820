"""Real PySpark (local[2]) streaming from moto's S3 server while a real broker keeps tiering into it.

``spark.readStream.format("tieredlog")`` with a checkpoint: the first run reads what is tiered, in
micro-batches capped by ``maxOffsetsPerTrigger``; more records are produced and tiered; a second run
from the same checkpoint reads exactly the new ones. Together the runs must equal what a
confluent-kafka consumer reads from the broker: no record twice, none missing. The offset arithmetic
(``maxOffsetsPerTrigger``'s spread, the offset JSON, the streaming options) is unit-tested at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from helpers import wait_for
from s3servers import S3Endpoint, moto_s3, unique_prefix  # noqa: F401  (fixture)
from spark_harness import s3_tier_overrides, spark  # noqa: F401  (fixture)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS

TOPIC = "spark-stream"
LATEST_TOPIC = "spark-stream-latest"
PARTITIONS = 2
LATEST_TIERED = -5  # ListOffsets timestamp for the highest offset in remote storage (KIP-1005)
LIMIT = 100  # maxOffsetsPerTrigger

Row = tuple[int, int, bytes]  # (partition, offset, value)


@pytest.fixture(scope="module")
def broker(moto_s3: S3Endpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker tiering TOPIC into moto; (broker, key prefix)."""
    prefix = unique_prefix()
    b = BrokerProcess(tmp_path_factory.mktemp("spark-stream-broker") / "data", s3_tier_overrides(moto_s3, prefix)).start()
    try:
        yield b, prefix
    finally:
        b.stop()


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # small segments, and a local retention that rolls and uploads the active segment too, so every
    # produced record reaches the remote tier within seconds
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={
        "remote.storage.enable": "true", "segment.bytes": "2000", "index.interval.bytes": "256",
        "local.retention.ms": "500"})])[topic].result(30)


def produce(bootstrap: str, topic: str, first: int, count: int, partitions: int = PARTITIONS) -> None:
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1024, "enable.idempotence": True})
    for i in range(first, first + count):
        p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=i % partitions,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(60) == 0
    assert errors == []


def list_offsets(bootstrap: str, topic: str, timestamp: int, partitions: int = PARTITIONS) -> dict[int, int]:
    with KafkaClient(bootstrap) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1}
                                           for p in range(partitions)]}]})
        return {part.partition_index: part.offset for part in r.topics[0].partitions if part.error_code == 0}


def wait_tiered(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """Waits until every produced offset is in the remote tier; the end offset per partition."""
    ends = list_offsets(bootstrap, topic, -1, partitions)
    wait_for(lambda: (lambda t: len(t) == partitions and all(t[p] + 1 == ends[p] for p in t))(
        list_offsets(bootstrap, topic, LATEST_TIERED, partitions)), "every offset tiered", 120)
    return ends


def consume_all(bootstrap: str, topic: str, total: int) -> list[Row]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-stream-test", "enable.auto.commit": False,
                  "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    rows: list[Row] = []
    deadline = time.monotonic() + 60
    try:
        while len(rows) < total and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                rows.append((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    return sorted(rows)


def stream_reader(spark, endpoint: S3Endpoint, prefix: str, topic: str, **options: str):
    r = (spark.readStream.format("tieredlog").option("path", f"s3://{endpoint.bucket}/{prefix.rstrip('/')}")
         .option("topic", topic)
         .option("storage.s3.endpoint.url", endpoint.url).option("storage.s3.region", endpoint.region)
         .option("storage.s3.path.style.access.enabled", "true")
         .option("storage.aws.access.key.id", endpoint.access_key)
         .option("storage.aws.secret.access.key", endpoint.secret_key))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_stream(spark, endpoint: S3Endpoint, prefix: str, topic: str, checkpoint: Path,
               **options: str) -> list[list[Row]]:
    """One run of the query until everything tiered is read (Trigger.AvailableNow); each micro-batch's rows."""
    batches: list[list[Row]] = []

    def collect(df, batch_id: int) -> None:
        batches.append([(r["partition"], r["offset"], bytes(r["value"]))
                        for r in df.select("partition", "offset", "value").collect()])

    query = (stream_reader(spark, endpoint, prefix, topic, **options).writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()
    return batches


def last_checkpointed_offset(checkpoint: Path) -> dict[str, Any]:
    offsets = checkpoint / "offsets"
    newest = max((f for f in offsets.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    # Spark's offset log: a version line, the batch metadata, then one line per source
    return json.loads(newest.read_text().splitlines()[-1])


@pytest.mark.integration
def test_stream_reads_new_segments_across_runs_from_its_checkpoint(
        spark, moto_s3: S3Endpoint, broker: tuple[BrokerProcess, str], tmp_path: Path) -> None:
    b, prefix = broker
    checkpoint = tmp_path / "checkpoint"
    create_topic(b.bootstrap, TOPIC)

    produce(b.bootstrap, TOPIC, 0, 300)
    first_ends = wait_tiered(b.bootstrap, TOPIC)
    first = run_stream(spark, moto_s3, prefix, TOPIC, checkpoint, maxOffsetsPerTrigger=str(LIMIT))
    # maxOffsetsPerTrigger: 300 offsets in 3 micro-batches of at most 100 (the backlogs are equal, so
    # each partition gets half of every batch)
    sizes = [len(batch) for batch in first if batch]
    assert sizes == [LIMIT] * 3, sizes
    assert last_checkpointed_offset(checkpoint) == {TOPIC: {str(p): first_ends[p] for p in range(PARTITIONS)}}

    produce(b.bootstrap, TOPIC, 300, 250)
    second_ends = wait_tiered(b.bootstrap, TOPIC)
    second = run_stream(spark, moto_s3, prefix, TOPIC, checkpoint)
    new_rows = sorted(r for batch in second for r in batch)
    assert new_rows and all(r[1] >= first_ends[r[0]] for r in new_rows), "the second run read old offsets"
    assert len(new_rows) == 250

    streamed = sorted(r for batch in first + second for r in batch)
    assert len(streamed) == len(set(streamed)) == 550  # no record twice
    assert streamed == consume_all(b.bootstrap, TOPIC, 550)  # none missing, the same bytes
    assert last_checkpointed_offset(checkpoint) == {TOPIC: {str(p): second_ends[p] for p in range(PARTITIONS)}}

    # a third run finds nothing new: no micro-batch with rows
    assert [batch for batch in run_stream(spark, moto_s3, prefix, TOPIC, checkpoint) if batch] == []


@pytest.mark.integration
def test_a_running_query_started_at_latest_picks_up_new_segments_and_partitions(
        spark, moto_s3: S3Endpoint, broker: tuple[BrokerProcess, str], tmp_path: Path) -> None:
    b, prefix = broker
    create_topic(b.bootstrap, LATEST_TOPIC)
    produce(b.bootstrap, LATEST_TOPIC, 0, 30)  # tiered before the query starts: not read
    ends = wait_tiered(b.bootstrap, LATEST_TOPIC)
    batches: list[list[Row]] = []

    def collect(df, batch_id: int) -> None:
        batches.append([(r["partition"], r["offset"], bytes(r["value"]))
                        for r in df.select("partition", "offset", "value").collect()])

    query = (stream_reader(spark, moto_s3, prefix, LATEST_TOPIC, startingOffsets="latest")
             .writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="500 milliseconds")
             .start())
    try:
        query.processAllAvailable()
        assert [batch for batch in batches if batch] == []  # latest: nothing tiered before the start
        produce(b.bootstrap, LATEST_TOPIC, 1000, 40)
        wait_tiered(b.bootstrap, LATEST_TOPIC)
        query.processAllAvailable()
        rows = sorted(r for batch in batches for r in batch)
        assert sorted(r[2] for r in rows) == sorted(b"value-%d" % i for i in range(1000, 1040))
        assert all(r[1] >= ends[r[0]] for r in rows)
        # a partition added while the query runs is read from its earliest offset, as in Spark
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept alive until the future resolves
        admin.create_partitions([NewPartitions(LATEST_TOPIC, PARTITIONS + 1)])[LATEST_TOPIC].result(30)
        produce(b.bootstrap, LATEST_TOPIC, 3000, 30, partitions=PARTITIONS + 1)
        wait_tiered(b.bootstrap, LATEST_TOPIC, PARTITIONS + 1)
        query.processAllAvailable()
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    rows = sorted(r for batch in batches for r in batch)
    assert sorted(r[2] for r in rows) == sorted(b"value-%d" % i for i in [*range(1000, 1040), *range(3000, 3030)])
    assert [r[1] for r in rows if r[0] == PARTITIONS] == list(range(10))
    assert len(rows) == len(set(rows))


def test_max_offsets_per_trigger_is_spread_by_backlog_as_sparks_kafka_source_spreads_it() -> None:
    from spark_readers.stream import rate_limit

    a, b = ("t", 0), ("t", 1)
    # backlogs 300 and 100: three quarters of the cap to the first
    assert rate_limit(100, {a: 0, b: 50}, {a: 300, b: 150}) == {a: 75, b: 75}
    # a share under one offset still advances by one: a small partition is never starved
    assert rate_limit(10, {a: 0, b: 7}, {a: 1000, b: 8}) == {a: 9, b: 8}
    # under the cap: everything
    assert rate_limit(100, {a: 10, b: 0}, {a: 40, b: 60}) == {a: 40, b: 60}
    # a partition with nothing new stays where it is
    assert rate_limit(10, {a: 5, b: 0}, {a: 5, b: 100}) == {a: 5, b: 10}


def test_offsets_are_json_shaped_as_sparks_kafka_source_checkpoints_them() -> None:
    from spark_readers.stream import from_json, to_json

    positions = {("orders", 1): 7, ("orders", 0): 42, ("audit", 0): 0}
    assert to_json(positions) == {"audit": {"0": 0}, "orders": {"0": 42, "1": 7}}
    assert from_json(json.loads(json.dumps(to_json(positions)))) == positions


def test_streaming_options() -> None:
    from spark_readers.options import LATEST, OptionError, parse_options

    base = {"path": "file:///tmp/none", "topic": "orders"}
    assert parse_options({**base, "startingOffsets": "latest"}, streaming=True).starting.default == LATEST
    assert parse_options({**base, "startingOffsets": '{"orders":{"0":-1,"1":5}}'}, streaming=True) \
        .starting.per_topic == {"orders": {0: LATEST, 1: 5}}
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_options({**base, "startingOffsets": "latest"})  # a batch query has no "latest" start
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(OptionError, match=f"{name} is not valid in streaming queries"):
            parse_options({**base, name.lower(): "1"}, streaming=True)
    assert parse_options({**base, "maxOffsetsPerTrigger": "500"}, streaming=True).max_offsets_per_trigger == 500
    assert parse_options(base, streaming=True).max_offsets_per_trigger is None
    with pytest.raises(OptionError, match="maxoffsetspertrigger must be positive"):
        parse_options({**base, "maxOffsetsPerTrigger": "0"}, streaming=True)


def test_an_empty_micro_batch_plans_nothing_without_touching_the_store() -> None:
    from spark_readers.options import parse_options
    from spark_readers.storage import storage_spec
    from spark_readers.stream import TieredLogStreamReader

    options = parse_options({"path": "file:///nonexistent/tier", "topic": "orders"}, streaming=True)
    reader = TieredLogStreamReader(options, storage_spec(options.path, options.storage))
    offset = {"orders": {"0": 5, "1": 9}}
    assert reader.partitions(offset, offset) == []
