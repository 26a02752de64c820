"""The landing job (``python -m spark_readers.landing``) as users run it: a Spark process streams a topic
from a broker's remote folder and its tail into date-partitioned Parquet, is killed (SIGKILL, the whole
process group: Python and its JVM) after two micro-batches, and started again from its checkpoint once
more records are on the broker only; the committed files then hold every record a consumer reads,
once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pyarrow.parquet as pq
import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for

from spark_readers.landing import committed_files

pytestmark = pytest.mark.integration

TOPIC = "landing"
PARTITIONS = 2
TS0 = int(time.time() * 1000) - 4 * 86_400_000  # four days back, 5 minutes apart: records span date folders


def produce(bootstrap: str, first: int, count: int) -> None:
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1024, "enable.idempotence": True})
    for i in range(first, first + count):
        p.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS, timestamp=TS0 + i * 300_000,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.poll(0)
    assert p.flush(60) == 0 and errors == []


def consume(bootstrap: str) -> list[tuple[int, int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "landing", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    rows, at_end = [], set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is not None:
                    at_end.add(m.partition())
                else:
                    rows.append((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    return sorted(rows)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("landing") / "data", {
        "remote.log.manager.task.interval.ms": "200", "offsets.topic.num.partitions": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept alive until the topic is created
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "2000"})])[TOPIC].result(30)
        del admin
        yield b
    finally:
        b.stop()


def job(b: BrokerProcess, out: Path, checkpoint: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "spark_readers.landing", "--topic", TOPIC, "--to", str(out),
           "--checkpoint", str(checkpoint), "--master", "local[1]", "--trigger-seconds", "1",
           "--option", f"path={(b.data_dir / 'remote-storage').as_uri()}",
           "--option", f"kafka.bootstrap.servers={b.bootstrap}", "--option", "maxOffsetsPerTrigger=250", *extra]
    return subprocess.Popen(cmd, env={**os.environ, "PYSPARK_PYTHON": sys.executable}, stdout=subprocess.DEVNULL,
                            stderr=open(out.parent / "job.log", "ab"), start_new_session=True)


def test_landing_job_survives_a_kill_and_restart_exactly_once(broker: BrokerProcess, tmp_path: Path) -> None:
    produce(broker.bootstrap, 0, 800)
    wait_for(lambda: any((broker.data_dir / "remote-storage").rglob("*.manifest")), "segments tiered", 60)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = job(broker, out, checkpoint)
    try:
        wait_for(lambda: (checkpoint / "commits" / "1").exists() or first.poll() is not None,
                 "two micro-batches committed", 180, 0.2)
        assert first.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the job's own process group: its Python and its JVM
        first.wait(30)
    landed_before = len(committed_files(out))
    produce(broker.bootstrap, 800, 200)  # on the broker only (the active segments are not tiered)
    second = job(broker, out, checkpoint, "--once")
    assert second.wait(300) == 0, (tmp_path / "job.log").read_text()[-3000:]
    files = committed_files(out)
    assert landed_before > 0 and len(files) > landed_before
    rows = sorted((r["partition"], r["offset"], r["value"]) for f in files
                  for r in pq.read_table(f, columns=["partition", "offset", "value"]).to_pylist())
    assert rows == consume(broker.bootstrap)  # every record, none twice
    assert len({Path(f).parent.name for f in files}) >= 3  # date=... folders
