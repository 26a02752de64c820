"""The Spark reader's columnar decoder (spark_readers.decoder / spark_readers.columns) against
tieredlog.records.decode_batch, the record-object decoder, on the same bytes: all five codecs,
headers, null keys, values and header values, control batches, aborted transactions, LogAppendTime,
compacted offset gaps, emptied batches, multi-byte varints, offset ranges."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from spark_readers.decoder import CorruptSegmentError, Source, decode_record_batches, decode_records, kafka_schema
from tieredlog.formats.varint import read_varint
from tieredlog.records.batch import CRC_OFFSET, compute_crc, iter_headers
from tieredlog.records.record import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    build_empty_batch,
    decode_batch,
)

TOPIC = "orders"
TS0 = 1_700_000_000_000
CODECS = (0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd
PRODUCER = 7  # the transactional producer of the aborted batches below


def record(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]:
    key = None if i % 7 == 3 else b"k%d" % i
    # values from none to 20 KiB: one-, two- and three-byte length varints
    value = None if i % 11 == 5 else bytes([i % 251]) * (i * 797 % 20_000 if i % 4 == 0 else i % 60)
    headers: list[tuple[str, bytes | None]] = [] if i % 3 else [("h", b"%d" % i), ("nul", None), ("é", b"")]
    # timestamps out of order within a batch (negative deltas) and far apart (long varints)
    return key, value, headers, TS0 + (i % 5) * 3_000_000 - (i % 2) * 70


def segment() -> tuple[bytes, list[tuple[int, int, int]]]:
    """Batches of every codec, control batches, an aborted transaction, a LogAppendTime batch, a
    compacted batch with offset gaps and an emptied batch; and the aborted transaction."""
    parts: list[bytes] = []
    offset = 0
    for codec in CODECS:
        parts.append(build_batch([record(offset + i) for i in range(23)], base_offset=offset, codec=codec))
        offset += 23
    parts.append(build_batch([record(offset + i) for i in range(5)], base_offset=offset, codec=4,
                             producer_id=PRODUCER, producer_epoch=0, base_sequence=0, is_transactional=True))
    aborted_first = offset
    offset += 5
    parts.append(build_control_batch(CONTROL_ABORT, PRODUCER, 0, offset, TS0))
    aborted = [(PRODUCER, aborted_first, offset)]
    offset += 1
    parts.append(build_batch([record(offset + i) for i in range(4)], base_offset=offset, codec=2,
                             producer_id=PRODUCER, producer_epoch=0, base_sequence=5, is_transactional=True))
    offset += 4
    parts.append(build_control_batch(CONTROL_COMMIT, PRODUCER, 0, offset, TS0))
    offset += 1
    parts.append(build_batch([record(offset + i) for i in range(6)], base_offset=offset, timestamp_type=1))
    offset += 6
    kept = [offset + i for i in (0, 3, 4, 9)]  # what the cleaner left of ten records
    parts.append(build_batch([Record(o, TS0 + o, b"k%d" % o, b"v", []) for o in kept], base_offset=offset, codec=3))
    offset += 10
    parts.append(build_empty_batch(offset, offset + 2, 3, 0, 0, -1, 0, TS0, False, False))
    offset += 3
    parts.append(build_batch([record(offset + i) for i in range(9)], base_offset=offset))
    return b"".join(parts), aborted


def expected(data: bytes, lo: int, hi: int, aborted: list[tuple[int, int, int]]) -> list[tuple]:
    """The rows decode_batch gives, as the reader must return them."""
    rows = []
    for pos, h in iter_headers(data):
        if h.is_control or (h.is_transactional and any(
                p == h.producer_id and first <= h.base_offset and h.last_offset < marker
                for p, first, marker in aborted)):
            continue
        for r in decode_batch(data, pos)[1]:
            if lo <= r.offset < hi:
                rows.append((r.key, r.value, TOPIC, 3, r.offset, r.timestamp * 1000, h.timestamp_type,
                             [{"key": k, "value": v} for k, v in r.headers] or None))
    return rows


def rows(batch: pa.RecordBatch) -> list[tuple]:
    batch.validate(full=True)
    columns = [batch.column(name).to_pylist() for name in ("key", "value", "topic", "partition", "offset")]
    columns.append(batch.column("timestamp").cast(pa.int64()).to_pylist())
    columns.append(batch.column("timestampType").to_pylist())
    if "headers" in batch.schema.names:
        columns.append(batch.column("headers").to_pylist())
    return list(zip(*columns))


@pytest.mark.parametrize("lo,hi", [(0, 1 << 62), (0, 0), (17, 60), (30, 31), (115, 131), (140, 1 << 62)])
def test_columns_equal_decode_batch(lo: int, hi: int) -> None:
    data, aborted = segment()
    out = decode_records(data, Source(TOPIC, 3, "x.log", 0), lo, hi, True, aborted)
    assert out.schema == kafka_schema(True)
    assert rows(out) == expected(data, lo, hi, aborted)
    assert (out.num_rows > 0) == (hi > lo)


@pytest.mark.parametrize("batch_bytes", [1, 3000, 1 << 30])
def test_batches_of_a_few_bytes_each_give_the_same_rows(batch_bytes: int) -> None:
    data, aborted = segment()
    source = Source(TOPIC, 3, "x.log", 0)
    whole = decode_records(data, source, 20, 140, True, aborted)
    parts = list(decode_record_batches(data, source, 20, 140, True, aborted, batch_bytes))
    assert pa.Table.from_batches(parts).equals(pa.Table.from_batches([whole]))
    assert len(parts) > 1 if batch_bytes < 3001 else len(parts) == 1
    empty = list(decode_record_batches(data, source, 5000, 5000, True, aborted, batch_bytes))
    assert [b.num_rows for b in empty] == [0] and empty[0].schema == kafka_schema(True)


def test_uncompressed_segments_are_gathered_from_their_own_bytes() -> None:
    """No codec: the zero-copy arena; also without headers, and read_uncommitted."""
    batches = [build_batch([record(o + i) for i in range(50)], base_offset=o) for o in range(0, 150, 50)]
    batches.append(build_control_batch(CONTROL_COMMIT, 1, 0, 150, TS0))
    batches += [build_batch([record(o + i) for i in range(50)], base_offset=o) for o in range(151, 500, 50)]
    data = b"".join(batches)
    out = decode_records(data, Source(TOPIC, 3, "x.log", 0), 10, 480, False)
    assert out.schema == kafka_schema(False)
    want = [row[:7] for row in expected(data, 10, 480, [])]
    assert rows(out) == want


def test_random_records_of_every_codec() -> None:
    rng = random.Random(12)
    parts = []
    offset = 0
    for n in range(40):
        recs = []
        for _ in range(rng.randint(1, 40)):
            size = rng.choice([0, 1, 63, 64, 8191, 8192, 70_000])
            headers = [(rng.choice(["a", "bé", ""]), rng.choice([None, b"", b"x" * 200]))
                       for _ in range(rng.choice([0, 0, 1, 70]))]
            recs.append((rng.choice([None, b"", b"key" * 30]), rng.choice([None, rng.randbytes(size)]), headers,
                         TS0 + rng.randint(-(1 << 40), 1 << 40)))
        parts.append(build_batch(recs, base_offset=offset, codec=CODECS[n % 5], timestamp_type=n % 7 == 6))
        offset += len(recs)
    data = b"".join(parts)
    assert rows(decode_records(data, Source(TOPIC, 3, "x.log", 0), 0, offset, True)) == expected(data, 0, offset, [])


def test_corrupt_records_name_the_object_and_byte() -> None:
    good = build_batch([record(i) for i in range(3)], base_offset=0)
    bad_key = bytearray(build_batch([(b"k", b"v", [("\u00ff", b"1")])], base_offset=3))
    at = bad_key.index("\u00ff".encode())
    bad_key[at:at + 2] = b"\xff\xfe"  # not UTF-8; the CRC is recomputed below as a producer would send it
    bad_key[CRC_OFFSET:CRC_OFFSET + 4] = compute_crc(bad_key, 0, len(bad_key)).to_bytes(4, "big")
    source = Source(TOPIC, 0, "orders-x/0/00000000000000000000-abc.log", 4096)
    with pytest.raises(CorruptSegmentError, match=rf"abc.log: corrupt batch at byte {4096 + len(good)}: a header key "
                                                  r"of the record at offset 3 is not valid UTF-8"):
        decode_records(good + bytes(bad_key), source, 0, 100, True)
    # a record whose length overruns its batch, uncompressed: the byte of the record is named
    short = bytearray(good)
    short[61] += 2  # the first record's length varint (zigzag: +1)
    short[CRC_OFFSET:CRC_OFFSET + 4] = compute_crc(short, 0, len(short)).to_bytes(4, "big")
    with pytest.raises(CorruptSegmentError, match=r"abc.log: corrupt batch at byte 4096: .* at byte 4157"):
        decode_records(bytes(short), source, 0, 100, False)


def test_runs_of_records_of_one_size() -> None:
    """Records of one size but where the offset delta's varint grows (at 64 and 8192) or a value
    differs: the record starts guessed for runs of one size, then checked, give the same rows."""
    batches = [build_batch([(b"k", b"v" * 100, [], TS0) for _ in range(9000)], base_offset=0)]
    batches.append(build_batch([(b"k", b"v" * (5 if i == 150 else 100), [], TS0 + i) for i in range(300)],
                               base_offset=9000))
    batches.append(build_batch([(b"k", b"v" * 100, [], TS0)], base_offset=9300))
    data = b"".join(batches)
    want = [row[:7] for row in expected(data, 0, 1 << 62, [])]
    assert len(want) == 9301
    assert rows(decode_records(data, Source(TOPIC, 3, "x.log", 0), 0, 1 << 62, False)) == want


def test_a_wrong_length_among_records_of_one_size_is_named() -> None:
    batch = bytearray(build_batch([(b"k", b"v" * 10, [], TS0) for _ in range(100)], base_offset=0))
    at, p = 0, 61  # the records section starts after the 61-byte batch header
    for _ in range(70):
        at = p
        length, p = read_varint(batch, p)
        p += length
    batch[at] += 2  # record 70 declares one byte more (zigzag)
    batch[CRC_OFFSET:CRC_OFFSET + 4] = compute_crc(batch, 0, len(batch)).to_bytes(4, "big")
    with pytest.raises(CorruptSegmentError, match=rf"x.log: corrupt batch at byte 0: .* at byte {at}$"):
        decode_records(bytes(batch), Source(TOPIC, 3, "x.log", 0), 0, 1 << 62, False)
