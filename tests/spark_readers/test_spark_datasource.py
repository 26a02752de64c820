"""Real PySpark (local[2], Java 17) reading a topic straight from moto's S3 server, no broker running.

A broker tiers into moto a topic of three partitions produced by five confluent-kafka producers (none,
gzip, snappy, lz4, zstd) with headers, null keys and null values; a confluent-kafka consumer reads it
all; local retention rolls and uploads even the active segments; the broker is stopped; then
``spark.read.format("tieredlog")`` must give the consumer's rows, row for row, for the tiered offsets.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for
from s3servers import S3Endpoint, moto_s3, unique_prefix  # noqa: F401  (fixture)
from spark_harness import s3_tier_overrides, spark  # noqa: F401  (fixture)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS
from tieredlog.records.batch import iter_headers

pytestmark = pytest.mark.integration

TOPIC = "spark-mixed"
PARTITIONS = 3
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 240
TS0 = int(time.time() * 1000) - 60_000
LATEST_TIERED = -5  # ListOffsets timestamp for the highest offset in remote storage (KIP-1005)

Row = tuple[bytes | None, bytes | None, str, int, int, int, int, tuple[tuple[str, bytes | None], ...] | None]


def key_of(i: int) -> bytes | None:
    return None if i % 5 == 0 else b"key-%d" % i


def value_of(i: int) -> bytes | None:
    return None if i % 13 == 0 else b"value-%d|" % i * (1 + i % 17)


def headers_of(i: int) -> list[tuple[str, bytes | None]] | None:
    if i % 3 == 0:
        return None
    return [("i", b"%d" % i), ("empty", b""), ("null", None)][: 1 + i % 3]


def produce_all(bootstrap: str) -> None:
    errors: list = []
    i = 0
    for codec in CODECS:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                      "batch.size": 4096, "enable.idempotence": True})
        for _ in range(PER_CODEC):
            p.produce(TOPIC, key=key_of(i), value=value_of(i), partition=i % PARTITIONS, timestamp=TS0 + i,
                      headers=headers_of(i), on_delivery=lambda err, msg: errors.append(err) if err else None)
            p.poll(0)
            i += 1
        assert p.flush(60) == 0
    assert errors == []


def list_offsets(bootstrap: str, timestamp: int) -> dict[int, int]:
    with KafkaClient(bootstrap) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1}
                                           for p in range(PARTITIONS)]}]})
        out = {}
        for part in r.topics[0].partitions:
            assert part.error_code == 0, part
            out[part.partition_index] = part.offset
        return out


def consume_all(bootstrap: str, ends: dict[int, int]) -> list[Row]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-test", "enable.auto.commit": False,
                  "auto.offset.reset": "error"})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    rows: list[Row] = []
    deadline = time.monotonic() + 60
    try:
        while len(rows) < sum(ends.values()) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                ts_type, ts = m.timestamp()
                headers = m.headers()
                rows.append((m.key(), m.value(), m.topic(), m.partition(), m.offset(), ts,
                             ts_type - 1,  # librdkafka's CreateTime is 1, Kafka's TimestampType.id 0
                             tuple(headers) if headers else None))
    finally:
        c.close()
    return sorted(rows, key=lambda r: (r[3], r[4]))


@pytest.fixture(scope="module")
def tiered(moto_s3: S3Endpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Row], dict[int, int]]]:
    """(key prefix, the consumer's rows, tiered end offset per partition), broker stopped."""
    prefix = unique_prefix()
    broker = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data", s3_tier_overrides(moto_s3, prefix)).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # local retention is off until everything was consumed, so the consumer reads local data too
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "6000",
            "index.interval.bytes": "512"})])[TOPIC].result(30)
        produce_all(broker.bootstrap)
        ends = list_offsets(broker.bootstrap, -1)
        rows = consume_all(broker.bootstrap, ends)
        assert len(rows) == len(CODECS) * PER_CODEC
        from confluent_kafka.admin import ConfigResource
        # now roll and upload the active segments too: everything becomes tiered
        admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
            _set("local.retention.ms", "500")])])[ConfigResource(ConfigResource.Type.TOPIC, TOPIC)].result(30)
        tiered_ends = wait_for(
            lambda: (lambda t: t if all(t[p] + 1 == ends[p] for p in t) else None)(
                list_offsets(broker.bootstrap, LATEST_TIERED)),
            "every offset tiered", 120)
        assert tiered_ends is not None
        del admin  # librdkafka would keep reconnecting to the stopped broker for the rest of the module
    finally:
        broker.stop()
    yield prefix, rows, {p: o + 1 for p, o in tiered_ends.items()}


