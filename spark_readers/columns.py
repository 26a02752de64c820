"""The records sections of v2 batches walked straight into column buffers: no object per record.

A record's key, value and header fields are not copied here: the walk notes where each starts and
ends in the *arena*, the bytes the records were read from (the segment's own bytes, or the batches'
decompressed records sections laid end to end), as int64 cut points in an ``array``. Arrow then
gathers them in C (:mod:`spark_readers.decoder`): the cut points, in rising order, make the arena one
large-binary array of fragments, and a ``take`` of every fourth fragment is the key column, of the
fragments two further on the value column. Offsets and timestamps go into ``array`` columns, null
keys and values into short lists of rows.

Varints of one or two bytes (record and value lengths up to 8 KiB, offset and timestamp deltas up to
8191) are looked up in tables of :func:`tieredlog.records.record.zigzag_decode`; longer ones go
through :func:`tieredlog.records.record.read_varint`.
"""

from __future__ import annotations

from array import array

from tieredlog.records.batch import MIN_RECORD_BODY, MIN_RECORD_SIZE, BytesLike
from tieredlog.records.errors import CorruptRecordError
from tieredlog.records.record import read_varint, zigzag_decode

# Zigzag varints of one byte, and of two bytes indexed by ``second << 8 | first``: in the walk's hot
# loop a list lookup costs less than the shifts and masks.
_ONE_BYTE = [zigzag_decode(b) for b in range(0x80)]
_TWO_BYTES = [zigzag_decode((c << 7) | (b & 0x7F)) if b >= 0x80 and c < 0x80 else 0
              for c in range(0x100) for b in range(0x100)]


