"""RemoteLogMetadataCache: Kafka's state-transition rules and query semantics."""

from __future__ import annotations

import logging
import uuid

import pytest

from tieredlog.rlmm.cache import RemoteLogMetadataCache, RemotePartitionMetadataStore
from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager
from tieredlog.rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TP = TopicIdPartition(uuid.UUID(int=42), "foo", 0)


def seg(start, end, epochs, tp=TP, size=100) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.uuid4()), start, end, end * 10, 0, 1, size, epochs)


def upd(md, state) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, None, state, 1)


@pytest.fixture
def cache():
    c = RemoteLogMetadataCache()
    c.mark_initialized()
    return c


def finished(cache, md):
    assert cache.add_copy_in_progress_segment(md)
    assert cache.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    return md


def test_started_segment_is_listed_but_not_readable(cache):
    md = seg(0, 100, {0: 0})
    cache.add_copy_in_progress_segment(md)
    assert cache.remote_log_segment_metadata(0, 50) is None
    assert cache.highest_offset_for_epoch(0) is None
    assert cache.list_remote_log_segments() == [md]
    assert cache.list_remote_log_segments(0) == [md]
    assert cache.list_remote_log_segments(1) == []


def test_finished_segment_epoch_slices(cache):
    md = finished(cache, seg(0, 100, {0: 0, 1: 20, 2: 50}))
    found = cache.remote_log_segment_metadata(0, 10)
    assert found is not None and found.state == S.COPY_SEGMENT_FINISHED
    assert found.remote_log_segment_id == md.remote_log_segment_id
    assert cache.remote_log_segment_metadata(0, 19) is not None
    assert cache.remote_log_segment_metadata(0, 20) is None  # offset 20 belongs to epoch 1
    assert cache.remote_log_segment_metadata(1, 20) is not None
    assert cache.remote_log_segment_metadata(1, 50) is None
    assert cache.remote_log_segment_metadata(2, 100) is not None
    assert cache.remote_log_segment_metadata(2, 101) is None
    assert cache.remote_log_segment_metadata(3, 60) is None
    assert [cache.highest_offset_for_epoch(e) for e in (0, 1, 2, 3)] == [19, 49, 100, None]


def test_floor_lookup_across_segments(cache):
    a = finished(cache, seg(0, 99, {0: 0}))
    b = finished(cache, seg(100, 199, {0: 100}))
    assert cache.remote_log_segment_metadata(0, 99).remote_log_segment_id == a.remote_log_segment_id
    assert cache.remote_log_segment_metadata(0, 100).remote_log_segment_id == b.remote_log_segment_id
    assert cache.remote_log_segment_metadata(0, 200) is None
    assert cache.highest_offset_for_epoch(0) == 199


def test_delete_lifecycle(cache):
    md = finished(cache, seg(0, 100, {0: 0}))
    assert cache.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(0, 10) is None
    assert [m.state for m in cache.list_remote_log_segments(0)] == [S.DELETE_SEGMENT_STARTED]
    assert cache.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_remote_log_segments() == []
    assert cache.list_remote_log_segments(0) == []
    # Kafka keeps the epoch's highest offset after deletion
    assert cache.highest_offset_for_epoch(0) == 100


def test_started_can_go_straight_to_delete(cache):
    md = seg(0, 100, {0: 0})
    cache.add_copy_in_progress_segment(md)
    assert cache.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
    assert cache.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_remote_log_segments() == []


def test_invalid_transitions_are_logged_and_dropped(cache, caplog):
    md = seg(0, 100, {0: 0})
    cache.add_copy_in_progress_segment(md)
    with caplog.at_level(logging.ERROR):
        assert not cache.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))
    assert "dropping" in caplog.text
    assert cache.list_remote_log_segments()[0].state == S.COPY_SEGMENT_STARTED
    cache.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    assert cache.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))  # self: idempotent
    assert not cache.add_copy_in_progress_segment(md)  # FINISHED -> STARTED
    assert not cache.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_remote_log_segments()[0].state == S.COPY_SEGMENT_FINISHED
    assert cache.remote_log_segment_metadata(0, 5) is not None


