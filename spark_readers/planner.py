"""From options to read tasks: one per segment slice of the requested offsets, large ones split.

A task is a ranged GET of whole batches of one ``.log`` object plus the offsets to keep from them. The
byte range comes from the segment's remote offset index (Kafka's ``.index``: each entry maps the *last*
offset of a batch to the position where that batch starts):

- the start is the position of the last entry at or below the first wanted offset (that batch ends at
  or before it, so the wanted record is in it or after it);
- the end is the position of the entry *after* the first one at or above the end offset (the batch of
  that first entry may still start below the end offset; the next one cannot).

Whole segments are read without their index. Slices over ``maxBytesPerPartition`` (or ``maxBytesPerTask``) are cut at index
positions, which are batch boundaries; every piece keeps the same offset bounds, so pieces never
return the same record twice.

With read_committed (the default) the tiered part of a partition ends at its stable end, and every
task carries the aborted transactions overlapping its slice (:mod:`spark_readers.transactions`).

With brokers (``kafka.bootstrap.servers``) a partition's range may go past its tiered part, up to the
brokers' end (high watermark, or last stable offset with read_committed): the offsets from the tiered
part's end (its stable end with read_committed, where a transaction's marker may still be only on the
brokers) are read from the brokers by one :class:`~spark_readers.brokers.TailTask` per partition, so the
two parts meet at one offset, with no gap and nothing twice. A partition not tiered at all is read from
the brokers whole.

Pushed filters (:mod:`spark_readers.filters`) drop partitions, narrow offsets and, with a timestamp
lower bound, start at the first offset that recent and skip segments whose maximum timestamp is older.

Offset ranges are then split as Spark's Kafka source splits them: ``maxRecordsPerPartition`` cuts every
range into pieces of at most that many offsets; ``minPartitions``, when there are fewer pieces than
that, cuts each piece in proportion to its share of all offsets (``KafkaOffsetRangeCalculator``).
"""

from __future__ import annotations

import bisect
import math
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Collection, Iterator, Mapping, Protocol

from spark_readers.brokers import TailTask
from spark_readers.catalog import (
    Catalog,
    CatalogError,
    ManifestListing,
    NothingTiered,
    Segment,
    SegmentListing,
    SegmentSlice,
)
from spark_readers.indexes import offset_index_entries
from spark_readers.options import BROKERS, EARLIEST, LATEST, OptionError, ReaderOptions
from spark_readers.storage import StorageError
from spark_readers.timestamps import offset_for_timestamp
from spark_readers.transactions import Aborted, AbortedTransactions, TransactionError, stable_end
from tieredlog.rsm.api import RemoteLogSegmentMetadata, RemoteStorageManager
from tieredlog.rsm.keys import LOG_SUFFIX
from tieredlog.rsm.listing import ListableRemoteStorageManager

if TYPE_CHECKING:  # filters needs PySpark; tieredlog export plans without it
    from spark_readers.filters import PushedFilters


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


Task = ReadTask | TailTask


