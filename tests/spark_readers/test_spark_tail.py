"""Real PySpark (local[2]) over a running broker: history from its remote folder plus the brokers' tail.

One broker (its default LocalTieredStorage folder as the remote tier) holds a topic of three partitions:
partitions 0 and 1 have rolled segments tiered and records only in their active local segment, partition 2
has only local records (nothing tiered), and partition 0 ends with a committed and an aborted transaction.
With ``kafka.bootstrap.servers`` the DataFrame must equal what a consumer reads, row for row, at both
isolation levels, the tiered part and the brokers' tail meeting with no gap and nothing twice; without
it, the range past the tiered part fails naming the partition and its first local-only offset. The same
data serves the pushed filters (``pushFilters=true``: in the plan, honoured, fewer segments read), the
``assign`` / ``minPartitions`` / ``maxRecordsPerPartition`` options and a stream that follows the brokers.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for
from spark_harness import spark  # noqa: F401  (fixture)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS

pytestmark = pytest.mark.integration

TOPIC = "spark-tail"
PARTITIONS = 3
LATEST_TIERED = -5  # ListOffsets: the highest offset in remote storage (KIP-1005)
TS0 = int(time.time() * 1000) - 600_000
OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
}

Row = tuple[bytes | None, bytes | None, str, int, int, int, int, tuple[tuple[str, bytes | None], ...] | None]


def list_offsets(bootstrap: str, timestamp: int) -> dict[int, int]:
    with KafkaClient(bootstrap) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1}
                                           for p in range(PARTITIONS)]}]})
        return {part.partition_index: part.offset for part in r.topics[0].partitions if part.error_code == 0}


def produce(bootstrap: str, first: int, count: int) -> None:
    """Records ``first..first+count-1``: partitions 0 and 1 get most, 2 a few; timestamps grow with i."""
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1024, "enable.idempotence": True,
                  "compression.type": "lz4"})
    for i in range(first, first + count):
        partition = 2 if i % 50 == 0 else i % 2
        p.produce(TOPIC, key=None if i % 7 == 0 else b"k%d" % i, value=b"value-%d-" % i + b"x" * (i % 50),
                  partition=partition, timestamp=TS0 + i * 10,
                  headers=None if i % 3 else [("i", b"%d" % i), ("null", None)],
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(60) == 0 and errors == []


def produce_transactions(bootstrap: str) -> None:
    """One committed and one aborted transaction at the end of partition 0."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "spark-tail-txn", "linger.ms": 2})
    p.init_transactions(30)
    for outcome in ("commit", "abort"):
        p.begin_transaction()
        for i in range(20):
            p.produce(TOPIC, value=b"%s-%d" % (outcome.encode(), i), partition=0, timestamp=TS0 + 500_000 + i)
        p.flush(30)
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)


