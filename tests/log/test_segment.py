"""LogSegment: append/read/index maintenance, timestamp lookup, recovery, truncation, and golden files
whose bytes are built by hand from Kafka's published v2 batch and index formats."""

from __future__ import annotations

import os
import struct

import crc32c
import pytest

from tieredlog.formats.index import CorruptIndexError
from tieredlog.log.segment import LogSegment, SegmentOffsetOverflowError
from tieredlog.records.batch import read_header


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def kafka_batch(base_offset: int, timestamps: list[int], value_len: int = 10, epoch: int = 0) -> bytes:
    """A v2 batch laid out by hand from Kafka's format spec: null keys, fixed-size values, no headers."""
    body = bytearray()
    for i, ts in enumerate(timestamps):
        rec = b"\x00" + _zigzag(ts - timestamps[0]) + _zigzag(i) + _zigzag(-1) + _zigzag(value_len)
        rec += bytes([65 + i % 26]) * value_len + _zigzag(0)
        body += _zigzag(len(rec)) + rec
    after_crc = struct.pack(
        ">hiqqqhii", 0, len(timestamps) - 1, timestamps[0], max(timestamps), -1, -1, -1, len(timestamps)
    ) + bytes(body)
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # partitionLeaderEpoch + magic + crc + rest
    return struct.pack(">qiibI", base_offset, batch_length, epoch, 2, crc) + after_crc


def headers_of(buf: bytes):
    out, pos = [], 0
    while pos < len(buf):
        h = read_header(buf, pos)
        out.append(h)
        pos += h.size
    return out


# Eight 3-record batches from offset 100; per-batch max timestamps chosen so the max does not always grow.
BATCH_MAX_TS = [1000, 1005, 1003, 1010, 1010, 1020, 1030, 1040]


def golden_batches() -> list[bytes]:
    return [kafka_batch(100 + 3 * i, [ts - 2, ts, ts - 1]) for i, ts in enumerate(BATCH_MAX_TS)]


def test_golden_batch_size_is_uniform():
    sizes = {len(b) for b in golden_batches()}
    assert len(sizes) == 1


def golden_expectations(size: int) -> tuple[bytes, bytes]:
    """The .index/.timeindex Kafka writes for golden_batches() with index.interval.bytes == batch size.

    Worked by hand: an entry is due when the bytes since the last entry exceed the interval, i.e. at
    batches 2, 4 and 6 (keyed by each batch's last offset 108, 114, 120 at positions 2S, 4S, 6S). The
    time index records the max timestamp so far at those points: 1005 first seen at offset 105 (batch 1),
    1010 at 111 (batch 3; batch 4 only ties it), 1030 at 120 (batch 6); the roll adds 1040 at 123.
    """
    index = struct.pack(">ii", 8, 2 * size) + struct.pack(">ii", 14, 4 * size) + struct.pack(">ii", 20, 6 * size)
    timeindex = struct.pack(">qi", 1005, 5) + struct.pack(">qi", 1010, 11) + struct.pack(">qi", 1030, 20) + struct.pack(
        ">qi", 1040, 23
    )
    return index, timeindex


def make_segment(tmp_path, base=100, interval=4096, max_index_size=4096, active=True) -> LogSegment:
    return LogSegment(
        tmp_path, base, index_interval_bytes=interval, max_index_size=max_index_size, active=active
    )


def test_golden_indexes_written_by_append(tmp_path):
    batches = golden_batches()
    size = len(batches[0])
    seg = make_segment(tmp_path, interval=size)
    for b in batches:
        seg.append(b, headers_of(b))
    seg.close()
    index, timeindex = golden_expectations(size)
    assert (tmp_path / "00000000000000000100.index").read_bytes() == index
    assert (tmp_path / "00000000000000000100.timeindex").read_bytes() == timeindex
    assert (tmp_path / "00000000000000000100.log").read_bytes() == b"".join(batches)


