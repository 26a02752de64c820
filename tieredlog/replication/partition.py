"""One partition's replication state on this broker: Kafka's ``Partition``.

The leader tracks every follower's log end offset, keeps the ISR (proposing changes to the
controller, which writes them to ZooKeeper), and moves the high watermark to the smallest log end
offset of the ISR. A follower records who leads at which epoch; its fetcher brings the leader's
answers, which the follower appends here with the leader's high watermark and log start offset.

Everything here runs on the event loop and only touches the log through its own lock, so it never
waits on a disk or a network: ISR changes leave as proposals (``IsrChangeSender``) answered later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Protocol

from tieredlog.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnexpectedAppendOffsetError,
    UnknownLeaderEpochError,
)
from tieredlog.log.types import AppendOrigin, LogAppendInfo, TopicPartition
from tieredlog.log.unified_log import UnifiedLog

log = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the controller decided for a partition (a LeaderAndIsr partition state)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0  # the state znode's version: AlterPartition names it to be applied
    controller_epoch: int = 0
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    is_new: bool = False


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    log_end_offset: int = -1
    log_start_offset: int = -1
    # the follower was caught up at this time: the ISR shrinks when it is older than replica.lag.time.max.ms
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class IsrChange:
    """A proposed ISR, sent to the controller in an AlterPartition request."""

    tp: TopicPartition
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


class IsrChangeSender(Protocol):
    """Where a leader's ISR proposals go (the AlterPartition manager). ``submit`` must not block; the
    answer comes back through ``Partition.on_isr_change_answered``."""

    def submit(self, partition: "Partition", change: IsrChange) -> None: ...


class IsrChangeListener(Protocol):
    """Told of every ISR change the controller accepted (Kafka's IsrChangeListener: the replica
    manager's IsrExpandsPerSec / IsrShrinksPerSec)."""

    def mark_expand(self) -> None: ...

    def mark_shrink(self) -> None: ...


class Partition:
    def __init__(self, tp: TopicPartition, log: UnifiedLog, local_broker_id: int, *,
                 clock_ms: Callable[[], int], isr_sender: IsrChangeSender | None = None,
                 isr_listener: IsrChangeListener | None = None) -> None:
        self.tp = tp
        self.log = log
        self.local_broker_id = local_broker_id
        self._clock_ms = clock_ms
        self._isr_sender = isr_sender
        self._isr_listener = isr_listener
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        # an ISR sent to the controller and not answered yet (Kafka's PendingExpandIsr/PendingShrinkIsr):
        # no second change leaves meanwhile, and the HW counts its members as maximal ISR
        self.pending_isr: tuple[int, ...] | None = None
        self.remote_replicas: dict[int, ReplicaState] = {}

    @classmethod
    def sole_replica(cls, tp: TopicPartition, log: UnifiedLog, broker_id: int, clock_ms: Callable[[], int]) -> "Partition":
        """A broker without a cluster leads every partition alone, at epoch 0, forever."""
        p = cls(tp, log, broker_id, clock_ms=clock_ms)
        p.leader_id = broker_id
        p.leader_epoch = 0
        p.replicas = (broker_id,)
        p.isr = frozenset((broker_id,))
        return p

    # ---- leadership -------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    def make_leader(self, state: PartitionState) -> bool:
        """Become (or stay) leader as the controller says. True when this is a new leadership or a new
        epoch; a new epoch starts at the current log end offset in the leader-epoch cache."""
        now = self._clock_ms()
        new_epoch = state.leader_epoch != self.leader_epoch
        was_leader = self.is_leader
        self._apply(state)
        if new_epoch:
            self.log.leader_epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)
        leo = self.log.log_end_offset
        if not was_leader or new_epoch:
            # Kafka's resetReplicaState: followers' offsets are unknown until they fetch again; ISR
            # members count as caught up now so they get a full replica.lag.time.max.ms to fetch
            self.remote_replicas = {
                r: ReplicaState(last_caught_up_time_ms=now if r in self.isr else 0, last_fetch_leader_log_end_offset=leo,
                                last_fetch_time_ms=now)
                for r in self.replicas if r != self.local_broker_id
            }
        else:
            for r in self.replicas:
                if r != self.local_broker_id and r not in self.remote_replicas:
                    self.remote_replicas[r] = ReplicaState(last_fetch_time_ms=now)
            for r in list(self.remote_replicas):
                if r not in self.replicas:
                    del self.remote_replicas[r]
        self.maybe_increment_high_watermark()
        return not was_leader or new_epoch

    def make_follower(self, state: PartitionState) -> bool:
        """Follow ``state.leader``. True when the leader or the epoch changed (the fetcher starts again)."""
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self._apply(state)
        self.remote_replicas = {}
        return changed

    def _apply(self, state: PartitionState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.controller_epoch = state.controller_epoch
        self.replicas = tuple(state.replicas)
        self.isr = frozenset(state.isr)
        self.pending_isr = None

    def check_leader_epoch(self, current_leader_epoch: int, require_leader: bool = True) -> None:
        """KIP-320: a request naming an older epoch is fenced, a newer one is unknown here yet."""
        if require_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of {self.tp}")
        if self.leader_id == NO_LEADER or self.local_broker_id not in self.replicas:
            # stopped, or without a leader: a follower's log is not known to be on the leader's lineage
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is neither leader nor follower of {self.tp}")
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.tp}: leader epoch {current_leader_epoch} is older than the current {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{self.tp}: leader epoch {current_leader_epoch} is newer than the current {self.leader_epoch}")

    # ---- produce ----------------------------------------------------------------------------------

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    def append_records_to_leader(self, records: bytes | bytearray, required_acks: int,
                                 origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of {self.tp}")
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            # checked before the append, so nothing is written that could not be acknowledged
            raise NotEnoughReplicasError(
                f"The size of the current ISR {sorted(self.isr)} is insufficient to satisfy the min.isr requirement "
                f"of {self.min_insync_replicas} for partition {self.tp}")
        info = self.log.append_as_leader(records, self.leader_epoch, origin)
        self.maybe_increment_high_watermark()
        return info

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, type[Exception] | None]:
        """(done, error) for an acks=all append that ended at ``required_offset``: done once the high
        watermark passed it; NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas
        meanwhile; NOT_LEADER_OR_FOLLOWER when leadership moved (the write may be truncated)."""
        if not self.is_leader:
            return True, NotLeaderOrFollowerError
        if self.log.high_watermark >= required_offset:
            if len(self.isr) < self.min_insync_replicas:
                return True, NotEnoughReplicasAfterAppendError
            return True, None
        return False, None

    # ---- follower ---------------------------------------------------------------------------------

    def append_records_to_follower(self, records: bytes | bytearray | memoryview, leader_high_watermark: int,
                                   leader_log_start_offset: int) -> bool:
        """One partition of the leader's fetch answer (Kafka's appendRecordsToFollowerOrFutureReplica,
        and the high watermark and log start updates its ReplicaFetcherThread makes after it).
        ``records`` are whole batches with the leader's offsets and epochs, possibly none; they are
        only read. The high watermark is the leader's, within this log's start and end: lower too, as
        Kafka's follower takes it (a new leader's may be behind the old one's until its followers
        catch up); the log start offset follows the leader's up to the high watermark. True when the
        high watermark changed (consumers reading this follower, KIP-392, wait on it)."""
        plog = self.log
        if len(records):
            self._append_as_follower(records)
        before = plog.high_watermark
        moved = plog.update_high_watermark(leader_high_watermark) != before
        if leader_log_start_offset > plog.log_start_offset:
            plog.maybe_increment_log_start_offset(min(leader_log_start_offset, plog.high_watermark),
                                                  "leader_offset_increment")
        return moved

    def _append_as_follower(self, records: bytes | bytearray | memoryview) -> None:
        plog = self.log
        try:
            plog.append_as_follower(records)
        except UnexpectedAppendOffsetError as e:
            end = plog.log_end_offset
            # An empty log started at the leader's log start, which DeleteRecords may have put inside a
            # batch: the leader answers that whole batch. Kafka restarts the log at the batch's base.
            if not (end == plog.log_start_offset and e.first_offset < end <= e.last_offset):
                raise
            log.info("%s: the leader's first batch starts at %d, below this empty log's start %d: "
                     "restarting the log there", self.tp, e.first_offset, end)
            plog.truncate_fully_and_start_at(e.first_offset)
            plog.append_as_follower(records)

    # ---- DeleteRecords ----------------------------------------------------------------------------

    def delete_records_on_leader(self, offset: int) -> int:
        """Move the leader's log start offset to ``offset`` (-1: the high watermark), as Kafka's
        deleteRecordsOnLeader; the offset the request needs every live replica's log start to reach."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"Leader not local for partition {self.tp} on broker {self.local_broker_id}")
        if not self.log.config.delete:
            raise PolicyViolationError(f"Records of partition {self.tp} can not be deleted due to the configured policy")
        required = self.log.high_watermark if offset == -1 else offset
        if required < 0:
            raise OffsetOutOfRangeError(f"The offset {required} for partition {self.tp} is not valid")
        self.log.maybe_increment_log_start_offset(required, "client delete records")
        return required

    def low_watermark_if_leader(self, is_broker_alive: Callable[[int], bool]) -> int:
        """The lowest log start offset among this leader and its followers on live brokers: a
        DeleteRecords is done once it reaches the requested offset. A follower that has not fetched
        since this leadership began counts as -1 (unknown)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"Leader not local for partition {self.tp} on broker {self.local_broker_id}")
        low = self.log.log_start_offset
        for r, state in self.remote_replicas.items():
            if state.log_start_offset < low and is_broker_alive(r):
                low = state.log_start_offset
        return low

    # ---- followers' fetches -----------------------------------------------------------------------

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, follower_log_start_offset: int,
                                    leader_end_offset: int) -> bool:
        """A follower fetched from ``fetch_offset``: it has everything below it. ``leader_end_offset`` is
        the leader's log end offset when the fetch was served. True when the high watermark moved."""
        state = self.remote_replicas.get(replica_id)
        if state is None:
            return False  # not (or no longer) an assigned replica: Kafka ignores it too
        now = self._clock_ms()
        if fetch_offset >= leader_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, now)
        elif fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
        state.log_end_offset = fetch_offset
        state.log_start_offset = follower_log_start_offset
        state.last_fetch_leader_log_end_offset = leader_end_offset
        state.last_fetch_time_ms = now
        self._maybe_expand_isr(replica_id, state)
        return self.maybe_increment_high_watermark()

    def _maybe_expand_isr(self, replica_id: int, state: ReplicaState) -> None:
        if not self.is_leader or replica_id in self.isr or self.pending_isr is not None:
            return
        if replica_id not in self.replicas:
            return
        # caught up to the HW, and to the start of this leader's epoch, so its log has the same lineage
        epoch_start = self.log.leader_epoch_cache.epoch_entry(self.leader_epoch)
        start = epoch_start.start_offset if epoch_start is not None else 0
        if state.log_end_offset >= self.log.high_watermark and state.log_end_offset >= start:
            self._propose_isr(tuple(sorted(self.isr | {replica_id})), f"replica {replica_id} caught up")

    def maximal_isr(self) -> frozenset[int]:
        # the HW waits for members being added too, so it never moves past what a new member lacks
        if self.pending_isr is None:
            return self.isr
        return self.isr | frozenset(self.pending_isr)

    def maybe_increment_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        leo = self.log.log_end_offset
        new_hw = leo
        for r in self.maximal_isr():
            if r == self.local_broker_id:
                continue
            state = self.remote_replicas.get(r)
            end = state.log_end_offset if state is not None else -1
            new_hw = min(new_hw, end)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    # ---- ISR maintenance --------------------------------------------------------------------------

    def out_of_sync_replicas(self, max_lag_ms: int) -> set[int]:
        now = self._clock_ms()
        out = set()
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            state = self.remote_replicas.get(r)
            if state is None or now - state.last_caught_up_time_ms > max_lag_ms:
                out.add(r)
        return out

    def maybe_shrink_isr(self, max_lag_ms: int) -> None:
        """Drop ISR members that have not caught up within ``replica.lag.time.max.ms``."""
        if not self.is_leader or self.pending_isr is not None:
            return
        lagging = self.out_of_sync_replicas(max_lag_ms)
        if lagging:
            self._propose_isr(tuple(sorted(self.isr - lagging)),
                              f"replica(s) {sorted(lagging)} out of sync for over {max_lag_ms} ms")

    def _propose_isr(self, new_isr: tuple[int, ...], why: str) -> None:
        if self._isr_sender is None:
            return
        log.info("%s: proposing ISR %s (was %s): %s", self.tp, list(new_isr), sorted(self.isr), why)
        self.pending_isr = new_isr
        self._isr_sender.submit(self, IsrChange(self.tp, self.leader_epoch, new_isr, self.partition_epoch))

    def on_isr_change_answered(self, change: IsrChange, result: PartitionState | None) -> bool:
        """The controller's answer to ``change``: the partition's new state, or None when it refused or
        could not be reached (the proposal is dropped; the next check proposes again). True when the
        high watermark moved."""
        if self.pending_isr != change.new_isr or self.leader_epoch != change.leader_epoch:
            return False  # a LeaderAndIsr overtook the answer: it decides
        self.pending_isr = None
        if result is None:
            return False
        if result.leader_epoch < self.leader_epoch or (
                result.leader_epoch == self.leader_epoch and result.partition_epoch < self.partition_epoch):
            return False
        old_isr, self.isr = self.isr, frozenset(result.isr)
        self.leader_epoch = result.leader_epoch
        self.partition_epoch = result.partition_epoch
        if self._isr_listener is not None:
            if self.isr > old_isr:
                self._isr_listener.mark_expand()
            elif self.isr < old_isr:
                self._isr_listener.mark_shrink()
        log.info("%s: ISR is now %s (partition epoch %d)", self.tp, sorted(self.isr), self.partition_epoch)
        return self.maybe_increment_high_watermark()

    def __repr__(self) -> str:
        return (f"Partition({self.tp}, leader={self.leader_id}, epoch={self.leader_epoch}, isr={sorted(self.isr)}, "
                f"replicas={list(self.replicas)})")
