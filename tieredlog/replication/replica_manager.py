"""The broker's side of replication: Kafka's ``ReplicaManager``.

It applies the controller's LeaderAndIsr and StopReplica decisions to this broker's partitions
(making leaders, starting follower fetchers), serves the produce path (append on the leader, acks=all
parked until the ISR has the data) and records followers' fetches so the high watermark moves.

Runs on the event loop. Creating, truncating and deleting logs touch the disk and run on the default
executor; nothing here waits on a network.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.errors import KafkaError, NotLeaderOrFollowerError, RequestTimedOutError, UnknownTopicOrPartitionError
from tieredlog.log.config import LONG_MAX, LogConfig
from tieredlog.log.types import AppendOrigin, LogAppendInfo, TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.replication.delayed_produce import DelayedDeleteRecords, DelayedProduce
from tieredlog.replication.fetcher import FetcherConfig, RemoteAuxStateSource, ReplicaFetcherManager
from tieredlog.replication.partition import IsrChangeSender, Partition, PartitionState
from tieredlog.replication.replica_selector import RackAwareReplicaSelector, ReplicaView
from tieredlog.replication.replication_quota import FOLLOWER, LEADER, ReplicationQuotaManager

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")


class ReplicaLogs(Protocol):
    """The part of the LogManager replication needs. ``get_or_create_log`` and ``delete_log`` touch the
    disk: they are called on an executor thread."""

    def get_log(self, tp: TopicPartition) -> UnifiedLog | None: ...

    def get_or_create_log(self, tp: TopicPartition, topic_id: uuid.UUID | None = None,
                          config: LogConfig | None = None) -> UnifiedLog: ...

    def delete_log(self, tp: TopicPartition) -> bool: ...

    def checkpoint_log_start_offsets(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartition:
    tp: TopicPartition
    topic_id: uuid.UUID | None
    state: PartitionState


# (tp, is_leader, leader_epoch): the group coordinator and the remote tier follow leadership
LeadershipListener = Callable[[TopicPartition, bool, int], None]
# (tp, replicas as this broker last knew them, delete): StopReplica, before the log is deleted
StopListener = Callable[[TopicPartition, tuple[int, ...], bool], None]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ReplicaManager:
    def __init__(self, broker_id: int, logs: ReplicaLogs, *, log_config_for: Callable[[str], LogConfig],
                 fetcher_config: FetcherConfig, replica_lag_time_max_ms: int,
                 on_high_watermark_moved: Callable[[TopicPartition], None],
                 isr_sender: IsrChangeSender | None = None, clock_ms: Callable[[], int] = _now_ms,
                 replica_selector: RackAwareReplicaSelector | None = None,
                 leader_throttled_rate: int = LONG_MAX, follower_throttled_rate: int = LONG_MAX,
                 quota_window_s: float = 1.0, is_broker_alive: Callable[[int], bool] | None = None) -> None:
        self.broker_id = broker_id
        self._logs = logs
        self._log_config_for = log_config_for
        self._clock_ms = clock_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._on_hw_moved_cb = on_high_watermark_moved
        self.isr_sender = isr_sender
        self.partitions: dict[TopicPartition, Partition] = {}
        self.delayed_produce = DelayedProduce()
        self.delayed_delete_records = DelayedDeleteRecords()
        # a DeleteRecords waits only for followers on live brokers (None: every broker counts as live)
        self._is_broker_alive = is_broker_alive or (lambda _broker_id: True)
        # KIP-73: the leader's fetch path and the follower fetchers hold back throttled replicas
        self.leader_quota = ReplicationQuotaManager(LEADER, broker_id, leader_throttled_rate, quota_window_s)
        self.follower_quota = ReplicationQuotaManager(FOLLOWER, broker_id, follower_throttled_rate, quota_window_s)
        # KIP-392 (None: consumers read from leaders only)
        self.replica_selector = replica_selector
        self.fetchers = ReplicaFetcherManager(broker_id, self, fetcher_config)
        self.leadership_listeners: list[LeadershipListener] = []
        # told before StopReplica stops (and maybe deletes) a partition here; the remote tier's tasks stop
        self.stop_listeners: list[StopListener] = []
        # the remote tier a follower rebuilds from when its leader's data is tiered (None: no remote tier)
        self.remote_aux: RemoteAuxStateSource | None = None
        self._isr_task: asyncio.Task | None = None
        # one LeaderAndIsr / StopReplica at a time: each awaits log creation on an executor
        self._state_lock = asyncio.Lock()
        # IsrExpandsPerSec / IsrShrinksPerSec: counted on the loop, read by the metrics scrape
        self.isr_expands = 0
        self.isr_shrinks = 0

    # ---- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._isr_task = asyncio.get_running_loop().create_task(self._isr_expiration_loop(), name="isr-expiration")

    async def shutdown(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
        await self.fetchers.shutdown()

    async def _isr_expiration_loop(self) -> None:
        # Kafka checks every replica.lag.time.max.ms / 2
        interval = max(self.replica_lag_time_max_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            for p in list(self.partitions.values()):
                if p.is_leader:
                    try:
                        p.maybe_shrink_isr(self.replica_lag_time_max_ms)
                    except Exception:  # noqa: BLE001 - one partition must not stop the check of the others
                        log.exception("ISR check of %s failed", p.tp)

    # ---- lookups ----------------------------------------------------------------------------------

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def add_sole_replica(self, tp: TopicPartition, plog: UnifiedLog) -> Partition:
        """Without a cluster: this broker leads ``tp`` alone."""
        p = Partition.sole_replica(tp, plog, self.broker_id, self._clock_ms)
        self.partitions[tp] = p
        return p

    def remove_partition(self, tp: TopicPartition) -> None:
        p = self.partitions.pop(tp, None)
        if p is not None:
            self.fetchers.remove_partitions([tp])
            self.high_watermark_moved(tp)

    def leader_partition(self, tp: TopicPartition) -> Partition:
        p = self.partitions.get(tp)
        if p is None:
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {tp}")
        if not p.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {tp}")
        return p

    # ---- produce ----------------------------------------------------------------------------------

    def append_to_leader(self, tp: TopicPartition, records: bytes | bytearray, required_acks: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        p = self.leader_partition(tp)
        before = p.log.high_watermark
        info = p.append_records_to_leader(records, required_acks, origin)
        if p.log.high_watermark != before:
            self._on_hw_moved_cb(tp)
        return info

    async def wait_for_acks(self, tp: TopicPartition, required_offset: int, timeout_s: float) -> type[Exception] | None:
        """acks=all: wait until the high watermark reaches ``required_offset`` (the append's next offset)."""
        p = self.partitions.get(tp)
        if p is None:
            return NotLeaderOrFollowerError

        def check() -> tuple[bool, type[Exception] | None]:
            current = self.partitions.get(tp)
            if current is not p:
                return True, NotLeaderOrFollowerError
            return p.check_enough_replicas_reach_offset(required_offset)

        return await self.delayed_produce.wait(tp, check, timeout_s)

    def high_watermark_moved(self, tp: TopicPartition) -> None:
        """Wake what waits on ``tp``: parked consumer fetches, acks=all appends and DeleteRecords."""
        self._on_hw_moved_cb(tp)
        self.delayed_produce.check(tp)
        self.delayed_delete_records.check(tp)

    # ---- DeleteRecords ----------------------------------------------------------------------------

    async def delete_records(self, tp: TopicPartition, offset: int, timeout_s: float,
                             topic_exists: bool) -> tuple[int, type[Exception] | None]:
        """Kafka's deleteRecords for one partition: only its leader moves the log start offset, then the
        answer waits (up to ``timeout_s``) until every live replica's log start offset has reached it.
        Returns (low watermark, error class or None); errors before the wait raise. ``topic_exists``:
        the partition is in the metadata, so a broker without its replica answers NOT_LEADER_OR_FOLLOWER
        (the client refreshes its metadata and retries on the leader)."""
        p = self.partitions.get(tp)
        if p is None:
            if topic_exists:
                raise NotLeaderOrFollowerError(f"broker {self.broker_id} hosts no replica of {tp}")
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {tp}")
        required = p.delete_records_on_leader(offset)
        initial = p.low_watermark_if_leader(self._is_broker_alive)
        reached = [initial]

        def check() -> tuple[bool, type[Exception] | None]:
            current = self.partitions.get(tp)
            if current is None:
                return True, UnknownTopicOrPartitionError
            if current is not p or not p.is_leader:
                return True, NotLeaderOrFollowerError
            reached[0] = p.low_watermark_if_leader(self._is_broker_alive)
            return reached[0] >= required, None

        error = await self.delayed_delete_records.wait(tp, check, timeout_s)
        if error is None:
            return reached[0], None
        # a timed-out request reports the low watermark it started from, as Kafka's
        return (initial if error is RequestTimedOutError else -1), error

    # ---- consumers' fetches (KIP-392) ------------------------------------------------------------

    def preferred_read_replica(self, partition: Partition, client_rack: str | None, fetch_offset: int,
                               live_racks: Mapping[int, str | None]) -> int:
        """The follower a consumer on ``client_rack`` fetching ``fetch_offset`` should read from, or -1
        (read here). Kafka's findPreferredReadReplica: only on the leader, with a selector, among the
        live followers that are in the ISR and hold the offset (an out-of-sync one could keep the
        consumer behind indefinitely)."""
        selector = self.replica_selector
        if selector is None or not partition.is_leader or self.broker_id not in live_racks:
            return -1
        now = self._clock_ms()
        leader = ReplicaView(self.broker_id, live_racks[self.broker_id], partition.log.log_end_offset, 0)
        views = [leader]
        for r, state in partition.remote_replicas.items():
            if (r in partition.isr and r in live_racks and state.log_end_offset >= fetch_offset
                    and 0 <= state.log_start_offset <= fetch_offset):
                views.append(ReplicaView(r, live_racks[r], state.log_end_offset, now - state.last_caught_up_time_ms))
        chosen = selector.select(client_rack, leader, views)
        return -1 if chosen.broker_id == self.broker_id else chosen.broker_id

    def update_replication_throttles(self, leader_rate: int, follower_rate: int) -> None:
        """leader.replication.throttled.rate / follower.replication.throttled.rate changed (dynamic)."""
        self.leader_quota.update_quota(leader_rate)
        self.follower_quota.update_quota(follower_rate)

    # ---- followers' fetches (on the leader) -------------------------------------------------------

    def update_follower_fetch_state(self, tp: TopicPartition, replica_id: int, fetch_offset: int,
                                    follower_log_start_offset: int, leader_end_offset: int) -> None:
        p = self.partitions.get(tp)
        if p is None or not p.is_leader:
            return
        if p.update_follower_fetch_state(replica_id, fetch_offset, follower_log_start_offset, leader_end_offset):
            self.high_watermark_moved(tp)
        else:
            # the follower's log start offset may have moved: a parked DeleteRecords may be done
            self.delayed_delete_records.check(tp)

    def mark_expand(self) -> None:
        self.isr_expands += 1

    def mark_shrink(self) -> None:
        self.isr_shrinks += 1

    def isr_change_answered(self, tp: TopicPartition) -> None:
        # an ISR change may move the HW, and may fail or complete acks=all waiters (min.insync.replicas)
        self.high_watermark_moved(tp)

    async def rebuild_from_remote(self, partition: Partition, next_offset: int, log_start_offset: int,
                                  epochs: list, producer_snapshot: bytes | None) -> None:
        """A follower's log restarts at ``next_offset`` over the remote tier (KIP-405); the log start
        offset below it is checkpointed at once, so a crash cannot forget that the history is remote."""

        def rebuild() -> None:
            partition.log.rebuild_from_remote(next_offset, log_start_offset, epochs, producer_snapshot)
            self._logs.checkpoint_log_start_offsets()

        await asyncio.get_running_loop().run_in_executor(None, rebuild)

    # ---- the controller's decisions ---------------------------------------------------------------

    async def become_leader_or_follower(self, controller_id: int, controller_epoch: int,
                                        partitions: list[LeaderAndIsrPartition],
                                        live_leaders: dict[int, tuple[str, int]]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's becomeLeaderOrFollower for one LeaderAndIsr request (its controller epoch already
        checked). Returns each partition's error code."""
        async with self._state_lock:
            return await self._become_leader_or_follower(controller_id, controller_epoch, partitions, live_leaders)

    async def _become_leader_or_follower(self, controller_id: int, controller_epoch: int,
                                         partitions: list[LeaderAndIsrPartition],
                                         live_leaders: dict[int, tuple[str, int]]) -> dict[TopicPartition, ErrorCode]:
        loop = asyncio.get_running_loop()
        result: dict[TopicPartition, ErrorCode] = {}
        leaders: list[tuple[Partition, PartitionState]] = []
        followers: list[tuple[Partition, PartitionState]] = []
        for lp in partitions:
            tp, state = lp.tp, lp.state
            current = self.partitions.get(tp)
            if current is not None and state.leader_epoch < current.leader_epoch:
                state_change_log.info(
                    "Ignoring LeaderAndIsr request from controller %d with correlation epoch %d for partition %s "
                    "since its associated leader epoch %d is smaller than the current leader epoch %d",
                    controller_id, controller_epoch, tp, state.leader_epoch, current.leader_epoch)
                result[tp] = ErrorCode.stale_controller_epoch
                continue
            if self.broker_id not in state.replicas:
                state_change_log.info("Ignoring LeaderAndIsr request from controller %d for partition %s: "
                                      "this broker is not in its replicas %s", controller_id, tp, list(state.replicas))
                result[tp] = ErrorCode.unknown_topic_or_partition
                continue
            if current is None:
                try:
                    plog = await loop.run_in_executor(
                        None, self._logs.get_or_create_log, tp, lp.topic_id, self._log_config_for(tp.topic))
                except KafkaError as exc:
                    result[tp] = exc.code
                    log.error("cannot create the log of %s: %s", tp, exc)
                    continue
                except OSError as exc:
                    result[tp] = ErrorCode.kafka_storage_error
                    log.error("cannot create the log of %s: %s", tp, exc)
                    continue
                current = self.partitions.get(tp)  # another request may have made it meanwhile
                if current is None:
                    current = Partition(tp, plog, self.broker_id, clock_ms=self._clock_ms, isr_sender=self.isr_sender,
                                        isr_listener=self)
                    self.partitions[tp] = current
            (leaders if state.leader == self.broker_id else followers).append((current, state))
            result[tp] = ErrorCode.none

        if leaders:
            self.fetchers.remove_partitions([p.tp for p, _ in leaders])
        for p, state in leaders:
            if p.make_leader(state):
                state_change_log.info("Leader %s with topic id %s starts at leader epoch %d from offset %d with "
                                      "partition epoch %d, high watermark %d, ISR %s, replicas %s (controller %d, epoch %d)",
                                      p.tp, p.log.topic_id, state.leader_epoch, p.log.log_end_offset,
                                      state.partition_epoch, p.log.high_watermark, list(state.isr),
                                      list(state.replicas), controller_id, controller_epoch)
                self._notify_leadership(p.tp, True, state.leader_epoch)
            self.high_watermark_moved(p.tp)

        to_fetch: dict[TopicPartition, tuple[Partition, tuple[str, int]]] = {}
        for p, state in followers:
            changed = p.make_follower(state)
            if changed:
                # a leader resigning, or a new follower: both stop leading work and start following
                self._notify_leadership(p.tp, False, state.leader_epoch)
            # parked acks=all appends of a former leader fail now: the new leader may truncate them
            self.high_watermark_moved(p.tp)
            endpoint = live_leaders.get(state.leader)
            if endpoint is None:
                state_change_log.info("Follower %s: leader %d is not live, not fetching (epoch %d)",
                                      p.tp, state.leader, state.leader_epoch)
                self.fetchers.remove_partitions([p.tp])
                continue
            if changed or not self.fetchers.is_fetching(p.tp):
                state_change_log.info("Follower %s starts at leader epoch %d from offset %d with partition epoch %d "
                                      "and high watermark %d; leader %d (controller %d, epoch %d)",
                                      p.tp, state.leader_epoch, p.log.log_end_offset, state.partition_epoch,
                                      p.log.high_watermark, state.leader, controller_id, controller_epoch)
                to_fetch[p.tp] = (p, endpoint)
        if to_fetch:
            self.fetchers.add_partitions(to_fetch)
        return result

    async def stop_replicas(self, controller_id: int, controller_epoch: int,
                            partitions: dict[TopicPartition, tuple[int, bool]]) -> dict[TopicPartition, ErrorCode]:
        """StopReplica: (leader epoch, delete) per partition. Deleted logs go through the LogManager's
        asynchronous delete (renamed now, removed in the background)."""
        async with self._state_lock:
            loop = asyncio.get_running_loop()
            result: dict[TopicPartition, ErrorCode] = {}
            self.fetchers.remove_partitions(list(partitions))
            for tp, (leader_epoch, delete) in partitions.items():
                p = self.partitions.get(tp)
                if p is not None and 0 <= leader_epoch < p.leader_epoch:
                    result[tp] = ErrorCode.fenced_leader_epoch
                    continue
                if p is not None and p.is_leader:
                    self._notify_leadership(tp, False, p.leader_epoch)
                for listener in self.stop_listeners:
                    try:
                        listener(tp, p.replicas if p is not None else (), delete)
                    except Exception:  # noqa: BLE001 - the replica stops all the same
                        log.exception("stop listener failed for %s", tp)
                if delete:
                    self.partitions.pop(tp, None)
                    self.high_watermark_moved(tp)
                    if self._logs.get_log(tp) is not None:
                        await loop.run_in_executor(None, self._logs.delete_log, tp)
                elif p is not None:
                    p.leader_id = -1  # neither leader nor fetching until the controller says again
                    self.high_watermark_moved(tp)
                state_change_log.info("Stopped replica %s (delete=%s) for controller %d epoch %d",
                                      tp, delete, controller_id, controller_epoch)
                result[tp] = ErrorCode.none
            return result

    def _notify_leadership(self, tp: TopicPartition, is_leader: bool, epoch: int) -> None:
        for listener in self.leadership_listeners:
            try:
                listener(tp, is_leader, epoch)
            except Exception:  # noqa: BLE001 - a listener's failure must not undo the state change
                log.exception("leadership listener failed for %s", tp)
