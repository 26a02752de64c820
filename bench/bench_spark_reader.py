"""The Spark reader beside the broker path and raw reads of the same objects, in one run.

A broker (``tieredlog broker`` subprocess) tiers ``SPARK_BENCH_MB`` (default 1024) MiB of 1 KiB
records in 2 partitions into a remote folder (LocalTieredStorage, the layout every backend writes).
Then, over the same tiered offsets:

1. ``spark.read.format("tieredlog")`` (``local[2]``, path ``file://`` of the folder): the time of
   ``sum(length(value))`` over the DataFrame, which decodes every row; best of 2 (the first run also
   starts Spark's Python workers). Broker CPU seconds meanwhile (the broker is idle: 0 is the point).
2. The broker path: a confluent-kafka consumer reading the same offsets through the broker, which
   serves them from the remote tier; broker CPU seconds meanwhile.
3. Raw reads: every ``.log`` object read whole with plain file reads (the ceiling of any reader of
   these objects).

    .venv/bin/python -m bench bench_spark_reader      # or: make bench-spark
    SPARK_BENCH_MB=256 .venv/bin/python -m bench bench_spark_reader
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

MB = int(os.environ.get("SPARK_BENCH_MB", "1024"))
VALUE_SIZE = 1024
PARTITIONS = 2
TOPIC = "history"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def produce(bootstrap: str, total: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                  "compression.type": "none", "queue.buffering.max.kbytes": 1 << 20})
    values = [os.urandom(VALUE_SIZE) for _ in range(64)]
    for i in range(total // VALUE_SIZE):
        while True:
            try:
                p.produce(TOPIC, value=values[i % 64], key=b"%d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise RuntimeError("records not delivered")


def tiered_ends(bootstrap: str) -> dict[int, int]:
    from tieredlog.protocol.api import LIST_OFFSETS
    from tieredlog.protocol.client import KafkaClient

    with KafkaClient(bootstrap, timeout=10) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -5}
                                           for p in range(PARTITIONS)]}]}, version=9)
    return {p.partition_index: p.offset + 1 for p in r.topics[0].partitions}


def broker_path(bootstrap: str, ends: dict[int, int]) -> tuple[float, int, int]:
    """(seconds, rows, value bytes) of a consumer reading [0, end) of every partition."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 10 << 20})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    left = dict(ends)
    rows = size = 0
    t0 = time.perf_counter()
    while any(v > 0 for v in left.values()):
        for m in c.consume(num_messages=10000, timeout=1.0):
            if m.error() is None and m.offset() < ends[m.partition()]:
                rows += 1
                size += len(m.value())
                left[m.partition()] = ends[m.partition()] - 1 - m.offset()
    dt = time.perf_counter() - t0
    c.close()
    return dt, rows, size


def spark_path(remote: Path, ends: dict[int, int]) -> tuple[float, float, int, int]:
    """(best seconds, first run seconds, rows, value bytes) of sum(length(value)) over the reader."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_readers import TieredLogDataSource

    spark = (SparkSession.builder.master("local[2]").appName("tieredlog-bench").config("spark.driver.memory", "1g")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TieredLogDataSource)
    try:
        times = []
        for _ in range(2):
            df = (spark.read.format("tieredlog").option("path", remote.as_uri()).option("topic", TOPIC)
                  .option("endingOffsets", json.dumps({TOPIC: {str(p): e for p, e in ends.items()}})).load())
            t0 = time.perf_counter()
            row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
            times.append(time.perf_counter() - t0)
        return min(times), times[0], int(row["n"]), int(row["b"])
    finally:
        spark.stop()


def raw_reads(remote: Path) -> tuple[float, int]:
    files = sorted(remote.glob(f"{TOPIC}-*/*/*.log"))
    t0 = time.perf_counter()
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(8 << 20):
                total += len(chunk)
    return time.perf_counter() - t0, total


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.broker_harness import BrokerProcess

    print(f"command: .venv/bin/python -m bench bench_spark_reader  (SPARK_BENCH_MB={MB}); {PARTITIONS} partitions, "
          f"{VALUE_SIZE} B records, remote folder (LocalTieredStorage), Spark local[2], {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as d:
        tmp = Path(d)
        remote = tmp / "remote"
        broker = BrokerProcess(tmp / "data", {"rsm.config.dir": str(remote), "remote.log.manager.task.interval.ms": "500",
                                              "log.retention.check.interval.ms": "1000"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
                "remote.storage.enable": "true", "segment.bytes": str(64 << 20),
                "local.retention.ms": "1000"})])[TOPIC].result(30)
            produce(broker.bootstrap, MB << 20)
            target = (MB << 20) * 0.9
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                ends = tiered_ends(broker.bootstrap)
                if sum(ends.values()) * VALUE_SIZE >= target:
                    break
                time.sleep(1)
            time.sleep(2)  # let the last copies settle: every method reads the same ends
            ends = tiered_ends(broker.bootstrap)
            rows = sum(ends.values())
            pid = broker.proc.pid if broker.proc else 0
            print(f"\ntiered: {rows} rows ({rows * VALUE_SIZE / (1 << 20):.0f} MiB of values) in "
                  f"{len(list(remote.glob(f'{TOPIC}-*/*/*.log')))} segments\n")

            cpu0 = cpu_seconds(pid)
            best, first, n, size = spark_path(remote, ends)
            spark_cpu = cpu_seconds(pid) - cpu0
            assert n == rows, (n, rows)
            cpu0 = cpu_seconds(pid)
            b_s, b_rows, b_size = broker_path(broker.bootstrap, ends)
            broker_cpu = cpu_seconds(pid) - cpu0
            assert b_rows == rows and b_size == size, (b_rows, b_size, rows, size)
            raw_s, raw_bytes = raw_reads(remote)

            def line(name: str, seconds: float, cpu: float | None) -> str:
                cpu_s = "" if cpu is None else f"{cpu:16.1f}"
                return (f"  {name:<40}{seconds:9.2f}{rows / seconds:12.0f}{size / seconds / (1 << 20):9.1f}{cpu_s}")

            print(f"  {'path':<40}{'seconds':>9}{'rows/s':>12}{'MiB/s':>9}{'broker CPU s':>16}")
            print(line("Spark reader (best of 2)", best, spark_cpu))
            print(f"  {'  (first run, workers starting)':<40}{first:9.2f}")
            print(line("broker path (confluent-kafka consumer)", b_s, broker_cpu))
            print(f"  {'raw file reads of the .log objects':<40}{raw_s:9.2f}{'':>12}{raw_bytes / raw_s / (1 << 20):9.1f}")
            print(f"\n  Spark reader / broker path: {b_s / best:.2f}x faster; broker CPU {spark_cpu:.1f} s vs "
                  f"{broker_cpu:.1f} s; reader MiB/s (values) / raw MiB/s (objects): "
                  f"{(size / best) / (raw_bytes / raw_s):.3f}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
