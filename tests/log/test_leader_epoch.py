import threading

import pytest

from tieredlog.formats.checkpoints import encode_leader_epoch_checkpoint, parse_leader_epoch_checkpoint
from tieredlog.log.checkpoints import LeaderEpochCheckpointFile
from tieredlog.log.leader_epoch import EpochEntry, LeaderEpochFileCache

E = EpochEntry


def cache_with(*entries, checkpoint=None):
    c = LeaderEpochFileCache(checkpoint)
    for epoch, offset in entries:
        c.assign(epoch, offset)
    return c


@pytest.fixture
def four():
    # The lineage of KIP-405 scenario 1: LE-0 -> 0, LE-1 -> 3, LE-2 -> 5, LE-3 -> 7.
    return cache_with((0, 0), (1, 3), (2, 5), (3, 7))


def test_assign_appends_new_epochs_and_ignores_later_offsets_of_the_same_epoch(tmp_path):
    c = LeaderEpochFileCache()
    assert c.latest_epoch is None and c.latest_entry is None and c.earliest_entry is None
    c.assign(0, 0)
    c.assign(0, 5)  # every batch of epoch 0 calls assign; only the first start counts
    c.assign(1, 7)
    c.assign(1, 9)
    assert c.epoch_entries() == [E(0, 0), E(1, 7)]
    assert c.latest_epoch == 1 and c.earliest_entry == E(0, 0) and c.latest_entry == E(1, 7)


def test_assign_removes_entries_that_break_monotonicity():
    c = cache_with((0, 0), (1, 5), (2, 10))
    c.assign(2, 8)  # same epoch, lower start: moves the start down
    assert c.epoch_entries() == [E(0, 0), E(1, 5), E(2, 8)]
    c.assign(3, 6)  # higher epoch at a lower offset: entries starting at or after 6 go
    assert c.epoch_entries() == [E(0, 0), E(1, 5), E(3, 6)]
    c.assign(1, 20)  # lower epoch: entries with epoch >= 1 go, as in Kafka, and (1, 20) replaces them
    assert c.epoch_entries() == [E(0, 0), E(1, 20)]
    with pytest.raises(ValueError):
        c.assign(-1, 3)
    with pytest.raises(ValueError):
        c.assign(4, -3)


def test_end_offset_for_kip101_279(four):
    leo = 10
    assert four.end_offset_for(3, leo) == (3, 10)  # latest epoch: still being written, LEO
    assert four.end_offset_for(2, leo) == (2, 7)
    assert four.end_offset_for(1, leo) == (1, 5)
    assert four.end_offset_for(0, leo) == (0, 3)
    assert four.end_offset_for(-1, leo) == (-1, -1)  # UNDEFINED_EPOCH
    assert four.end_offset_for(4, leo) == (-1, -1)  # above every known epoch
    assert LeaderEpochFileCache().end_offset_for(0, leo) == (-1, -1)


def test_end_offset_for_unknown_epoch_between_known_ones_answers_the_floor_epoch():
    # KIP-279: a follower asking for epoch 2 that this leader never saw learns epoch 1 ended at 12.
    c = cache_with((1, 0), (3, 12), (6, 20))
    assert c.end_offset_for(2, 30) == (1, 12)
    assert c.end_offset_for(5, 30) == (3, 20)


def test_end_offset_for_epoch_below_earliest_after_start_truncation():
    # Old epochs were removed with their data; the follower must truncate to the earliest start.
    c = cache_with((4, 100), (5, 150))
    assert c.end_offset_for(2, 200) == (2, 100)


def test_kip101_follower_truncates_to_leader_epoch_end():
    # Follower B wrote offsets 0-2 in epoch 0 but the new leader A started epoch 1 at offset 1.
    leader = cache_with((0, 0), (1, 1))
    follower = cache_with((0, 0))
    follower_leo = 3
    epoch, end = leader.end_offset_for(follower.latest_epoch, 2)
    assert (epoch, end) == (0, 1)
    truncate_to = min(end, follower_leo)
    follower.truncate_from_end(truncate_to)
    assert follower.epoch_entries() == [E(0, 0)]
    follower.assign(1, 1)  # then replicates msg3 at offset 1 in epoch 1
    assert follower.epoch_entries() == leader.epoch_entries()
    # KIP-405 scenario 3: offset 1 now belongs to LE-1, offset 0 to LE-0.
    assert follower.epoch_for_offset(1) == 1
    assert follower.epoch_for_offset(0) == 0


def test_kip405_scenario5_lineage_from_remote_checkpoint():
    # B rebuilds its cache from seg-4-5's leader-epoch index {LE-0,0; LE-2,5}; LE-1 is not in its lineage.
    c = LeaderEpochFileCache()
    c.assign_all(parse_leader_epoch_checkpoint(b"0\n2\n0 0\n2 5\n"))
    assert c.epoch_entries() == [E(0, 0), E(2, 5)]
    assert c.epoch_entry(1) is None
    assert c.end_offset_for(1, 7) == (0, 5)  # a fetch at (offset 3, LE-1) is fenced
    assert c.epoch_for_offset(2) == 0


