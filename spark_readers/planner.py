"""From options to read tasks: one per segment slice of the requested offsets, large ones split.

A task is a ranged GET of whole batches of one ``.log`` object plus the offsets to keep from them. The
byte range comes from the segment's remote offset index (Kafka's ``.index``: each entry maps the *last*
offset of a batch to the position where that batch starts):

- the start is the position of the last entry at or below the first wanted offset (that batch ends at
  or before it, so the wanted record is in it or after it);
- the end is the position of the entry *after* the first one at or above the end offset (the batch of
  that first entry may still start below the end offset; the next one cannot).

Whole segments are read without their index. Slices over ``maxBytesPerPartition`` are cut at index
positions, which are batch boundaries; every piece keeps the same offset bounds, so pieces never
return the same record twice.

With read_committed (the default) a partition ends at its stable end, and every task carries the
aborted transactions overlapping its slice (:mod:`spark_readers.transactions`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Collection, Iterator, Mapping

from spark_readers.catalog import Catalog, CatalogError, SegmentSlice
from spark_readers.indexes import offset_index_entries
from spark_readers.options import EARLIEST, LATEST, OptionError, ReaderOptions
from spark_readers.timestamps import offset_for_timestamp
from spark_readers.transactions import Aborted, AbortedTransactions, TransactionError, stable_end
from tieredlog.rsm.api import RemoteLogSegmentMetadata
from tieredlog.rsm.objectstore import ObjectStoreRemoteStorageManager


class PlanError(Exception):
    """The requested range cannot be read from the remote tier; names the partition and offsets."""


@dataclass(frozen=True, slots=True)
class ReadTask:
    """Bytes ``[start_position, end_position]`` (inclusive; ``None`` = to the end) of one segment's
    ``.log``, of which the records in ``[from_offset, to_offset)`` are returned. Picklable."""

    topic: str
    partition: int
    metadata: RemoteLogSegmentMetadata
    object_name: str
    start_position: int
    end_position: int | None
    from_offset: int
    to_offset: int
    # read_committed: the aborted transactions (producer id, first offset, marker offset) overlapping
    # [from_offset, to_offset), whose records are dropped
    aborted: Aborted = ()


def plan(rsm: ObjectStoreRemoteStorageManager, options: ReaderOptions,
         partitions: Mapping[str, Collection[int]] | None = None) -> list[ReadTask]:
    """Read tasks for the offsets ``options`` give; ``partitions`` (topic -> partitions) narrows the plan
    to those partitions, so the streaming reader plans (and GETs checkpoints for) only the partitions a
    micro-batch advances."""
    tasks: list[ReadTask] = []
    for topic, partition, slices in _resolved(rsm, options, partitions):
        start, end = _bounds(rsm, topic, partition, slices, options)
        tasks.extend(_plan_range(rsm, topic, partition, slices, start, end, options))
    return tasks


def offset_bounds(rsm: ObjectStoreRemoteStorageManager, options: ReaderOptions) -> dict[str, dict[int, tuple[int, int]]]:
    """Topic -> partition -> the ``[start, end)`` offsets :func:`plan` would read with ``options``, without
    planning reads: the streaming reader's initial and latest offsets, resolved exactly as a batch
    query resolves its range."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, partition, slices in _resolved(rsm, options, None):
        out.setdefault(topic, {})[partition] = _bounds(rsm, topic, partition, slices, options)
    return out


def _resolved(rsm: ObjectStoreRemoteStorageManager, options: ReaderOptions,
              partitions: Mapping[str, Collection[int]] | None) -> Iterator[tuple[str, int, list[SegmentSlice]]]:
    catalog = Catalog(rsm)
    topics = _topics(catalog, options) if partitions is None else sorted(partitions)
    for topic in topics:
        segments = catalog.committed_segments(topic)
        if partitions is not None:
            segments = {p: s for p, s in segments.items() if p in partitions[topic]}
        slices = catalog.resolve_partitions(segments)
        for partition in sorted(slices):
            yield topic, partition, slices[partition]


def _topics(catalog: Catalog, options: ReaderOptions) -> list[str]:
    if options.topic_pattern is None:
        return list(options.topics)
    pattern = options.topic_pattern
    found = [t for t in catalog.topics() if pattern.fullmatch(t)]
    if not found:
        raise CatalogError(f"no topic in the remote tier matches {pattern.pattern!r}")
    return found