def test_golden_indexes_written_by_one_multi_batch_append_and_by_recovery(tmp_path):
    batches = golden_batches()
    size = len(batches[0])
    seg = make_segment(tmp_path, interval=size)
    data = b"".join(batches)
    seg.append(data, headers_of(data))
    seg.close()
    index, timeindex = golden_expectations(size)
    assert seg.offset_index_path.read_bytes() == index
    assert seg.time_index_path.read_bytes() == timeindex
    seg2 = make_segment(tmp_path, interval=size, active=False)
    assert seg2.recover() == 0
    seg2.close()
    assert seg2.offset_index_path.read_bytes() == index
    assert seg2.time_index_path.read_bytes() == timeindex


def test_kafka_written_segment_loads_and_reads(tmp_path):
    """Files laid out by hand as Kafka would leave them after a clean shutdown."""
    batches = golden_batches()
    size = len(batches[0])
    index, timeindex = golden_expectations(size)
    (tmp_path / "00000000000000000100.log").write_bytes(b"".join(batches))
    (tmp_path / "00000000000000000100.index").write_bytes(index)
    (tmp_path / "00000000000000000100.timeindex").write_bytes(timeindex)
    seg = make_segment(tmp_path, interval=size, active=False)
    seg.sanity_check()
    assert seg.next_offset == 124
    assert seg.largest_timestamp == 1040
    for offset in range(100, 124):
        sl, first = seg.read(offset, 1, min_one_message=True)
        i = (offset - 100) // 3
        assert (sl.position, sl.size, first) == (i * size, size, 100 + 3 * i)
        assert sl.read_bytes() == batches[i]
    assert seg.read(124, 100) is None
    # Timestamp lookups: first batch whose max timestamp is >= the target.
    expect = {0: 100, 1000: 100, 1001: 103, 1004: 103, 1005: 103, 1006: 109, 1010: 109, 1011: 115, 1040: 121}
    for ts, base in expect.items():
        pos, h = seg.find_offset_by_timestamp(ts)
        assert h.base_offset == base, ts
    assert seg.find_offset_by_timestamp(1041) is None


def test_read_caps_and_max_position(tmp_path):
    batches = golden_batches()
    size = len(batches[0])
    seg = make_segment(tmp_path)
    data = b"".join(batches)
    seg.append(data, headers_of(data))
    sl, _ = seg.read(100, 10)
    # Kafka's slice would be 10 bytes of a batch: nothing whole is sent, the 10 bytes are what the
    # fetch counts
    assert (sl.size, sl.fetch_size) == (0, 10)
    sl, _ = seg.read(100, 10, min_one_message=True)
    assert sl.size == size
    sl, _ = seg.read(103, 10_000, max_position=3 * size)
    assert (sl.position, sl.size) == (size, 2 * size)
    with sl.open() as f:
        assert os.pread(f.fileno(), sl.size, sl.position) == b"".join(batches[1:3])


@pytest.mark.parametrize("interval", [1, 2, 10**6], ids=["indexed", "sparse-index", "unindexed"])
def test_read_sends_whole_batches_and_counts_kafkas_slice(tmp_path, interval):
    batches = golden_batches()
    size = len(batches[0])
    seg = make_segment(tmp_path, interval=interval * size)
    data = b"".join(batches)
    seg.append(data, headers_of(data))
    # a max that ends inside the fourth batch: three whole batches go, Kafka's slice is counted
    sl, first = seg.read(100, 3 * size + 7)
    assert (first, sl.position, sl.size, sl.fetch_size) == (100, 0, 3 * size, 3 * size + 7)
    sl, first = seg.read(104, 2 * size - 1, min_one_message=True)
    assert (first, sl.position, sl.size, sl.fetch_size) == (103, size, size, 2 * size - 1)
    # up to the read's end (a high watermark inside the segment, or its end): nothing to cut
    sl, _ = seg.read(103, 10 * size, max_position=5 * size)
    assert (sl.position, sl.size, sl.fetch_size) == (size, 4 * size, 4 * size)
    sl, _ = seg.read(100, 10 * size)
    assert (sl.size, sl.fetch_size) == (len(data), len(data))


