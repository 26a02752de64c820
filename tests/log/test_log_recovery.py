"""Recovery after an unclean shutdown: torn tails and garbage after the last flushed batch, missing or
corrupt indexes, producer state and leader epochs rebuilt. Seeded random cases, bounded count."""

from __future__ import annotations

import os
import random

import pytest

from tieredlog.log.checkpoints import LeaderEpochCheckpointFile
from tieredlog.log.config import LogConfig
from tieredlog.log.index import _SparseIndex
from tieredlog.log.segment import LogSegment
from tieredlog.log.types import FetchIsolation
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import iter_headers, validate_batch
from tieredlog.records.record import build_batch

TS = 1_700_000_000_000


def rand_batch(rng: random.Random, **kw) -> bytes:
    n = rng.randint(1, 4)
    return build_batch([(None, rng.randbytes(rng.randint(0, 120)), [], TS + rng.randint(0, 5000)) for _ in range(n)], **kw)


def read_all(plog: UnifiedLog) -> dict[int, bytes]:
    """base offset -> batch bytes of every batch in the log, CRC-checked."""
    out = {}
    off = plog.local_log_start_offset
    while off < plog.log_end_offset:
        data = plog.read(off, 1 << 20, isolation=FetchIsolation.LOG_END).records
        data = data if isinstance(data, bytes) else data.read_bytes()
        if not data:
            break
        for pos, h in iter_headers(data):
            validate_batch(data, pos)
            out[h.base_offset] = data[pos : pos + h.size]
            off = h.next_offset
    return out


def config(rng: random.Random) -> LogConfig:
    return LogConfig(segment_bytes=rng.choice([600, 1500, 4000]), index_interval_bytes=rng.choice([0, 100, 4096]))


def crash(plog: UnifiedLog) -> None:
    """Drop a log as a killed broker would: release its descriptors without writing anything."""
    for seg in plog.segments:
        seg.offset_index.release()
        seg.time_index.release()
        seg.close_handles()