def test_started_is_added_not_updated(cache):
    md = seg(0, 100, {0: 0})
    cache.add_copy_in_progress_segment(md)
    with pytest.raises(ValueError):
        cache.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_STARTED))
    other = seg(0, 1, {0: 0})
    with pytest.raises(ValueError):
        cache.add_copy_in_progress_segment(other.create_with_updates(upd(other, S.COPY_SEGMENT_FINISHED)))


def test_unknown_segment_update(cache):
    stranger = seg(0, 1, {0: 0})
    with pytest.raises(RemoteResourceNotFoundException):
        cache.update_remote_log_segment_metadata(upd(stranger, S.COPY_SEGMENT_FINISHED))
    replaying = RemoteLogMetadataCache()  # not initialized: the segment may have left by retention
    assert not replaying.update_remote_log_segment_metadata(upd(stranger, S.COPY_SEGMENT_FINISHED))


def test_new_leader_reupload_supersedes_previous_copy(cache):
    s0 = finished(cache, seg(0, 100, {0: 0}))
    s1 = finished(cache, seg(0, 200, {0: 0}))
    assert cache.remote_log_segment_metadata(0, 50).remote_log_segment_id == s1.remote_log_segment_id
    listed = {m.remote_log_segment_id for m in cache.list_remote_log_segments(0)}
    assert listed == {s0.remote_log_segment_id, s1.remote_log_segment_id}  # s0 is left for retention
    assert cache.highest_offset_for_epoch(0) == 200


def test_a_copy_of_another_history_from_the_same_offset_stays_listed_under_the_epoch(cache):
    """Two unclean elections leave seg-0-3 twice: A's in epoch 0, B's with epoch 1 from offset 2. Reads
    of epoch 0 go to the later copy, and the earlier one stays listed under the epoch for retention."""
    a = finished(cache, seg(0, 3, {0: 0}))
    b = finished(cache, seg(0, 3, {0: 0, 1: 2}))
    assert cache.remote_log_segment_metadata(0, 1).remote_log_segment_id == b.remote_log_segment_id
    assert cache.remote_log_segment_metadata(0, 2) is None  # B's epoch 0 ends at 1
    assert {m.remote_log_segment_id for m in cache.list_remote_log_segments(0)} == {
        a.remote_log_segment_id, b.remote_log_segment_id}
    assert cache.highest_offset_for_epoch(0) == 3


def test_overlapping_segments_read_newest(cache):
    s0 = finished(cache, seg(10, 90, {0: 10}))
    s1 = finished(cache, seg(5, 100, {0: 5}))
    s2 = finished(cache, seg(101, 200, {0: 101}))
    assert cache.remote_log_segment_metadata(0, 95).remote_log_segment_id == s1.remote_log_segment_id
    assert cache.remote_log_segment_metadata(0, 150).remote_log_segment_id == s2.remote_log_segment_id
    assert [m.start_offset for m in cache.list_remote_log_segments(0)] == [5, 10, 101]
    assert s0.remote_log_segment_id in {m.remote_log_segment_id for m in cache.list_remote_log_segments()}


def test_lists_are_sorted_by_start_offset(cache):
    mds = [seg(s, s + 9, {0: s}) for s in (50, 10, 30, 0, 20, 40)]
    for i, md in enumerate(mds):
        if i % 2:
            finished(cache, md)
        else:
            cache.add_copy_in_progress_segment(md)
    assert [m.start_offset for m in cache.list_remote_log_segments()] == [0, 10, 20, 30, 40, 50]
    assert [m.start_offset for m in cache.list_remote_log_segments(0)] == [0, 10, 20, 30, 40, 50]


