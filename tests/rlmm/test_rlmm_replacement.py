"""The remote cleaner's switch rule in the RLMM cache: a replacement covering the same offsets under a new
segment id is served from its COPY_SEGMENT_FINISHED on, the old segment until then; for every offset
exactly one of the two at every step of the replacement (and of a replay of the same events)."""

from __future__ import annotations

import uuid

import pytest

from tieredlog.rlmm.cache import RemoteLogMetadataCache
from tieredlog.rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID(int=7), "changelog", 0)


def seg(start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, uuid.uuid4()), start, end, end, 0, 1, 100, epochs)


def event(md: RemoteLogSegmentMetadata, state: S) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, None, state, 0)


def apply(cache: RemoteLogMetadataCache, ev: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate) -> None:
    if isinstance(ev, RemoteLogSegmentMetadata):
        assert cache.add_copy_in_progress_segment(ev)
    else:
        assert cache.update_remote_log_segment_metadata(ev)


def served(cache: RemoteLogMetadataCache, epochs: dict[int, int], end: int) -> dict[int, uuid.UUID | None]:
    """The segment id served for every offset of the log, each under the epoch the lineage gives it."""
    starts = sorted(epochs.items(), key=lambda kv: kv[1])
    out: dict[int, uuid.UUID | None] = {}
    for offset in range(end + 1):
        epoch = max(e for e, s in starts if s <= offset)
        md = cache.remote_log_segment_metadata(epoch, offset)
        out[offset] = None if md is None else md.remote_log_segment_id.id
    return out


LINEAGE = {0: 0, 1: 150, 2: 260}
SEGMENTS = [(0, 99, {0: 0}), (100, 199, {0: 100, 1: 150}), (200, 299, {1: 200, 2: 260})]


@pytest.mark.parametrize("victim", [0, 1, 2])
def test_replacement_switches_in_one_event(victim: int) -> None:
    cache = RemoteLogMetadataCache()
    cache.mark_initialized()
    olds = [seg(*s) for s in SEGMENTS]
    for md in olds:
        apply(cache, md)
        apply(cache, event(md, S.COPY_SEGMENT_FINISHED))
    old = olds[victim]
    new = seg(old.start_offset, old.end_offset, dict(old.segment_leader_epochs))
    steps = [new, event(new, S.COPY_SEGMENT_FINISHED), event(old, S.DELETE_SEGMENT_STARTED),
             event(old, S.DELETE_SEGMENT_FINISHED)]
    before = served(cache, LINEAGE, 299)
    assert None not in before.values()
    for i, step in enumerate(steps):
        apply(cache, step)
        now = served(cache, LINEAGE, 299)
        for offset, sid in now.items():
            in_victim = old.start_offset <= offset <= old.end_offset
            expected = (new if i >= 1 else old).remote_log_segment_id.id if in_victim else before[offset]
            assert sid == expected, (i, offset)
    # the old copy is left listed for expiration until its deletion finishes, then gone
    assert old.remote_log_segment_id not in {m.remote_log_segment_id for m in cache.list_remote_log_segments()}
    assert cache.highest_offset_for_epoch(2) == 299


def test_crash_before_finish_keeps_the_old_copy_served() -> None:
    cache = RemoteLogMetadataCache()
    cache.mark_initialized()
    old = seg(0, 99, {0: 0})
    apply(cache, old)
    apply(cache, event(old, S.COPY_SEGMENT_FINISHED))
    apply(cache, seg(0, 99, {0: 0}))  # the replacement's STARTED; its upload never finishes
    assert cache.remote_log_segment_metadata(0, 50) == cache.segment(old.remote_log_segment_id)


@pytest.mark.parametrize("merged", [(0, 2), (1, 3), (0, 3)])
def test_a_replacement_merging_segments_supersedes_them_all_in_one_event(merged: tuple[int, int]) -> None:
    """The remote cleaner's merge: one new segment covers several consecutive old ones (across epochs), and
    its COPY_SEGMENT_FINISHED alone moves every offset of theirs to it; readable_segments never overlap."""
    cache = RemoteLogMetadataCache()
    cache.mark_initialized()
    olds = [seg(*s) for s in SEGMENTS]
    for md in olds:
        apply(cache, md)
        apply(cache, event(md, S.COPY_SEGMENT_FINISHED))
    retired = olds[merged[0]:merged[1]]
    epochs: dict[int, int] = {}
    for md in retired:
        for e, s in md.segment_leader_epochs.items():
            epochs.setdefault(e, s)
    new = seg(retired[0].start_offset, retired[-1].end_offset, epochs)
    steps = [new, event(new, S.COPY_SEGMENT_FINISHED)]
    steps += [event(md, S.DELETE_SEGMENT_STARTED) for md in retired]
    steps += [event(md, S.DELETE_SEGMENT_FINISHED) for md in retired]
    before = served(cache, LINEAGE, 299)
    for i, step in enumerate(steps):
        apply(cache, step)
        now = served(cache, LINEAGE, 299)
        for offset, sid in now.items():
            covered = new.start_offset <= offset <= new.end_offset
            assert sid == (new.remote_log_segment_id.id if covered and i >= 1 else before[offset]), (i, offset)
        ranges = [(m.start_offset, m.end_offset) for m in cache.readable_segments()]
        assert [r for a, b in zip(ranges, ranges[1:]) for r in (a, b) if a[1] >= b[0]] == []  # no overlap
        assert sum(e - s + 1 for s, e in ranges) == 300  # and no hole
    assert [m.remote_log_segment_id for m in cache.list_remote_log_segments()] == \
        [m.remote_log_segment_id for m in [*olds[:merged[0]], new, *olds[merged[1]:]]]
    assert cache.highest_offset_for_epoch(2) == 299


def test_a_copy_reaching_past_a_mapped_segment_leaves_it_mapped() -> None:
    """Only segments a new copy covers whole are superseded by it: one reaching further keeps its offsets."""
    cache = RemoteLogMetadataCache()
    cache.mark_initialized()
    olds = [seg(0, 99, {0: 0}), seg(100, 199, {0: 100}), seg(200, 299, {0: 200})]
    for md in olds:
        apply(cache, md)
        apply(cache, event(md, S.COPY_SEGMENT_FINISHED))
    partial = seg(0, 149, {0: 0})
    apply(cache, partial)
    apply(cache, event(partial, S.COPY_SEGMENT_FINISHED))
    now = served(cache, {0: 0}, 299)
    assert {now[o] for o in range(100)} == {partial.remote_log_segment_id.id}
    assert {now[o] for o in range(100, 200)} == {olds[1].remote_log_segment_id.id}  # still whole, still served
    assert {now[o] for o in range(200, 300)} == {olds[2].remote_log_segment_id.id}
