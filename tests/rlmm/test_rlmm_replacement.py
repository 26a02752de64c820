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
