"""Partition (the leader's replication state) over a real UnifiedLog: the high watermark as the
smallest log end offset of the ISR, ISR shrink after replica.lag.time.max.ms and expansion on catch-up
through the controller's answer, min.insync.replicas, KIP-320 epoch fencing, and leader epochs
stamped into the log; a follower's appends of the leader's answers; plus the follower fetcher's
batch trimming."""

from __future__ import annotations

import pytest

from tieredlog import errors
from tieredlog.log.config import LogConfig
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.records.batch import iter_headers
from tieredlog.records.record import build_batch
from tieredlog.replication.fetcher import whole_batches
from tieredlog.replication.partition import IsrChange, Partition, PartitionState

TP = TopicPartition("t", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Proposals:
    """Records ISR proposals instead of sending AlterPartition (the controller's side is tested apart)."""

    def __init__(self) -> None:
        self.sent: list[IsrChange] = []

    def submit(self, partition: Partition, change: IsrChange) -> None:
        self.sent.append(change)


def batch(n: int = 2) -> bytes:
    return build_batch([(b"k", b"v" * 20, [], 1_700_000_000_000 + i) for i in range(n)])


def leader(tmp_path, clock: Clock, proposals: Proposals, *, isr=(1, 2, 3), min_isr: int = 1, epoch: int = 5) -> Partition:
    plog = UnifiedLog(tmp_path / "t-0", LogConfig(min_insync_replicas=min_isr), clock=clock)
    p = Partition(TP, plog, 1, clock_ms=clock, isr_sender=proposals)
    assert p.make_leader(PartitionState(leader=1, leader_epoch=epoch, isr=tuple(isr), replicas=(1, 2, 3), partition_epoch=7))
    return p


def test_high_watermark_is_the_smallest_log_end_offset_of_the_isr(tmp_path) -> None:
    clock, proposals = Clock(), Proposals()
    p = leader(tmp_path, clock, proposals)
    p.append_records_to_leader(batch(2), required_acks=-1)
    p.append_records_to_leader(batch(2), required_acks=-1)
    assert (p.log.log_end_offset, p.log.high_watermark) == (4, 0)
    assert p.check_enough_replicas_reach_offset(4) == (False, None)
    assert not p.update_follower_fetch_state(2, 4, 0, leader_end_offset=4)  # replica 3 still lacks all
    assert p.update_follower_fetch_state(3, 2, 0, leader_end_offset=4)
    assert p.log.high_watermark == 2
    assert p.update_follower_fetch_state(3, 4, 0, leader_end_offset=4)
    assert p.log.high_watermark == 4
    assert p.check_enough_replicas_reach_offset(4) == (True, None)
    # the leader's epoch is stamped into its batches and its epoch cache
    assert {h.partition_leader_epoch for _pos, h in iter_headers(p.log.read(0, 1 << 20).records.read_bytes())} == {5}
    assert p.log.leader_epoch_cache.latest_epoch == 5


def test_lagging_follower_leaves_the_isr_and_comes_back_once_caught_up(tmp_path) -> None:
    clock, proposals = Clock(), Proposals()
    p = leader(tmp_path, clock, proposals)
    p.append_records_to_leader(batch(3), required_acks=1)
    p.update_follower_fetch_state(2, 3, 0, leader_end_offset=3)
    clock.now += 5_000
    p.update_follower_fetch_state(2, 3, 0, leader_end_offset=3)  # replica 2 keeps up, replica 3 never fetched
    p.maybe_shrink_isr(max_lag_ms=4_000)
    assert [(c.new_isr, c.leader_epoch, c.partition_epoch) for c in proposals.sent] == [((1, 2), 5, 7)]
    assert p.maximal_isr() == {1, 2, 3}  # not applied until the controller answers
    p.maybe_shrink_isr(max_lag_ms=4_000)
    assert len(proposals.sent) == 1  # one change in flight at a time
    assert p.on_isr_change_answered(proposals.sent[0], PartitionState(1, 5, (1, 2), (1, 2, 3), partition_epoch=8))
    assert (p.isr, p.partition_epoch, p.log.high_watermark) == ({1, 2}, 8, 3)

    # replica 3 fetches up to the high watermark: proposed back into the ISR
    p.update_follower_fetch_state(3, 3, 0, leader_end_offset=3)
    assert proposals.sent[-1].new_isr == (1, 2, 3)
    p.on_isr_change_answered(proposals.sent[-1], PartitionState(1, 5, (1, 2, 3), (1, 2, 3), partition_epoch=9))
    assert p.isr == {1, 2, 3}


def test_a_refused_isr_change_is_dropped_and_proposed_again(tmp_path) -> None:
    clock, proposals = Clock(), Proposals()
    p = leader(tmp_path, clock, proposals)
    clock.now += 10_000
    p.maybe_shrink_isr(max_lag_ms=4_000)
    assert not p.on_isr_change_answered(proposals.sent[0], None)
    assert p.isr == {1, 2, 3} and p.pending_isr is None
    p.maybe_shrink_isr(max_lag_ms=4_000)
    assert len(proposals.sent) == 2


def test_min_insync_replicas(tmp_path) -> None:
    clock, proposals = Clock(), Proposals()
    p = leader(tmp_path, clock, proposals, isr=(1,), min_isr=2)
    with pytest.raises(errors.NotEnoughReplicasError):
        p.append_records_to_leader(batch(1), required_acks=-1)
    assert p.log.log_end_offset == 0  # refused before the append
    p.append_records_to_leader(batch(1), required_acks=1)
    assert p.check_enough_replicas_reach_offset(1) == (True, errors.NotEnoughReplicasAfterAppendError)


def test_epoch_fencing_and_leadership_loss(tmp_path) -> None:
    clock, proposals = Clock(), Proposals()
    p = leader(tmp_path, clock, proposals)
    p.check_leader_epoch(5)
    p.check_leader_epoch(-1)
    with pytest.raises(errors.FencedLeaderEpochError):
        p.check_leader_epoch(4)
    with pytest.raises(errors.UnknownLeaderEpochError):
        p.check_leader_epoch(6)
    p.append_records_to_leader(batch(2), required_acks=-1)
    assert p.make_follower(PartitionState(leader=2, leader_epoch=6, isr=(2, 3), replicas=(1, 2, 3)))
    with pytest.raises(errors.NotLeaderOrFollowerError):
        p.append_records_to_leader(batch(1), required_acks=1)
    assert p.check_enough_replicas_reach_offset(2) == (True, errors.NotLeaderOrFollowerError)
    # a follower keeps its data: the fetcher decides what to truncate (KIP-101)
    assert p.log.log_end_offset == 2


def test_a_new_leader_epoch_starts_at_the_log_end(tmp_path) -> None:
    clock, proposals = Clock(), Proposals()
    p = leader(tmp_path, clock, proposals, epoch=0)
    p.append_records_to_leader(batch(3), required_acks=1)
    p.make_follower(PartitionState(leader=2, leader_epoch=1, isr=(1, 2), replicas=(1, 2, 3)))
    p.make_leader(PartitionState(leader=1, leader_epoch=2, isr=(1, 2), replicas=(1, 2, 3)))
    assert [(e.epoch, e.start_offset) for e in p.log.leader_epoch_cache.epoch_entries()] == [(0, 0), (2, 3)]


def follower(tmp_path, clock: Clock) -> Partition:
    plog = UnifiedLog(tmp_path / "t-0", LogConfig(), clock=clock)
    p = Partition(TP, plog, 2, clock_ms=clock)
    p.make_follower(PartitionState(leader=1, leader_epoch=5, isr=(1, 2), replicas=(1, 2)))
    return p


def leader_batch(base_offset: int, n: int) -> bytes:
    return build_batch([(b"k", b"v", [], 1_700_000_000_000 + i) for i in range(n)], base_offset=base_offset,
                       partition_leader_epoch=5)


def test_follower_appends_the_leaders_batches_and_takes_its_high_watermark_and_log_start(tmp_path) -> None:
    p = follower(tmp_path, Clock())
    answer = memoryview(leader_batch(0, 3) + leader_batch(3, 2))  # a view of the response, as the fetcher has it
    assert p.append_records_to_follower(answer, leader_high_watermark=9, leader_log_start_offset=0)
    # the leader's offsets and epochs as they are; the high watermark never past this log's end
    assert (p.log.log_end_offset, p.log.high_watermark, p.log.log_start_offset) == (5, 5, 0)
    assert p.log.leader_epoch_cache.epoch_entries() == [(5, 0)]
    # an answer without records: a lower leader high watermark lowers ours (Kafka's follower takes the
    # leader's), a later log start moves ours
    assert p.append_records_to_follower(b"", leader_high_watermark=3, leader_log_start_offset=2)
    assert (p.log.high_watermark, p.log.log_start_offset) == (3, 2)
    assert not p.append_records_to_follower(b"", leader_high_watermark=3, leader_log_start_offset=2)
    # the leader's log start beyond our high watermark: ours stops at the high watermark
    assert p.append_records_to_follower(leader_batch(5, 2), leader_high_watermark=6, leader_log_start_offset=7)
    assert (p.log.log_end_offset, p.log.high_watermark, p.log.log_start_offset) == (7, 6, 6)


def test_an_empty_follower_log_starting_inside_the_leaders_batch_restarts_at_the_batch(tmp_path) -> None:
    p = follower(tmp_path, Clock())
    p.log.truncate_fully_and_start_at(4)  # the leader's log start, moved inside a batch by DeleteRecords
    p.append_records_to_follower(leader_batch(2, 5), leader_high_watermark=7, leader_log_start_offset=4)
    assert (p.log.log_end_offset, p.log.high_watermark, p.log.log_start_offset) == (7, 7, 4)
    # the same batch again overlaps a log that is not empty: refused, the log unchanged
    with pytest.raises(errors.UnexpectedAppendOffsetError):
        p.append_records_to_follower(leader_batch(2, 5), leader_high_watermark=7, leader_log_start_offset=4)
    assert p.log.log_end_offset == 7


def test_whole_batches_drops_a_trailing_partial_batch() -> None:
    a, b = batch(2), batch(3)
    assert bytes(whole_batches(a + b)) == a + b
    assert bytes(whole_batches(a + b[:-1])) == a
    assert bytes(whole_batches(a + b[:7])) == a
    assert bytes(whole_batches(b"")) == b""