class RecordColumns:
    """The columns of the rows decoded so far. Per row: ``offsets``, ``timestamps`` (epoch ms),
    ``timestamp_types``, and in ``cuts`` the arena positions key start, key end, value start, value end
    (an empty fragment for a null, whose row is listed in ``null_keys`` / ``null_values``). With
    headers, per header the same four positions in ``header_cuts``, and per row the index of its first
    header in ``header_offsets`` (Arrow's list offsets: one more entry than rows)."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.offsets = array("q")
        self.timestamps = array("q")
        self.timestamp_types = array("i")
        self.cuts = array("q")
        self.null_keys: list[int] = []
        self.null_values: list[int] = []
        self.header_cuts = array("q")
        self.null_header_values: list[int] = []
        self.header_offsets = array("i", [0])

    def __len__(self) -> int:
        return len(self.offsets)

    def add_records(self, d: BytesLike, p: int, end: int, count: int, base_offset: int, base_timestamp: int,
                    log_append_time: int | None, timestamp_type: int, lo: int, hi: int) -> None:
        """Walk the ``count`` records that fill ``d[p:end]`` exactly (``d`` is the arena); keep those with
        offsets in ``[lo, hi)``. Malformed records raise CorruptRecordError with a position in ``d``."""
        if count > (end - p) // MIN_RECORD_SIZE:
            raise CorruptRecordError(f"record count {count} cannot fit in {end - p} bytes", position=p)
        one_byte, two_bytes = _ONE_BYTE, _TWO_BYTES
        offsets_append = self.offsets.append
        timestamps_append = self.timestamps.append
        cuts_extend = self.cuts.extend
        header_offsets_append = self.header_offsets.append
        null_keys = self.null_keys
        null_values = self.null_values
        include_headers = self.include_headers
        row = first_row = len(self.offsets)
        rec = p
        try:
            for _ in range(count):
                rec = p
                # Varints of one and two bytes inline: the walk's hot spot.
                b = d[p]
                if b < 0x80:
                    length = one_byte[b]
                    p += 1
                elif (c := d[p + 1]) < 0x80:  # two bytes: lengths of 64 B .. 8 KiB, deltas up to 8191
                    length = two_bytes[(c << 8) | b]
                    p += 2
                else:
                    length, p = read_varint(d, p)
                rec_end = p + length
                if length < MIN_RECORD_BODY or rec_end > end:
                    raise CorruptRecordError(f"record length {length} overruns the batch", position=rec)
                p += 1  # the attributes byte, unused
                b = d[p]
                if b < 0x80:
                    timestamp_delta = one_byte[b]
                    p += 1
                elif (c := d[p + 1]) < 0x80:
                    timestamp_delta = two_bytes[(c << 8) | b]
                    p += 2
                else:
                    timestamp_delta, p = read_varint(d, p)
                b = d[p]
                if b < 0x80:
                    offset_delta = one_byte[b]
                    p += 1
                elif (c := d[p + 1]) < 0x80:
                    offset_delta = two_bytes[(c << 8) | b]
                    p += 2
                else:
                    offset_delta, p = read_varint(d, p)
                offset = base_offset + offset_delta
                keep = lo <= offset < hi
                b = d[p]
                if b < 0x80:
                    key_length = one_byte[b]
                    p += 1
                elif (c := d[p + 1]) < 0x80:
                    key_length = two_bytes[(c << 8) | b]
                    p += 2
                else:
                    key_length, p = read_varint(d, p)
                key_start = p
                if key_length >= 0:
                    p += key_length
                    if p > rec_end:
                        raise CorruptRecordError(f"key length {key_length} overruns the record", position=key_start)
                elif key_length != -1:
                    raise CorruptRecordError(f"invalid key length {key_length}", position=p)
                key_end = p
                b = d[p]
                if b < 0x80:
                    value_length = one_byte[b]
                    p += 1
                elif (c := d[p + 1]) < 0x80:
                    value_length = two_bytes[(c << 8) | b]
                    p += 2
                else:
                    value_length, p = read_varint(d, p)
                value_start = p
                if value_length >= 0:
                    p += value_length
                    if p > rec_end:
                        raise CorruptRecordError(f"value length {value_length} overruns the record",
                                                 position=value_start)
                elif value_length != -1:
                    raise CorruptRecordError(f"invalid value length {value_length}", position=p)
                value_end = p
                b = d[p]
                if b < 0x80:
                    header_count = one_byte[b]
                    p += 1
                else:
                    header_count, p = read_varint(d, p)
                if header_count:
                    if header_count < 0 or header_count > rec_end - p:
                        raise CorruptRecordError(f"invalid header count {header_count}", position=p)
                    p = self._headers(d, p, rec_end, header_count, keep and include_headers)
                if p != rec_end:
                    raise CorruptRecordError(
                        f"record declares {length} bytes but its fields take {p - rec_end + length}", position=rec)
                if not keep:
                    continue
                offsets_append(offset)
                timestamps_append(base_timestamp + timestamp_delta)
                cuts_extend((key_start, key_end, value_start, value_end))
                if key_length < 0:
                    null_keys.append(row)
                if value_length < 0:
                    null_values.append(row)
                if include_headers:
                    header_offsets_append(len(self.header_cuts) >> 2)
                row += 1
        except IndexError:
            raise CorruptRecordError("record truncated", position=rec) from None
        if p != end:
            raise CorruptRecordError(f"{end - p} bytes left over after {count} records", position=p)
        kept = row - first_row
        self.timestamp_types.extend(array("i", [timestamp_type]) * kept)
        if log_append_time is not None:  # every record takes the batch's time, as Kafka's consumers read it
            self.timestamps[first_row:] = array("q", [log_append_time]) * kept

    def _headers(self, d: BytesLike, p: int, rec_end: int, count: int, keep: bool) -> int:
        """Walk ``count`` headers from ``p``; returns the position after them. Header keys are checked
        as UTF-8 when the column is built, in one pass."""
        cuts_extend = self.header_cuts.extend
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
            if keep:
                if value_length < 0:
                    self.null_header_values.append(len(self.header_cuts) >> 2)
                cuts_extend((key_start, key_end, value_start, p))
        return p
