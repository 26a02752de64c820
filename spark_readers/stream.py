"""``spark.readStream.format("tieredlog")``: the remote tier as a micro-batch stream.

Offsets are what Spark's Kafka source checkpoints, ``{"topic": {"0": 42, "1": 7}}`` (the next offset to
read per partition), so a checkpoint reads the same way in both. Each trigger lists the manifests
again: the latest offset of a partition is the end of its tiered part (segments whose manifest is
present, resolved on the leader-epoch lineage as a batch query resolves them), so segments committed
since the last micro-batch are read by the next one. A partition (or, with ``topicPattern``, a topic)
that appears later starts at its earliest tiered offset, as in Spark's Kafka source.

``maxOffsetsPerTrigger`` caps the offsets of one micro-batch over all partitions, spread over the
partitions in proportion to their backlog exactly as Spark's Kafka source spreads it (a partition
whose share is under one offset still gets one, so a batch may exceed the cap by at most one offset
per partition; offsets with no record, e.g. after compaction, make a batch's rows fewer).

The stream's planning reuses the batch planner (:func:`~spark_readers.planner.offset_bounds` for the
offsets, :func:`~spark_readers.planner.plan` with per-partition start and end for the read tasks), and
executors read with the batch reader's code, so a micro-batch returns exactly what a batch query over
the same offsets returns.

With ``kafka.bootstrap.servers`` a partition's latest offset is the brokers' end (high watermark, or
last stable offset with read_committed) and each micro-batch reads what is past the tiered part from
the brokers (:mod:`spark_readers.brokers`), so the stream follows the live topic, not only the tier.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from spark_readers.options import EARLIEST, OffsetSpec, ReaderOptions
from spark_readers.partitions import brokers_for, input_partition, read_partition
from spark_readers.planner import PlanError, offset_bounds, plan
from spark_readers.storage import StorageSpec, open_storage

# (topic, partition) -> offset: the working form of a JSON offset
Positions = dict[tuple[str, int], int]


def to_json(positions: Positions) -> dict[str, dict[str, int]]:
    """Spark's Kafka source shape: topic -> partition number as a string -> offset."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(offset: dict[str, dict[str, int]]) -> Positions:
    return {(topic, int(p)): int(o) for topic, parts in offset.items() for p, o in parts.items()}


def rate_limit(limit: int, start: Positions, available: Positions) -> Positions:
    """The end of a micro-batch of at most ``limit`` offsets (plus at most one per partition) from
    ``start`` towards ``available``, the backlog spread in proportion as Spark's Kafka source spreads
    it (``KafkaMicroBatchStream.rateLimit``): each partition advances ``limit * backlog / total``
    offsets, floored, or one when its share is under one, so a small partition is never starved."""
    sizes = {tp: end - start[tp] for tp, end in available.items() if end - start[tp] > 0}
    total = sum(sizes.values())
    if total <= limit:
        return dict(available)
    out = dict(available)
    for tp, size in sizes.items():
        share = limit * size / total
        out[tp] = min(available[tp], start[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return out


class TieredLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Runs in one long-lived Python process on the driver per query (offsets, planning), and is
    pickled to the executors for :meth:`read`."""

    def __init__(self, options: ReaderOptions, spec: StorageSpec) -> None:
        self.options = options
        self.spec = spec
        # Trigger.AvailableNow: the tiered ends when the query started; later segments wait for the next run.
        self._target: dict[tuple[str, int], tuple[int, int]] | None = None
        self._last_seen: Positions | None = None
        self._initial: dict[str, dict[str, int]] | None = None

    def initialOffset(self) -> dict[str, dict[str, int]]:
        # Spark asks again at every trigger until a first micro-batch is checkpointed: resolved once per
        # run, or startingOffsets=latest would move on with the tier and never read anything.
        if self._initial is None:
            bounds = offset_bounds(open_storage(self.spec), self.options, brokers_for(self.options))
            self._initial = to_json({(t, p): start for t, parts in bounds.items() for p, (start, _) in parts.items()})
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._tiered()

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        tiered = self._target if self._target is not None else self._tiered()
        self._last_seen = {tp: end for tp, (_, end) in tiered.items()}
        begin = from_json(start)
        # a partition not in the start offset appeared since: it starts at its earliest tiered offset
        first = {tp: begin.get(tp, earliest) for tp, (earliest, _) in tiered.items()}
        available: Positions = {}
        for tp, (_, end) in tiered.items():
            if end < first[tp]:
                # The tier went back (a topic recreated under the same name, segments of another
                # history deleted): offsets already read are not in it any more.
                if self.options.fail_on_data_loss:
                    raise PlanError(f"{tp[0]}-{tp[1]}: the remote tier ends at {end}, before offset {first[tp]} "
                                    "this query has already read to; set failOnDataLoss=false to wait for it")
                end = first[tp]
            available[tp] = end
        if isinstance(limit, ReadMaxRows):
            available = rate_limit(limit.max_rows, first, available)
        # partitions that left the tier (every segment deleted) keep their position rather than go back
        return to_json({**begin, **available})

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return None if self._last_seen is None else to_json(self._last_seen)

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> Sequence[InputPartition]:
        begin, until = from_json(start), from_json(end)
        # a partition new in this micro-batch is read from its earliest tiered offset, as latestOffset counted it
        ranges = {tp: (begin.get(tp, EARLIEST), o) for tp, o in until.items() if begin.get(tp) != o}
        if not ranges:
            return []
        starting: dict[str, dict[int, int]] = {}
        ending: dict[str, dict[int, int]] = {}
        for (topic, partition), (lo, hi) in ranges.items():
            starting.setdefault(topic, {})[partition] = lo
            ending.setdefault(topic, {})[partition] = hi
        options = replace(self.options, topics=tuple(sorted(starting)), topic_pattern=None,
                          starting=OffsetSpec(None, starting), ending=OffsetSpec(None, ending))
        tasks = plan(open_storage(self.spec), options, {t: set(parts) for t, parts in starting.items()},
                     brokers=brokers_for(self.options))
        return [input_partition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(self.spec, self.options, partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        # Nothing to acknowledge: the remote tier is read, never consumed from.
        pass

    def _tiered(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(earliest, end) of every partition of the query's topics: the tiered part, or with brokers
        up to their end."""
        everything = replace(self.options, starting=OffsetSpec(EARLIEST, {}))
        bounds = offset_bounds(open_storage(self.spec), everything, brokers_for(self.options))
        return {(t, p): b for t, parts in bounds.items() for p, b in parts.items()}
