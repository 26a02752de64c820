"""Offset, time and transaction indexes: Kafka's byte layout, preallocation, trim, lookups, truncation."""

from __future__ import annotations

import struct

import pytest

from tieredlog.formats.index import CorruptIndexError
from tieredlog.formats.txn_index import AbortedTxn
from tieredlog.log.index import (
    IndexOffsetError,
    MappedOffsetIndex,
    MappedTimeIndex,
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
    read_txn_index,
)


def test_offset_index_preallocates_rounded_down_and_trims(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100, max_index_size=8 * 10 + 5, writable=True)
    assert path.stat().st_size == 80  # rounded down to whole 8-byte entries
    assert idx.max_entries == 10
    idx.append(105, 300)
    idx.append(110, 700)
    assert path.stat().st_size == 80
    idx.trim_to_valid_size()
    assert path.read_bytes() == struct.pack(">iiii", 5, 300, 10, 700)


def test_offset_index_lookup_is_floor(tmp_path):
    idx = OffsetIndex(tmp_path / "a.index", 1000, 4096, writable=True)
    for rel, pos in [(3, 100), (9, 250), (20, 900)]:
        idx.append(1000 + rel, pos)
    assert idx.lookup(999) == (1000, 0)
    assert idx.lookup(1002) == (1000, 0)
    assert idx.lookup(1003) == (1003, 100)
    assert idx.lookup(1015) == (1009, 250)
    assert idx.lookup(10**12) == (1020, 900)


def test_offset_index_rejects_non_increasing_and_full(tmp_path):
    idx = OffsetIndex(tmp_path / "a.index", 0, 16, writable=True)
    idx.append(5, 10)
    with pytest.raises(IndexOffsetError):
        idx.append(5, 20)
    idx.append(6, 20)
    assert idx.is_full
    with pytest.raises(IndexOffsetError):
        idx.append(7, 30)


def test_offset_index_reload_and_truncate(tmp_path):
    path = tmp_path / "a.index"
    idx = OffsetIndex(path, 0, 4096, writable=True)
    for i in range(1, 6):
        idx.append(i * 10, i * 100)
    idx.close()
    again = OffsetIndex(path, 0, 4096)
    assert again.entries == 5
    assert again.lookup(35) == (30, 300)
    again.truncate_to(30)  # removes entries with offset >= 30
    assert again.entries == 2 and again.is_writable
    assert again.lookup(1000) == (20, 200)
    again.close()
    assert path.read_bytes() == struct.pack(">iiii", 10, 100, 20, 200)


def test_offset_index_sanity_check(tmp_path):
    path = tmp_path / "a.index"
    path.write_bytes(struct.pack(">ii", 5, 10) + b"\x00\x00")
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 4096).sanity_check()
    path.write_bytes(bytes(64))  # preallocated zeros left by a crash
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 4096).sanity_check()
    path.write_bytes(struct.pack(">iiii", 5, 10, 9, 9000))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 4096).sanity_check(log_size=1000)
    OffsetIndex(path, 0, 4096).sanity_check(log_size=10_000)


def test_time_index_appends_only_growing_timestamps_and_reserves_last_slot(tmp_path):
    path = tmp_path / "a.timeindex"
    idx = TimeIndex(path, 50, max_index_size=12 * 3, writable=True)
    idx.maybe_append(1000, 52)
    idx.maybe_append(1000, 55)  # same timestamp: no entry
    with pytest.raises(IndexOffsetError):
        idx.maybe_append(999, 56)
    idx.maybe_append(1005, 57)
    assert idx.is_full  # 2 of 3: the last slot is kept for the roll
    with pytest.raises(IndexOffsetError):
        idx.maybe_append(1010, 58)
    idx.maybe_append(1010, 58, skip_full_check=True)
    idx.trim_to_valid_size()
    assert path.read_bytes() == struct.pack(">qiqiqi", 1000, 2, 1005, 7, 1010, 8)
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(1004) == (1000, 52)
    assert idx.lookup(1005) == (1005, 57)
    assert idx.last_entry == (1010, 58)


def test_time_index_truncate(tmp_path):
    idx = TimeIndex(tmp_path / "a.timeindex", 0, 4096, writable=True)
    for ts, off in [(10, 1), (20, 5), (30, 9)]:
        idx.maybe_append(ts, off)
    idx.truncate_to(5)
    assert idx.entries == 1 and idx.last_entry == (10, 1)


