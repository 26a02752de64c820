"""Leader-epoch lineage: the arithmetic the copy, expiration, follower and read paths and the Spark
reader share.

Everything here is pure: lists of ``(epoch, start_offset)`` (a leader-epoch checkpoint's entries, see
:mod:`tieredlog.formats.checkpoints`) and a remote segment's epoch map in, numbers out. It is what
decides which remote copy of an offset range belongs to the log's history when leaders changed.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Protocol, Sequence


class SegmentEpochs(Protocol):
    """What the lineage needs of a remote segment (RemoteLogSegmentMetadata has it)."""

    @property
    def segment_leader_epochs(self) -> Mapping[int, int]: ...

    @property
    def end_offset(self) -> int: ...


def filtered_epochs(entries: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop epochs that hold no records (the next epoch starts at the same offset):
    Kafka's buildFilteredLeaderEpochMap."""
    out: list[tuple[int, int]] = []
    for i, (epoch, start) in enumerate(entries):
        if i + 1 < len(entries) and entries[i + 1][1] == start:
            continue
        out.append((epoch, start))
    return out


def segment_leader_epochs(entries: Sequence[tuple[int, int]], base_offset: int, next_offset: int) -> dict[int, int]:
    """Epochs with records in ``[base_offset, next_offset)`` mapped to their first offset there
    (the ``segmentLeaderEpochs`` of RemoteLogSegmentMetadata)."""
    out: dict[int, int] = {}
    entries = filtered_epochs(entries)
    for i, (epoch, start) in enumerate(entries):
        end = entries[i + 1][1] if i + 1 < len(entries) else None
        if end is not None and end <= base_offset:
            continue
        if start >= next_offset:
            break
        out[epoch] = max(start, base_offset)
    return out


def epoch_for_offset(entries: Sequence[tuple[int, int]], offset: int) -> int | None:
    found = None
    for epoch, start in entries:
        if start <= offset:
            found = epoch
        else:
            break
    return found


def epoch_of_offset_in_segment(md: SegmentEpochs, offset: int) -> int:
    """The epoch a segment's own epoch map gives ``offset`` (used when the local leader-epoch
    cache no longer reaches that far back)."""
    best_epoch, best_start = None, -1
    for epoch, start in md.segment_leader_epochs.items():
        if best_start < start <= offset:
            best_epoch, best_start = epoch, start
    if best_epoch is None:
        best_epoch = min(md.segment_leader_epochs, key=lambda e: md.segment_leader_epochs[e])
    return best_epoch


def holds_offset_on_lineage(md: SegmentEpochs, lineage: Sequence[tuple[int, int]], offset: int) -> bool:
    """Does the segment hold this log's record at ``offset``? It does when it puts ``offset`` in the
    epoch the log's lineage puts it in: one leader wrote each (epoch, offset), once (KIP-101). Such
    a segment may still diverge from the log before or after ``offset`` (see ``lineage_end_in_segment``)."""
    epoch = epoch_for_offset(filtered_epochs(lineage), offset)
    return epoch is None or epoch_of_offset_in_segment(md, offset) == epoch


def lineage_end_in_segment(md: SegmentEpochs, lineage: Sequence[tuple[int, int]], offset: int) -> int | None:
    """Reading ``md`` from ``offset`` (a record it holds on the log's lineage), the first offset past
    which it holds another history's records: the first epoch change after ``offset`` where the
    segment and the lineage disagree. None when they agree to the segment's end."""
    if epoch_for_offset(lineage, offset) is None:
        return None
    ours = {start: epoch for epoch, start in filtered_epochs(lineage) if offset < start <= md.end_offset}
    theirs = {start: epoch for epoch, start in md.segment_leader_epochs.items() if offset < start <= md.end_offset}
    return min((s for s in ours.keys() | theirs.keys() if ours.get(s) != theirs.get(s)), default=None)


def is_within_lineage(
    md: SegmentEpochs, lineage: Sequence[tuple[int, int]], log_end_offset: int
) -> bool:
    """Does this remote segment belong to the history of the current log (Kafka's
    isRemoteSegmentWithinLeaderEpochs)? Segments written by a leader whose data was later
    truncated away (unclean election) are not, and must not count for retention or reads."""
    if md.end_offset >= log_end_offset or not lineage:
        return False
    lineage = filtered_epochs(lineage)
    epochs = {e: s for e, s in lineage}
    order = [e for e, _ in lineage]
    seg = sorted(md.segment_leader_epochs.items(), key=lambda kv: kv[1])
    first_lineage_epoch = order[0]
    # epochs below the start of the cache were truncated with the log start; ignore them
    seg = [(e, s) for e, s in seg if e >= first_lineage_epoch]
    if not seg:
        return False
    for i, (epoch, start) in enumerate(seg):
        if epoch not in epochs:
            return False
        idx = order.index(epoch)
        if i > 0 and start != epochs[epoch]:
            return False  # a leader change inside the segment must match the log's own
        if i == 0 and epoch != first_lineage_epoch and start < epochs[epoch]:
            return False
        next_start = lineage[idx + 1][1] if idx + 1 < len(lineage) else None
        if i + 1 < len(seg):
            if idx + 1 >= len(order) or seg[i + 1][0] != order[idx + 1]:
                return False
        elif next_start is not None and md.end_offset > next_start - 1:
            return False
    return True


def highest_remote_offset(
    entries: Sequence[tuple[int, int]],
    log_end_offset: int,
    highest_for_epoch: Callable[[int], int | None],
) -> tuple[int, int]:
    """Walk the leader epochs from the latest back and ask the RLMM for the highest copied offset
    of each; the first hit, clipped to where that epoch ends locally, is where copying resumes
    (Kafka's findHighestRemoteOffset). ``(-1, -1)`` when nothing of this lineage is remote."""
    for i in range(len(entries) - 1, -1, -1):
        epoch = entries[i][0]
        remote = highest_for_epoch(epoch)
        if remote is None or remote < 0:
            continue
        local_end = entries[i + 1][1] if i + 1 < len(entries) else log_end_offset
        if local_end <= remote:
            return local_end - 1, epoch
        return remote, epoch
    return -1, -1


def segment_epoch_bounds(md: SegmentEpochs) -> list[tuple[int, int, int]]:
    """(epoch, first offset, last offset) slices of a remote segment."""
    items: list[tuple[int, int]] = sorted(md.segment_leader_epochs.items(), key=lambda kv: kv[1])
    out: list[tuple[int, int, int]] = []
    for i, (epoch, start) in enumerate(items):
        end = items[i + 1][1] - 1 if i + 1 < len(items) else md.end_offset
        out.append((epoch, start, end))
    return out


def as_pairs(entries: Iterable[Sequence[int]]) -> list[tuple[int, int]]:
    return [(int(e[0]), int(e[1])) for e in entries]


def mapping_epochs(m: Mapping[int, int]) -> list[tuple[int, int]]:
    return sorted(m.items(), key=lambda kv: kv[1])