@pytest.mark.parametrize("seed", range(40))
def test_flushed_batches_survive_torn_tail_and_garbage(tmp_path, seed):
    rng = random.Random(seed)
    cfg = config(rng)
    d = tmp_path / "t-0"
    plog = UnifiedLog(d, cfg)
    for i in range(rng.randint(1, 25)):
        plog.append_as_leader(rand_batch(rng), leader_epoch=i // 8)
    plog.flush()
    flushed = read_all(plog)
    rp = plog.recovery_point
    for i in range(rng.randint(0, 15)):
        plog.append_as_leader(rand_batch(rng), leader_epoch=3 + i // 5)
    # Crash: no close. Damage a segment holding only unflushed data, past the flushed bytes.
    victims = [s for s in plog.segments if s.next_offset > rp] or [plog.active_segment]
    seg = rng.choice(victims)
    floor = 0
    if seg.base_offset < rp:
        found = seg.translate_offset(rp)
        floor = found[0] if found else seg.size
    cut = rng.randint(floor, seg.size)
    with open(seg.log_path, "r+b") as f:
        f.truncate(cut)
        f.seek(cut)
        f.write(rng.randbytes(rng.choice([0, 1, 11, 61, 300])))
    if rng.random() < 0.3:
        seg.offset_index_path.unlink(missing_ok=True)
    crash(plog)

    recovered = UnifiedLog(d, cfg, recovery_point=rp, had_clean_shutdown=False)
    assert recovered.log_end_offset >= rp
    now = read_all(recovered)
    for base, data in flushed.items():
        assert now[base] == data
    # The epoch cache never points past the log end, and the log accepts new appends right after it.
    latest = recovered.leader_epoch_cache.latest_entry
    assert latest is None or latest.start_offset < recovered.log_end_offset
    leo = recovered.log_end_offset
    assert recovered.append_as_leader(rand_batch(rng), leader_epoch=20).first_offset == leo
    recovered.close()
    again = UnifiedLog(d, cfg, recovery_point=recovered.recovery_point)
    assert again.log_end_offset == recovered.log_end_offset
    assert read_all(again) == read_all(recovered)
    again.close()


def test_recovery_rebuilds_indexes_equal_to_originals(tmp_path):
    rng = random.Random(7)
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=150)
    d = tmp_path / "t-0"
    plog = UnifiedLog(d, cfg)
    for _ in range(60):
        plog.append_as_leader(rand_batch(rng), 0)
    plog.close()
    original = {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")}
    assert len(original) > 4
    # Unclean restart from offset 0: everything is re-read and every index rebuilt.
    UnifiedLog(d, cfg, recovery_point=0, had_clean_shutdown=False).close()
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.suffix in (".index", ".timeindex")} == original


@pytest.mark.parametrize("damage", ["delete", "zeros", "garbage", "odd_size"])
def test_corrupt_or_missing_index_rebuilt_after_clean_shutdown(tmp_path, damage):
    rng = random.Random(3)
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=100)
    d = tmp_path / "t-0"
    plog = UnifiedLog(d, cfg)
    for _ in range(40):
        plog.append_as_leader(rand_batch(rng), 0)
    plog.close()
    before = read_all(UnifiedLog(d, cfg))
    target = d / "00000000000000000000.index"
    good = target.read_bytes()
    assert good
    if damage == "delete":
        target.unlink()
    elif damage == "zeros":
        target.write_bytes(bytes(len(good) + 64))
    elif damage == "garbage":
        target.write_bytes(b"\x7f\xff\xff\xff" * (len(good) // 4))
    else:
        target.write_bytes(good + b"\x01\x02\x03")
    plog = UnifiedLog(d, cfg)
    assert read_all(plog) == before
    plog.close()
    assert target.read_bytes() == good


def test_producer_state_rebuilt_after_crash(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=2000)
    plog = UnifiedLog(d, cfg)
    seq = 0
    for _ in range(20):
        b = build_batch([(b"k", b"v" * 30, [], TS)] * 2, producer_id=77, producer_epoch=0, base_sequence=seq)
        plog.append_as_leader(b, 0)
        seq += 2
    last = b
    crash(plog)  # no snapshot at the log end
    plog = UnifiedLog(d, cfg, had_clean_shutdown=False, recovery_point=0)
    dup = plog.append_as_leader(last, 0)
    assert dup.duplicate and dup.first_offset == 38
    nxt = build_batch([(b"k", b"v", [], TS)], producer_id=77, producer_epoch=0, base_sequence=seq)
    assert plog.append_as_leader(nxt, 0).first_offset == 40


def test_deleted_and_orphan_files_removed_on_load(tmp_path):
    d = tmp_path / "t-0"
    plog = UnifiedLog(d, LogConfig())
    plog.append_as_leader(build_batch([(None, b"x", [], TS)]), 0)
    plog.close()
    (d / "00000000000000000005.log.deleted").write_bytes(b"junk")
    (d / "00000000000000000009.index").write_bytes(b"")
    UnifiedLog(d, LogConfig()).close()
    names = set(os.listdir(d))
    assert "00000000000000000005.log.deleted" not in names and "00000000000000000009.index" not in names


def test_unclean_restart_recovers_from_the_recovery_point_and_checks_the_rest(tmp_path, monkeypatch):
    """Kafka's recoverLog: segments from the one holding the recovery point on are re-read; the ones
    below keep their indexes unless the sanity check fails."""
    rng = random.Random(11)
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=100)
    d = tmp_path / "t-0"
    plog = UnifiedLog(d, cfg)
    while plog.num_segments < 5:
        plog.append_as_leader(rand_batch(rng), 0)
    plog.flush()
    rp = plog.recovery_point
    while plog.num_segments < 7:
        plog.append_as_leader(rand_batch(rng), 0)
    bases = [s.base_offset for s in plog.segments]
    floor = max(b for b in bases if b <= rp)
    flushed = {b: v for b, v in read_all(plog).items() if b < rp}
    crash(plog)
    (d / f"{bases[1]:020d}.index").write_bytes(b"\x7f\xff\xff\xff" * 4)  # below the recovery point
    good = (d / f"{bases[2]:020d}.index").read_bytes()

    recovered: list[int] = []
    real = LogSegment.recover

    def spy(self, *a, **kw):
        recovered.append(self.base_offset)
        return real(self, *a, **kw)

    monkeypatch.setattr(LogSegment, "recover", spy)
    plog = UnifiedLog(d, cfg, recovery_point=rp, had_clean_shutdown=False)
    assert recovered == [bases[1]] + [b for b in bases if b >= floor]
    assert (d / f"{bases[2]:020d}.index").read_bytes() == good
    now = read_all(plog)
    assert all(now[b] == v for b, v in flushed.items())
    plog.close()


def test_unclean_restart_does_not_read_the_preallocated_indexes_it_rebuilds(tmp_path, monkeypatch):
    """After a kill -9 the active segment's indexes are still 10 MiB of preallocated slots; recovery
    rebuilds them from the log and must not decode them first (that cost ~150 ms per partition)."""
    rng = random.Random(5)
    cfg = LogConfig(index_interval_bytes=100)  # default segment.index.bytes: 10 MiB preallocated
    d = tmp_path / "t-0"
    plog = UnifiedLog(d, cfg)
    for _ in range(30):
        plog.append_as_leader(rand_batch(rng), 0)
    plog.flush(10)
    for _ in range(5):
        plog.append_as_leader(rand_batch(rng), 0)
    before = read_all(plog)
    seg = plog.active_segment
    assert seg.offset_index_path.stat().st_size == 10 * 1024 * 1024
    written = (seg.offset_index.file_bytes(), seg.time_index.file_bytes())
    assert len(written[0]) > 8
    crash(plog)  # nothing trimmed

    loaded = []
    real = _SparseIndex._load

    def spy(self):
        loaded.append(self.path.name)
        return real(self)

    monkeypatch.setattr(_SparseIndex, "_load", spy)
    plog = UnifiedLog(d, cfg, recovery_point=10, had_clean_shutdown=False)
    assert loaded == []
    assert read_all(plog) == before
    seg = plog.active_segment
    # The rebuilt entries are the ones the appends wrote; recovery may add the max-timestamp entry a
    # roll would add (Kafka's LogSegment.recover does the same).
    assert seg.offset_index.file_bytes() == written[0]
    assert seg.time_index.file_bytes()[: len(written[1])] == written[1]
    plog.close()


@pytest.mark.parametrize("declared", [(1 << 31) - 1, 1 << 24, -1, -12, 0, 48, "file+1"])
def test_a_tail_batch_length_that_cannot_be_is_cut_without_reading_what_it_claims(tmp_path, declared):
    # Lengths read from a segment file are bounded by the file: recovery never allocates or reads
    # what a torn header claims, and the log keeps everything before it.
    import struct
    import tracemalloc

    rng = random.Random(5)
    cfg = LogConfig(segment_bytes=1 << 20)
    d = tmp_path / "t-0"
    plog = UnifiedLog(d, cfg)
    for _ in range(20):
        plog.append_as_leader(rand_batch(rng), leader_epoch=0)
    plog.flush()
    flushed, end = read_all(plog), plog.log_end_offset
    seg = plog.active_segment
    tail = bytearray(rand_batch(rng))
    length = seg.size + len(tail) + 1 - 12 if declared == "file+1" else declared
    struct.pack_into(">qi", tail, 0, end, length)  # a plausible base offset, an impossible length
    with open(seg.log_path, "ab") as f:
        f.write(tail)
    crash(plog)
    tracemalloc.start()
    try:
        recovered = UnifiedLog(d, cfg, recovery_point=0, had_clean_shutdown=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # one recovery chunk (4 MiB) at most, never the claimed length
    assert recovered.log_end_offset == end and read_all(recovered) == flushed
    assert recovered.active_segment.size == seg.size  # the bad tail is gone
    recovered.close()


@pytest.mark.parametrize("recovered_from", ["start", "last segment", "nothing: clean"])
@pytest.mark.parametrize("damage", [b"\0" * 12, b"0\n2\n1 0\n", b"garbage", b"0\n1\n-4 0\n"],
                         ids=["zeros", "short-count", "garbage", "negative-epoch"])
def test_torn_leader_epoch_checkpoint_is_rebuilt_from_the_log(tmp_path, damage, recovered_from):
    """The append path writes the checkpoint without waiting for its fsync: after a machine crash it can
    be torn. The log still loads, with the epochs its batches carry, also those of the segments below
    the recovery point (recovery re-reads only the ones after it), and the checkpoint is written again."""
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=4096)
    plog = UnifiedLog(d, cfg)
    for epoch in (1, 1, 2, 3, 3):
        for _ in range(4):
            plog.append_as_leader(build_batch([(b"k", b"v" * 300)]), epoch)
    expected = plog.leader_epoch_cache.epoch_entries()
    assert [e.epoch for e in expected] == [1, 2, 3] and plog.num_segments > 1
    plog.flush()
    rp = {"start": 0, "last segment": plog.segments[-1].base_offset, "nothing: clean": plog.log_end_offset}
    clean = recovered_from.endswith("clean")
    plog.close() if clean else crash(plog)
    (d / "leader-epoch-checkpoint").write_bytes(damage)
    again = UnifiedLog(d, cfg, recovery_point=rp[recovered_from], had_clean_shutdown=clean)
    assert again.leader_epoch_cache.epoch_entries() == expected
    assert again.log_end_offset == 20
    assert LeaderEpochCheckpointFile(d / "leader-epoch-checkpoint").read() == expected


@pytest.mark.parametrize("clean", [True, False])
def test_an_unreadable_transaction_index_is_emptied_not_fatal(tmp_path, clean, caplog):
    # Kafka's recovery resets the transaction index too; one that cannot even be read (a size that
    # is not whole entries, an unknown version) used to fail the partition's load, and the broker's.
    import logging

    rng = random.Random(3)
    cfg = LogConfig(segment_bytes=600)
    d = tmp_path / "t-0"
    plog = UnifiedLog(d, cfg)
    for _ in range(12):
        plog.append_as_leader(rand_batch(rng), leader_epoch=0)
    plog.flush()
    data, end = read_all(plog), plog.log_end_offset
    segs = plog.segments
    assert len(segs) >= 3
    victim = segs[0] if clean else segs[-1]  # before the recovery point / after it
    rp = plog.recovery_point if clean else segs[-1].base_offset
    if clean:
        plog.close()
    else:
        crash(plog)
    victim.txn_index_path.write_bytes(b"\x00\x07" + bytes(40))  # 42 bytes: not whole 34-byte entries
    with caplog.at_level(logging.WARNING):
        again = UnifiedLog(d, cfg, recovery_point=rp, had_clean_shutdown=clean)
    assert again.log_end_offset == end and read_all(again) == data
    assert victim.txn_index_path.read_bytes() == b""
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "transaction index" in lines[0], lines
    again.close()


@pytest.mark.parametrize("clean", [True, False])
def test_a_corrupt_control_batch_does_not_fail_the_load(tmp_path, clean, caplog):
    """Replaying producer state reads each transaction marker's control record. One damaged on disk (a
    clean shutdown's load checks no CRC) used to raise ValueError out of the load, and the broker did
    not start. Now it is one line and the marker counts as no control record (Kafka's default: commit)."""
    import logging

    from tieredlog.log.types import AppendOrigin
    from tieredlog.records.record import build_control_batch

    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=1 << 20)
    plog = UnifiedLog(d, cfg)
    txn = build_batch([(None, b"v")], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    plog.append_as_leader(txn, 0)
    plog.append_as_leader(build_control_batch(0, 9, 0, 0, TS), 0, origin=AppendOrigin.COORDINATOR)  # ABORT
    marker_pos, marker = [(p, h) for p, h in plog.active_segment.iter_headers(0) if h.is_control][0]
    plog.roll()  # after an unclean shutdown only segments past the recovery point are re-validated
    plog.append_as_leader(build_batch([(None, b"after")]), 0)
    plog.flush()
    end, recovery_point = plog.log_end_offset, plog.recovery_point
    if clean:
        plog.close()
    else:
        crash(plog)
    for snap in d.glob("*.snapshot"):
        snap.unlink()  # replay the markers from the log
    with open(d / "00000000000000000000.log", "r+b") as f:
        f.seek(marker_pos + 61 + 1 + 1 + 1 + 1)  # record length, attributes, timestamp and offset deltas
        f.write(b"\x7f")  # key length: 63 bytes, past the batch
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = UnifiedLog(d, cfg, recovery_point=recovery_point, had_clean_shutdown=clean)
    assert again.log_end_offset == end
    assert again.producer_state.first_undecided_offset() is None  # the transaction is not left open
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "control" in lines[0] and str(marker.base_offset) in lines[0], lines
    again.close()
