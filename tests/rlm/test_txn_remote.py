"""Transactions read back from the remote tier, on a real broker process with confluent-kafka clients.

Two transactional producers interleave committed and aborted transactions over many small
segments of a tiered topic; every rolled segment is copied and deleted locally, so a consumer
from offset 0 is served by the remote tier (the last abort marker stays local, in the active
segment). A read_committed consumer must see exactly the committed records, a read_uncommitted one
everything; a raw Fetch of each remote segment must list exactly the aborted transactions that
overlap the batches it returns, computed here from the records themselves, not from any index.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import wait_for
from txn_remote_harness import (
    OVERRIDES,
    TIERED,
    TOPIC,
    list_offset,
    produce_transactions,
    read_records,
    tiered_and_deleted,
)

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import FETCH
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import decode_batch

pytestmark = pytest.mark.integration

READ_COMMITTED = 1


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
