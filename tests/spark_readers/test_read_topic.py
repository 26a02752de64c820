"""``spark_readers.read_topic`` through the plugin contract: a broker process tiers a topic with the
tieredlog-chunked plugin (chunked, zstd-compressed, AES-GCM encrypted over a local folder), and the reader,
configured with the broker's own ``remote.log.storage.manager.class.name`` and ``rsm.config.*``
properties, reads it as Arrow, DuckDB and Polars row for row as a consumer does; after DeleteRecords,
nothing below the log start (from the brokers, and from the tier alone once the leader published it); byte-range splits of one partition neither drop nor repeat a record; a
segment deleted under a read fails it in one line; secrets stay out of messages; one Spark query
reads the same rows through the same contract; and with the manifests gone, ``metadataSource=brokers``
lists the segments from ``__remote_log_metadata`` instead."""

from __future__ import annotations

import base64
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from helpers import wait_for
from spark_harness import spark  # noqa: F401  (fixture)

from spark_readers import export, read_topic
from spark_readers.arrow import plan_read
from spark_readers.catalog import CatalogError
from spark_readers.options import OptionError, parse_options
from spark_readers.planner import ReadTask
from spark_readers.read import SegmentDeletedError
from spark_readers.storage import StorageError, open_storage, storage_spec
from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS
from tieredlog.rsm.api import RemoteResourceNotFoundException

pytestmark = pytest.mark.integration

TOPIC = "read-anywhere"
PARTITIONS = 2
LATEST_TIERED = -5  # ListOffsets: the highest offset in remote storage (KIP-1005)
KEY = base64.b64encode(bytes(range(7, 39))).decode()
TS0 = int(time.time() * 1000) - 600_000

Row = tuple[Any, ...]


def rsm_properties(remote: Path) -> dict[str, str]:
    """The broker's storage properties; the reader takes the very same."""
    return {
        "remote.log.storage.manager.class.name": "chunked",
        "rsm.config.chunked.backend": "local",
        "rsm.config.chunked.backend.config.dir": str(remote),
        "rsm.config.chunk.size": "4096",
        "rsm.config.compression.enabled": "true",
        "rsm.config.compression.heuristic.enabled": "false",
        "rsm.config.encryption.enabled": "true",
        "rsm.config.encryption.key.id": "k1",
        "rsm.config.encryption.keys.k1": KEY,
    }


def tiered_ends(bootstrap: str, topic: str = TOPIC, partitions: int = PARTITIONS) -> dict[int, int]:
    with KafkaClient(bootstrap) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "timestamp": LATEST_TIERED,
                                            "current_leader_epoch": -1} for p in range(partitions)]}]})
        return {p.partition_index: p.offset + 1 for p in r.topics[0].partitions if p.error_code == 0}


