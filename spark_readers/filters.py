"""``pushFilters``: the ``where`` clauses on ``partition``, ``offset`` and ``timestamp`` that narrow a read.

Spark hands the reader the conjuncts (``And``) of a query's filter it could translate; each one of
``EqualTo``, ``EqualNullSafe``, ``In``, ``GreaterThan(OrEqual)``, ``LessThan(OrEqual)`` and ``IsNotNull``
on one of the three columns is folded into a :class:`PushedFilters` and the rest go back to Spark.

- ``partition``: a set of partition numbers and a range; the other partitions are not planned at all.
- ``offset``: a ``[low, high)`` range intersected with the offset options; ``In`` narrows to the range of
  its values and is also returned to Spark, which keeps only the listed offsets.
- ``timestamp``: a ``[low, high)`` range in microseconds (Spark's unit). A lower bound narrows the read:
  the earliest offset at or after it is found with the time index (as ``startingTimestamp`` is) and
  segments whose manifest's maximum timestamp is below it are skipped. An upper bound narrows nothing
  (Kafka timestamps are not ordered and a segment records only its maximum), but both are applied
  exactly to each decoded batch before it leaves the executor.

Every pushed filter is applied exactly, so Spark does not evaluate it again; all three columns are never
null, so ``IsNotNull`` on them is always true.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MICROSECOND = datetime.timedelta(microseconds=1)
COLUMNS = ("partition", "offset", "timestamp")


@dataclass(frozen=True, slots=True)
class PushedFilters:
    """What the pushed filters allow; ``None`` is no bound. Offsets and timestamps: ``[low, high)``,
    timestamps in microseconds since the epoch. Picklable."""

    partitions: frozenset[int] | None = None
    offset_low: int | None = None
    offset_high: int | None = None
    timestamp_low: int | None = None
    timestamp_high: int | None = None
    partition_low: int | None = None
    partition_high: int | None = None

    def keeps_partition(self, partition: int) -> bool:
        if self.partitions is not None and partition not in self.partitions:
            return False
        return ((self.partition_low is None or partition >= self.partition_low)
                and (self.partition_high is None or partition < self.partition_high))

    @property
    def narrows_timestamps(self) -> bool:
        return self.timestamp_low is not None or self.timestamp_high is not None

    def timestamp_low_ms(self) -> int | None:
        """The lowest Kafka timestamp (epoch ms) the lower bound keeps."""
        return None if self.timestamp_low is None else math.ceil(self.timestamp_low / 1000)

    def offsets(self, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` narrowed to the pushed offset range (``start >= end``: nothing to read)."""
        if self.offset_low is not None:
            start = max(start, self.offset_low)
        if self.offset_high is not None:
            end = min(end, self.offset_high)
        return start, end

    def filter_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of ``batch`` inside the timestamp bounds (offsets and partitions were planned)."""
        if not self.narrows_timestamps or batch.num_rows == 0:
            return batch
        micros = pc.cast(batch.column("timestamp"), pa.int64())
        mask = None
        if self.timestamp_low is not None:
            mask = pc.greater_equal(micros, self.timestamp_low)
        if self.timestamp_high is not None:
            high = pc.less(micros, self.timestamp_high)
            mask = high if mask is None else pc.and_(mask, high)
        return batch.filter(mask)


Comparison = EqualTo | EqualNullSafe | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual | In
_COMPARISONS = (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In)


def push(filters: Iterable[Filter]) -> tuple[PushedFilters, list[Filter]]:
    """The filters folded into one :class:`PushedFilters`, and those Spark must still evaluate (each
    one of ``filters`` by reference, as Spark requires)."""
    partitions: set[int] | None = None
    bounds: dict[str, list[int | None]] = {c: [None, None] for c in COLUMNS}
    rest: list[Filter] = []
    for f in filters:
        if isinstance(f, IsNotNull) and f.attribute in _PATHS:
            continue
        if not isinstance(f, _COMPARISONS) or f.attribute not in _PATHS:
            rest.append(f)
            continue
        column = f.attribute[0]
        values = _values(f, column)
        if values is None:
            rest.append(f)
            continue
        if column == "partition" and isinstance(f, (EqualTo, EqualNullSafe, In)):
            partitions = set(values) if partitions is None else partitions & set(values)
            continue
        low, high = _range(f, values)
        pair = bounds[column]
        if low is not None:
            pair[0] = low if pair[0] is None else max(pair[0], low)
        if high is not None:
            pair[1] = high if pair[1] is None else min(pair[1], high)
        if isinstance(f, In) and len(set(values)) > 1:
            rest.append(f)  # only its range was pushed
    pushed = PushedFilters(None if partitions is None else frozenset(partitions),
                           bounds["offset"][0], bounds["offset"][1],
                           bounds["timestamp"][0], bounds["timestamp"][1],
                           bounds["partition"][0], bounds["partition"][1])
    return pushed, rest


_PATHS = {(c,) for c in COLUMNS}


def _values(f: Comparison, column: str) -> list[int] | None:
    """The filter's literal(s) as integers (timestamps in microseconds); None when one is not of the
    column's type (Spark then keeps the filter)."""
    raw = list(f.value) if isinstance(f, In) else [f.value]
    out = [_integer(v, column) for v in raw]
    return None if not out or any(v is None for v in out) else [v for v in out if v is not None]


def _integer(value: object, column: str) -> int | None:
    if column == "timestamp":
        if not isinstance(value, datetime.datetime):
            return None
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return (aware - _EPOCH) // _MICROSECOND
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _range(f: Comparison, values: list[int]) -> tuple[int | None, int | None]:
    """``[low, high)`` of a comparison on an integer column."""
    v = values[0]
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return v, v + 1
    if isinstance(f, In):
        return min(values), max(values) + 1
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return None, v
    if isinstance(f, LessThanOrEqual):
        return None, v + 1
    return None, None


def describe(pushed: PushedFilters) -> Iterator[str]:
    """The pushed bounds as the plan's partitions print them."""
    if pushed.partitions is not None:
        yield f"partition in {sorted(pushed.partitions)}"
    if pushed.partition_low is not None or pushed.partition_high is not None:
        yield f"partition in [{pushed.partition_low}, {pushed.partition_high})"
    if pushed.offset_low is not None or pushed.offset_high is not None:
        yield f"offset in [{pushed.offset_low}, {pushed.offset_high})"
    if pushed.narrows_timestamps:
        yield f"timestamp(us) in [{pushed.timestamp_low}, {pushed.timestamp_high})"
