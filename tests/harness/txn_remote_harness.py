"""Helpers of the tests of transactions in the remote tier: interleaved committed and aborted
transactions written to ``TOPIC`` (small tiered segments), read back per isolation level, and the wait
until every rolled segment is tiered and deleted locally."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import wait_for

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import LIST_OFFSETS

OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
    "remote.fetch.max.wait.ms": "5000",
}

TOPIC = "txr"


TIERED = {"segment.bytes": "4096", "local.retention.bytes": "1", "remote.storage.enable": "true"}


def read_records(bootstrap: str, isolation: str, expect: int, timeout_s: float = 60) -> list[tuple[int, str]]:
    """(offset, value) of partition 0 from offset 0 until ``expect`` came (more would be kept, and fail
    the test) and then nothing more for a moment."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}", "isolation.level": isolation,
                  "enable.auto.commit": False, "fetch.error.backoff.ms": 50})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    out: list[tuple[int, str]] = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error() is None:
                    out.append((m.offset(), m.value().decode()))
            if len(out) >= expect and quiet_until is None:
                quiet_until = time.monotonic() + 1.0
    finally:
        c.close()
    return out


def produce_transactions(bootstrap: str) -> tuple[list[str], list[str], int]:
    """Committed and aborted transactions of two interleaving producers into TOPIC, the last one aborted
    (so its marker ends the log); returns the committed values, the aborted ones, and the aborts."""
    # batches well below segment.bytes (a bigger one is refused, as in Kafka)
    producers = {name: Producer({"bootstrap.servers": bootstrap, "transactional.id": name, "linger.ms": 2,
                                 "batch.size": 1500}) for name in ("left", "right")}
    for p in producers.values():
        p.init_transactions(30)
    committed: list[str] = []
    aborted: list[str] = []
    aborts = 0
    for t in range(10):
        # both open at once, records interleaved, so each transaction spans several small segments
        # and one's marker lands while the other is still open
        for p in producers.values():
            p.begin_transaction()
        written: dict[str, list[str]] = {name: [] for name in producers}
        for i in range(12):
            for name, p in producers.items():
                value = f"{name}-t{t}-r{i}-" + "x" * 200
                p.produce(TOPIC, value=value.encode())
                written[name].append(value)
            if i % 4 == 3:
                for p in producers.values():
                    p.flush(30)
        for name, p in producers.items():
            p.flush(30)  # in the log before an abort: only then is there anything to hide
            if (t + (name == "right")) % 3 == 0:
                p.abort_transaction(30)
                aborted += written[name]
                aborts += 1
            else:
                p.commit_transaction(30)
                committed += written[name]
    # the last transaction is aborted, so its marker ends the log: it stays in the active segment
    last = producers["left"]
    last.begin_transaction()
    tail = [f"left-last-r{i}-" + "x" * 200 for i in range(30)]
    for v in tail:
        last.produce(TOPIC, value=v.encode())
    last.flush(30)
    last.abort_transaction(30)
    return committed, aborted + tail, aborts + 1


def tiered_and_deleted(bootstrap: str, log_dir: Path) -> int:
    """Wait until every rolled segment is tiered and deleted locally (the active one, holding the last
    marker, is left); returns the local log start offset."""
    wait_for(lambda: len(list(log_dir.glob("*.log"))) == 1, what="the rolled segments to be tiered and deleted")
    local_start = list_offset(bootstrap, -4)
    assert local_start == int(next(log_dir.glob("*.log")).name[:20])
    return local_start


def list_offset(bootstrap: str, timestamp: int) -> int:
    with KafkaClient(bootstrap, timeout=10) as c:
        r = c.request(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": timestamp, "current_leader_epoch": -1}]}]})
    return r.topics[0].partitions[0].offset
