"""Reading a partition log back as decoded batches: how the broker replays its internal topics
(``__remote_log_metadata`` for the RLMM, ``__consumer_offsets`` for the group coordinator).

Not a fetch path: every batch is decoded (and decompressed). A batch that does not decode is
reported and skipped, never the end of the load: a replay that failed on damage would fail the same
way at every start, and everything after the damage would be lost with it.
"""

from __future__ import annotations

from typing import Callable, Iterator, Protocol

from tieredlog.formats.errors import RecordError
from tieredlog.log.types import FetchDataInfo, FetchIsolation
from tieredlog.records.batch import BatchHeader
from tieredlog.records.record import Record, iter_batches_records

__all__ = ["LogBatches", "OnCorrupt", "ReadableLog"]


class ReadableLog(Protocol):
    """What the walk needs of a UnifiedLog."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def read(
        self, fetch_offset: int, max_bytes: int, isolation: FetchIsolation = ..., min_one_message: bool = ...
    ) -> FetchDataInfo: ...


# on_corrupt(offset, header | None, error): ``offset`` is the next offset the walk had to read when
# it met the batch (the damage lies at or after it); ``header`` when the batch's 61 bytes read as one.
OnCorrupt = Callable[[int, BatchHeader | None, RecordError], None]

_CHUNK_BYTES = 1 << 20


class LogBatches:
    """``for header, records in LogBatches(plog, from_offset): ...``: the log's batches from
    ``from_offset`` (at least the log start) up to ``end_offset`` (default: the log end as each
    chunk is read), decoded, in order; ``records`` holds only the records at or after the offset
    the walk had reached (the first batch may begin below ``from_offset``).

    ``offset`` is always the next offset to read: after the walk, where it ended; when a read
    raises (OSError, a KafkaError such as OffsetOutOfRangeError, RecordError: they propagate),
    where it failed. A corrupt batch goes to ``on_corrupt`` and is skipped; the walk moves past it
    only when the offsets its header claims are plausible (inside ``[offset, end)``), and ends when
    a chunk moves it no further.
    """

    def __init__(
        self,
        plog: ReadableLog,
        from_offset: int,
        *,
        end_offset: int | None = None,
        on_corrupt: OnCorrupt | None = None,
        isolation: FetchIsolation = FetchIsolation.LOG_END,
        chunk_bytes: int = _CHUNK_BYTES,
    ):
        self._plog = plog
        self.offset = from_offset
        self._end = end_offset
        self._on_corrupt = on_corrupt
        self._isolation = isolation
        self._chunk_bytes = chunk_bytes

    def __iter__(self) -> Iterator[tuple[BatchHeader, list[Record]]]:
        plog = self._plog
        self.offset = max(self.offset, plog.log_start_offset)
        while True:
            end = plog.log_end_offset if self._end is None else self._end
            if self.offset >= end:
                return
            records = plog.read(self.offset, self._chunk_bytes, self._isolation, True).records
            data = records if isinstance(records, (bytes, bytearray, memoryview)) else records.read_bytes()
            if not data:
                return
            start = self.offset

            def corrupt(_pos: int, header: BatchHeader | None, exc: RecordError, end: int = end) -> None:
                if self._on_corrupt is not None:
                    self._on_corrupt(self.offset, header, exc)
                if header is not None and self.offset <= header.base_offset <= header.last_offset < end:
                    self.offset = header.last_offset + 1

            for header, batch_records in iter_batches_records(data, stop_at_partial=True, on_corrupt=corrupt):
                reached = self.offset
                self.offset = max(reached, header.last_offset + 1)
                yield header, [r for r in batch_records if r.offset >= reached]
            if self.offset == start:
                return
