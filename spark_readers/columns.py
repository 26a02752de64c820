"""The records sections of v2 batches decoded into column arrays, all records of a run of batches at once.

Only the record-length chain is walked in Python, one varint per record, because a record's start is
known only from the previous one's length: :func:`_record_starts` keeps each start and nothing else.
Every other field of every record is then decoded with numpy at the array of positions
(:func:`_varints`: the bytes at ``pos``, ``pos + 1``, ... gathered while their continuation bits are
set, then zigzag), field after field: attributes, timestamp delta, offset delta, key length and key,
value length and value, header count. Headers are walked in Python for the few records that have any.

A record's key and value are not copied here: the arrays note where each starts and ends in the
*arena*, the bytes the records were read from (the segment's own bytes, or the batches' decompressed
records sections laid end to end), and Arrow gathers them (:mod:`spark_readers.decoder`).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import numpy.typing as npt

from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.record_walk import MIN_RECORD_BODY, MIN_RECORD_SIZE
from tieredlog.formats.varint import MAX_VARINT_BYTES, read_varint, zigzag_decode
from tieredlog.records.batch import BytesLike

Int64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
# Batches whose records are still to find: (batch index, position of its next record not yet found,
# that record's index in the batch, how many short runs of one size it had)
Pending = list[tuple[int, int, int, int]]


def _steps() -> list[int]:
    """Indexed by the two bytes at a record's start (``second << 8 | first``): how far the next record
    starts, for a length varint of one or two bytes; 0 sends the walk to :func:`read_varint`."""
    table = [0] * 0x10000
    for c in range(0x100):
        for b in range(0x100):
            if b < 0x80:
                step = zigzag_decode(b) + 1
            elif c < 0x80:
                step = zigzag_decode((c << 7) | (b & 0x7F)) + 2
            else:
                continue
            table[(c << 8) | b] = step
    return table


# Record lengths up to 8 KiB take one lookup per record; a step of 0 (a length of -1) or less only
# comes from corrupt data, which the checks after the walk catch.
_STEP = _steps()
# Rounds of guessing record positions (:func:`_guess`), the shortest run of one size worth another
# round, and how many shorter runs a batch may have before it is walked: in a batch of more than 64
# records their sizes change at least where the offset delta's varint takes a second byte, and again
# where the timestamp delta's does; keys such as "k9" and "k10" change them once more, early on.
_GUESSES = 8
_SHORT_RUN = 16
_SHORT_RUNS = 2


@dataclass(frozen=True, slots=True)
class BatchRecords:
    """What the decoding needs of one batch's header, and where its records section lies in the arena."""

    start: int
    end: int
    count: int
    base_offset: int
    base_timestamp: int
    # The batch's max timestamp for a LogAppendTime batch, which every record takes as Kafka's
    # consumers read it; None for CreateTime.
    log_append_time: int | None
    timestamp_type: int


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The rows kept (offsets in ``[lo, hi)``): ``offsets``, ``timestamps`` (epoch ms),
    ``timestamp_types``, and in ``cuts`` the arena positions key start, key end, value start, value end
    per row (an empty fragment for a null, whose row is false in ``key_valid`` / ``value_valid``, None
    when none is null). With headers, per header the same four positions in ``header_cuts``, and per
    row the index of its first header in ``header_offsets`` (Arrow's list offsets: one more entry than
    rows)."""

    offsets: Int64s
    timestamps: Int64s
    timestamp_types: npt.NDArray[np.int32]
    cuts: Int64s
    key_valid: Bools | None
    value_valid: Bools | None
    include_headers: bool
    header_cuts: Int64s
    header_value_valid: Bools | None
    header_offsets: npt.NDArray[np.int32]

    def __len__(self) -> int:
        return len(self.offsets)


def decode_columns(d: BytesLike, batches: Sequence[BatchRecords], lo: int, hi: int,
                   include_headers: bool) -> RecordColumns:
    """The records of ``batches`` (each section filled exactly by its records; ``d`` is the arena) with
    offsets in ``[lo, hi)``. Malformed records raise CorruptRecordError with a position in ``d``."""
    buf = np.frombuffer(d, np.uint8)
    starts, chain_error = _record_starts(d, buf, batches)
    counts = np.fromiter((b.count for b in batches), np.int64, len(batches))

    def per_record(values: list[int]) -> Int64s:
        return np.repeat(np.array(values, np.int64), counts)

    length, body = _varints(buf, starts)
    checks = _Checks(starts)
    checks.add(length < MIN_RECORD_BODY, "record length {} is below the minimum", length)
    record_end = body + length
    # the attributes byte at ``body`` is unused
    timestamp_delta, p = _varints(buf, body + 1)
    offset_delta, p = _varints(buf, p)
    key_length, key_start = _varints(buf, p)
    checks.add((key_length < -1) | (key_length > record_end - key_start), "invalid key length {}", key_length)
    key_end = key_start + np.maximum(key_length, 0)
    value_length, value_start = _varints(buf, key_end)
    checks.add((value_length < -1) | (value_length > record_end - value_start), "invalid value length {}",
               value_length)
    value_end = value_start + np.maximum(value_length, 0)
    header_count, p = _varints(buf, value_end)
    checks.add((header_count < 0) | (header_count > record_end - p), "invalid header count {}", header_count)
    checks.add((p != record_end) & (header_count == 0), "record length {} does not match its fields", length)
    with_headers = np.flatnonzero(header_count)
    header_cuts = array("q")
    null_header_values: list[int] = []
    for rec, at, end, n in zip(starts[with_headers].tolist(), p[with_headers].tolist(),
                               record_end[with_headers].tolist(), header_count[with_headers].tolist()):
        if rec >= checks.first_bad:
            break
        _headers(d, rec, at, end, n, header_cuts if include_headers else None, null_header_values)
    checks.raise_first()
    if chain_error is not None:
        raise chain_error

    offsets = per_record([b.base_offset for b in batches]) + offset_delta
    timestamps = per_record([b.base_timestamp for b in batches]) + timestamp_delta
    if any(b.log_append_time is not None for b in batches):
        timestamps = np.where(per_record([b.log_append_time is not None for b in batches]) != 0,
                              per_record([b.log_append_time or 0 for b in batches]), timestamps)
    timestamp_types = np.repeat(np.array([b.timestamp_type for b in batches], np.int32), counts)
    cuts = np.stack([key_start, key_end, value_start, value_end], axis=1)
    headers = np.frombuffer(header_cuts, np.int64).reshape(-1, 4)
    header_value_valid = None
    if null_header_values:
        header_value_valid = np.ones(len(headers), np.bool_)
        header_value_valid[null_header_values] = False
    keep = (offsets >= lo) & (offsets < hi)
    if not keep.all():
        offsets, timestamps, timestamp_types, cuts = offsets[keep], timestamps[keep], timestamp_types[keep], cuts[keep]
        key_length, value_length = key_length[keep], value_length[keep]
        if include_headers and len(headers):
            kept_headers = np.repeat(keep[with_headers], header_count[with_headers])
            headers = headers[kept_headers]
            if header_value_valid is not None:
                header_value_valid = _all_true_to_none(header_value_valid[kept_headers])
        header_count = header_count[keep]
    header_offsets = np.zeros(len(offsets) + 1, np.int32)
    if include_headers:
        np.cumsum(header_count, out=header_offsets[1:])
    return RecordColumns(offsets, timestamps, timestamp_types, cuts.ravel(), _valid(key_length), _valid(value_length),
                         include_headers, headers.ravel(), header_value_valid, header_offsets)


def _valid(lengths: Int64s) -> Bools | None:
    return _all_true_to_none(lengths >= 0)


def _all_true_to_none(valid: Bools) -> Bools | None:
    return None if valid.all() else valid


class _Checks:
    """The records' fields checked, all records at once; the error raised is that of the first record
    in error (the one a walk would meet first), so that a wrong length is not reported at one of the
    misread records after it."""

    def __init__(self, starts: Int64s) -> None:
        self.starts = starts
        self.first_bad = 1 << 62  # the position of the first record in error
        self.error: CorruptRecordError | None = None

    def add(self, bad: Bools, message: str, values: Int64s) -> None:
        if bad.any():
            i = int(np.argmax(bad))
            if self.starts[i] < self.first_bad:
                self.first_bad = int(self.starts[i])
                self.error = CorruptRecordError(message.format(int(values[i])), position=self.first_bad)

    def raise_first(self) -> None:
        if self.error is not None:
            raise self.error


def _record_starts(d: BytesLike, buf: npt.NDArray[np.uint8],
                   batches: Sequence[BatchRecords]) -> tuple[Int64s, CorruptRecordError | None]:
    """Each record's position, found by guessing (:func:`_guess`) where runs of records of one size
    follow each other, and walking the length chain in Python where the guesses fail. When a chain
    does not end at its section's end: the starts up to the first record that overruns its batch,
    and the error to raise if none of their fields explains it."""
    runs: list[list[Int64s]] = [[] for _ in batches]
    pending: Pending = []
    failed = [False] * len(batches)
    for i, batch in enumerate(batches):
        p, end, count = batch.start, batch.end, batch.count
        if count > (end - p) // MIN_RECORD_SIZE:
            raise CorruptRecordError(f"record count {count} cannot fit in {end - p} bytes", position=p)
        if count:
            pending.append((i, p, 0, 0))
        elif p != end:
            failed[i] = True
    walks: Pending = []
    for round_ in range(_GUESSES):
        if not pending:
            break
        pending = _guess(buf, batches, pending, 64 << 2 * round_, runs, walks)
    for i, p, k, _ in walks + pending:
        tail = _walk(d, p, batches[i].end, batches[i].count - k)
        if tail is None:
            failed[i] = True
        else:
            runs[i].append(tail)
    done: list[Int64s] = []
    for i, batch_runs in enumerate(runs):
        if failed[i]:
            starts = array("q", np.concatenate(done).tolist() if done else [])
            error = _chain_error(d, batches[i], starts)
            return np.frombuffer(starts, np.int64), error
        done += sorted(batch_runs, key=lambda run: int(run[0]))
    return (np.concatenate(done) if done else np.zeros(0, np.int64)), None


def _guess(buf: npt.NDArray[np.uint8], batches: Sequence[BatchRecords], pending: Pending,
           window: int, runs: list[list[Int64s]], walks: Pending) -> Pending:
    """One round of guesses for the ``pending`` batches, all at once: the next ``window`` records of
    a batch guessed of the size of the first of them, each guess's length varint decoded and its
    size compared (the window grows round after round: the first size change comes early, where
    the offset delta's varint grows, the later ones far apart).
    The records up to the first of another size are found (a run, to ``runs``); that one is where
    the next round starts, or the Python walk (``walks``) once the batch had ``_SHORT_RUNS`` short
    runs: sizes that vary from record to record make guessing a waste. Returns what the next round
    has to do."""
    at = np.array([p for _, p, _, _ in pending], np.int64)
    left = np.array([min(batches[i].count - k, window) for i, _, k, _ in pending], np.int64)
    length, body = _varints(buf, at)
    size = body + length - at
    groups = np.cumsum(left) - left
    ordinal = np.arange(int(left.sum()), dtype=np.int64) - np.repeat(groups, left)
    guessed = np.repeat(at, left) + ordinal * np.repeat(size, left)
    length, body = _varints(buf, guessed)
    other = body + length - guessed != np.repeat(size, left)
    # per batch, the index of its first record of another size (``left`` when none is)
    first_other = np.minimum.reduceat(np.where(other, ordinal, np.repeat(left, left)), groups)
    out: Pending = []
    for (i, p, k, short), n, m, step, g in zip(pending, left.tolist(), first_other.tolist(), size.tolist(),
                                              groups.tolist()):
        if step < MIN_RECORD_SIZE:
            walks.append((i, p, k, short))  # corrupt: the walk finds where
            continue
        if m == n:
            runs[i].append(guessed[g:g + n])
            if k + n < batches[i].count:
                out.append((i, p + n * step, k + n, short))
            elif p + n * step != batches[i].end:
                runs[i].pop()
                walks.append((i, p, k, short))
            continue
        runs[i].append(guessed[g:g + m])
        short += m < _SHORT_RUN
        (walks if short >= _SHORT_RUNS else out).append((i, p + m * step, k + m, short))
    return out


def _walk(d: BytesLike, p: int, end: int, count: int) -> Int64s | None:
    """The length chain of ``count`` records from ``p`` walked in Python, one varint per record;
    checked only by where it ends: on any other end than ``end``, None (:func:`_chain_error` then
    finds what is wrong)."""
    step = _STEP
    starts = array("q")
    append = starts.append
    try:
        for _ in range(count):
            append(p)
            s = step[d[p] | (d[p + 1] << 8)]
            if s > 0:
                p += s
            else:
                length, p = read_varint(d, p)
                p += length
    except (IndexError, CorruptRecordError):
        p = -1
    return np.frombuffer(starts, np.int64) if p == end else None


def _chain_error(d: BytesLike, batch: BatchRecords, starts: array[int]) -> CorruptRecordError:
    """The length chain of ``batch`` again, each record checked, its records' starts noted in
    ``starts`` up to the one in error."""
    p = batch.start
    for _ in range(batch.count):
        try:
            length, body = read_varint(d, p)
        except (IndexError, CorruptRecordError):
            return CorruptRecordError("record truncated", position=p)
        if length < MIN_RECORD_BODY or body + length > batch.end:
            return CorruptRecordError(f"record length {length} overruns the batch", position=p)
        starts.append(p)
        p = body + length
    return CorruptRecordError(f"{batch.end - p} bytes left over after {batch.count} records", position=p)


def _varints(buf: npt.NDArray[np.uint8], pos: Int64s) -> tuple[Int64s, Int64s]:
    """The zigzag varints at ``pos`` in ``buf`` and the positions after them. A varint running past
    the buffer or longer than 10 bytes gives a value that the caller's bounds checks reject."""
    # Most varints of a record take one or two bytes: both gathered for all, the rest one by one.
    first = buf.take(pos, mode="clip").astype(np.int64)
    second = buf.take(pos + 1, mode="clip").astype(np.int64)
    more = first >> 7
    raw = (first & 0x7F) | (((second & 0x7F) << 7) * more)
    after = pos + 1 + more
    value = (raw >> 1) ^ -(raw & 1)
    longer = np.flatnonzero(more & (second >> 7))
    if longer.size:
        value[longer], after[longer] = _long_varints(buf, pos[longer])
    return value, after


def _long_varints(buf: npt.NDArray[np.uint8], pos: Int64s) -> tuple[Int64s, Int64s]:
    """:func:`_varints` a byte at a time, for varints of three bytes or more."""
    last = len(buf) - 1
    b = buf.take(pos, mode="clip")
    raw = (b & 0x7F).astype(np.uint64)
    after = pos + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while more.size:
        if shift >= 7 * MAX_VARINT_BYTES:
            after[more] = last + 2  # past any record's end
            break
        at = after[more]
        b = buf.take(at, mode="clip")
        raw[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[more] = np.where(at > last, last + 2, at + 1)
        more = more[(b & 0x80) != 0]
        shift += 7
    return (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64), after


def _headers(d: BytesLike, rec: int, p: int, rec_end: int, count: int, cuts: array[int] | None,
             null_values: list[int]) -> None:
    """Walk the ``count`` headers from ``p`` to the record's end, noting their cuts in ``cuts`` (when
    kept). Header keys are checked as UTF-8 when the column is built, in one pass."""
    try:
        p = _header_fields(d, p, rec_end, count, cuts, null_values)
    except IndexError:
        raise CorruptRecordError("record truncated", position=p) from None
    if p != rec_end:
        raise CorruptRecordError(f"record's fields end {rec_end - p} bytes before its length says", position=rec)


def _header_fields(d: BytesLike, p: int, rec_end: int, count: int, cuts: array[int] | None,
                   null_values: list[int]) -> int:
    for _ in range(count):
        key_length, p = read_varint(d, p)
        key_start = p
        p += key_length
        if key_length < 0 or p > rec_end:
            raise CorruptRecordError(f"invalid header key length {key_length}", position=key_start)
        key_end = p
        value_length, p = read_varint(d, p)
        value_start = p
        if value_length >= 0:
            p += value_length
            if p > rec_end:
                raise CorruptRecordError(f"header value length {value_length} overruns the record",
                                         position=value_start)
        elif value_length != -1:
            raise CorruptRecordError(f"invalid header value length {value_length}", position=value_start)
        if cuts is not None:
            if value_length < 0:
                null_values.append(len(cuts) >> 2)
            cuts.extend((key_start, key_end, value_start, p))
    return p
