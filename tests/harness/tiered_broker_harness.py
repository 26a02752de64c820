"""Helpers of the single-broker tiered-storage tests: fast RLM settings (``FAST``), a tiered topic
(``TIERED`` configs, small segments, local retention of one byte), produced and consumed through
confluent-kafka with recent timestamps, and ListOffsets; ``PLUGINS`` is the folder of the RSM test plugins."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS

PLUGINS = Path(__file__).resolve().parent / "rsm_plugins"

FAST = {
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
    "remote.fetch.max.wait.ms": "2000",
}


# recent timestamps: retention.ms (7 days by default) must not expire the data under test
TS0 = int(time.time() * 1000) - 60_000

TIERED = {"segment.bytes": "32768", "local.retention.bytes": "1", "remote.storage.enable": "true"}


def create(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result arrives
    admin.create_topics([NewTopic(topic, 1, 1, config={**TIERED, **configs})])[topic].result(30)


def value_of(i: int) -> bytes:
    return b"value-%d-" % i * 8


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    # batches well below segment.bytes (a bigger record set is rejected, as in Kafka)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "batch.size": 8192})
    errors: list = []
    for i in range(start, start + n):
        p.produce(topic, key=b"k%d" % i, value=value_of(i), timestamp=TS0 + i, headers=[("i", b"%d" % i)],
                  on_delivery=lambda err, msg: errors.append(err) if err is not None else None)
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == []


def consume(bootstrap: str, topic: str, offset: int, n: int, timeout_s: float = 40) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False,
                  "fetch.error.backoff.ms": 50, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, offset)])
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    got.append(m)
    finally:
        c.close()
    return got


def list_offset(bootstrap: str, topic: str, ts: int) -> int:
    with KafkaClient(bootstrap) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}]}]})
        return r.topics[0].partitions[0].offset
