"""LogBatches: a partition log read back as decoded batches (the internal topics' replay)."""

from __future__ import annotations

import pytest

from tieredlog.log.batch_reader import LogBatches
from tieredlog.log.config import LogConfig
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import HEADER_SIZE
from tieredlog.records.record import build_batch


def make_log(tmp_path, batches: int = 6, per_batch: int = 3) -> UnifiedLog:
    plog = UnifiedLog(tmp_path / "t-0", LogConfig(segment_bytes=200))
    for b in range(batches):
        plog.append_as_leader(build_batch([(None, f"{b}.{i}".encode()) for i in range(per_batch)]), 0)
    return plog


def values(batches: LogBatches) -> list[bytes]:
    return [bytes(r.value) for _, records in batches for r in records]


def test_every_record_from_an_offset_in_order_across_segments(tmp_path):
    plog = make_log(tmp_path)
    assert plog.num_segments > 1
    everything = values(LogBatches(plog, 0))
    assert everything == [f"{b}.{i}".encode() for b in range(6) for i in range(3)]
    walk = LogBatches(plog, 4)  # inside the second batch: its first record is not wanted
    assert values(walk) == everything[4:] and walk.offset == plog.log_end_offset == 18
    bounded = LogBatches(plog, 0, end_offset=7)  # whole chunks: it stops at the first read past the bound
    assert values(bounded)[:7] == everything[:7] and bounded.offset >= 7


def test_a_corrupt_batch_is_reported_once_and_skipped(tmp_path):
    plog = make_log(tmp_path)
    seg = plog.segments[0]
    pos, h = list(seg.iter_headers(0))[1]  # offsets 3..5
    with open(seg.log_path, "r+b") as f:
        f.seek(pos + HEADER_SIZE + 2)
        f.write(b"\xff")  # inside the records: the CRC no longer matches, the header still reads
    seen = []
    walk = LogBatches(plog, 0, on_corrupt=lambda offset, header, exc: seen.append((offset, header.base_offset)))
    got = values(walk)
    assert seen == [(3, 3)]
    assert got == [f"{b}.{i}".encode() for b in range(6) if b != 1 for i in range(3)]
    assert walk.offset == 18


def test_a_failed_read_raises_and_says_where(tmp_path):
    plog = make_log(tmp_path)

    class Failing:
        log_start_offset = 0
        log_end_offset = 18

        def read(self, offset, *args):
            if offset >= 9:
                raise OSError(5, "Input/output error")
            return plog.read(offset, 100, *args[1:])  # small reads, so the walk gets to offset 9

    walk = LogBatches(Failing(), 0)
    got = []
    with pytest.raises(OSError):
        for _, records in walk:
            got.extend(r.offset for r in records)
    assert walk.offset == 9 and got == list(range(9))
