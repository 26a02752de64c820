"""Helpers of the tests of compacted tiered topics: updates, deletes and transactions written to
``TOPIC`` with the key -> latest value view a reader must see, that view read back with read_committed,
the local log start offset, and the remote cleaner offset kept beside the tier."""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path

from broker_harness import BrokerProcess
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

TOPIC = "changelog"

WAIT_S = 60.0


def produce(b: BrokerProcess, seed: int, transactions: bool = True, records: int = 3000,
            ) -> tuple[dict[bytes, bytes | None], int]:
    """Updates and deletes of 100 keys, and transactions committed or aborted at random; the key -> latest
    value map (None: a tombstone) of a replay of all acknowledged records, and the payload bytes written."""
    rnd = random.Random(seed)
    acked: list[tuple[int, bytes, bytes | None]] = []
    aborted: set[int] = set()
    errors: list[KafkaError] = []

    def report(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.offset(), msg.key(), msg.value()))

    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                  "batch.size": 4096, "linger.ms": 2})
    tx = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"tx-{seed}"})
    if transactions:
        tx.init_transactions(30)
    written = 0
    for i in range(records):
        key = b"key-%d" % rnd.randrange(100)
        value = None if rnd.random() < 0.1 else b"value-%d-" % i * 8
        written += len(key) + len(value or b"")
        p.produce(TOPIC, key=key, value=value, partition=0, on_delivery=report)
        p.poll(0)
        if transactions and i % 300 == 150:
            p.flush(30)
            tx.begin_transaction()
            mine: list[tuple[int, bytes, bytes | None]] = []
            for j in range(5):
                tx.produce(TOPIC, key=b"key-%d" % rnd.randrange(100), value=b"txn-%d-%d" % (i, j), partition=0,
                           on_delivery=lambda err, msg, mine=mine: report(err, msg) if err else
                           mine.append((msg.offset(), msg.key(), msg.value())))
            tx.flush(30)
            if rnd.random() < 0.5:
                tx.abort_transaction(30)
                aborted |= {o for o, _, _ in mine}
            else:
                tx.commit_transaction(30)
            acked += mine
    assert p.flush(60) == 0 and not errors, errors[:3]
    view: dict[bytes, bytes | None] = {}
    for offset, key, value in sorted(acked):
        if offset not in aborted:
            view[key] = value  # a tombstone (None) too: a reader within delete.retention.ms sees it
    return view, written


def consume(b: BrokerProcess) -> tuple[dict[bytes, bytes | None], list[int]]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"reader-{uuid.uuid4()}", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        view: dict[bytes, bytes | None] = {}
        offsets: list[int] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() >= high:
                    return view, offsets
                continue
            offsets.append(msg.offset())
            view[msg.key()] = msg.value()
        raise AssertionError(f"read {len(offsets)} records in {WAIT_S} s without reaching offset {high}")
    finally:
        c.close()


def local_log_start(b: BrokerProcess) -> int:
    logs = sorted((b.data_dir / f"{TOPIC}-0").glob("*.log"))
    return int(logs[0].name.split(".")[0]) if logs else 0


def kept_cleaner_offset(remote: Path) -> int | None:
    """The remote cleaner offset the leader keeps beside the tier, read from the store."""
    found = list(remote.rglob("cleaner-offset-checkpoint.json"))
    return json.loads(found[0].read_bytes())["cleaner_offset"] if found else None
