"""The Spark reader beside the broker path and raw reads of the same objects, in one run.

A broker (``tieredlog broker`` subprocess) tiers ``SPARK_BENCH_MB`` (default 1024) MiB of 1 KiB
records in ``SPARK_BENCH_PARTITIONS`` (default 1) partitions of 128 MiB segments into a remote folder
(LocalTieredStorage, the layout every backend writes). The reader splits each segment into byte-range
read tasks of at most 64 MiB (``maxBytesPerTask``'s default), so one partition spreads over every core.
Then, over the same tiered offsets:

1. ``spark.read.format("tieredlog")`` (``local[2]``, path ``file://`` of the folder): the time of
   ``sum(length(value))`` over the DataFrame, which decodes every row; best of ``SPARK_BENCH_RUNS``
   (default 5, every run printed: the first also starts Spark's Python workers, and the JVM's JIT
   takes a few runs to compile Spark's Arrow-to-row path). Broker CPU seconds meanwhile (the
   broker is idle: 0 is the point), and the CPU seconds of Spark's JVM and Python workers, to show
   where the reader's time goes.
2. The reader's executor side without Spark: every planned read task read and decoded to Arrow in
   this process, one after another (one core): the decoder's own throughput.
3. The same DataFrame built through the brokers, the issue's baseline: the reader with ``path`` at an
   empty folder and ``kafka.bootstrap.servers``, so every offset is read by confluent-kafka inside
   the executors from the broker (which serves it from the remote tier); right after each reader run,
   best taken; broker CPU seconds meanwhile.
4. The broker path without Spark: a confluent-kafka consumer reading the same offsets through the broker, which
   serves them from the remote tier; as many runs as 1., each right after a reader run (a burst of
   load from elsewhere on the machine then weighs on both), best taken; broker CPU seconds meanwhile.
5. Raw reads: every ``.log`` object read whole with plain file reads (the ceiling of any reader of
   these objects).
6. The Spark reader again in a ``local[1]`` session: ``local[2]`` over ``local[1]`` is how the split
   scales with cores.

    .venv/bin/python -m bench bench_spark_reader      # or: make bench-spark
    SPARK_BENCH_MB=256 SPARK_BENCH_RUNS=3 .venv/bin/python -m bench bench_spark_reader
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.proc_cpu import cpu_seconds
from bench.proc_cpu import parents as proc_parents

MB = int(os.environ.get("SPARK_BENCH_MB", "1024"))
RUNS = int(os.environ.get("SPARK_BENCH_RUNS", "5"))
VALUE_SIZE = 1024
PARTITIONS = int(os.environ.get("SPARK_BENCH_PARTITIONS", "1"))
SEGMENT_BYTES = 128 << 20
TOPIC = "history"


def spark_cpu_seconds(exclude: int) -> dict[str, float]:
    """CPU seconds of this process's descendants but ``exclude`` (the broker): Spark's JVM and its
    Python workers (the daemon forks them; they live as long as the session)."""
    parents = proc_parents()
    out = {"jvm": 0.0, "python workers": 0.0}
    for pid in parents:
        p, inside = pid, False
        while p in parents and p != exclude:
            p = parents[p]
            if p == os.getpid():
                inside = True
                break
        if not inside or pid == exclude:
            continue
        try:
            java = b"java" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            out["jvm" if java else "python workers"] += cpu_seconds(pid)
        except (OSError, IndexError):
            continue
    return out


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
    from tieredlog.clients.blocking import KafkaClient
    from tieredlog.protocol.api import LIST_OFFSETS

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


class SparkPath:
    """``sum(length(value))`` over the reader in one ``local[N]`` session, run after run."""

    def __init__(self, remote: Path, ends: dict[int, int], broker_pid: int, master: str = "local[2]") -> None:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        from spark_readers import TieredLogDataSource

        self.remote, self.ends, self.broker_pid = remote, ends, broker_pid
        self.spark = (SparkSession.builder.master(master).appName("tieredlog-bench")
                      .config("spark.driver.memory", "1g").config("spark.ui.enabled", "false")
                      .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        self.spark.dataSource.register(TieredLogDataSource)

    def run(self) -> tuple[float, int, int, float, dict[str, float]]:
        """(seconds, rows, value bytes, broker CPU seconds, CPU seconds of Spark's processes)."""
        df = (self.spark.read.format("tieredlog").option("path", self.remote.as_uri()).option("topic", TOPIC)
              .option("endingOffsets", json.dumps({TOPIC: {str(p): e for p, e in self.ends.items()}})).load())
        cpu0, broker0 = spark_cpu_seconds(self.broker_pid), cpu_seconds(self.broker_pid)
        t0 = time.perf_counter()
        row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
        dt = time.perf_counter() - t0
        cpu1, broker1 = spark_cpu_seconds(self.broker_pid), cpu_seconds(self.broker_pid)
        return dt, int(row["n"]), int(row["b"]), broker1 - broker0, {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}

    def run_brokers(self, bootstrap: str, empty: Path) -> tuple[float, int, int, float]:
        """(seconds, rows, value bytes, broker CPU seconds) of the same DataFrame built through the
        brokers: ``path`` at an empty folder and ``kafka.bootstrap.servers``, so every partition is one
        tail read by confluent-kafka in the executors, the broker serving it from the remote tier."""
        df = (self.spark.read.format("tieredlog").option("path", empty.as_uri()).option("topic", TOPIC)
              .option("kafka.bootstrap.servers", bootstrap).option("startingOffsets", "earliest")
              .option("endingOffsets", json.dumps({TOPIC: {str(p): e for p, e in self.ends.items()}})).load())
        broker0 = cpu_seconds(self.broker_pid)
        t0 = time.perf_counter()
        row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
        dt = time.perf_counter() - t0
        return dt, int(row["n"]), int(row["b"]), cpu_seconds(self.broker_pid) - broker0

    def stop(self) -> None:
        self.spark.stop()


def decoder_alone(remote: Path, ends: dict[int, int]) -> tuple[float, int, int]:
    """(seconds, rows, value bytes) of every read task of the reader's plan read and decoded here."""
    import pyarrow.compute as pc

    from spark_readers.read import read_task_batches

    rsm, tasks = reader_plan(remote, ends)
    rows = size = 0
    t0 = time.perf_counter()
    for task in tasks:
        for batch in read_task_batches(rsm, task, False):
            rows += batch.num_rows
            size += pc.sum(pc.binary_length(batch.column("value"))).as_py() or 0
    return time.perf_counter() - t0, rows, size


def reader_plan(remote: Path, ends: dict[int, int]) -> tuple[Any, list[Any]]:
    """The reader's store and read tasks (its input partitions) for the bench's offsets."""
    from spark_readers.options import parse_options
    from spark_readers.planner import plan
    from spark_readers.storage import open_storage, storage_spec

    options = parse_options({"path": remote.as_uri(), "topic": TOPIC,
                             "endingOffsets": json.dumps({TOPIC: {str(p): e for p, e in ends.items()}})})
    rsm = open_storage(storage_spec(options.path, options.storage))
    return rsm, plan(rsm, options)


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
    from broker_harness import BrokerProcess
    from confluent_kafka.admin import AdminClient, NewTopic

    print(f"command: .venv/bin/python -m bench bench_spark_reader  (SPARK_BENCH_MB={MB}); {PARTITIONS} partitions, "
          f"{VALUE_SIZE} B records, remote folder (LocalTieredStorage), Spark local[2] and local[1], "
          f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as d:
        tmp = Path(d)
        remote = tmp / "remote"
        broker = BrokerProcess(tmp / "data", {"rsm.config.dir": str(remote), "remote.log.manager.task.interval.ms": "500",
                                              "log.retention.check.interval.ms": "1000"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
                "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.ms": "1000"})])[TOPIC].result(30)
            produce(broker.bootstrap, MB << 20)
            # every segment but each partition's active one, which is never tiered
            target = ((MB << 20) - PARTITIONS * SEGMENT_BYTES) * 0.95
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
                  f"{len(list(remote.glob(f'{TOPIC}-*/*/*.log')))} segments, read by the reader as "
                  f"{len(reader_plan(remote, ends)[1])} input partitions (local[2] runs 2 at a time)\n")

            # The two paths take turns, so a burst of load on the machine weighs on both alike.
            reader_runs, broker_runs, df_broker_runs = [], [], []
            empty = tmp / "empty"
            empty.mkdir()
            spark = SparkPath(remote, ends, pid)
            try:
                for _ in range(max(RUNS, 1)):
                    dt, n, size, spark_cpu, spark_cpus = spark.run()
                    assert n == rows, (n, rows)
                    reader_runs.append((dt, spark_cpu, spark_cpus))
                    d_s, d_rows, d_size, d_cpu = spark.run_brokers(broker.bootstrap, empty)
                    assert (d_rows, d_size) == (rows, size), (d_rows, d_size, rows, size)
                    df_broker_runs.append((d_s, d_cpu))
                    cpu0 = cpu_seconds(pid)
                    b_s, b_rows, b_size = broker_path(broker.bootstrap, ends)
                    broker_runs.append((b_s, cpu_seconds(pid) - cpu0))
                    assert b_rows == rows and b_size == size, (b_rows, b_size, rows, size)
            finally:
                spark.stop()
            one_core_runs = []
            spark = SparkPath(remote, ends, pid, master="local[1]")
            try:
                for _ in range(max(RUNS, 1)):
                    dt, n, _size, _cpu, _cpus = spark.run()
                    assert n == rows, (n, rows)
                    one_core_runs.append(dt)
            finally:
                spark.stop()
            best, spark_cpu, spark_cpus = min(reader_runs, key=lambda r: r[0])
            one_core = min(one_core_runs)
            b_s, broker_cpu = min(broker_runs)
            d_s, df_broker_cpu = min(df_broker_runs)
            alone_s, a_rows, a_size = decoder_alone(remote, ends)
            assert (a_rows, a_size) == (rows, size), (a_rows, a_size, rows, size)
            raw_s, raw_bytes = raw_reads(remote)

            def line(name: str, seconds: float, cpu: float | None) -> str:
                cpu_s = "" if cpu is None else f"{cpu:16.1f}"
                return (f"  {name:<52}{seconds:9.2f}{rows / seconds:12.0f}{size / seconds / (1 << 20):9.1f}{cpu_s}")

            print(f"  {'path':<52}{'seconds':>9}{'rows/s':>12}{'MiB/s':>9}{'broker CPU s':>16}")
            print(line(f"Spark reader (best of {max(RUNS, 1)})", best, spark_cpu))
            print(f"  {'  every run, in order':<52}{', '.join(f'{r[0]:.2f}' for r in reader_runs)}")
            print(f"  {'  CPU s in the best run: Spark JVM':<52}{spark_cpus['jvm']:9.2f}")
            print(f"  {'  CPU s in the best run: Python workers':<52}{spark_cpus['python workers']:9.2f}")
            print(line(f"Spark reader, local[1] (best of {max(RUNS, 1)})", one_core, None))
            print(f"  {'  every run, in order':<52}{', '.join(f'{r:.2f}' for r in one_core_runs)}")
            print(line("reader's read tasks without Spark (1 core)", alone_s, None))
            print(line(f"DataFrame through the brokers (best of {max(RUNS, 1)})", d_s, df_broker_cpu))
            print(f"  {'  every run, in order':<52}{', '.join(f'{r[0]:.2f}' for r in df_broker_runs)}")
            print(line(f"broker path (confluent-kafka consumer, best of {max(RUNS, 1)})", b_s, broker_cpu))
            print(f"  {'  every run, in order':<52}{', '.join(f'{r[0]:.2f}' for r in broker_runs)}")
            print(f"  {'raw file reads of the .log objects':<52}{raw_s:9.2f}{'':>12}{raw_bytes / raw_s / (1 << 20):9.1f}")
            print(f"\n  Spark reader local[2] / local[1]: {one_core / best:.2f}x faster "
                  f"({len(reader_plan(remote, ends)[1])} read tasks over {PARTITIONS} partition(s))")
            print(f"  Spark reader / the DataFrame through the brokers: {d_s / best:.2f}x faster; broker CPU "
                  f"{spark_cpu:.1f} s vs {df_broker_cpu:.1f} s")
            print(f"  Spark reader / broker path: {b_s / best:.2f}x faster; broker CPU {spark_cpu:.1f} s vs "
                  f"{broker_cpu:.1f} s; reader MiB/s (values) / raw MiB/s (objects): "
                  f"{(size / best) / (raw_bytes / raw_s):.3f}; without Spark, on one core: "
                  f"{(size / alone_s) / (raw_bytes / raw_s):.3f}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