def test_append_rejects_offsets_outside_relative_range(tmp_path):
    seg = make_segment(tmp_path, base=0)
    far = kafka_batch(2**31, [5])
    with pytest.raises(SegmentOffsetOverflowError):
        seg.append(far, headers_of(far))
    below = kafka_batch(0, [5])
    seg2 = make_segment(tmp_path / "b", base=10)
    with pytest.raises(SegmentOffsetOverflowError):
        seg2.append(below, headers_of(below))


def test_should_roll_conditions(tmp_path):
    seg = make_segment(tmp_path, base=0, max_index_size=8 * 4)
    b = kafka_batch(0, [1000])
    common = dict(max_offset_in_messages=1, now_ms=0, segment_bytes=10_000, segment_ms=10_000)
    assert not seg.should_roll(messages_size=len(b), max_timestamp_in_messages=1000, **common)
    seg.append(b, headers_of(b))
    # Size: the next batch does not fit.
    assert seg.should_roll(messages_size=10_000 - len(b) + 1, max_timestamp_in_messages=1000, **common)
    assert not seg.should_roll(messages_size=10_000 - len(b), max_timestamp_in_messages=1000, **common)
    # Age: measured from the first batch's timestamp.
    assert seg.should_roll(messages_size=1, max_timestamp_in_messages=1000 + 10_001, **common)
    assert not seg.should_roll(messages_size=1, max_timestamp_in_messages=1000 + 10_000, **common)
    # Relative offset overflow.
    assert seg.should_roll(messages_size=1, max_timestamp_in_messages=1000, **{**common, "max_offset_in_messages": 2**31})
    # Jitter shortens the age limit.
    seg.roll_jitter_ms = 5
    assert seg.should_roll(messages_size=1, max_timestamp_in_messages=1000 + 9_996, **common)


def test_full_offset_index_requests_roll(tmp_path):
    roll_args = dict(messages_size=1, max_timestamp_in_messages=-1, max_offset_in_messages=9, now_ms=0,
                     segment_bytes=10**9, segment_ms=10**9)
    seg = make_segment(tmp_path, base=0, interval=0, max_index_size=8 * 3)
    for i in range(3):  # no timestamps: only the offset index fills (batches 1 and 2 are indexed)
        b = kafka_batch(i, [-1])
        seg.append(b, headers_of(b))
    assert seg.offset_index.entries == 2 and not seg.should_roll(**roll_args)
    b = kafka_batch(3, [-1])
    seg.append(b, headers_of(b))
    assert seg.offset_index.is_full and seg.should_roll(**roll_args)
    # The time index (12-byte entries, last slot reserved) fills after a single entry here.
    seg2 = make_segment(tmp_path / "t", base=0, interval=0, max_index_size=8 * 3)
    for i in range(2):
        b = kafka_batch(i, [1000 + i])
        seg2.append(b, headers_of(b))
    assert seg2.time_index.is_full and not seg2.offset_index.is_full
    assert seg2.should_roll(**roll_args)


def test_truncate_to_drops_whole_batches_and_index_entries(tmp_path):
    batches = golden_batches()
    size = len(batches[0])
    seg = make_segment(tmp_path, interval=size)
    data = b"".join(batches)
    seg.append(data, headers_of(data))
    assert seg.truncate_to(113) == 4 * size  # 113 lives in batch 4 (112..114): batches 4..7 go whole
    assert seg.next_offset == 112 and seg.size == 4 * size
    assert seg.offset_index.lookup(10**9) == (108, 2 * size)
    assert seg.time_index.last_entry == (1010, 111)
    b = kafka_batch(112, [2000])
    seg.append(b, headers_of(b))
    assert seg.next_offset == 113
    assert seg.read(112, 1, min_one_message=True)[0].read_bytes() == b