def produce(bootstrap: str, count: int, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 2048, "enable.idempotence": True})
    for i in range(count):
        p.produce(topic, key=None if i % 7 == 0 else b"k%d" % i, value=b"value-%d-" % i + b"x" * (i % 60),
                  partition=i % partitions, timestamp=TS0 + i,
                  headers=None if i % 3 else [("i", b"%d" % i), ("null", None)],
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(60) == 0 and errors == []


def consume(bootstrap: str, topic: str = TOPIC, partitions: int = PARTITIONS) -> list[Row]:
    """What a read_committed consumer reads, as (partition, offset, key, value, timestamp, headers)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-anywhere", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, -2) for p in range(partitions)])  # -2: the log start offset
    rows: list[Row] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is not None:
                    at_end.add(m.partition())
                    continue
                headers = m.headers()
                rows.append((m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1],
                             tuple(headers) if headers else None))
    finally:
        c.close()
    assert len(at_end) == partitions
    return sorted(rows)


def arrow_rows(table: pa.Table) -> list[Row]:
    rows = []
    for r in table.to_pylist():
        headers = tuple((h["key"], h["value"]) for h in r["headers"]) if r["headers"] is not None else None
        rows.append((r["partition"], r["offset"], r["key"], r["value"], int(r["timestamp"].timestamp() * 1000),
                     headers))
    return sorted(rows)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("read-anywhere")
    b = BrokerProcess(root / "data", {
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3", "offsets.topic.num.partitions": "1",
        **rsm_properties(root / "remote")}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "16000", "index.interval.bytes": "512"})])[TOPIC].result(30)
        produce(b.bootstrap, 2000)
        active = {p: max(int(f.name[:20]) for f in (b.data_dir / f"{TOPIC}-{p}").glob("*.log"))
                  for p in range(PARTITIONS)}
        wait_for(lambda: tiered_ends(b.bootstrap) == active, "the rolled segments tiered", 60)
        b.remote = root / "remote"  # type: ignore[attr-defined]
        yield b
    finally:
        b.stop()


def reader_options(b: BrokerProcess, **extra: str) -> dict[str, str]:
    return {**rsm_properties(b.remote), "includeHeaders": "true", **extra}  # type: ignore[attr-defined]


def test_arrow_duckdb_and_polars_read_what_a_consumer_reads(broker: BrokerProcess) -> None:
    consumed = consume(broker.bootstrap)
    ends = tiered_ends(broker.bootstrap)
    # the tier alone: every record below the tiered end, decrypted and decompressed by the plugin
    tiered = read_topic(TOPIC, reader_options(broker)).read_all()
    assert arrow_rows(tiered) == [r for r in consumed if r[1] < ends[r[0]]]
    assert b"value-0-" not in b"".join(p.read_bytes() for p in broker.remote.rglob("*.log"))  # type: ignore[attr-defined]
    # history plus the brokers' tail: the whole topic
    everything = reader_options(broker, **{"kafka.bootstrap.servers": broker.bootstrap})
    assert arrow_rows(read_topic(TOPIC, everything).read_all()) == consumed
    db = duckdb.connect()
    db.register("records", read_topic(TOPIC, everything))
    counts = db.sql("SELECT partition, count(*), min(\"offset\"), max(\"offset\"), sum(octet_length(value)) "
                        "FROM records GROUP BY partition ORDER BY partition").fetchall()
    assert counts == [(p, len([r for r in consumed if r[0] == p]), 0, max(r[1] for r in consumed if r[0] == p),
                       sum(len(r[3]) for r in consumed if r[0] == p)) for p in range(PARTITIONS)]
    frame = pl.from_arrow(read_topic(TOPIC, everything))
    assert isinstance(frame, pl.DataFrame)
    assert arrow_rows(frame.to_arrow()) == consumed


def test_byte_range_splits_neither_drop_nor_repeat_a_record(broker: BrokerProcess) -> None:
    whole = plan_read(parse_options({**reader_options(broker), "topic": TOPIC}))
    split = plan_read(parse_options({**reader_options(broker), "topic": TOPIC, "maxBytesPerTask": "3000"}))
    assert len(split.tasks) > 2 * len(whole.tasks)
    for task in split.tasks:
        assert isinstance(task, ReadTask)
        if task.end_position is not None:
            # index entries every 512 bytes and batches of about 2 KiB: every cut fits
            assert task.end_position - task.start_position + 1 <= 3000
    rows = arrow_rows(split.reader().read_all())
    assert len(rows) == len(set((r[0], r[1]) for r in rows))
    assert rows == arrow_rows(whole.reader().read_all())


def test_after_delete_records_nothing_below_the_log_start(broker: BrokerProcess) -> None:
    ends = tiered_ends(broker.bootstrap)
    cut = ends[0] // 2 + 3  # inside a tiered segment
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (future,) = admin.delete_records([TopicPartition(TOPIC, 0, cut)], request_timeout=30).values()
    assert future.result(30).low_watermark == cut
    consumed = consume(broker.bootstrap)
    assert min(r[1] for r in consumed if r[0] == 0) == cut
    options = reader_options(broker, **{"kafka.bootstrap.servers": broker.bootstrap})
    assert arrow_rows(read_topic(TOPIC, options).read_all()) == consumed
    db = duckdb.connect()
    db.register("records", read_topic(TOPIC, options))
    assert db.sql("SELECT min(\"offset\") FROM records WHERE partition = 0").fetchall() == [(cut,)]
    frame = pl.from_arrow(read_topic(TOPIC, options))
    assert isinstance(frame, pl.DataFrame)
    assert frame.filter((pl.col("partition") == 0) & (pl.col("offset") < cut)).height == 0
    # without the brokers: the leader publishes the log start to the tier, and the tier alone agrees
    tier_only = reader_options(broker)

    def tier_start() -> int:
        return pl.from_arrow(read_topic(TOPIC, tier_only)).filter(pl.col("partition") == 0)["offset"].min()

    wait_for(lambda: tier_start() == cut, "the log start published to the remote tier", 30)
    ends = tiered_ends(broker.bootstrap)
    assert arrow_rows(read_topic(TOPIC, tier_only).read_all()) == [r for r in consumed if r[1] < ends[r[0]]]


def test_spark_reads_the_same_rows_through_the_contract(spark, broker: BrokerProcess) -> None:  # noqa: F811
    """After the DeleteRecords above: the broker's properties as options, the plugin in the executors."""
    r = spark.read.format("tieredlog").option("topic", TOPIC)
    for k, v in reader_options(broker, **{"kafka.bootstrap.servers": broker.bootstrap}).items():
        r = r.option(k, v)
    rows = []
    for row in r.load().selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect():
        headers = tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in row["headers"]) \
            if row["headers"] is not None else None
        rows.append((row["partition"], row["offset"], None if row["key"] is None else bytes(row["key"]),
                     bytes(row["value"]), row["ts_ms"], headers))
    assert sorted(rows) == consume(broker.bootstrap)


