"""The broker-less reader's choice among copies of the same offsets, for the remote cleaner's replacements:
a replacement covers the old segment's exact range and epochs and is uploaded later (a greater
event_timestamp_ms), so while both manifests exist the replacement is read, and each offset once."""

from __future__ import annotations

import uuid

from spark_readers.catalog import Lineage, Segment, resolve_slices
from tieredlog.rsm.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition

TIP = TopicIdPartition(uuid.UUID(int=3), "changelog", 0)


def seg(start: int, end: int, epochs: dict[int, int], uploaded: int) -> Segment:
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, uuid.uuid4()), start, end, end, 0, uploaded, 100, epochs,
                                  RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    return Segment(md, 100, f"{start}-{uploaded}")


def test_the_later_upload_of_the_same_range_is_read_and_each_offset_once() -> None:
    first, middle, last = (
        seg(0, 99, {0: 0}, 10), seg(100, 199, {0: 100, 1: 150}, 20), seg(200, 299, {1: 200}, 30))
    replacement = seg(100, 199, {0: 100, 1: 150}, 21)
    lineage = Lineage([(0, 0), (1, 150)], 300)
    for listing in ([first, middle, last], [first, middle, replacement, last], [first, replacement, last]):
        slices = resolve_slices(listing, lineage)
        covered = [(s.from_offset, s.to_offset) for s in slices]
        assert covered[0][0] == 0 and covered[-1][1] == 300
        assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))  # no gap, no overlap
        chosen = {s.segment.manifest_key for s in slices if s.from_offset >= 100 and s.to_offset <= 200}
        assert chosen == {(replacement if replacement in listing else middle).manifest_key}


def test_a_replacement_merging_several_segments_is_read_for_all_their_offsets() -> None:
    """The remote cleaner's merge: one later upload covering several old segments whole starts with the first
    of them and reaches further than it, so while all the manifests exist it alone is read for their offsets."""
    first, middle, last = (
        seg(0, 99, {0: 0}, 10), seg(100, 199, {0: 100, 1: 150}, 20), seg(200, 299, {1: 200}, 30))
    merged = seg(0, 199, {0: 0, 1: 150}, 31)
    lineage = Lineage([(0, 0), (1, 150)], 300)
    for listing in ([first, middle, last], [first, middle, merged, last], [middle, merged, last], [merged, last]):
        slices = resolve_slices(listing, lineage)
        covered = [(s.from_offset, s.to_offset) for s in slices]
        assert covered[0][0] == 0 and covered[-1][1] == 300
        assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))  # no gap, no overlap
        chosen = {s.segment.manifest_key for s in slices if s.to_offset <= 200}
        assert chosen == ({merged.manifest_key} if merged in listing else {first.manifest_key, middle.manifest_key})