def consume(bootstrap: str, isolation: str) -> list[Row]:
    """Every record a consumer of ``isolation`` reads, in the DataFrame's row shape."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"spark-tail-{isolation}", "enable.auto.commit": False,
                  "auto.offset.reset": "error", "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    rows: list[Row] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is not None:
                    at_end.add(m.partition())
                    continue
                ts_type, ts = m.timestamp()
                headers = m.headers()
                rows.append((m.key(), m.value(), m.topic(), m.partition(), m.offset(), ts, ts_type - 1,
                             tuple(headers) if headers else None))
    finally:
        c.close()
    assert len(at_end) == PARTITIONS
    return sorted(rows, key=lambda r: (r[3], r[4]))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark-tail") / "data", OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "3000", "index.interval.bytes": "256"})])[TOPIC].result(30)
        del admin
        produce(b.bootstrap, 0, 1200)
        produce_transactions(b.bootstrap)
        # every rolled segment tiered; the active ones (and all of partition 2's) stay local-only
        active = {p: max(int(f.name[:20]) for f in (Path(b.data_dir) / f"{TOPIC}-{p}").glob("*.log")) for p in (0, 1)}
        assert min(active.values()) > 300
        wait_for(lambda: (lambda t: all(t.get(p, -1) + 1 == active[p] for p in active))(
            list_offsets(b.bootstrap, LATEST_TIERED)), "the rolled segments of partitions 0 and 1 tiered", 60)
        yield b
    finally:
        b.stop()


def folder(b: BrokerProcess) -> Path:
    return Path(b.data_dir) / "remote-storage"  # the broker's default LocalTieredStorage


def load(spark, b: BrokerProcess, **options: str):  # noqa: ANN201, F811 - a DataFrame; the fixture
    r = spark.read.format("tieredlog").option("path", folder(b).as_uri())
    for k, v in ({"topic": TOPIC} if "assign" not in options else {}).items() | options.items():
        r = r.option(k, v)
    return r.load()


def spark_rows(df) -> list[Row]:  # noqa: ANN001 - a DataFrame
    out: list[Row] = []
    with_headers = "headers" in df.columns
    for r in df.selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect():
        headers = tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]) \
            if with_headers and r["headers"] is not None else None
        out.append((None if r["key"] is None else bytes(r["key"]), None if r["value"] is None else bytes(r["value"]),
                    r["topic"], r["partition"], r["offset"], r["ts_ms"], r["timestampType"], headers))
    return sorted(out, key=lambda row: (row[3], row[4]))


def brokers(b: BrokerProcess) -> dict[str, str]:
    return {"kafka.bootstrap.servers": b.bootstrap}


def test_history_plus_the_brokers_tail_equals_what_a_consumer_reads(spark, broker: BrokerProcess) -> None:  # noqa: F811
    tiered_ends = {p: o + 1 for p, o in list_offsets(broker.bootstrap, LATEST_TIERED).items()}
    ends = list_offsets(broker.bootstrap, -1)
    # both parts in partitions 0 and 1, nothing tiered in partition 2 (ListOffsets answers -1)
    assert tiered_ends[0] < ends[0] and tiered_ends[1] < ends[1] and tiered_ends[2] == 0
    consumed = consume(broker.bootstrap, "read_committed")
    df = load(spark, broker, includeHeaders="true", **brokers(broker))
    got = spark_rows(df)
    assert got == consumed
    assert any(v == b"commit-0" for _, v, *_ in got) and not any(v == b"abort-0" for _, v, *_ in got)
    assert df.rdd.getNumPartitions() > PARTITIONS  # segments, plus one tail task per partition

    everything = consume(broker.bootstrap, "read_uncommitted")
    uncommitted = load(spark, broker, includeHeaders="true", **brokers(broker),
                       **{"kafka.isolation.level": "read_uncommitted"})
    assert spark_rows(uncommitted) == everything

    # without the brokers the tiered part is all there is: latest ends there, further fails
    tiered_only = spark_rows(load(spark, broker, includeHeaders="true", **{"kafka.isolation.level": "read_uncommitted"},
                                  assign=f'{{"{TOPIC}":[0,1]}}'))
    assert tiered_only == [r for r in everything if r[3] < 2 and r[4] < tiered_ends[r[3]]]
    ending = f'{{"{TOPIC}":{{"0":{ends[0]},"1":-1}}}}'
    with pytest.raises(Exception, match=f"{TOPIC}-0: offsets from {tiered_ends[0]} are not in the remote tier yet"):
        load(spark, broker, assign=f'{{"{TOPIC}":[0,1]}}', endingOffsets=ending,
             **{"kafka.isolation.level": "read_uncommitted"}).collect()
    # an ending offset inside the tail: the tail task stops there
    inside = ends[1] - 3
    ranged = load(spark, broker, includeHeaders="true", **brokers(broker), assign=f'{{"{TOPIC}":[1]}}',
                  startingOffsets=f'{{"{TOPIC}":{{"1":{tiered_ends[1] - 5}}}}}',
                  endingOffsets=f'{{"{TOPIC}":{{"1":{inside}}}}}')
    assert spark_rows(ranged) == [r for r in consumed if r[3] == 1 and tiered_ends[1] - 5 <= r[4] < inside]


def test_pushed_filters_are_in_the_plan_honoured_and_read_less(spark, broker: BrokerProcess) -> None:  # noqa: F811
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        since = datetime.datetime.fromtimestamp((TS0 + 4000) / 1000, tz=datetime.timezone.utc)
        condition = ((F.col("partition").isin(0, 2)) & (F.col("offset") >= 20) & (F.col("offset") < 400)
                     & (F.col("timestamp") >= F.lit(since)) & (F.col("value").isNotNull()))
        pushed = load(spark, broker, pushFilters="true", **brokers(broker)).where(condition)
        plain = load(spark, broker, **brokers(broker)).where(condition)
        expected = spark_rows(plain)
        assert expected and {r[3] for r in expected} == {0, 2}
        assert spark_rows(pushed) == expected
        # what df.explain("formatted") prints
        plan = pushed._sc._jvm.PythonSQLUtils.explainString(pushed._jdf.queryExecution(), "formatted")
        pushed_line = next(line for line in plan.splitlines() if line.startswith("PushedFilters"))
        assert "In(partition, [0,2])" in pushed_line and "GreaterThanOrEqual(offset,20)" in pushed_line
        assert "LessThan(offset,400)" in pushed_line and "GreaterThanOrEqual(timestamp," in pushed_line
        # Spark evaluates only what was not pushed
        condition_line = next(line for line in plan.splitlines() if line.startswith("Condition"))
        assert "value" in condition_line and not any(c in condition_line for c in ("offset", "partition", "timestamp"))
        # fewer input partitions: partition 1 and the segments outside the offsets and time are not read
        unfiltered = load(spark, broker, pushFilters="true", **brokers(broker))
        assert pushed.rdd.getNumPartitions() < unfiltered.rdd.getNumPartitions() / 2
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


def test_pushed_filters_plan_fewer_segment_bytes(broker: BrokerProcess) -> None:
    """The reader's own planning (no Spark session): pushed filters drop partitions, segments and bytes;
    what they cannot do exactly goes back to Spark."""
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan, StringStartsWith

    from spark_readers.datasource import TieredLogFilteringReader
    from spark_readers.options import parse_options
    from spark_readers.partitions import ReadTaskPartition, TailPartition
    from spark_readers.storage import storage_spec

    options = parse_options({"path": folder(broker).as_uri(), "topic": TOPIC, **brokers(broker)})

    def planned(filters: list) -> tuple[list, list, int]:
        reader = TieredLogFilteringReader(options, storage_spec(options.path, options.storage))
        rest = list(reader.pushFilters(filters))
        parts = reader.partitions()
        tiered = [p for p in parts if isinstance(p, ReadTaskPartition)]
        size = sum((p.task.end_position + 1 if p.task.end_position is not None else
                    p.task.metadata.segment_size_in_bytes) - p.task.start_position for p in tiered)
        return rest, parts, size

    _, everything, all_bytes = planned([])
    since = datetime.datetime.fromtimestamp((TS0 + 8000) / 1000, tz=datetime.timezone.utc)
    offsets_in = In(("offset",), (30, 31, 90))
    other = StringStartsWith(("topic",), "spark")
    rest, parts, size = planned([EqualTo(("partition",), 1), offsets_in, other])
    assert rest == [offsets_in, other]  # In on offsets: only its range is pushed; topic filters are Spark's
    assert {p.task.partition for p in parts} == {1} and len(parts) == 1 and size < all_bytes / 5
    assert (parts[0].task.from_offset, parts[0].task.to_offset) == (30, 91)
    # a timestamp lower bound starts at the first offset that recent and skips older segments
    rest, parts, size = planned([GreaterThanOrEqual(("timestamp",), since), LessThan(("partition",), 2)])
    assert rest == [] and 0 < size < all_bytes / 2
    assert len(parts) < len(everything) and any(isinstance(p, TailPartition) for p in parts)
    first = min(p.task.from_offset for p in parts if p.task.partition == 0)
    assert 300 < first < 500  # record i = 800 is at about offset 400 of partition 0


def test_assign_min_partitions_and_max_records_per_partition(spark, broker: BrokerProcess) -> None:  # noqa: F811
    from pyspark.sql.functions import spark_partition_id

    consumed = consume(broker.bootstrap, "read_committed")
    assign = f'{{"{TOPIC}":[1,2]}}'
    expected = [r[:7] + (None,) for r in consumed if r[3] in (1, 2)]
    n = load(spark, broker, assign=assign, **brokers(broker)).rdd.getNumPartitions()  # plans, reads nothing
    more = load(spark, broker, assign=assign, minPartitions=str(2 * n), **brokers(broker))
    assert more.rdd.getNumPartitions() >= 2 * n - 2 and spark_rows(more) == expected
    capped = load(spark, broker, assign=assign, maxRecordsPerPartition="100", **brokers(broker))
    tagged = capped.withColumn("task", spark_partition_id())
    assert spark_rows(tagged.drop("task")) == expected
    per_task = [r["count"] for r in tagged.groupBy("task").count().collect()]
    assert len(per_task) >= len(expected) / 100 and max(per_task) <= 100
    with pytest.raises(Exception, match=f"{TOPIC}-7 is not in the remote tier nor on the brokers"):
        load(spark, broker, assign=f'{{"{TOPIC}":[7]}}', **brokers(broker)).collect()


def test_a_stream_reads_the_tier_and_follows_the_brokers(spark, broker: BrokerProcess, tmp_path: Path) -> None:  # noqa: F811
    batches: list[list[tuple[int, int, bytes]]] = []

    def collect(df, batch_id: int) -> None:  # noqa: ANN001 - a DataFrame
        batches.append([(r["partition"], r["offset"], bytes(r["value"]))
                        for r in df.select("partition", "offset", "value").collect()])

    def run() -> list[tuple[int, int, bytes]]:
        batches.clear()
        query = (spark.readStream.format("tieredlog").option("path", folder(broker).as_uri()).option("topic", TOPIC)
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("maxOffsetsPerTrigger", "500").load()
                 .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180), "the availableNow query did not finish"
        assert query.exception() is None, query.exception()
        return sorted(row for batch in batches for row in batch)

    first = run()
    assert len(batches) > 1  # capped by maxOffsetsPerTrigger
    assert first == sorted((r[3], r[4], r[1]) for r in consume(broker.bootstrap, "read_committed"))
    produce(broker.bootstrap, 5000, 60)  # local-only records: only the brokers have them
    second = run()
    assert sorted(first + second) == sorted((r[3], r[4], r[1]) for r in consume(broker.bootstrap, "read_committed"))
    assert len(second) == 60 and all(v.startswith(b"value-5") for _, _, v in second)


def test_push_folds_the_filters_it_can_apply_exactly_and_returns_the_rest() -> None:
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        LessThanOrEqual,
        Not,
    )

    from spark_readers.filters import push

    t = datetime.datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=datetime.timezone.utc)
    micros = int(t.timestamp()) * 1_000_000 + 1500
    odd = [Not(EqualTo(("offset",), 3)), IsNull(("offset",)), EqualTo(("offset",), "7"), EqualTo(("key",), b"k"),
           In(("offset",), (4, 9))]
    pushed, rest = push([In(("partition",), (0, 2, 5)), LessThan(("partition",), 5), GreaterThan(("offset",), 10),
                         LessThanOrEqual(("offset",), 20), GreaterThanOrEqual(("offset",), 12),
                         GreaterThan(("timestamp",), t), LessThan(("timestamp",), t + datetime.timedelta(seconds=1)),
                         IsNotNull(("timestamp",)), *odd])
    assert rest == odd[:4] + [odd[4]]  # In on offsets is pushed as a range and still evaluated by Spark
    assert [p for p in range(8) if pushed.keeps_partition(p)] == [0, 2]
    assert pushed.offsets(0, 100) == (12, 10)  # [12, 21) and the In's [4, 10): nothing to read
    assert (pushed.timestamp_low, pushed.timestamp_high) == (micros + 1, micros + 1_000_000)
    assert pushed.timestamp_low_ms() == micros // 1000 + 1  # the first whole millisecond after t


def test_reader_options_of_the_tail_and_the_splits() -> None:
    from spark_readers.options import OptionError, parse_options

    o = parse_options({"path": "file:///x", "assign": '{"a":[1,0,1],"b":[2]}', "minPartitions": "8",
                       "maxRecordsPerPartition": "1000", "kafka.bootstrap.servers": "h:1",
                       "kafka.security.protocol": "SASL_SSL", "kafka.sasl.password": "secret-pw",
                       "kafka.isolation.level": "read_uncommitted"})
    assert o.assign == {"a": (0, 1), "b": (2,)} and o.topics == ("a", "b")
    assert (o.min_partitions, o.max_records_per_partition, o.read_committed) == (8, 1000, False)
    assert o.kafka == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.password": "secret-pw"}
    assert o.reads_brokers and "secret-pw" not in repr(o)
    with pytest.raises(OptionError, match="exactly one of"):
        parse_options({"path": "file:///x", "assign": '{"a":[0]}', "topic": "a"})
    with pytest.raises(OptionError, match="assign must be JSON"):
        parse_options({"path": "file:///x", "assign": "a:0"})
    with pytest.raises(OptionError, match="'group.id' is not supported"):
        parse_options({"path": "file:///x", "topic": "a", "kafka.group.id": "g"})


def test_brokers_that_do_not_answer_fail_the_plan_in_one_line(tmp_path: Path) -> None:
    from helpers import free_port

    from spark_readers.brokers import BrokerError
    from spark_readers.datasource import TieredLogReader
    from spark_readers.options import parse_options
    from spark_readers.storage import storage_spec

    (tmp_path / "empty").mkdir()
    options = parse_options({"path": (tmp_path / "empty").as_uri(), "topic": TOPIC,
                             "kafka.bootstrap.servers": f"127.0.0.1:{free_port()}",
                             "kafkaConsumer.pollTimeoutMs": "1500"})
    reader = TieredLogReader(options, storage_spec(options.path, options.storage))
    with pytest.raises(BrokerError, match=r"^cannot reach the brokers \(kafka.bootstrap.servers\)"):
        reader.partitions()


class FixedBrokers:
    """The brokers' answers the planner asks for, fixed: a unit test of the planner's boundary alone."""

    def __init__(self, topic: str, bounds: dict[int, tuple[int, int]]) -> None:
        self.topic, self._bounds = topic, bounds

    def topics(self) -> list[str]:
        return [self.topic]

    def partitions(self, topic: str) -> list[int]:
        return sorted(self._bounds) if topic == self.topic else []

    def bounds(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        return {p: self._bounds[p] for p in partitions}

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return None


def test_the_tail_starts_where_the_tier_ends_and_nothing_below_the_log_start_is_read(tmp_path: Path) -> None:
    import uuid

    from spark_harness import TOPIC as CORE_TOPIC
    from spark_harness import write_segment

    from spark_readers.brokers import TailTask
    from spark_readers.filters import PushedFilters
    from spark_readers.options import parse_options
    from spark_readers.planner import PlanError, ReadTask, plan
    from spark_readers.storage import open_storage, storage_spec
    from tieredlog.rsm.api import TopicIdPartition
    from tieredlog.rsm.local import LocalTieredStorage

    folder = tmp_path / "remote"
    tp = TopicIdPartition(uuid.uuid4(), CORE_TOPIC, 0)
    write_segment(tmp_path, LocalTieredStorage(folder), tp, [(0, 0)], 0, 40)
    write_segment(tmp_path, LocalTieredStorage(folder), tp, [(0, 0)], 40, 80)

    def tasks(bounds: dict[int, tuple[int, int]], **extra: str) -> list[tuple[str, int, int, int]]:
        o = parse_options({"path": folder.as_uri(), "topic": CORE_TOPIC, "kafka.bootstrap.servers": "unused:1",
                           **extra})
        planned = plan(open_storage(storage_spec(o.path, o.storage)), o, brokers=FixedBrokers(CORE_TOPIC, bounds),
                       pushed=PushedFilters(offset_low=10))
        return [("tier" if isinstance(t, ReadTask) else "brokers", t.partition, t.from_offset, t.to_offset)
                for t in planned if isinstance(t, (ReadTask, TailTask))]

    # partition 0: offsets 0..79 tiered, the brokers up to 120; partition 1: nothing tiered
    assert tasks({0: (0, 120), 1: (5, 30)}) == [
        ("tier", 0, 10, 40), ("tier", 0, 40, 80), ("brokers", 0, 80, 120), ("brokers", 1, 10, 30)]
    planned = tasks({0: (0, 120), 1: (5, 30)}, maxRecordsPerPartition="25")
    assert planned == [("tier", 0, 10, 25), ("tier", 0, 25, 40), ("tier", 0, 40, 60), ("tier", 0, 60, 80),
                       ("brokers", 0, 80, 100), ("brokers", 0, 100, 120), ("brokers", 1, 10, 30)]
    # minPartitions=8 over 130 offsets in 4 ranges: each cut in proportion (2, 2, 2, 1 pieces), no offset lost
    spread = tasks({0: (0, 120), 1: (5, 30)}, minPartitions="8")
    assert len(spread) == 7 and sum(hi - lo for *_, lo, hi in spread) == 130
    assert [(lo, hi) for _, p, lo, hi in spread if p == 0] == [(10, 25), (25, 40), (40, 60), (60, 80), (80, 100),
                                                               (100, 120)]
    # the brokers' log starts past the tier's end (DeleteRecords there): earliest is the log start, as
    # for a consumer, and the tiered records below it are never read
    assert tasks({0: (90, 120)}) == [("brokers", 0, 90, 120)]
    # ... and inside the tier: the tiered part is read from there
    assert tasks({0: (50, 120)}) == [("tier", 0, 50, 80), ("brokers", 0, 80, 120)]
    with pytest.raises(PlanError, match=f"{CORE_TOPIC}-0: offset 20 is no longer in the partition .below its log "
                                        "start offset. .earliest 50."):
        tasks({0: (50, 120)}, startingOffsets=f'{{"{CORE_TOPIC}":{{"0":20}}}}')
    assert tasks({0: (90, 120)}, failOnDataLoss="false")[-1] == ("brokers", 0, 90, 120)
    with pytest.raises(PlanError, match="endingOffsets 200 is past the end of the partition on the brokers"):
        tasks({0: (0, 120)}, endingOffsets=f'{{"{CORE_TOPIC}":{{"0":200}}}}')