def _set(name: str, value: str):  # noqa: ANN202 - confluent-kafka's ConfigEntry
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def reader(spark, endpoint: S3Endpoint, prefix: str, **options: str):
    r = (spark.read.format("tieredlog").option("path", f"s3://{endpoint.bucket}/{prefix.rstrip('/')}")
         .option("storage.s3.endpoint.url", endpoint.url).option("storage.s3.region", endpoint.region)
         .option("storage.s3.path.style.access.enabled", "true")
         .option("storage.aws.access.key.id", endpoint.access_key)
         .option("storage.aws.secret.access.key", endpoint.secret_key))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def spark_rows(df) -> list[Row]:
    out: list[Row] = []
    with_headers = "headers" in df.columns
    for r in df.selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect():
        headers = tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]) \
            if with_headers and r["headers"] is not None else None
        out.append((None if r["key"] is None else bytes(r["key"]), None if r["value"] is None else bytes(r["value"]),
                    r["topic"], r["partition"], r["offset"], r["ts_ms"], r["timestampType"], headers))
    return sorted(out, key=lambda row: (row[3], row[4]))


def test_dataframe_equals_what_a_consumer_read(spark, moto_s3: S3Endpoint, tiered) -> None:
    prefix, consumed, tiered_ends = tiered
    df = reader(spark, moto_s3, prefix, topic=TOPIC, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    expected = [r for r in consumed if r[4] < tiered_ends[r[3]]]
    assert len(expected) == len(consumed)  # local retention had every segment uploaded
    assert spark_rows(df) == expected
    client = moto_s3.client()
    logs = [o["Key"] for o in client.list_objects_v2(Bucket=moto_s3.bucket, Prefix=prefix)["Contents"]
            if o["Key"].endswith(".log")]
    codecs = {h.compression for key in logs
              for _, h in iter_headers(client.get_object(Bucket=moto_s3.bucket, Key=key)["Body"].read())}
    assert codecs == {0, 1, 2, 3, 4} and len(logs) > 2 * PARTITIONS
    assert df.rdd.getNumPartitions() > PARTITIONS  # one input partition per segment
    plan_text = df._jdf.queryExecution().toString()
    assert "tieredlog" in plan_text.lower() and moto_s3.secret_key not in plan_text
    # without includeHeaders, as in Spark's Kafka source: no headers column
    plain = reader(spark, moto_s3, prefix, subscribe=TOPIC)
    assert "headers" not in plain.columns and plain.count() == len(expected)


def test_offset_range(spark, moto_s3: S3Endpoint, tiered) -> None:
    prefix, consumed, tiered_ends = tiered
    df = reader(spark, moto_s3, prefix, subscribePattern="spark-mix.*", includeHeaders="true",
                startingOffsets=f'{{"{TOPIC}":{{"0":17,"1":-2,"2":300}}}}',
                endingOffsets=f'{{"{TOPIC}":{{"0":251,"1":5,"2":-1}}}}', maxBytesPerPartition="2048")
    bounds = {0: (17, 251), 1: (0, 5), 2: (300, 1 << 62)}
    expected = [r for r in consumed if bounds[r[3]][0] <= r[4] < bounds[r[3]][1]]
    assert len(expected) == (251 - 17) + 5 + (tiered_ends[2] - 300)
    assert spark_rows(df) == expected
    # 2 KiB pieces: more input partitions than whole segments give
    whole = reader(spark, moto_s3, prefix, topic=TOPIC, startingOffsets=f'{{"{TOPIC}":{{"0":17,"1":-2,"2":300}}}}',
                   endingOffsets=f'{{"{TOPIC}":{{"0":251,"1":5,"2":-1}}}}')
    assert df.rdd.getNumPartitions() > whole.rdd.getNumPartitions() >= 3


def test_timestamp_range(spark, moto_s3: S3Endpoint, tiered) -> None:
    prefix, consumed, _ = tiered
    df = reader(spark, moto_s3, prefix, topic=TOPIC, startingTimestamp=str(TS0 + 300),
                endingTimestamp=str(TS0 + 900))
    # timestamps grow with the offsets in every partition here, so the range is a time window
    expected = [r[:7] + (None,) for r in consumed if TS0 + 300 <= r[5] < TS0 + 900]
    assert len(expected) == 600 and spark_rows(df) == expected


def test_clear_errors(spark, moto_s3: S3Endpoint, tiered) -> None:
    prefix, _, _ = tiered
    with pytest.raises(Exception, match="topic 'no-such-topic' has no committed segments") as missing:
        reader(spark, moto_s3, prefix, topic="no-such-topic").collect()
    assert moto_s3.secret_key not in str(missing.value)
    with pytest.raises(Exception, match="S3 bucket 'no-such-bucket' does not exist") as no_bucket:
        reader(spark, S3Endpoint("moto", moto_s3.url, bucket="no-such-bucket"), prefix, topic=TOPIC).collect()
    assert moto_s3.secret_key not in str(no_bucket.value)


def test_local_tiered_storage_layout_is_read_through_a_file_url(spark, tmp_path: Path) -> None:
    """The broker's default remote tier (a LocalTieredStorage folder) through the fsspec RSM."""
    import uuid

    from spark_harness import TOPIC as CORE_TOPIC
    from spark_harness import expected_rows, write_segment

    from tieredlog.rsm.api import TopicIdPartition
    from tieredlog.rsm.local import LocalTieredStorage

    folder = tmp_path / "remote"
    w = write_segment(tmp_path, LocalTieredStorage(folder), TopicIdPartition(uuid.uuid4(), CORE_TOPIC, 0),
                      [(0, 0)], 0, 40)
    df = spark.read.format("tieredlog").option("path", folder.as_uri()).option("topic", CORE_TOPIC).load()
    got = [(bytes(r["value"]) if r["value"] is not None else None, r["offset"]) for r in df.orderBy("offset").collect()]
    assert got == [(row["value"], row["offset"]) for row in expected_rows(w.records, 0, range(40))]


def test_export_writes_the_dataframes_rows_to_parquet(spark, moto_s3: S3Endpoint, tiered, tmp_path: Path) -> None:
    """`tieredlog export`, run as a user runs it, gives the rows the DataFrame gives, whole and in a range."""
    import pyarrow.dataset as pads

    prefix, consumed, _ = tiered
    storage = ["--storage", f"storage.s3.endpoint.url={moto_s3.url}", "--storage", f"storage.s3.region={moto_s3.region}",
               "--storage", "storage.s3.path.style.access.enabled=true",
               "--storage", f"storage.aws.access.key.id={moto_s3.access_key}",
               "--storage", f"storage.aws.secret.access.key={moto_s3.secret_key}"]
    path = f"s3://{moto_s3.bucket}/{prefix.rstrip('/')}"

    def export(out: Path, *extra: str) -> list[Row]:
        done = subprocess.run([sys.executable, "-m", "tieredlog.cli", "export", "--topic", TOPIC, "--path", path,
                               "--to", str(out), *storage, *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert moto_s3.secret_key not in done.stdout + done.stderr
        assert sorted(p.name for p in out.iterdir()) == [f"{TOPIC}-{p}.parquet" for p in range(PARTITIONS)]
        assert pads.dataset(out, format="parquet").count_rows() > 0  # pyarrow reads the folder as one dataset
        return spark_rows(spark.read.parquet(str(out)))

    whole = export(tmp_path / "whole", "--include-headers")
    assert whole == spark_rows(reader(spark, moto_s3, prefix, topic=TOPIC, includeHeaders="true")) == consumed
    ranged = export(tmp_path / "ranged", "--from-offset", "17", "--to-offset", "251")
    assert ranged == [r[:7] + (None,) for r in consumed if 17 <= r[4] < 251]

    failed = subprocess.run([sys.executable, "-m", "tieredlog.cli", "export", "--topic", "no-such-topic", "--path", path,
                             "--to", str(tmp_path / "none"), *storage], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "no-such-topic" in failed.stderr and "Traceback" not in failed.stderr