def without_manifests(remote: Path, into: Path) -> Path:
    """A copy of the tier as a writer that leaves no manifests would leave it. The leader's expiration
    task may be deleting segments meanwhile: copy again until one copy sees no object vanish."""
    def copied() -> bool:
        shutil.rmtree(into, ignore_errors=True)
        try:
            shutil.copytree(remote, into)
        except shutil.Error:
            return False
        return True

    wait_for(copied, "a copy of the remote tier", 30)
    manifests = list(into.rglob("*.manifest"))
    assert manifests
    for m in manifests:
        m.unlink()
    return into


def test_without_manifests_the_segments_are_listed_from_the_brokers(spark, broker: BrokerProcess,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    bare = without_manifests(broker.remote, tmp_path / "remote")  # type: ignore[attr-defined]
    brokers = {"kafka.bootstrap.servers": broker.bootstrap}
    options = {**rsm_properties(bare), "includeHeaders": "true", "topic": TOPIC, **brokers}
    # the default source finds no committed segment, and says so in one line
    for extra in ({}, brokers):
        with pytest.raises(CatalogError, match=f"^topic '{TOPIC}' has segment objects but no manifests in the "
                                               "remote tier.*metadataSource=brokers lists them") as err:
            read_topic(TOPIC, {**rsm_properties(bare), **extra})
        assert "\n" not in str(err.value)
    with pytest.raises(OptionError, match="^option metadataSource=brokers reads __remote_log_metadata through the "
                                          "brokers: set kafka.bootstrap.servers$"):
        read_topic(TOPIC, {**rsm_properties(bare), "metadataSource": "brokers"})
    read = plan_read(parse_options({**options, "metadataSource": "brokers"}))
    # the tiered part comes from the copy, up to where the broker tiered it; the rest from the brokers
    ends = tiered_ends(broker.bootstrap)
    assert {p: max(t.to_offset for t in read.tasks if isinstance(t, ReadTask) and t.partition == p)
            for p in range(PARTITIONS)} == ends
    consumed = consume(broker.bootstrap)
    assert arrow_rows(read.reader().read_all()) == consumed
    # tieredlog export, through the same source: the tier's rows and the brokers' tail, as Parquet
    storage = [f"--storage={k}={v}" for k, v in rsm_properties(bare).items()]
    assert export.main(["--topic", TOPIC, "--to", str(tmp_path / "out"), "--include-headers", *storage,
                        "--bootstrap-server", broker.bootstrap, "--metadata-source", "brokers"]) == 0
    assert arrow_rows(pa.concat_tables(pq.read_table(f) for f in sorted((tmp_path / "out").iterdir()))) == consumed
    with pytest.raises(SystemExit):  # argparse's usage error: no brokers to list from
        export.main(["--topic", TOPIC, "--to", str(tmp_path / "none"), *storage, "--metadata-source", "brokers"])
    # Spark, through the same option: the last tiered segment of one partition and the brokers' tail (a
    # small plan: Spark tasks are slow)
    last = max((t for t in read.tasks if isinstance(t, ReadTask) and t.partition == 0), key=lambda t: t.to_offset)
    assigned = {k: v for k, v in options.items() if k != "topic"}
    frame = spark.read.format("tieredlog").options(**{
        **assigned, "metadataSource": "brokers", "assign": json.dumps({TOPIC: [0]}),
        "startingOffsets": json.dumps({TOPIC: {"0": last.from_offset}})}).load()
    assert sorted(row["offset"] for row in frame.select("offset").collect()) == \
        [r[1] for r in consumed if r[0] == 0 and r[1] >= last.from_offset]
    # a backend that cannot list at all (the chunked plugin over it here): only the brokers can say what it holds
    fetch_only = {**rsm_properties(broker.remote), "includeHeaders": "true",  # type: ignore[attr-defined]
                  "rsm.config.chunked.backend": "fetch_only_rsm:FetchOnlyStorage",
                  "rsm.config.chunked.backend.class.path":
                      str(Path(__file__).resolve().parents[1] / "harness" / "rsm_plugins")}
    with pytest.raises(CatalogError, match=f"^cannot list the segments of topic '{TOPIC}' in the remote tier: .*"
                                           "FetchOnlyStorage cannot list segments"):
        read_topic(TOPIC, fetch_only)
    listed = {**fetch_only, **brokers, "metadataSource": "brokers"}
    assert arrow_rows(read_topic(TOPIC, listed).read_all()) == consumed
    # segments tiered since: the process's listing reads only the metadata records added since, and has them
    before = tiered_ends(broker.bootstrap)
    produce(broker.bootstrap, 600)
    wait_for(lambda: all(e > before[p] for p, e in tiered_ends(broker.bootstrap).items()), "more segments tiered", 60)
    low = tiered_ends(broker.bootstrap)
    read = plan_read(parse_options({**listed, "topic": TOPIC}))
    high = tiered_ends(broker.bootstrap)  # the last segments may still be tiering
    for p in range(PARTITIONS):
        assert low[p] <= max(t.to_offset for t in read.tasks if isinstance(t, ReadTask) and t.partition == p) <= high[p]
    assert arrow_rows(read.reader().read_all()) == consume(broker.bootstrap)
    # the same backend as the RSM itself: nothing to list the bucket with, said in one line
    with pytest.raises(StorageError, match="^the remote storage manager FetchOnlyStorage cannot list segments .*: "
                                           "metadataSource=brokers lists it from __remote_log_metadata$"):
        read_topic(TOPIC, {"remote.log.storage.manager.class.name": "fetch_only_rsm:FetchOnlyStorage",
                           "remote.log.storage.manager.class.path": fetch_only["rsm.config.chunked.backend.class.path"],
                           "rsm.config.dir": str(bare)})


def test_secrets_never_appear_in_messages(tmp_path: Path) -> None:
    bad_key = base64.b64encode(b"a-secret-that-is-not-32-bytes").decode()
    # chunk.size echoes its bad value in the message; the same text is a secret's value, so it is masked
    options = {**rsm_properties(tmp_path / "remote"), "rsm.config.encryption.keys.k1": bad_key,
               "rsm.config.chunk.size": bad_key, "topic": TOPIC}
    parsed = parse_options(options)
    assert bad_key not in repr(parsed)
    spec = storage_spec(parsed.path, parsed.storage)
    assert bad_key not in repr(spec)
    with pytest.raises(StorageError, match="cannot configure remote storage manager 'chunked'") as err:
        open_storage(spec)
    assert bad_key not in str(err.value) and "rsm.config.chunk.size='[hidden]'" in str(err.value)
    with pytest.raises(StorageError, match="set either path or remote.log.storage.manager.class.name"):
        storage_spec("file:///x", parsed.storage)


def test_a_segment_deleted_under_a_read_fails_it_in_one_line(broker: BrokerProcess) -> None:
    read = plan_read(parse_options({**reader_options(broker), "topic": TOPIC}))
    first = read.tasks[0]
    assert isinstance(first, ReadTask)
    read.rsm.delete_log_segment_data(first.metadata)  # as remote retention deletes it
    with pytest.raises(SegmentDeletedError, match=f"^{TOPIC}-{first.partition}: segment .* was deleted from the "
                                                  "remote tier while it was read .*: read again$"):
        read.reader().read_all()


def test_without_fail_on_data_loss_a_deleted_segment_is_skipped_in_one_line(
        broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    options = parse_options({**reader_options(broker), "topic": TOPIC, "failOnDataLoss": "false"})
    read = plan_read(options)
    tasks = [t for t in read.tasks if isinstance(t, ReadTask)]
    every = arrow_rows(plan_read(options).reader().read_all())
    gone = tasks[1]
    read.rsm.delete_log_segment_data(gone.metadata)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spark_readers.read"):
        rows = arrow_rows(read.reader().read_all())
    # the rows of every other segment, and none of the deleted one's
    assert rows == [r for r in every if r[0] != gone.partition or not gone.from_offset <= r[1] < gone.to_offset]
    assert len(rows) < len(every)
    assert [r.getMessage() for r in caplog.records] == [
        f"{TOPIC}-{gone.partition}: segment {gone.object_name} was deleted from the remote tier while it was read; "
        f"offsets {gone.from_offset}..{gone.to_offset - 1} skipped (failOnDataLoss=false)"]


def test_a_read_while_retention_deletes_under_it_never_misses_a_row(broker: BrokerProcess) -> None:
    """The broker's own remote retention deletes the segments a read has planned, between two of the
    reader's batches: the rows returned are a consumer's, contiguous, and the read stops in one line at
    the first segment it could not read, naming it and the offsets it did not return."""
    topic = "read-under-retention"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "remote.storage.enable": "true", "segment.bytes": "16000"})])[topic].result(30)
    produce(broker.bootstrap, 1600, topic, 1)
    active = max(int(f.name[:20]) for f in (broker.data_dir / f"{topic}-0").glob("*.log"))
    wait_for(lambda: tiered_ends(broker.bootstrap, topic, 1) == {0: active}, "the rolled segments tiered", 60)
    consumed = consume(broker.bootstrap, topic, 1)
    read = plan_read(parse_options({**reader_options(broker), "topic": topic}))
    tasks = [t for t in read.tasks if isinstance(t, ReadTask)]
    assert len(tasks) >= 4
    reader = read.reader()
    batches = [reader.read_next_batch()]  # the first segment's rows; the second one is being fetched
    # every record is ten minutes old: retention.ms=1000 expires every tiered segment, oldest first
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(
        "retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    # the reader pulls its next batch only once the broker has deleted the segment after the prefetched one
    tier = open_storage(storage_spec(None, parse_options({**reader_options(broker), "topic": topic}).storage))

    def deleted(task: ReadTask) -> bool:
        try:
            with tier.fetch_log_segment(task.metadata, 0, 0) as stream:
                stream.read()
        except RemoteResourceNotFoundException:
            return True
        return False

    wait_for(lambda: deleted(tasks[2]), "the third planned segment deleted by retention", 30)
    failure: SegmentDeletedError | None = None
    try:
        for batch in reader:
            batches.append(batch)
    except SegmentDeletedError as exc:
        failure = exc
    rows = arrow_rows(pa.Table.from_batches(batches, read.schema))
    assert rows == consumed[:len(rows)], "a returned row differs from the consumer's, or one is missing"
    assert [r[1] for r in rows] == list(range(rows[0][1], rows[0][1] + len(rows)))
    if failure is not None:  # the read stopped at the first segment it could not read
        missed = next(t for t in tasks if t.from_offset == rows[-1][1] + 1)
        assert str(failure) == (
            f"{topic}-0: segment {missed.object_name} was deleted from the remote tier while it was read "
            f"(retention or DeleteRecords); offsets {missed.from_offset}..{missed.to_offset - 1} were not "
            "read: read again")
    else:  # a reader that planned again must still have returned every planned row, to the tiered end
        assert rows[-1][1] == tasks[-1].to_offset - 1, f"rows after offset {rows[-1][1]} silently missing"
