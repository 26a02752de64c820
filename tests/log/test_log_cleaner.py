"""The log cleaner on real partition directories, in process: what a round keeps and drops, offsets
that never change, tombstones and transaction markers until their delete horizon, aborted transactional
data, producers' last batches, compressed batches, the choice of log, the checkpoint, aborted rounds,
and a load after a crash at every step of a swap."""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest

from tieredlog.log.cleaner.cleaner import Cleaner
from tieredlog.log.cleaner.log_cleaner import CleanerConfig, LogCleaner
from tieredlog.log.cleaner.manager import CLEANER_OFFSET_CHECKPOINT, log_to_clean
from tieredlog.log.cleaner.offset_map import ENTRY_SIZE, OffsetMap
from tieredlog.log.config import LogConfig
from tieredlog.log.log_manager import LogManager
from tieredlog.log.types import AppendOrigin
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import DELETE_HORIZON_MASK, iter_headers
from tieredlog.records.record import build_batch, build_control_batch, build_empty_batch, iter_batches_records

T0 = time.time_ns() // 1_000_000  # now: a reload expires producers idle for producer.id.expiration.ms
ABORT, COMMIT = 0, 1


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def compacted(tmp_path: Path, clock: Clock, **overrides: str) -> UnifiedLog:
    cfg = LogConfig().with_overrides({
        "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
        "file.delete.delay.ms": "0", "message.timestamp.after.max.ms": str(1 << 62),
        "message.timestamp.before.max.ms": str(1 << 62), **overrides})
    return UnifiedLog(tmp_path / "c-0", cfg, clock=clock)


def cleaner_for(plog: UnifiedLog, clock: Clock, **kw: int) -> LogCleaner:
    return LogCleaner(CleanerConfig(**kw), [plog.dir.parent], lambda: [plog], clock=clock)


def produce(plog: UnifiedLog, records: list[tuple[bytes, bytes | None]], codec: int = 0, **kw: int) -> list[int]:
    """One batch; the offsets of its records."""
    info = plog.append_as_leader(build_batch([(k, v, [], T0) for k, v in records], codec=codec, **kw), 0)
    plog.update_high_watermark(plog.log_end_offset)
    return list(range(info.first_offset, info.last_offset + 1))


def marker(plog: UnifiedLog, pid: int, control: int) -> int:
    info = plog.append_as_leader(build_control_batch(control, pid, 0, 0, T0), 0, origin=AppendOrigin.COORDINATOR)
    plog.update_high_watermark(plog.log_end_offset)
    return info.first_offset


def log_bytes(plog: UnifiedLog) -> bytes:
    return b"".join(s.read_bytes(0, s.size) for s in plog.segments)


def records(plog: UnifiedLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for _, recs in iter_batches_records(log_bytes(plog)) for r in recs]


def headers(plog: UnifiedLog) -> list:  # type: ignore[type-arg]
    return [h for _, h in iter_headers(log_bytes(plog))]


def clean_all(cleaner: LogCleaner) -> int:
    rounds = 0
    while cleaner.clean_once():
        rounds += 1
    return rounds


