"""Open transactions made by hand: a transactional batch sent by Produce under a producer id no
coordinator allocated, which the partition accepts as Kafka's does (an unknown producer id starts a
transaction at any sequence). Nothing will ever end it but a marker: a hanging transaction. The
Produce names no transactional id, so the leader has no coordinator to verify it with (KIP-890 part 1
verifies only produces that name one), as a Kafka broker without an authorizer also lets through.

    start = open_transaction(bootstrap, "t", 0, producer_id=7001, timestamp_ms=now_ms() - HOUR_MS)
"""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import CREATE_TOPICS, PRODUCE
from tieredlog.records.record import build_batch

HOUR_MS = 3_600_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def create_topic(bootstrap: str, name: str, partitions: int = 1, assignment: list[list[int]] | None = None) -> None:
    with KafkaClient(bootstrap, timeout=30) as c:
        topic = {"name": name, "num_partitions": -1 if assignment else partitions,
                 "replication_factor": -1 if assignment else 1, "configs": [],
                 "assignments": [{"partition_index": i, "broker_ids": ids} for i, ids in enumerate(assignment or [])]}
        r = c.request(CREATE_TOPICS, {"topics": [topic], "timeout": 30000, "validate_only": False}).topics[0]
    assert r.error_code == ErrorCode.none, r


def produce_batch(bootstrap: str, topic: str, partition: int, records: bytes, acks: int = -1,
                  transactional_id: str | None = None) -> int:
    """Append one raw batch; returns its base offset."""
    with KafkaClient(bootstrap, timeout=30) as c:
        r = c.request(PRODUCE, {"transactional_id": transactional_id, "acks": acks, "timeout": 30000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}, version=9)
    p = r.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.none, p
    return int(p.base_offset)


def open_transaction(bootstrap: str, topic: str, partition: int, *, producer_id: int, producer_epoch: int = 0,
                     base_sequence: int = 0, records: int = 2, timestamp_ms: int | None = None) -> int:
    """Begin a transaction of ``records`` records stamped ``timestamp_ms`` (CreateTime: the producer
    state keeps it as the producer's last timestamp); returns the offset it starts at."""
    ts = now_ms() if timestamp_ms is None else timestamp_ms
    batch = build_batch([(b"k%d" % i, b"v%d" % i, [], ts) for i in range(records)], producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence, is_transactional=True)
    return produce_batch(bootstrap, topic, partition, batch)


def idempotent_batch(producer_id: int, producer_epoch: int, base_sequence: int, records: int,
                     timestamp_ms: int | None = None) -> bytes:
    ts = now_ms() if timestamp_ms is None else timestamp_ms
    return build_batch([(None, b"v%d" % i, [], ts) for i in range(records)], producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence)