def test_truncate_from_end(four):
    four.truncate_from_end(8)  # 7 < 8: nothing starts at or after 8
    assert four.epoch_entries() == [E(0, 0), E(1, 3), E(2, 5), E(3, 7)]
    four.truncate_from_end(5)
    assert four.epoch_entries() == [E(0, 0), E(1, 3)]
    four.truncate_from_end(-1)  # undefined end offset: no-op
    assert four.epoch_entries() == [E(0, 0), E(1, 3)]
    four.truncate_from_end(0)
    assert four.epoch_entries() == []


@pytest.mark.parametrize(
    "start, expected",
    [
        (0, [E(0, 0), E(1, 3), E(2, 5), E(3, 7)]),
        (4, [E(1, 4), E(2, 5), E(3, 7)]),
        (5, [E(2, 5), E(3, 7)]),  # exclusive: the entry at 5 stays
        (100, [E(3, 100)]),
    ],
)
def test_truncate_from_start(four, start, expected):
    four.truncate_from_start(start)
    assert four.epoch_entries() == expected


def test_epoch_for_offset_and_neighbours():
    c = cache_with((1, 10), (3, 20), (4, 25))
    assert c.epoch_for_offset(9) is None
    assert [c.epoch_for_offset(o) for o in (10, 19, 20, 24, 25, 10**9)] == [1, 1, 3, 3, 4, 4]
    assert c.previous_epoch() == 3 and c.previous_epoch(3) == 1 and c.previous_epoch(1) is None
    assert c.next_epoch(1) == 3 and c.next_epoch(2) == 3 and c.next_epoch(4) is None
    assert c.epoch_entry(3) == E(3, 20)


def test_entries_in_range_for_segment_copy(four):
    # The RLM ships the whole history up to the segment end, and the segment's own epochs.
    assert four.entries_in_range(-1, 7) == [E(0, 0), E(1, 3), E(2, 5)]
    assert four.entries_in_range(3, 7) == [E(1, 3), E(2, 5)]
    assert four.entries_in_range(4, 6) == [E(1, 4), E(2, 5)]
    assert four.entries_in_range(8, 11) == [E(3, 8)]
    assert four.epoch_entries() == [E(0, 0), E(1, 3), E(2, 5), E(3, 7)]  # the cache is untouched
    assert encode_leader_epoch_checkpoint(four.entries_in_range(-1, 7)) == b"0\n3\n0 0\n1 3\n2 5\n"


def test_changes_are_checkpointed_and_reloaded(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cp = LeaderEpochCheckpointFile(path)
    c = LeaderEpochFileCache(cp)
    c.assign(0, 0)
    c.assign(2, 10)
    assert path.read_text() == "0\n2\n0 0\n2 10\n"
    c.assign(2, 12)  # no change, no rewrite
    assert path.read_text() == "0\n2\n0 0\n2 10\n"
    c.truncate_from_start(4)
    assert path.read_text() == "0\n2\n0 4\n2 10\n"
    c.truncate_from_end(10, flush=False)  # deferred flush leaves the file stale
    assert path.read_text() == "0\n2\n0 4\n2 10\n"
    c.flush()
    assert path.read_text() == "0\n1\n0 4\n"
    assert LeaderEpochFileCache(LeaderEpochCheckpointFile(path)).epoch_entries() == [E(0, 4)]
    c.clear_and_flush()
    assert path.read_text() == "0\n0\n"


def test_loading_a_non_monotonic_checkpoint_repairs_it(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n3\n0 0\n2 10\n1 12\n")
    c = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert c.epoch_entries() == [E(0, 0), E(1, 12)]


def test_concurrent_assign_and_read_stay_monotonic():
    c = LeaderEpochFileCache()
    errors = []

    def writer(base):
        for i in range(200):
            c.assign(base + i * 4, (base + i * 4) * 10)

    def reader():
        for _ in range(400):
            entries = c.epoch_entries()
            if any(a.epoch >= b.epoch or a.start_offset >= b.start_offset for a, b in zip(entries, entries[1:])):
                errors.append(entries)

    threads = [threading.Thread(target=writer, args=(b,)) for b in range(4)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = c.epoch_entries()
    assert not errors
    assert entries and all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in zip(entries, entries[1:]))


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 20), st.integers(0, 200)),
        st.tuples(st.just("end"), st.integers(-1, 200), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 200), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_any_operation_sequence_keeps_the_lineage_monotonic_and_checkpointed(ops):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        cp = LeaderEpochCheckpointFile(Path(d) / "leader-epoch-checkpoint")
        c = LeaderEpochFileCache(cp)
        for op, a, b in ops:
            if op == "assign":
                c.assign(a, b)
                assert c.latest_entry == E(a, b) or (c.latest_epoch == a and c.latest_entry.start_offset <= b)
            elif op == "end":
                c.truncate_from_end(a)
                assert a < 0 or all(e.start_offset < a for e in c.epoch_entries())
            else:
                before = c.epoch_entries()
                c.truncate_from_start(a)
                after = c.epoch_entries()
                assert all(e.start_offset >= a for e in after)
                assert [e for e in before if e.start_offset > a] == [e for e in after if e.start_offset > a]
                if any(e.start_offset <= a for e in before):
                    assert after[0].start_offset == a
            entries = c.epoch_entries()
            assert all(x.epoch < y.epoch and x.start_offset < y.start_offset for x, y in zip(entries, entries[1:]))
            assert cp.read() == entries
