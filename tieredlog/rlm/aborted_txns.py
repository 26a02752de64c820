"""The aborted transactions a read_committed fetch served from the remote tier returns.

Kafka's ``RemoteLogManager.addAbortedTransactions`` / ``collectAbortedTransactions`` (with KIP-1058):
the fetched segment's txn index, then the txn indexes of the following remote segments on the
leader-epoch lineage, skipping those the metadata says have none (``tx_index_present``), then the
local segments, until a search is complete. A transaction's entry lives in the segment of its abort
marker, so one that began in the fetched segment can be reported by any later one.

Walked once per remote segment, for the whole segment (``[start, end + 1)``), and kept: every
transaction with records in a tiered segment was decided below the last stable offset before the
segment was copied, so the set that overlaps it no longer changes, and each fetch of the segment
takes the part that overlaps what it returns. A fetch's range is inside the segment, so that part
is exactly what Kafka's walk for the fetch's own range gives (a search complete for the segment's
end is complete for any lower bound, and no entry past the completing one can overlap a lower
range). A sequential read_committed reader thus costs one walk per segment, and its later fetches
are answered without I/O, on the event loop too (:meth:`RemoteAbortedTxns.cached`).

The walk does I/O (txn indexes through the index cache, metadata lookups): reader pool only.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import Iterator, Sequence

from tieredlog.formats.lineage import as_pairs, epoch_for_offset, filtered_epochs, holds_offset_on_lineage
from tieredlog.formats.txn_index import AbortedTxn, collect_aborted_across
from tieredlog.rlm.contracts import TieredLog
from tieredlog.rlm.index_cache import RemoteIndexCache
from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rsm.api import RemoteLogSegmentMetadata, TopicIdPartition

# segments whose walk is kept; each holds the few aborted transactions overlapping one segment
MAX_SEGMENTS = 4096


def in_range(txns: Sequence[AbortedTxn], start: int, end_exclusive: int) -> list[AbortedTxn]:
    """The transactions of ``txns`` overlapping ``[start, end_exclusive)``."""
    return [t for t in txns if t.last_offset >= start and t.first_offset < end_exclusive]


class RemoteAbortedTxns:
    def __init__(
        self, lifecycle: RemoteSegmentLifecycle, index_cache: RemoteIndexCache, max_segments: int = MAX_SEGMENTS
    ) -> None:
        self._lifecycle = lifecycle
        self._index_cache = index_cache
        self._max_segments = max_segments
        self._lock = threading.Lock()
        # segment id -> (latest leader epoch when walked, aborted transactions overlapping the segment)
        self._walked: OrderedDict[uuid.UUID, tuple[int | None, list[AbortedTxn]]] = OrderedDict()
        self.walks = 0  # segments walked (not answered from what was kept)

    def __len__(self) -> int:
        return len(self._walked)

    def cached(self, log: TieredLog, md: RemoteLogSegmentMetadata) -> list[AbortedTxn] | None:
        """The aborted transactions overlapping ``md``, when its walk is kept; never does I/O."""
        key = md.remote_log_segment_id.id
        with self._lock:
            kept = self._walked.get(key)
            if kept is None:
                return None
            self._walked.move_to_end(key)
        # a new leader epoch may follow a truncation that replaced records (an unclean election):
        # walk again rather than trust markers of another history
        return kept[1] if kept[0] == log.leader_epoch_cache.latest_epoch else None

    def for_segment(self, tip: TopicIdPartition, log: TieredLog, md: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``md``: kept, or walked now (blocking: reader pool)."""
        found = self.cached(log, md)
        if found is not None:
            return found
        epoch = log.leader_epoch_cache.latest_epoch
        local_start = log.local_log_start_offset
        found = collect_aborted_across(self._indexes(tip, log, md, local_start), md.start_offset, md.end_offset + 1)
        with self._lock:
            self.walks += 1
            if log.local_log_start_offset == local_start:
                # kept only when no local segment was deleted meanwhile: one the remote part of the walk
                # had not reached yet, and the local part no longer found, may have held an entry
                self._walked[md.remote_log_segment_id.id] = (epoch, found)
                self._walked.move_to_end(md.remote_log_segment_id.id)
                while len(self._walked) > self._max_segments:
                    self._walked.popitem(last=False)
        return found

    def forget(self, segment_id: uuid.UUID) -> None:
        """A deleted remote segment."""
        with self._lock:
            self._walked.pop(segment_id, None)

    def _indexes(
        self, tip: TopicIdPartition, log: TieredLog, md: RemoteLogSegmentMetadata, local_start: int
    ) -> Iterator[Sequence[AbortedTxn]]:
        """The txn indexes to search, in log order, each fetched only when the search reaches it:
        ``md``'s, those of the following remote segments below the local log, the local segments'."""
        lineage = filtered_epochs(as_pairs(log.leader_epoch_cache.epoch_entries()))
        seen = {md.remote_log_segment_id.id}
        if md.tx_index_present:
            yield self._index_cache.get_entry(md).aborted_txns
        offset = md.end_offset + 1
        while offset < local_start:
            nxt = self._next_with_txn_index(tip, lineage, offset)
            if nxt is None or nxt.start_offset >= local_start:
                break
            if nxt.remote_log_segment_id.id not in seen:  # copies of other histories may overlap
                seen.add(nxt.remote_log_segment_id.id)
                yield self._index_cache.get_entry(nxt).aborted_txns
            offset = nxt.end_offset + 1
        # every local segment (they start at local_start), searched until complete
        yield log.collect_aborted_transactions(md.start_offset, md.end_offset + 1)

    def _next_with_txn_index(
        self, tip: TopicIdPartition, lineage: list[tuple[int, int]], offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The first remote segment at or after ``offset`` on the lineage with a txn index (Kafka's
        findNextSegmentWithTxnIndex): each epoch from ``offset``'s on, asked of the metadata."""
        first = epoch_for_offset(lineage, offset)
        if first is None:
            return None
        for epoch, epoch_start in lineage:
            if epoch < first:
                continue
            at = max(epoch_start, offset)
            md = self._lifecycle.next_segment_with_txn_index(tip, epoch, at)
            if md is None:
                continue
            # the metadata serves an epoch's last copy; after an unclean election that may be another
            # history's, whose markers are not this log's
            if holds_offset_on_lineage(md, lineage, max(at, md.segment_leader_epochs.get(epoch, md.start_offset))):
                return md
        return None