def test_partition_delete_states():
    store = RemotePartitionMetadataStore()
    store.handle_segment_metadata(seg(0, 1, {0: 0}))
    assert not store.handle_partition_delete(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_STARTED, 1, 0))
    assert TP not in store.delete_metadata
    assert store.handle_partition_delete(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_MARKED, 1, 0))
    assert store.handle_partition_delete(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_MARKED, 2, 0))
    assert not store.handle_partition_delete(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_FINISHED, 3, 0))
    assert store.handle_partition_delete(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_STARTED, 4, 0))
    assert store.delete_metadata[TP].state == P.DELETE_PARTITION_STARTED
    assert TP in store.caches
    assert store.handle_partition_delete(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_FINISHED, 5, 0))
    assert TP not in store.caches and TP not in store.delete_metadata


def test_in_memory_manager():
    rlmm = InMemoryRemoteLogMetadataManager()
    md = seg(0, 9, {0: 0}, size=123)
    with pytest.raises(ValueError):
        rlmm.add_remote_log_segment_metadata(md.create_with_updates(upd(md, S.COPY_SEGMENT_FINISHED)))
    rlmm.add_remote_log_segment_metadata(md)
    assert rlmm.remote_log_segment_metadata(TP, 0, 5) is None
    with pytest.raises(ValueError):
        rlmm.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_STARTED))
    rlmm.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    assert rlmm.remote_log_segment_metadata(TP, 0, 5).state == S.COPY_SEGMENT_FINISHED
    assert rlmm.highest_offset_for_epoch(TP, 0) == 9
    assert rlmm.remote_log_size(TP, 0) == 123
    assert [m.start_offset for m in rlmm.list_remote_log_segments(TP)] == [0]


def test_next_segment_with_txn_index(cache):
    def with_txn(md, present):
        return RemoteLogSegmentMetadata(md.remote_log_segment_id, md.start_offset, md.end_offset, 0, 0, 0, 1,
                                        md.segment_leader_epochs, tx_index_present=present)

    a = finished(cache, with_txn(seg(0, 99, {0: 0}), False))
    b = finished(cache, with_txn(seg(100, 199, {0: 100}), True))
    c = finished(cache, with_txn(seg(200, 299, {0: 200, 1: 250}), True))
    assert a is not None
    assert cache.next_segment_with_txn_index(0, 5).remote_log_segment_id == b.remote_log_segment_id
    assert cache.next_segment_with_txn_index(0, 150).remote_log_segment_id == b.remote_log_segment_id
    assert cache.next_segment_with_txn_index(0, 200).remote_log_segment_id == c.remote_log_segment_id
    assert cache.next_segment_with_txn_index(0, 250) is None  # 250 is epoch 1's
    assert cache.next_segment_with_txn_index(1, 250).remote_log_segment_id == c.remote_log_segment_id
    assert cache.next_segment_with_txn_index(2, 0) is None


def test_readable_segments_are_what_reads_go_to(cache):
    """What a reader without the broker's epoch cache is handed (``metadataSource=brokers``): finished
    copies still mapped under an epoch; not a copy in progress, one being deleted, or one superseded."""
    started = seg(300, 400, {1: 300})
    cache.add_copy_in_progress_segment(started)
    old = finished(cache, seg(0, 100, {0: 0}))
    new = finished(cache, seg(0, 200, {0: 0}))  # a new leader's copy of the same offsets and more
    later = finished(cache, seg(201, 299, {0: 201, 1: 250}))
    deleting = finished(cache, seg(400, 500, {1: 400}))
    assert cache.update_remote_log_segment_metadata(upd(deleting, S.DELETE_SEGMENT_STARTED))
    readable = cache.readable_segments()
    assert [m.remote_log_segment_id for m in readable] == [new.remote_log_segment_id, later.remote_log_segment_id]
    assert all(m.state == S.COPY_SEGMENT_FINISHED for m in readable)
    assert old.remote_log_segment_id in {m.remote_log_segment_id for m in cache.list_remote_log_segments()}
