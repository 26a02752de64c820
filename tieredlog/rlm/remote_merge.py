"""Which adjacent cleaned remote segments a remote cleaning round writes as one replacement (docs/compaction.md,
"Compacted topics in the remote tier").

Kafka's LogCleaner cleans consecutive local segments into one (``groupSegmentsBySize``) while their sizes
fit one segment (``segment.bytes``), their offset and time indexes fit ``segment.index.bytes`` and their
offsets fit the int32 relative offsets of one segment. The remote cleaner applies the same bounds, but on
what cleaning kept of each segment rather than on the old segment's size: it has cleaned each into a
scratch file already, so a tier whose segments each keep a few records is merged in the round that
cleans it, not one round later. A replacement also needs one leader-epoch lineage (its leader-epoch
index and producer snapshot are its last old segment's), so only contiguous segments whose epochs do not
go back join.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from tieredlog.formats.lineage import segment_leader_epochs
from tieredlog.log.index import INT32_MAX, OffsetIndex, TimeIndex
from tieredlog.records.batch import HEADER_SIZE

OFFSET_ENTRY_BYTES = OffsetIndex.entry_size
TIME_ENTRY_BYTES = TimeIndex.entry_size
# a replacement whose last old segment kept nothing of its last batch ends with that batch's header
# (Kafka's empty batch), so that its last offset is the old segments' last offset
END_MARKER_BYTES = HEADER_SIZE


@dataclass(frozen=True, slots=True)
class CleanedSize:
    """What cleaning kept of one old remote segment, as the grouping rule sees it."""

    start_offset: int
    end_offset: int
    leader_epochs: Mapping[int, int]
    log_bytes: int
    offset_index_bytes: int
    time_index_bytes: int


def joins_group(group: Sequence[CleanedSize], nxt: CleanedSize, segment_bytes: int, segment_index_bytes: int) -> bool:
    """Whether ``nxt`` can be written into the same replacement as ``group`` (never empty)."""
    last = group[-1]
    if nxt.start_offset != last.end_offset + 1:
        return False  # a hole in the tier (an unclean election's lineage): never bridged
    if min(nxt.leader_epochs, default=0) < max(last.leader_epochs, default=0):
        return False
    if nxt.end_offset - group[0].start_offset > INT32_MAX:
        return False
    parts = len(group) + 1
    if sum(p.log_bytes for p in group) + nxt.log_bytes + END_MARKER_BYTES > segment_bytes:
        return False
    # rewritten batch by batch, the merged indexes have at most one entry per part more than the parts'
    offsets = sum(p.offset_index_bytes for p in group) + nxt.offset_index_bytes + parts * OFFSET_ENTRY_BYTES
    times = sum(p.time_index_bytes for p in group) + nxt.time_index_bytes + parts * TIME_ENTRY_BYTES
    return offsets <= segment_index_bytes and times <= segment_index_bytes


def merged_leader_epochs(group: Sequence[CleanedSize]) -> dict[int, int]:
    """The replacement's epoch map: each epoch's first offset in the group."""
    out: dict[int, int] = {}
    for part in group:
        for epoch, start in part.leader_epochs.items():
            out[epoch] = min(out.get(epoch, start), start)
    return out


def lineage_holds(group: Sequence[CleanedSize], checkpoint: Sequence[tuple[int, int]]) -> bool:
    """Whether the last part's leader-epoch checkpoint (shipped with the replacement) gives the group the
    epochs its parts have: otherwise a reader checking the replacement against it would not trust it."""
    return segment_leader_epochs(checkpoint, group[0].start_offset, group[-1].end_offset + 1) == \
        merged_leader_epochs(group)
