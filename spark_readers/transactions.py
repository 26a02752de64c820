"""read_committed over the remote tier (``kafka.isolation.level``, the reader's default): which records
a read task drops, and how far a partition may be read.

- **Aborted transactions.** A transaction's aborted range is recorded in the txn index of the segment
  holding its abort marker, which may come segments after its first record. For each slice the planner
  walks the txn indexes of that slice's segment and the following ones on the lineage, exactly as the
  broker does for a remote fetch (Kafka's ``collectAbortedTransactions``, one implementation:
  :func:`tieredlog.formats.txn_index.collect_aborted_across`), until the search is complete. Only segments
  whose manifest lists a txn index are fetched (KIP-1058's rule), each once per plan, and of a segment
  only the markers inside its slice count: the rest of it is another copy's or another history's.
  The tasks carry the result, ``(producer id, first offset, marker offset)`` triples, to the executors.
- **The stable end.** A transaction still open at the end of the tiered part has its records tiered and
  its marker not (the broker tiers a segment once the last stable offset passed it, which needs the
  marker written, not tiered): the reader cannot tell whether it commits. Like a consumer at the last
  stable offset, it stops at the first offset of such a transaction. They are listed in the producer
  snapshot uploaded with the last segment (Kafka's, taken at the segment's end: every producer with
  the first offset of its open transaction).
"""

from __future__ import annotations

import uuid
from typing import Sequence

from spark_readers.catalog import SegmentSlice
from spark_readers.indexes import txn_index_entries
from tieredlog.formats.index import CorruptIndexError
from tieredlog.formats.producer_snapshot import NO_TXN_FIRST_OFFSET, CorruptSnapshotError, decode_producer_snapshot
from tieredlog.formats.txn_index import AbortedTxn, collect_aborted_across
from tieredlog.rsm.api import IndexType, RemoteResourceNotFoundException, RemoteStorageManager

# (producer id, first offset, marker offset): picklable, for the read tasks
Aborted = tuple[tuple[int, int, int], ...]


class TransactionError(Exception):
    """The remote tier cannot say which transactions aborted; names the object."""


class AbortedTransactions:
    """The aborted transactions over one partition's resolved slices; txn indexes fetched once each."""

    def __init__(self, rsm: RemoteStorageManager, slices: Sequence[SegmentSlice]) -> None:
        self._rsm = rsm
        self._slices = slices
        self._entries: dict[uuid.UUID, list[AbortedTxn]] = {}

    def overlapping(self, index: int, start: int, end: int) -> Aborted:
        """Those overlapping offsets ``[start, end)`` of ``slices[index]``."""
        found = collect_aborted_across((self._markers_in(s) for s in self._slices[index:]), start, end)
        return tuple((t.producer_id, t.first_offset, t.last_offset) for t in found)

    def _markers_in(self, s: SegmentSlice) -> list[AbortedTxn]:
        md = s.segment.metadata
        if not md.tx_index_present:
            return []
        key = md.remote_log_segment_id.id
        entries = self._entries.get(key)
        if entries is None:
            try:
                entries = self._entries[key] = txn_index_entries(self._rsm, md)
            except CorruptIndexError as exc:
                raise TransactionError(f"{_object(s)}: {exc}") from None
            except Exception as exc:
                raise TransactionError(f"cannot read the txn index of {_object(s)}: {exc}") from None
        return [t for t in entries if s.from_offset <= t.last_offset < s.to_offset]


def stable_end(rsm: RemoteStorageManager, slices: Sequence[SegmentSlice]) -> int:
    """Where a read_committed read of the partition ends: the end of its tiered part, or the first
    offset of a transaction still open there."""
    last = slices[-1]
    end = last.to_offset
    md = last.segment.metadata
    if md.end_offset + 1 != end:
        # a snapshot describes its own segment's end; the tiered end is the authoritative segment's
        # end (catalog.py), and the last slice comes from a segment ending there
        raise TransactionError(f"{_object(last)}: the tiered part ends at {end}, inside this segment; "
                               "its producer snapshot does not say which transactions are open there")
    try:
        with rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) as stream:
            producers = decode_producer_snapshot(stream.read())
    except RemoteResourceNotFoundException:
        raise TransactionError(f"{_object(last)} has no producer snapshot: the transactions open at the end of "
                               "the tiered part are unknown (kafka.isolation.level=read_uncommitted reads it)") from None
    except CorruptSnapshotError as exc:
        raise TransactionError(f"the producer snapshot of {_object(last)} is corrupt: {exc}") from None
    except Exception as exc:
        raise TransactionError(f"cannot read the producer snapshot of {_object(last)}: {exc}") from None
    open_firsts = [p.current_txn_first_offset for p in producers if p.current_txn_first_offset != NO_TXN_FIRST_OFFSET]
    return min([end, *open_firsts])


def _object(s: SegmentSlice) -> str:
    return s.segment.stem