class BrokerView(Protocol):
    """What the planner needs of the brokers (:class:`spark_readers.brokers.Brokers`)."""

    def topics(self) -> list[str]: ...

    def partitions(self, topic: str) -> list[int]: ...

    def bounds(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]: ...

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None: ...


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``[start, end)`` of one partition to read: from the remote tier below ``boundary``,
    from the brokers from ``tail_from`` (``boundary``, or the brokers' log start when retention there
    went past the tier's end and ``failOnDataLoss=false`` lets the hole be skipped)."""

    topic: str
    partition: int
    slices: list[SegmentSlice]
    start: int
    end: int
    boundary: int
    tail_from: int


@dataclass(frozen=True, slots=True)
class _Piece:
    """Offsets ``[lo, hi)`` read from one segment slice (``index`` into the range's slices), or from
    the brokers (``index`` None)."""

    range: PartitionRange
    index: int | None
    lo: int
    hi: int
    aborted: Aborted = ()


def plan(rsm: RemoteStorageManager, options: ReaderOptions,
         partitions: Mapping[str, Collection[int]] | None = None, pushed: PushedFilters | None = None,
         brokers: BrokerView | None = None) -> list[Task]:
    """Read tasks for the offsets ``options`` give; ``partitions`` (topic -> partitions) narrows the plan
    to those partitions, so the streaming reader plans (and GETs checkpoints for) only the partitions a
    micro-batch advances. Tail tasks only with ``brokers``."""
    pieces: list[_Piece] = []
    for r in _ranges(rsm, options, partitions, pushed, brokers):
        start, end = r.start, r.end
        if pushed is not None:
            start, end = pushed.offsets(start, end)
            start = _timestamp_start(rsm, r, start, end, pushed)
        if start >= end:
            continue
        pieces.extend(_tiered_pieces(rsm, r, start, min(end, r.boundary), options, pushed))
        if end > r.tail_from:
            pieces.append(_Piece(r, None, max(start, r.tail_from), end))
    tasks: list[Task] = []
    indexes: dict[uuid.UUID, list[tuple[int, int]]] = {}
    for piece in _split(pieces, options.max_records_per_partition, options.min_partitions):
        r = piece.range
        if piece.index is None:
            tasks.append(TailTask(r.topic, r.partition, piece.lo, piece.hi))
        else:
            tasks.extend(_tasks_for_slice(rsm, indexes, r.topic, r.partition, r.slices[piece.index], piece.lo,
                                          piece.hi, options.max_bytes_per_partition, piece.aborted))
    return tasks


def offset_bounds(rsm: RemoteStorageManager, options: ReaderOptions,
                  brokers: BrokerView | None = None) -> dict[str, dict[int, tuple[int, int]]]:
    """Topic -> partition -> the ``[start, end)`` offsets :func:`plan` would read with ``options``, without
    planning reads: the streaming reader's initial and latest offsets, resolved exactly as a batch
    query resolves its range."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for r in _ranges(rsm, options, None, None, brokers):
        out.setdefault(r.topic, {})[r.partition] = (r.start, r.end)
    return out


def _ranges(rsm: RemoteStorageManager, options: ReaderOptions,
            partitions: Mapping[str, Collection[int]] | None, pushed: PushedFilters | None,
            brokers: BrokerView | None) -> Iterator[PartitionRange]:
    catalog = Catalog(rsm, segment_listing(rsm, options))
    wanted: Mapping[str, Collection[int]] | None = partitions if partitions is not None else options.assign
    topics = sorted(wanted) if wanted is not None else _topics(catalog, options, brokers)
    for topic in topics:
        segments = _committed_segments(catalog, topic, brokers is not None)
        on_brokers = brokers.partitions(topic) if brokers is not None else []
        if not segments and not on_brokers:
            raise CatalogError(f"topic {topic!r} is neither in the remote tier nor on the brokers")
        found = set(segments) | set(on_brokers)
        if wanted is not None:
            missing = sorted(set(wanted[topic]) - found)
            if missing and partitions is None:
                raise PlanError(f"{topic}-{missing[0]} is not in the remote tier"
                                + (" nor on the brokers" if brokers is not None else ""))
            found &= set(wanted[topic])
        if pushed is not None:
            found = {p for p in found if pushed.keeps_partition(p)}
        slices = catalog.resolve_partitions({p: s for p, s in segments.items() if p in found})
        live = sorted(p for p in on_brokers if p in found)
        bounds = brokers.bounds(topic, live) if brokers is not None and live else {}
        for partition in sorted(found):
            yield _range(rsm, topic, partition, slices.get(partition, []), options, bounds.get(partition), brokers)


def segment_listing(rsm: RemoteStorageManager, options: ReaderOptions) -> SegmentListing:
    """The listing ``metadataSource`` names: the bucket's manifests (the RSM must list) or
    ``__remote_log_metadata`` through the brokers."""
    if options.metadata_source == BROKERS:
        # confluent-kafka: imported on the driver only, and only with this option
        from spark_readers.remote_log_metadata import broker_metadata_listing

        return broker_metadata_listing(options.kafka, options.poll_timeout_ms / 1000)
    if not isinstance(rsm, ListableRemoteStorageManager):
        raise StorageError(f"the remote storage manager {type(rsm).__name__} cannot list segments "
                           "(tieredlog.rsm.ListableRemoteStorageManager), so its tier cannot be listed from the "
                           "bucket: metadataSource=brokers lists it from __remote_log_metadata")
    return ManifestListing(rsm)


def _committed_segments(catalog: Catalog, topic: str, with_brokers: bool) -> dict[int, list[Segment]]:
    try:
        return catalog.committed_segments(topic)
    except NothingTiered:
        if with_brokers:
            return {}  # not tiered yet: the brokers have all of it
        raise


def _topics(catalog: Catalog, options: ReaderOptions, brokers: BrokerView | None) -> list[str]:
    if options.topic_pattern is None:
        return list(options.topics)
    pattern = options.topic_pattern
    names = set(catalog.topics()) | set(brokers.topics() if brokers is not None else [])
    found = sorted(t for t in names if pattern.fullmatch(t))
    if not found:
        raise CatalogError(f"no topic in the remote tier{' or on the brokers' if brokers is not None else ''} "
                           f"matches {pattern.pattern!r}")
    return found


def _range(rsm: RemoteStorageManager, topic: str, partition: int, slices: list[SegmentSlice],
           options: ReaderOptions, on_brokers: tuple[int, int] | None, brokers: BrokerView | None) -> PartitionRange:
    """The ``[start, end)`` the options give one partition, checked against its tiered part (with
    read_committed, the part below its stable end) and, with brokers, against the brokers' log."""
    name = f"{topic}-{partition}"
    if slices:
        earliest, boundary = slices[0].from_offset, slices[-1].to_offset
        if options.read_committed:
            try:
                boundary = max(earliest, stable_end(rsm, slices))
            except TransactionError as exc:
                raise PlanError(f"{name}: {exc}") from None
    elif on_brokers is not None:
        earliest = boundary = on_brokers[0]
    else:
        raise PlanError(f"{name} is not in the remote tier nor on the brokers")
    latest = boundary
    if on_brokers is not None:
        latest = on_brokers[1]
        # brokers behind the tier (a truncated history): their log is the partition's
        boundary = min(boundary, latest)
        # Kafka's view of what exists: nothing below the log start (DeleteRecords, retention), though
        # the tier keeps those records until their whole segment expires
        earliest = min(max(earliest, on_brokers[0]), latest)
    start = options.starting.for_partition(topic, partition, "startingOffsets")
    end = options.ending.for_partition(topic, partition, "endingOffsets")
    if options.starting.by_timestamp:
        found = _offset_for_timestamp(rsm, topic, partition, slices, start, on_brokers is not None, brokers)
        if found is None and not options.start_latest_when_no_timestamp:
            raise PlanError(f"{name}: no record in the remote tier{' or on the brokers' if on_brokers else ''} has a "
                            f"timestamp at or after {start} (startingOffsetsByTimestampStrategy=latest starts at the "
                            "end instead)")
        start = latest if found is None else found
    if options.ending.by_timestamp:
        found = _offset_for_timestamp(rsm, topic, partition, slices, end, on_brokers is not None, brokers)
        end = latest if found is None else found
    # LATEST as a start comes only from a streaming query's startingOffsets (batch options refuse it)
    start = earliest if start == EARLIEST else latest if start == LATEST else start
    end = latest if end == LATEST else end
    if end > latest:
        if on_brokers is not None:
            raise PlanError(f"{name}: endingOffsets {end} is past the end of the partition on the brokers ({latest})")
        if latest < slices[-1].to_offset:
            raise PlanError(f"{name}: offsets from {latest} are in a transaction whose marker is not in the "
                            f"remote tier yet (endingOffsets {end}); kafka.isolation.level=read_uncommitted reads "
                            "them, kafka.bootstrap.servers reads them from the brokers")
        raise PlanError(f"{name}: offsets from {latest} are not in the remote tier yet (endingOffsets "
                        f"{end}); set kafka.bootstrap.servers to read them from the brokers")
    if start < earliest:
        if options.fail_on_data_loss:
            where = "in the remote tier" if on_brokers is None else "in the partition (below its log start offset)"
            raise PlanError(f"{name}: offset {start} is no longer {where} (earliest {earliest}); "
                            "set failOnDataLoss=false to start at the earliest")
        start = earliest
    if start > end:
        raise OptionError(f"{name}: starting offset {start} is after ending offset {end}")
    tail_from = boundary
    if on_brokers is not None and on_brokers[0] > boundary:
        # the brokers' log starts past the tier's end (DeleteRecords or retention there): start is
        # already at or past it, as earliest is
        tail_from = on_brokers[0]
    return PartitionRange(topic, partition, slices, start, end, boundary, tail_from)


def _offset_for_timestamp(rsm: RemoteStorageManager, topic: str, partition: int,
                          slices: list[SegmentSlice], timestamp: int, ask_brokers: bool,
                          brokers: BrokerView | None) -> int | None:
    found = offset_for_timestamp(rsm, slices, timestamp) if slices else None
    if found is None and ask_brokers and brokers is not None:
        found = brokers.offset_for_timestamp(topic, partition, timestamp)
    return found


def _timestamp_start(rsm: RemoteStorageManager, r: PartitionRange, start: int, end: int,
                     pushed: PushedFilters) -> int:
    """``start`` moved to the first tiered offset at or after the pushed timestamp lower bound (or to
    the brokers' part when no tiered record is that recent)."""
    ts = pushed.timestamp_low_ms()
    if ts is None or start >= end:
        return start
    candidates = [s for s in r.slices if s.to_offset > start and s.from_offset < min(end, r.boundary)]
    found = offset_for_timestamp(rsm, candidates, ts) if candidates else None
    return max(start, r.boundary if found is None else found)


def _tiered_pieces(rsm: RemoteStorageManager, r: PartitionRange, start: int, end: int,
                   options: ReaderOptions, pushed: PushedFilters | None) -> Iterator[_Piece]:
    name = f"{r.topic}-{r.partition}"
    cursor = start
    txns = AbortedTransactions(rsm, r.slices) if options.read_committed else None
    ts = pushed.timestamp_low_ms() if pushed is not None else None
    for i, s in enumerate(r.slices):
        lo, hi = max(s.from_offset, start), min(s.to_offset, end)
        if lo >= hi:
            continue
        if lo > cursor and options.fail_on_data_loss:
            raise PlanError(f"{name}: offsets {cursor}..{lo - 1} are in no committed remote segment; "
                            "set failOnDataLoss=false to skip them")
        cursor = hi
        if ts is not None and s.segment.metadata.max_timestamp_ms < ts:
            continue  # every record of the segment is older than the pushed lower bound
        try:
            aborted = txns.overlapping(i, lo, hi) if txns is not None else ()
        except TransactionError as exc:
            raise PlanError(f"{name}: {exc}") from None
        yield _Piece(r, i, lo, hi, aborted)


def _split(pieces: list[_Piece], max_records: int | None, min_partitions: int | None) -> list[_Piece]:
    """``maxRecordsPerPartition``, then ``minPartitions``, as Spark's Kafka source applies them."""
    out = [part for p in pieces for part in _cut(p, math.ceil((p.hi - p.lo) / max_records) if max_records else 1)]
    if min_partitions is None or len(out) >= min_partitions:
        return out
    total = sum(p.hi - p.lo for p in out)
    return [part for p in out for part in _cut(p, max(1, round((p.hi - p.lo) / total * min_partitions)))]


def _cut(p: _Piece, n: int) -> list[_Piece]:
    if n <= 1:
        return [p]
    size = p.hi - p.lo
    bounds = sorted({p.lo + size * k // n for k in range(n)} | {p.hi})
    return [replace(p, lo=a, hi=b) for a, b in zip(bounds, bounds[1:])]


def _tasks_for_slice(rsm: RemoteStorageManager, indexes: dict[uuid.UUID, list[tuple[int, int]]],
                     topic: str, partition: int, s: SegmentSlice, lo: int, hi: int, max_bytes: int,
                     aborted: Aborted) -> Iterator[ReadTask]:
    seg = s.segment
    object_name = seg.object_name(LOG_SUFFIX)
    whole = lo <= seg.start_offset and hi > seg.end_offset
    if whole and seg.log_size <= max_bytes:
        yield ReadTask(topic, partition, seg.metadata, object_name, 0, None, lo, hi, aborted)
        return
    key = seg.metadata.remote_log_segment_id.id
    if key not in indexes:
        indexes[key] = offset_index_entries(rsm, seg.metadata)
    entries = indexes[key]
    offsets = [o for o, _ in entries]
    i = bisect.bisect_right(offsets, lo) - 1
    first = entries[i][1] if i >= 0 else 0
    j = bisect.bisect_left(offsets, hi) + 1
    stop = entries[j][1] if j < len(entries) else seg.log_size
    # Each task ends at the furthest index position (a batch boundary) within max_bytes of its start:
    # no task reads more, unless one index interval alone is larger.
    cuts = [first]
    fits = first
    for _, position in entries:
        if not first < position < stop:
            continue
        if position - cuts[-1] > max_bytes and fits > cuts[-1]:
            cuts.append(fits)
        fits = position
    if stop - cuts[-1] > max_bytes and fits > cuts[-1]:
        cuts.append(fits)
    cuts.append(stop)
    for a, b in zip(cuts, cuts[1:]):
        if b > a:
            yield ReadTask(topic, partition, seg.metadata, object_name, a, b - 1, lo, hi, aborted)
