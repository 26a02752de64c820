"""The remote indexes a reader uses, in Kafka's formats (:mod:`tieredlog.formats.index`, :mod:`tieredlog.formats.txn_index`).

- ``.index``: ``relative offset i32 | position i32``; the offset is the *last* offset of the batch
  starting at that position (Kafka's LogSegment appends ``batch.lastOffset``).
- ``.timeindex``: ``timestamp i64 | relative offset i32``; each entry is a new maximum timestamp of the
  segment and the offset where it appeared.
- ``.txnindex``: Kafka's AbortedTxn entries, one per transaction aborted by a marker in the segment;
  uploaded only when the segment has one (the manifest's ``tx_index_present``).

A rolled segment's indexes are trimmed to their valid entries; entries that stop increasing (a zeroed
tail of a file that was not) end the index instead of being trusted.
"""

from __future__ import annotations

from tieredlog.formats.index import OFFSET_ENTRY, TIME_ENTRY
from tieredlog.formats.txn_index import AbortedTxn, decode_txn_entries
from tieredlog.rsm.api import IndexType, RemoteLogSegmentMetadata, RemoteStorageManager


def _fetch(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, index_type: IndexType,
           entry_size: int) -> bytes:
    with rsm.fetch_index(md, index_type) as stream:
        data = stream.read()
    return data[: len(data) - len(data) % entry_size]


def offset_index_entries(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata) -> list[tuple[int, int]]:
    """(absolute last offset of a batch, position where that batch starts), increasing."""
    out: list[tuple[int, int]] = []
    for relative, position in OFFSET_ENTRY.iter_unpack(_fetch(rsm, md, IndexType.OFFSET, OFFSET_ENTRY.size)):
        if out and (md.start_offset + relative <= out[-1][0] or position <= out[-1][1]):
            break
        out.append((md.start_offset + relative, position))
    return out


def older_than_floor(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, timestamp: int) -> int:
    """An offset of the segment before which every record is older than ``timestamp``: the offset of
    the last time-index maximum below it (records up to there are at most that maximum)."""
    floor, last_ts = md.start_offset, None
    for ts, relative in TIME_ENTRY.iter_unpack(_fetch(rsm, md, IndexType.TIMESTAMP, TIME_ENTRY.size)):
        if ts >= timestamp or (last_ts is not None and ts <= last_ts):
            break
        floor, last_ts = md.start_offset + relative, ts
    return floor


def txn_index_entries(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
    """The segment's aborted transactions, in marker order; CorruptIndexError for a partial entry."""
    with rsm.fetch_index(md, IndexType.TRANSACTION) as stream:
        data = stream.read()
    return decode_txn_entries(data, f"of segment {md.remote_log_segment_id.id} ({md.start_offset}..{md.end_offset})")
