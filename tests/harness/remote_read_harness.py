"""Helpers of the tests reading a single broker's remote tier through KafkaClient: a tiered topic
created with CreateTopics, records produced to each of its partitions, and the local log start offset
(ListOffsets -4) of a partition."""

from __future__ import annotations

from confluent_kafka import Producer

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import CREATE_TOPICS, LIST_OFFSETS

FAST = {
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
}

TIERED = [{"name": "segment.bytes", "value": "16384"}, {"name": "local.retention.bytes", "value": "1"},
          {"name": "remote.storage.enable", "value": "true"}]


def create_tiered_topic(c: KafkaClient, topic: str, partitions: int = 1, configs: list[dict[str, str]] = TIERED) -> None:
    r = c.request(CREATE_TOPICS, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                              "configs": configs}], "timeout": 10000})
    assert r.topics[0].error_code.value == 0, r.topics[0]


def produce_to_partitions(bootstrap: str, topic: str, partitions: int, n: int = 600) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "batch.size": 4096})
    for part in range(partitions):
        for i in range(n):
            p.produce(topic, value=b"value-%d-" % i * 10, partition=part)
    assert p.flush(30) == 0


def local_log_start_of(c: KafkaClient, topic: str, partition: int) -> int:
    r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -4, "current_leader_epoch": -1}]}]})
    return r.topics[0].partitions[0].offset