def test_txn_index_round_trip_and_collect(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    idx = TransactionIndex(path, 0)
    assert not path.exists()  # created only when first needed
    a = AbortedTxn(producer_id=7, first_offset=3, last_offset=10, last_stable_offset=3)
    b = AbortedTxn(producer_id=8, first_offset=12, last_offset=20, last_stable_offset=25)
    idx.append(a)
    idx.append(b)
    idx.close()
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 7, 3, 10, 3) + struct.pack(">hqqqq", 0, 8, 12, 20, 25)
    again = TransactionIndex(path, 0)
    assert again.entries() == [a, b]
    res = again.collect_aborted(11, 30)
    assert res.aborted == [b] and res.is_complete is False
    res = again.collect_aborted(0, 5)
    assert res.aborted == [a] and res.is_complete is True  # b's LSO 25 >= 5: search done
    with pytest.raises(IndexOffsetError):
        again.append(AbortedTxn(9, 1, 15, 1))
    again.truncate_to(15)
    assert again.entries() == [a] and path.stat().st_size == 34


def test_txn_index_corrupt_size(tmp_path):
    path = tmp_path / "a.txnindex"
    path.write_bytes(bytes(35))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 0).sanity_check()


def test_reset_drops_entries_without_reading_the_file(tmp_path, monkeypatch):
    """Recovery resets the indexes it rebuilds; a crashed active segment's index is megabytes of
    preallocated slots that must not be decoded only to be thrown away."""
    path = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(path, 0, 8 * 100, writable=True)
    for i in range(1, 6):
        idx.append(i * 10, i * 100)
    idx.flush()
    again = OffsetIndex(path, 0, 8 * 100)  # as loaded after a crash: nothing read yet, file untrimmed

    def boom():
        raise AssertionError("reset read the old index")

    monkeypatch.setattr(again, "_load", boom)
    again.reset()
    assert again.entries == 0 and again.is_writable
    assert path.read_bytes() == bytes(800)  # no stale entry survives a crash during the rebuild
    again.append(7, 50)
    again.trim_to_valid_size()
    assert path.read_bytes() == struct.pack(">ii", 7, 50)


def test_time_index_reload_keeps_64_bit_timestamps(tmp_path):
    path = tmp_path / "00000000000000000000.timeindex"
    idx = TimeIndex(path, 0, 12 * 50, writable=True)
    entries = [(5, 1), (1 << 40, 2), ((1 << 62) + 3, (1 << 31) - 1)]
    for ts, off in entries:
        idx.maybe_append(ts, off)
    idx.close()
    again = TimeIndex(path, 0, 12 * 50)
    assert [again.lookup(ts) for ts, _ in entries] == entries
    assert again.last_entry == entries[-1]
    assert again.file_bytes() == path.read_bytes()


@pytest.mark.parametrize("trimmed", [True, False])
def test_mapped_views_answer_as_the_writable_indexes(tmp_path, trimmed):
    # The remote index cache reads a segment's uploaded indexes through these views: the same file,
    # the same answers, also when the file still has its preallocated zero tail (not trimmed at roll).
    off = OffsetIndex(tmp_path / "00000000000000001000.index", 1000, 8 * 64, writable=True)
    tim = TimeIndex(tmp_path / "00000000000000001000.timeindex", 1000, 12 * 64, writable=True)
    for i in range(1, 40):
        off.append(1000 + 3 * i, 100 * i)
        tim.maybe_append(5_000_000_000 + 7 * i, 1000 + 3 * i)
    if trimmed:
        off.trim_to_valid_size()
        tim.trim_to_valid_size()
    moff, mtim = MappedOffsetIndex(off.path, 1000), MappedTimeIndex(tim.path, 1000)
    assert moff.entries == off.entries == 39 and mtim.entries == tim.entries == 39
    for target in range(990, 1130):
        assert moff.lookup(target) == off.lookup(target)
    for ts in range(5_000_000_000 - 3, 5_000_000_000 + 300):
        assert mtim.lookup(ts) == tim.lookup(ts)


def test_mapped_views_refuse_what_no_segment_writes(tmp_path):
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">ii", 5, 300) + b"\0" * 3)
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        MappedOffsetIndex(path, 0)
    path.write_bytes(struct.pack(">iiii", 9, 300, 5, 200))
    with pytest.raises(CorruptIndexError, match="out of order"):
        MappedOffsetIndex(path, 0)
    tpath = tmp_path / "x.timeindex"
    tpath.write_bytes(struct.pack(">qiqi", 50, 1, 40, 2))
    with pytest.raises(CorruptIndexError, match="out of order"):
        MappedTimeIndex(tpath, 0)
    txn = tmp_path / "x.txnindex"
    txn.write_bytes(AbortedTxn(7, 10, 20, 10).to_bytes())
    assert read_txn_index(txn) == [AbortedTxn(7, 10, 20, 10)]
    txn.write_bytes(b"\0\1" + AbortedTxn(7, 10, 20, 10).to_bytes()[2:])
    with pytest.raises(CorruptIndexError, match="unknown version 1"):
        read_txn_index(txn)