def test_recover_cuts_torn_tail_and_garbage(tmp_path):
    batches = golden_batches()
    seg = make_segment(tmp_path)
    data = b"".join(batches)
    seg.append(data, headers_of(data))
    seg.close()
    with open(seg.log_path, "ab") as f:
        f.write(batches[0][:30])  # torn write
    seg = make_segment(tmp_path, active=False)
    assert seg.recover() == 30
    assert seg.size == len(data) and seg.next_offset == 124
    with open(seg.log_path, "r+b") as f:
        f.seek(len(batches[0]) * 5 + 40)
        f.write(b"\xff" * 8)  # garbage inside batch 5: CRC no longer matches
    seg = make_segment(tmp_path, active=False)
    assert seg.recover() == len(batches[0]) * 3
    assert seg.next_offset == 115


def test_missing_or_corrupt_index_detected(tmp_path):
    batches = golden_batches()
    size = len(batches[0])
    seg = make_segment(tmp_path, interval=size)
    data = b"".join(batches)
    seg.append(data, headers_of(data))
    seg.close()
    good_index = seg.offset_index_path.read_bytes()
    seg.offset_index_path.unlink()
    seg = make_segment(tmp_path, interval=size, active=False)
    with pytest.raises(CorruptIndexError):
        seg.sanity_check()
    seg.rebuild_indexes()
    seg.close()
    assert seg.offset_index_path.read_bytes() == good_index
    seg.offset_index_path.write_bytes(struct.pack(">ii", 90, 8))  # points past the last offset
    seg = make_segment(tmp_path, interval=size, active=False)
    with pytest.raises(CorruptIndexError):
        seg.sanity_check()


def test_deleted_suffix_rename_and_delete(tmp_path):
    seg = make_segment(tmp_path)
    b = kafka_batch(100, [1])
    seg.append(b, headers_of(b))
    seg.close()
    seg.change_file_suffix(".deleted")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00000000000000000100.index.deleted", "00000000000000000100.log.deleted",
                     "00000000000000000100.timeindex.deleted"]
    seg.delete()
    assert list(tmp_path.iterdir()) == []


def test_a_read_never_recreates_a_deleted_segment_file(tmp_path):
    """A fetch holding a slice of a segment that retention deletes meanwhile gets an error; it must not
    leave an empty ``.log`` behind under the old name (the next load would take it for a segment)."""
    seg = make_segment(tmp_path)
    b = kafka_batch(100, [1, 2])
    seg.append(b, headers_of(b))
    fslice, _ = seg.read(100, 1 << 20)
    seg.delete()
    with pytest.raises(FileNotFoundError):
        fslice.read_bytes()
    with pytest.raises(FileNotFoundError):
        seg.read_bytes(0, 10)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="needs os.RWF_NOWAIT (Linux 4.14+)")
def test_nowait_header_read_raises_pages_not_cached_instead_of_waiting(tmp_path, monkeypatch):
    from tieredlog.log import segment as segment_mod

    batches = golden_batches()
    seg = make_segment(tmp_path)
    data = b"".join(batches)
    seg.append(data, headers_of(data))
    warm = seg.translate_offset(103)
    assert seg.translate_offset(103, nowait=True) == warm  # cached (just written): same answer
    real_preadv = os.preadv
    answers = iter([BlockingIOError(11, "EAGAIN"), 61])  # not cached at all; then a short read

    def preadv(fd, buffers, offset, flags=0):
        assert flags & os.RWF_NOWAIT
        a = next(answers)
        if isinstance(a, BaseException):
            raise a
        real_preadv(fd, buffers, offset, flags)
        return a

    monkeypatch.setattr(segment_mod.os, "preadv", preadv)
    for _ in range(2):
        with pytest.raises(segment_mod.PagesNotCached):
            seg.read(103, 10_000, nowait=True)
    assert seg.translate_offset(103) == warm  # the blocking read never asks preadv
    monkeypatch.setattr(segment_mod, "_NOWAIT", 0)  # an OS without RWF_NOWAIT: nowait reads block
    assert seg.translate_offset(103, nowait=True) == warm