def _bounds(rsm: ObjectStoreRemoteStorageManager, topic: str, partition: int, slices: list[SegmentSlice],
            options: ReaderOptions) -> tuple[int, int]:
    """The ``[start, end)`` the options give one partition, checked against its tiered part (with
    read_committed, the part below its stable end)."""
    name = f"{topic}-{partition}"
    earliest, tiered_end = slices[0].from_offset, slices[-1].to_offset
    if options.read_committed:
        try:
            tiered_end = max(earliest, stable_end(rsm, slices))
        except TransactionError as exc:
            raise PlanError(f"{name}: {exc}") from None
    start = options.starting.for_partition(topic, partition, "startingOffsets")
    end = options.ending.for_partition(topic, partition, "endingOffsets")
    if options.starting.by_timestamp:
        found = offset_for_timestamp(rsm, slices, start)
        if found is None and not options.start_latest_when_no_timestamp:
            raise PlanError(f"{name}: no record in the remote tier has a timestamp at or after {start} "
                            "(startingOffsetsByTimestampStrategy=latest starts at the end instead)")
        start = tiered_end if found is None else found
    if options.ending.by_timestamp:
        found = offset_for_timestamp(rsm, slices, end)
        end = tiered_end if found is None else found
    # LATEST as a start comes only from a streaming query's startingOffsets (batch options refuse it)
    start = earliest if start == EARLIEST else tiered_end if start == LATEST else start
    end = tiered_end if end == LATEST else end
    if end > tiered_end:
        if tiered_end < slices[-1].to_offset:
            raise PlanError(f"{name}: offsets from {tiered_end} are in a transaction whose marker is not in the "
                            f"remote tier yet (endingOffsets {end}); kafka.isolation.level=read_uncommitted reads "
                            "them")
        raise PlanError(f"{name}: offsets from {tiered_end} are not in the remote tier yet (endingOffsets "
                        f"{end}); reading the brokers' tail is not supported yet")
    if start < earliest:
        if options.fail_on_data_loss:
            raise PlanError(f"{name}: offset {start} is no longer in the remote tier (earliest {earliest}); "
                            "set failOnDataLoss=false to start at the earliest")
        start = earliest
    if start > end:
        raise OptionError(f"{name}: starting offset {start} is after ending offset {end}")
    return start, end


def _plan_range(rsm: ObjectStoreRemoteStorageManager, topic: str, partition: int, slices: list[SegmentSlice],
                start: int, end: int, options: ReaderOptions) -> Iterator[ReadTask]:
    name = f"{topic}-{partition}"
    cursor = start
    txns = AbortedTransactions(rsm, slices) if options.read_committed else None
    for i, s in enumerate(slices):
        lo, hi = max(s.from_offset, start), min(s.to_offset, end)
        if lo >= hi:
            continue
        if lo > cursor and options.fail_on_data_loss:
            raise PlanError(f"{name}: offsets {cursor}..{lo - 1} are in no committed remote segment; "
                            "set failOnDataLoss=false to skip them")
        cursor = hi
        try:
            aborted = txns.overlapping(i, lo, hi) if txns is not None else ()
        except TransactionError as exc:
            raise PlanError(f"{name}: {exc}") from None
        yield from _tasks_for_slice(rsm, topic, partition, s, lo, hi, options.max_bytes_per_partition, aborted)


def _tasks_for_slice(rsm: ObjectStoreRemoteStorageManager, topic: str, partition: int, s: SegmentSlice,
                     lo: int, hi: int, max_bytes: int, aborted: Aborted) -> Iterator[ReadTask]:
    seg = s.segment
    object_name = seg.manifest_key.removesuffix("manifest") + "log"
    whole = lo <= seg.start_offset and hi > seg.end_offset
    if whole and seg.log_size <= max_bytes:
        yield ReadTask(topic, partition, seg.metadata, object_name, 0, None, lo, hi, aborted)
        return
    entries = offset_index_entries(rsm, seg.metadata)
    offsets = [o for o, _ in entries]
    i = bisect.bisect_right(offsets, lo) - 1
    first = entries[i][1] if i >= 0 else 0
    j = bisect.bisect_left(offsets, hi) + 1
    stop = entries[j][1] if j < len(entries) else seg.log_size
    cuts = [first]
    for _, position in entries:
        if first < position < stop and position - cuts[-1] >= max_bytes:
            cuts.append(position)
    cuts.append(stop)
    for a, b in zip(cuts, cuts[1:]):
        if b > a:
            yield ReadTask(topic, partition, seg.metadata, object_name, a, b - 1, lo, hi, aborted)