def test_offset_map_keeps_the_latest_offset_per_key_in_24_bytes_an_entry() -> None:
    m = OffsetMap(1000 * ENTRY_SIZE)
    assert m.slots <= 1000 and m.memory_bytes == m.slots * ENTRY_SIZE
    for i in range(800):
        m.put(b"key-%d" % (i % 400), i)
    assert m.size == 400
    assert [m.get(b"key-%d" % i) for i in (0, 1, 399)] == [400, 401, 799]
    assert m.get(b"absent") == -1
    assert m.latest_offset == 799
    assert 0.39 < m.utilization < 0.42
    m.clear()
    assert (m.size, m.get(b"key-0"), m.latest_offset) == (0, -1, -1)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_a_round_keeps_exactly_the_latest_value_of_every_key_at_its_offset(tmp_path: Path, codec: int) -> None:
    clock = Clock()
    plog = compacted(tmp_path, clock)
    rng = random.Random(codec)
    latest: dict[bytes, tuple[int, bytes]] = {}
    for n in range(300):
        batch = [(b"k%d" % rng.randrange(150), b"v%d-%d" % (n, i)) for i in range(4)]
        for off, (k, v) in zip(produce(plog, batch, codec), batch):
            latest[k] = (off, v)  # type: ignore[assignment]
    plog.roll()
    before = plog.size
    cleaner = cleaner_for(plog, clock)
    assert clean_all(cleaner) >= 1
    got = records(plog)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert sorted((o, k, v) for o, k, v in got) == sorted((o, k, v) for k, (o, v) in latest.items())
    assert plog.size < before / 3
    assert {h.compression for h in headers(plog) if h.records_count} == {codec}  # empty batches: none
    assert plog.log_end_offset == 1200  # the log's end stays: offsets never change
    # nothing left to do until new data: the checkpoint says where the clean part ends
    assert not cleaner.clean_once()
    assert cleaner.manager.checkpoint_of(plog.topic_partition) == 1200
    text = (plog.dir.parent / CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")
    assert text[:3] == ["0", "1", "c 0 1200"]
    # a reload reads the cleaned segments back the same
    plog.close()
    again = compacted(tmp_path, clock)
    assert records(again) == got


def test_a_cleaned_group_never_straddles_the_highest_offset_in_remote_storage(tmp_path: Path) -> None:
    clock = Clock()
    plog = compacted(tmp_path, clock)
    for n in range(300):
        produce(plog, [(b"k%d" % (n % 5), b"v%d" % n)])
    plog.roll()
    bases = [s.base_offset for s in plog.segments]
    tiered_end = bases[len(bases) // 2]
    plog.highest_offset_in_remote_storage = tiered_end - 1  # what the copy task records after a copy
    assert clean_all(cleaner_for(plog, clock)) >= 1
    after = [s.base_offset for s in plog.segments]
    assert tiered_end in after and len(after) > 2  # the segments on either side joined, not across it
    assert {k for _, k, _ in records(plog)} == {b"k%d" % i for i in range(5)}


def test_tombstones_stay_until_their_delete_horizon_then_go(tmp_path: Path) -> None:
    clock = Clock()
    plog = compacted(tmp_path, clock, **{"delete.retention.ms": "60000"})
    produce(plog, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    produce(plog, [(b"a", None), (b"b", b"2")])
    plog.roll()
    cleaner = cleaner_for(plog, clock)
    assert clean_all(cleaner) == 1
    assert records(plog) == [(2, b"c", b"1"), (3, b"a", None), (4, b"b", b"2")]
    stamped = [h for h in headers(plog) if h.base_offset == 3][0]
    assert stamped.attributes & DELETE_HORIZON_MASK and stamped.base_timestamp == T0 + 60000
    # the record timestamps are what the producer gave, whatever the base timestamp became
    assert {r.timestamp for _, recs in iter_batches_records(log_bytes(plog)) for r in recs} == {T0}

    produce(plog, [(b"d", b"1")])  # more dirty data for another round
    plog.roll()
    clock.now = T0 + 59_999
    assert clean_all(cleaner) == 1
    assert (3, b"a", None) in records(plog)
    produce(plog, [(b"e", b"1")])
    plog.roll()
    clock.now = T0 + 60_000
    assert clean_all(cleaner) == 1
    assert [k for _, k, _ in records(plog)] == [b"c", b"b", b"d", b"e"]


def test_aborted_transactions_go_and_their_markers_once_no_data_needs_them_and_the_horizon_passed(
        tmp_path: Path) -> None:
    clock = Clock()
    plog = compacted(tmp_path, clock, **{"delete.retention.ms": "1000"})
    produce(plog, [(b"x", b"committed")], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    commit = marker(plog, 7, COMMIT)
    produce(plog, [(b"y", b"aborted")], producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)
    abort = marker(plog, 8, ABORT)
    produce(plog, [(b"z", b"plain")])
    plog.roll()
    cleaner = cleaner_for(plog, clock)
    clean_all(cleaner)
    # the aborted record went; its batch stays as an empty batch (producer 8's last data batch, which
    # its idempotence state needs), and so do its marker and index entry: the round saw that batch
    kept = {h.base_offset: h for h in headers(plog)}
    assert [(o, v) for o, k, v in records(plog) if k in (b"x", b"y", b"z")] == [(0, b"committed"), (4, b"plain")]
    assert kept[2].records_count == 0 and kept[2].is_transactional
    assert kept[commit].records_count == 1 and kept[abort].records_count == 1
    assert [a.producer_id for a in plog.collect_aborted_transactions(0, 100)] == [8]

    # once both producers expired and x was overwritten, the round drops the transactions' data; the
    # next one sees none and stamps the markers with a delete horizon; one after it drops them
    clock.now += plog.producer_state.producer_id_expiration_ms + 1
    plog.remove_expired_producers(clock.now)
    produce(plog, [(b"x", b"overwritten")])
    plog.roll()
    clean_all(cleaner)
    kept = {h.base_offset: h for h in headers(plog)}
    assert 0 not in kept and 2 not in kept
    assert not kept[commit].attributes & DELETE_HORIZON_MASK and not kept[abort].attributes & DELETE_HORIZON_MASK
    produce(plog, [(b"v", b"1")])
    plog.roll()
    clean_all(cleaner)
    kept = {h.base_offset: h for h in headers(plog)}
    assert kept[commit].attributes & DELETE_HORIZON_MASK and kept[abort].attributes & DELETE_HORIZON_MASK
    assert plog.collect_aborted_transactions(0, 100) == []
    clock.now += 1000
    produce(plog, [(b"w", b"1")])
    plog.roll()
    clean_all(cleaner)
    kept = {h.base_offset: h for h in headers(plog)}
    assert commit not in kept and abort not in kept
    assert [(k, v) for _, k, v in records(plog)] == [(b"z", b"plain"), (b"x", b"overwritten"), (b"v", b"1"),
                                                      (b"w", b"1")]


def test_a_producers_last_batch_stays_as_an_empty_batch_so_idempotence_survives(tmp_path: Path) -> None:
    clock = Clock()
    plog = compacted(tmp_path, clock)
    produce(plog, [(b"a", b"1"), (b"b", b"1")], producer_id=5, producer_epoch=0, base_sequence=0)
    produce(plog, [(b"a", b"2"), (b"b", b"2")])  # supersedes both of the producer's records
    plog.roll()
    clean_all(cleaner_for(plog, clock))
    first = headers(plog)[0]
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 1, 0)
    assert (first.producer_id, first.base_sequence, first.last_sequence) == (5, 0, 1)
    plog.close()
    again = compacted(tmp_path, clock)
    entry = again.producer_state.last_entry(5)
    assert entry is not None and entry.last_seq == 1
    # the producer's retry of its last batch is still found as a duplicate
    dup = again.append_as_leader(build_batch([(b"a", b"1", [], T0), (b"b", b"1", [], T0)], producer_id=5,
                                             producer_epoch=0, base_sequence=0), 0)
    assert dup.first_offset == 0 and again.log_end_offset == 4


def test_the_filthiest_log_is_cleaned_first_and_ratio_and_lags_decide_if_at_all(tmp_path: Path) -> None:
    clock = Clock()
    a = UnifiedLog(tmp_path / "a-0", LogConfig().with_overrides({"cleanup.policy": "compact", "segment.bytes": "2048"}),
                   clock=clock)
    b = UnifiedLog(tmp_path / "b-0", LogConfig().with_overrides({"cleanup.policy": "compact", "segment.bytes": "2048"}),
                   clock=clock)
    for i in range(40):
        produce(a, [(b"k", b"%d" % i)])
    for i in range(10):
        produce(b, [(b"k", b"%d" % i)])
    a.roll()
    b.roll()
    clean_all(LogCleaner(CleanerConfig(), [tmp_path], lambda: [b], clock=clock))  # b: clean part, then dirty
    for i in range(3):
        produce(b, [(b"k", b"x%d" % i)])
    b.roll()
    ltc_a, ltc_b = log_to_clean(a, None, clock.now), log_to_clean(b, 10, clock.now)
    assert ltc_a.cleanable_ratio == 1.0 and 0 < ltc_b.cleanable_ratio < 1
    cleaner = LogCleaner(CleanerConfig(), [tmp_path], lambda: [b, a], clock=clock)
    chosen = cleaner.manager.grab_filthiest_log(clock.now)
    assert chosen is not None and chosen.log is a
    cleaner.manager.done_cleaning(a, None)
    # min.cleanable.dirty.ratio above b's share: b waits, unless max.compaction.lag.ms has passed
    b.config = LogConfig().with_overrides({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.99"})
    only_b = LogCleaner(CleanerConfig(), [tmp_path], lambda: [b], clock=clock)
    assert only_b.manager.grab_filthiest_log(clock.now) is None
    b.config = LogConfig().with_overrides({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.99",
                                           "max.compaction.lag.ms": "1000"})
    clock.now = T0 + 1001
    assert only_b.manager.grab_filthiest_log(clock.now) is not None
    # min.compaction.lag.ms keeps segments newer than the lag out of the round
    c = UnifiedLog(tmp_path / "c-0", LogConfig().with_overrides({"cleanup.policy": "compact",
                                                                  "min.compaction.lag.ms": "5000"}), clock=clock)
    produce(c, [(b"k", b"1")])
    c.roll()
    assert log_to_clean(c, None, T0 + 4000).cleanable_bytes == 0
    assert log_to_clean(c, None, T0 + 5001).cleanable_bytes > 0


def test_nothing_past_the_last_stable_offset_is_cleaned(tmp_path: Path) -> None:
    clock = Clock()
    plog = compacted(tmp_path, clock)
    produce(plog, [(b"a", b"1")])
    produce(plog, [(b"a", b"2")], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    produce(plog, [(b"a", b"3")])
    plog.roll()
    assert plog.last_stable_offset == 1
    clean_all(cleaner_for(plog, clock))
    assert [v for _, _, v in records(plog)] == [b"1", b"2", b"3"]  # the open transaction holds the round


def test_a_truncation_during_a_round_aborts_the_swap(tmp_path: Path) -> None:
    clock = Clock()
    plog = compacted(tmp_path, clock)
    for i in range(30):
        produce(plog, [(b"k%d" % (i % 3), b"%d" % i)])
    plog.roll()
    before = records(plog)
    cleaner = cleaner_for(plog, clock)
    ltc = cleaner.manager.grab_filthiest_log(clock.now)
    assert ltc is not None
    real = plog.local_log.replace_segments

    def truncate_then_swap(*args, **kw):  # type: ignore[no-untyped-def]
        plog.truncate_to(plog.log_end_offset)  # nothing removed: not a truncation
        plog.local_log._note_truncation(plog.log_end_offset)
        return real(*args, **kw)

    plog.local_log.replace_segments = truncate_then_swap  # type: ignore[method-assign]
    with pytest.raises(Exception, match="changed while it was cleaned"):
        cleaner.cleaners[0].clean(ltc)
    assert records(plog) == before
    assert not [p for p in os.listdir(plog.dir) if p.endswith((".cleaned", ".swap"))]


def _cleaned_twin(tmp_path: Path) -> tuple[Path, list[tuple[int, bytes | None, bytes | None]], list[str]]:
    """A partition dir, and in ``twin`` the same partition cleaned: (twin dir, its records, the
    segment files it replaced)."""
    clock = Clock()
    plog = compacted(tmp_path / "orig", clock)
    for i in range(200):
        produce(plog, [(b"k%d" % (i % 4), b"%d" % i)])
    plog.roll()
    plog.close()
    shutil.copytree(plog.dir, tmp_path / "twin" / "c-0")
    plog = compacted(tmp_path / "orig", clock, **{"segment.bytes": str(1 << 20)})  # one group: all of them
    plog.update_high_watermark(plog.log_end_offset)
    old = [s.log_path.name for s in plog.segments[:-1]]
    assert clean_all(cleaner_for(plog, clock)) == 1
    expected = records(plog)
    plog.close()
    return tmp_path / "twin" / "c-0", expected, old


@pytest.mark.parametrize("stage", ["cleaned", "swap", "old-deleted", "indexes-renamed"])
def test_a_load_after_a_crash_at_any_step_of_a_swap_finds_a_consistent_log(tmp_path: Path, stage: str) -> None:
    """The files of a swap, laid out as a crash would leave them at each step, in a copy of the
    uncleaned partition: the cleaned segment is the one the same round made in the original."""
    twin, cleaned_records, old = _cleaned_twin(tmp_path)
    orig = tmp_path / "orig" / "c-0"
    uncleaned = records(compacted(tmp_path / "twin", Clock()))
    cleaned_logs = sorted(n for n in os.listdir(orig) if n.endswith(".log"))
    # the crash hits the round's first group: its cleaned segment is the first one, and it replaces
    # the old segments below the second one's base; the later groups are still as they were
    base, next_base = cleaned_logs[0][:20], int(cleaned_logs[1][:20])
    group = [n for n in old if int(n[:20]) < next_base]
    assert len(group) > 1
    swapped = [r for r in cleaned_records if r[0] < next_base] + [r for r in uncleaned if r[0] >= next_base]
    suffix = ".cleaned" if stage == "cleaned" else ".swap"
    for ext in (".log", ".index", ".timeindex"):
        shutil.copy(orig / f"{base}{ext}", twin / f"{base}{ext}{suffix}")
    if stage in ("old-deleted", "indexes-renamed"):
        for name in group[:1]:
            os.replace(twin / name, twin / f"{name}.deleted")
    if stage == "indexes-renamed":
        for ext in (".index", ".timeindex"):
            os.replace(twin / f"{base}{ext}.swap", twin / f"{base}{ext}")
    plog = UnifiedLog(twin, compacted(tmp_path / "x", Clock()).config, had_clean_shutdown=False)
    got = records(plog)
    assert got == (uncleaned if stage == "cleaned" else swapped)
    assert got != uncleaned or stage == "cleaned"
    assert not [n for n in os.listdir(twin) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_the_log_manager_runs_the_cleaner_and_a_deleted_log_is_never_recreated(tmp_path: Path) -> None:
    clock = Clock()
    cfg = LogConfig().with_overrides({"cleanup.policy": "compact", "segment.bytes": "2048",
                                      "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"})
    lm = LogManager([tmp_path], cfg, clock=clock, cleaner_config=CleanerConfig(backoff_ms=10))
    try:
        plog = lm.get_or_create_log(("t", 0))
        for i in range(50):
            produce(plog, [(b"k", b"%d" % i)])
        plog.roll()
        assert lm.cleaner is not None
        while lm.cleaner.clean_once():
            pass
        assert [v for _, _, v in records(plog)] == [b"49"]
        assert lm.cleaner.metrics().cleaner_recopy_percent < 50
        for i in range(50):
            produce(plog, [(b"k", b"%d" % i)])
        plog.roll()
        lm.delete_log(("t", 0))
        assert not lm.cleaner.clean_once()
        assert not (tmp_path / "t-0").exists()
    finally:
        lm.shutdown()


def test_a_cleaner_with_a_map_smaller_than_the_dirty_part_makes_progress_round_by_round(tmp_path: Path) -> None:
    clock = Clock()
    plog = compacted(tmp_path, clock)
    for i in range(400):
        produce(plog, [(b"k%d" % (i % 200), b"%d" % i)])
    plog.roll()
    cleaner = cleaner_for(plog, clock)
    small = Cleaner(0, 100 * ENTRY_SIZE, clock=clock)  # fits ~90 keys at the load factor
    cleaner.cleaners[0] = small
    rounds = clean_all(cleaner)
    assert rounds > 2
    assert sorted(v for _, _, v in records(plog)) == sorted(b"%d" % i for i in range(200, 400))


def test_a_follower_replicates_a_cleaned_log_with_empty_batches_and_markers(tmp_path: Path) -> None:
    """What a follower fetches from a cleaned leader: gaps, a producer's last (transactional) data batch
    emptied with its marker kept, and an empty control batch (a producer whose last record is a
    marker); it appends all of it, and its producer state and last stable offset agree."""
    clock = Clock()
    plog = compacted(tmp_path, clock, **{"delete.retention.ms": "0"})
    produce(plog, [(b"a", b"1")], producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True)
    marker(plog, 3, COMMIT)
    produce(plog, [(b"a", b"2")])
    plog.roll()
    clean_all(cleaner_for(plog, clock))
    kept = {h.base_offset: h for h in headers(plog)}
    assert kept[0].is_transactional and kept[0].records_count == 0 and kept[1].records_count == 1
    end = plog.log_end_offset
    empty_marker = build_empty_batch(end, end, 4, 0, -1, 0, 0, T0, True, True)
    follower = UnifiedLog(tmp_path / "f" / "c-0", plog.config, clock=clock)
    follower.append_as_follower(log_bytes(plog) + empty_marker)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.log_end_offset == end + 1
    assert follower.last_stable_offset == follower.log_end_offset  # no transaction left open
    assert records(follower) == records(plog)
    follower.close()
    reloaded = UnifiedLog(tmp_path / "f" / "c-0", plog.config, clock=clock, had_clean_shutdown=False)
    reloaded.update_high_watermark(reloaded.log_end_offset)
    assert reloaded.last_stable_offset == reloaded.log_end_offset
    assert reloaded.producer_state.last_entry(3) is not None
