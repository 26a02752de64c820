"""Transactions read back from the remote tier, on a real broker process with confluent-kafka clients.

Two transactional producers interleave committed and aborted transactions over many small
segments of a tiered topic; every rolled segment is copied and deleted locally, so a consumer
from offset 0 is served by the remote tier (the last abort marker stays local, in the active
segment). A read_committed consumer must see exactly the committed records, a read_uncommitted one
everything; a raw Fetch of each remote segment must list exactly the aborted transactions that
overlap the batches it returns, computed here from the records themselves, not from any index.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import FETCH, LIST_OFFSETS
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import decode_batch

pytestmark = pytest.mark.integration

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
READ_COMMITTED = 1


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


def fetch(bootstrap: str, offset: int, isolation: int, max_bytes: int = 1 << 20):  # noqa: ANN201 - kio's partition
    with KafkaClient(bootstrap, timeout=60) as c:
        r = c.request(FETCH, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes,
                              "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                              "topics": [{"topic": TOPIC, "partitions": [
                                  {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]},
                      version=12)
    return r.responses[0].partitions[0]


def remote_fetch(bootstrap: str, offset: int, isolation: int):  # noqa: ANN201
    """A Fetch the remote tier answers with records (a read past remote.fetch.max.wait.ms is empty: again)."""
    return wait_for(lambda: (p := fetch(bootstrap, offset, isolation)).records and p, what=f"a remote read at {offset}")


def transactions_of(data: bytes) -> tuple[list[tuple[int, int, int]], int]:
    """From the batches alone: the aborted transactions (producer id, first offset, marker offset) and
    the offset after the last batch. A producer's transaction runs from its first batch to its marker."""
    first: dict[int, int] = {}
    aborted = []
    end = 0
    for pos, h in iter_headers(data):
        end = h.next_offset
        if not h.is_transactional:
            continue
        if not h.is_control:
            first.setdefault(h.producer_id, h.base_offset)
            continue
        _, records = decode_batch(data, pos)
        if records[0].key[3] == 0 and h.producer_id in first:  # key: version i16, type i16 (0 = ABORT)
            aborted.append((h.producer_id, first[h.producer_id], h.base_offset))
        first.pop(h.producer_id, None)
    return aborted, end


def test_read_committed_from_the_remote_tier_skips_aborted_transactions(broker_factory) -> None:
    b = broker_factory(OVERRIDES)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=TIERED)])[TOPIC].result(30)
    committed, aborted, aborts = produce_transactions(b.bootstrap)
    end = list_offset(b.bootstrap, -1)
    local_start = tiered_and_deleted(b.bootstrap, Path(b.data_dir) / f"{TOPIC}-0")
    assert 0 < local_start < end and list_offset(b.bootstrap, -2) == 0

    # the clients: read_committed sees exactly the committed records, read_uncommitted everything
    # (the two producers' records interleave in the log; each producer's keep their order)
    seen = [v for _, v in read_records(b.bootstrap, "read_committed", len(committed))]
    assert sorted(seen) == sorted(committed)
    for name in ("left", "right"):
        assert [v for v in seen if v.startswith(name)] == [v for v in committed if v.startswith(name)]
    everything = [v for _, v in read_records(b.bootstrap, "read_uncommitted", len(committed) + len(aborted))]
    assert sorted(everything) == sorted(committed + aborted)

    # the protocol: each remote segment's answer lists exactly the aborted transactions overlapping it
    remote_data, offset = [], 0
    while offset < local_start:
        part = remote_fetch(b.bootstrap, offset, 0)
        assert part.aborted_transactions is None  # read_uncommitted: as before
        data = bytes(part.records)
        remote_data.append((offset, data))
        offset = transactions_of(data)[1]
    local = fetch(b.bootstrap, local_start, 0)
    every_batch = b"".join(d for _, d in remote_data) + bytes(local.records)
    truth, log_end = transactions_of(every_batch)
    assert log_end == end and len(truth) == aborts
    starts = [start for start, _ in remote_data]

    def segment_of(offset: int) -> int:
        return sum(1 for s in starts if s <= offset)  # len(starts) + 1 past them: local

    # every abort marker lies in a later segment than its transaction's first record (each
    # transaction outgrows a segment), and the last one is local while its records are remote
    assert all(segment_of(first) < segment_of(marker) for _, first, marker in truth)
    assert truth[-1][1] < local_start <= truth[-1][2]
    listed = []
    for start, data in remote_data:
        part = remote_fetch(b.bootstrap, start, READ_COMMITTED)
        assert bytes(part.records) == data
        _, next_offset = transactions_of(data)
        want = sorted((pid, first) for pid, first, marker in truth if marker >= start and first < next_offset)
        assert sorted((a.producer_id, a.first_offset) for a in part.aborted_transactions) == want, start
        listed.append(len(want))
    assert any(listed) and not all(listed)  # segments of committed transactions only list none
