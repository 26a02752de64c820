"""``startingTimestamp`` and friends: the earliest offset whose timestamp is at or after a time, found in
the remote tier the way Kafka's ListOffsets finds it in a segment (``offsetsForTimes``).

Segments whose manifest's ``max_timestamp_ms`` is below the time are skipped without a read. In the
first one that may hold it, the time index (``.timeindex``: each entry is a new maximum timestamp and
the offset where it first appeared) gives an offset before which every record is older; the offset
index turns it into a position, and the batches from there are searched with
``tieredlog.records.record.record_at_or_after`` in one ranged GET.
"""

from __future__ import annotations

import bisect

from spark_readers.catalog import SegmentSlice
from spark_readers.indexes import offset_index_entries, older_than_floor
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import record_at_or_after
from tieredlog.rsm.api import RemoteStorageManager


def offset_for_timestamp(rsm: RemoteStorageManager, slices: list[SegmentSlice], timestamp: int) -> int | None:
    """The first offset of the slices whose record timestamp is >= ``timestamp``; None when none is."""
    for s in slices:
        md = s.segment.metadata
        if md.max_timestamp_ms < timestamp:
            continue
        start = max(s.from_offset, older_than_floor(rsm, md, timestamp))
        entries = offset_index_entries(rsm, md)
        i = bisect.bisect_right([o for o, _ in entries], start) - 1
        position = entries[i][1] if i >= 0 else 0
        with rsm.fetch_log_segment(md, position, s.segment.log_size - 1) as stream:
            data = stream.read()
        for pos, header in iter_headers(data):
            if header.last_offset < start or header.max_timestamp < timestamp:
                continue
            if header.base_offset >= s.to_offset:
                break
            found = record_at_or_after(data, pos, timestamp, start)
            if found is not None and found[0] < s.to_offset:
                return found[0]
    return None

