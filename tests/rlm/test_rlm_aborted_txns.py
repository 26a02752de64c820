"""read_committed fetches served from the remote tier carry the aborted transactions of what they
return (Kafka's RemoteLogManager.read with READ_COMMITTED, KIP-1058's walk): from the fetched
segment's txn index, the later remote segments' on the lineage (those without one are not fetched)
and the local segments'. Real parts: UnifiedLog in a tmp dir, LocalTieredStorage, the in-memory RLMM.

The partition (each line a batch; ``Pn`` a transactional producer, ``*`` its marker)::

    A  P1 P2 P3 P4 plain P1*ABORT          remote
    B  plain P2*COMMIT P3 P4 plain         remote, no txn index
    C  P3*ABORT plain                      remote
    D  plain P5 P5*ABORT plain             remote
    L  P4*ABORT plain                      local (the active segment)
"""

from __future__ import annotations

from concurrent.futures import wait

import pytest
from txn_layout import ABORT, COMMIT, TxnPartition, tier, tiered_log

from tieredlog.log.types import FetchDataInfo
from tieredlog.records.batch import iter_headers
from tieredlog.rlm.manager import RemoteLogManager


@pytest.fixture
def tiered(tmp_path):
    plog = tiered_log(tmp_path / "logs")
    p = TxnPartition(plog)
    for pid in (1, 2, 3, 4):  # A
        p.txn(pid)
    p.plain()
    p.end(1, ABORT)
    p.roll()
    p.plain()  # B
    p.end(2, COMMIT)
    p.txn(3)
    p.txn(4)
    p.plain()
    p.roll()
    p.end(3, ABORT)  # C
    p.plain()
    p.roll()
    p.plain()  # D
    p.txn(5)
    p.end(5, ABORT)
    p.plain()
    p.roll()
    p.end(4, ABORT)  # L, the active segment: never tiered
    p.plain()
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == plog.log_end_offset  # every transaction is decided
    rlm = tier(plog, tmp_path / "remote", tmp_path / "logs")
    events: list = []
    rlm.rsm.add_listener(events.append)
    assert plog.local_log_start_offset == p.segments[-1][1] + 1  # A..D are remote only
    # the layout the tests rely on: B has no txn index, markers in a later remote segment and locally
    tip = rlm._tip(plog.topic_partition, plog)
    assert [m.tx_index_present for m in rlm.list_segments(tip)] == [True, False, True, True]
    assert p.segments == [(0, 10), (11, 19), (20, 22), (23, 29)]
    assert p.aborted == [(1, 0, 10), (3, 4, 20), (5, 25, 27), (4, 6, 30)]
    try:
        yield p, rlm, events
    finally:
        rlm.shutdown()


def _committed(rlm: RemoteLogManager, p: TxnPartition, offset: int, max_bytes: int) -> tuple[bytes, int, set]:
    info = rlm.read_committed_async(p.plog.topic_partition, offset, max_bytes).result(10)
    assert isinstance(info, FetchDataInfo)
    data = bytes(info.records)
    hdrs = [h for _, h in iter_headers(data)]
    next_offset = hdrs[-1].next_offset if hdrs else offset
    return data, next_offset, {(t.producer_id, t.first_offset, t.last_offset) for t in info.aborted_transactions}


def test_each_remote_segment_returns_the_transactions_aborted_over_it_wherever_the_marker_is(tiered):
    p, rlm, events = tiered
    for start, end in p.segments:
        data, next_offset, aborted = _committed(rlm, p, start, 1 << 20)
        assert next_offset == end + 1  # the whole segment, never more
        assert aborted == p.expected(start, end + 1)
        # the batches are those a read_uncommitted fetch gets
        assert data == rlm.read_async(p.plog.topic_partition, start, 1 << 20).result(10)
    # A: its own abort (P1), one in the later remote segment C (P3), one still local (P4)
    assert p.expected(*p.segments[0]) == {(1, 0, 10), (3, 4, 20), (4, 6, 30)}
    # each segment walked once; B's indexes were fetched to read B, never for a walk
    assert rlm.aborted_txns.walks == 4


def test_a_walk_fetches_only_the_txn_indexes_the_metadata_lists(tiered):
    p, rlm, events = tiered
    del events[:]
    _, _, aborted = _committed(rlm, p, 0, 1 << 20)
    assert aborted == {(1, 0, 10), (3, 4, 20), (4, 6, 30)}
    fetched = [e.start_offset for e in events if e.type == "FETCH_TRANSACTION_INDEX"]
    assert fetched == [p.segments[0][0], p.segments[2][0], p.segments[3][0]]  # A, C, D: not B


def test_small_fetches_get_the_transactions_overlapping_exactly_what_they_return(tiered):
    p, rlm, _ = tiered
    offset, seen = 0, []
    while offset < p.plog.local_log_start_offset:
        _, next_offset, aborted = _committed(rlm, p, offset, 1)  # one batch per fetch
        assert next_offset > offset
        assert aborted == p.expected(offset, next_offset), offset
        seen.append(aborted)
        offset = next_offset
    # the first batch (P1's) overlaps only P1's transaction; P2's batch, inside it, too
    assert seen[0] == seen[1] == {(1, 0, 10)}
    assert rlm.aborted_txns.walks == 4


def test_read_uncommitted_answers_carry_no_aborted_list(tiered):
    p, rlm, _ = tiered
    data = rlm.read_async(p.plog.topic_partition, 0, 1 << 20).result(10)
    assert isinstance(data, (bytes, memoryview)) and len(data) > 0
    assert rlm.aborted_txns.walks == 0


def test_after_its_first_fetch_a_segment_is_answered_inline_without_a_walk(tiered):
    p, rlm, _ = tiered
    tasks: list = []
    submit = rlm.reader_pool.submit

    def recording(fn, *args):
        fut = submit(fn, *args)
        tasks.append((fn, fut))
        return fut

    rlm.reader_pool.submit = recording

    def settle() -> None:
        seen = 0
        while seen < len(tasks):
            batch = [f for _, f in tasks[seen:]]
            seen += len(batch)
            wait(batch)

    offset, inline = 0, []
    while offset < p.plog.local_log_start_offset:
        settle()  # read-ahead and next-segment set-ups have landed
        walked = rlm.aborted_txns.walks
        fut = rlm.read_committed_async(p.plog.topic_partition, offset, 1)
        inline.append(fut.done())
        info = fut.result(10)
        hdrs = [h for _, h in iter_headers(bytes(info.records))]
        next_offset = hdrs[-1].next_offset
        assert {(t.producer_id, t.first_offset, t.last_offset) for t in info.aborted_transactions} == \
            p.expected(offset, next_offset)
        if inline[-1]:
            assert rlm.aborted_txns.walks == walked  # answered from the kept walk
        offset = next_offset
    # the first fetch of each segment went to the pool (to read or to walk), every other was inline
    assert inline.count(False) == len(p.segments) and len(inline) > 2 * len(p.segments)
    assert rlm.aborted_txns.walks == len(p.segments)
