"""The broker's side of replication: Kafka's ``ReplicaManager``.

It applies the controller's LeaderAndIsr and StopReplica decisions to this broker's partitions
(making leaders, starting follower fetchers) and owns the data path: the produce path (append on
the leader, acks=all parked until the ISR has the data) and the fetch path (local or remote-tier
reads, the fetch's byte budgets, fetches parked for ``min_bytes``), recording followers' fetches so
the high watermark moves. The API handlers only translate requests and responses.

Runs on the event loop. Creating, truncating and deleting logs touch the disk and run on the default
executor; nothing here waits on a network.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.errors import (
    InvalidTopicError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from tieredlog.formats.errors import InvalidRecordError
from tieredlog.log.config import LONG_MAX, LogConfig
from tieredlog.log.segment import PagesNotCached
from tieredlog.log.types import AppendOrigin, FetchIsolation, LogAppendInfo, TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.replication.data_path import (
    AppendVerification,
    DataPathMetrics,
    FetchParams,
    FetchPurgatory,
    PartitionAppendResult,
    PartitionRead,
    TopicLookup,
    Unverified,
    aborted_of,
    diverging_epoch,
    error_code_of,
    fill_offsets,
    read_size,
    records_size,
)
from tieredlog.replication.delayed_fetch import PartitionWatchers
from tieredlog.replication.delayed_produce import DelayedDeleteRecords, DelayedProduce
from tieredlog.replication.delayed_remote_fetch import RemoteFetchStats, RemoteReader, read_remote
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


def _acks_failed(result: PartitionAppendResult, error: type[Exception] | None) -> None:
    if error is not None:
        result.error_code = error.code  # type: ignore[attr-defined]
        result.error_message = None


class ReplicaManager:
    def __init__(self, broker_id: int, logs: ReplicaLogs, *, log_config_for: Callable[[str], LogConfig],
                 fetcher_config: FetcherConfig, replica_lag_time_max_ms: int,
                 on_high_watermark_moved: Callable[[TopicPartition], None],
                 isr_sender: IsrChangeSender | None = None, clock_ms: Callable[[], int] = _now_ms,
                 replica_selector: RackAwareReplicaSelector | None = None,
                 leader_throttled_rate: int = LONG_MAX, follower_throttled_rate: int = LONG_MAX,
                 quota_window_s: float = 1.0, is_broker_alive: Callable[[int], bool] | None = None,
                 topics: TopicLookup | None = None, metrics: DataPathMetrics | None = None,
                 fetch_purgatory: FetchPurgatory | None = None,
                 remote_reader: Callable[[], RemoteReader | None] = lambda: None,
                 remote_fetch_max_wait_ms: Callable[[], int] = lambda: 500,
                 live_racks: Callable[[], Mapping[int, str | None]] | None = None,
                 is_shutting_down: Callable[[], bool] = lambda: False) -> None:
        self.broker_id = broker_id
        self._logs = logs
        self.remote_fetch_stats = RemoteFetchStats()
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
        # the data path: what fetches and appends need of the rest of the broker
        self._topics = topics
        self._metrics = metrics
        # fetches short of min_bytes park here; appends and high-watermark moves wake them
        self.fetch_purgatory: FetchPurgatory = fetch_purgatory if fetch_purgatory is not None else PartitionWatchers()
        # the RemoteLogManager once it runs (None: no remote tier)
        self._remote_reader = remote_reader
        self._remote_fetch_max_wait_ms = remote_fetch_max_wait_ms
        self._live_racks = live_racks  # None: no cluster, consumers read from this broker
        self._is_shutting_down = is_shutting_down

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
        return await self.delayed_produce.wait(tp, self._acks_check(tp, required_offset), timeout_s)

    def _acks_check(self, tp: TopicPartition, required_offset: int) -> Callable[[], tuple[bool, type[Exception] | None]]:
        """Whether an acks=all append that ended at ``required_offset`` is done: (done, error)."""
        p = self.partitions.get(tp)

        def check() -> tuple[bool, type[Exception] | None]:
            current = self.partitions.get(tp)
            if p is None or current is not p:
                return True, NotLeaderOrFollowerError
            return p.check_enough_replicas_reach_offset(required_offset)

        return check

    async def append_records(self, entries: list[tuple[TopicPartition, bytes | None]], required_acks: int,
                             timeout_s: float, *, internal_allowed: bool = False,
                             verification: AppendVerification | None = None) -> list[PartitionAppendResult]:
        """Kafka's appendRecords: each partition's records appended on its leader here, in request
        order (the answers line up with ``entries``); a transaction's first batch on a partition
        once ``verification`` confirms it; with acks=all (-1) each answer waits, up to
        ``timeout_s``, until the ISR has its records (the produce purgatory)."""
        results: list[PartitionAppendResult | None] = []
        unverified: list[Unverified] = []
        for i, (tp, records) in enumerate(entries):
            producer = verification.producer_to_verify(tp, records) if verification is not None else None
            if producer is not None and records is not None:
                results.append(None)
                unverified.append((i, tp, records, producer))
            else:
                results.append(self.append_to_local_log(tp, records, required_acks, internal_allowed))
        if verification is not None and unverified:
            append = functools.partial(self.append_to_local_log, required_acks=required_acks,
                                       internal_allowed=internal_allowed)
            for i, res in (await verification.append_verified(unverified, append)).items():
                results[i] = res
        done = [r for r in results if r is not None]
        assert len(done) == len(results), "every partition of the append is answered"
        if required_acks == -1:
            await self._wait_for_isr([(tp, r) for (tp, _), r in zip(entries, done)], timeout_s)
        return done

    def append_to_local_log(self, tp: TopicPartition, records: bytes | None, required_acks: int,
                            internal_allowed: bool = False) -> PartitionAppendResult:
        """One partition's append on its leader; every failure becomes the partition's error code."""
        topic, partition = tp
        topics = self._topics
        plog = topics.get_partition_log(topic, partition) if topics is not None else self._logs.get_log(tp)
        if plog is None:
            return PartitionAppendResult(ErrorCode.unknown_topic_or_partition)
        try:
            meta = topics.get_topic(topic) if topics is not None else None
            if meta is not None and meta.internal and not internal_allowed:
                # As Kafka's ReplicaManager: only the broker appends to its internal topics, so no client
                # forges committed offsets or feeds the coordinators' start-up loads its own bytes.
                raise InvalidTopicError(f"Cannot append to internal topic {topic}")
            if not records:
                raise InvalidRecordError("produce request without records")
            info = self.append_to_leader(tp, records, required_acks)
        except Exception as exc:  # noqa: BLE001 - every failure becomes this partition's error code
            return self._append_failed(tp, plog, exc)
        # fetches parked at the log end (followers', and consumers' of acks=1 data) wake for the new data
        self.fetch_purgatory.notify((topic, partition))
        if self._metrics is not None:
            self._metrics.record_produce(topic, len(records), info.record_count)
        return PartitionAppendResult(ErrorCode.none, info.first_offset, info.log_append_time, info.log_start_offset,
                                     required_offset=info.last_offset + 1)

    def _append_failed(self, tp: TopicPartition, plog: UnifiedLog, exc: Exception) -> PartitionAppendResult:
        code = error_code_of(exc)
        if code == ErrorCode.unknown_server_error:
            log.exception("append to %s-%d failed", tp.topic, tp.partition)
        elif isinstance(exc, OSError):
            log.error("append to %s-%d failed: %s", tp.topic, tp.partition, exc)
        res = PartitionAppendResult(code, log_start_offset=plog.log_start_offset, error_message=str(exc))
        hint = self.partitions.get(tp)
        if code in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch) and hint is not None \
                and hint.leader_id >= 0:
            # KIP-951: the client goes to the new leader without a Metadata round trip
            res.current_leader = (hint.leader_id, hint.leader_epoch)
        if isinstance(exc, KafkaError) and exc.record_errors:
            # KIP-467 (v8+): every record of the refused batch that broke a per-record rule, so a
            # client can fail those records with their own message. A batch refused as a whole
            # (CRC, sizes, counts) names no record, as in Kafka.
            res.record_errors = exc.record_errors
        return res

    async def _wait_for_isr(self, appended: list[tuple[TopicPartition, PartitionAppendResult]], timeout_s: float) -> None:
        """As Kafka's delayedProduceRequestRequired: the appends the ISR already has (every one, where
        this broker is the ISR) are answered at once, without a waiter (a task and loop turns per
        request); the others park in the produce purgatory."""
        waits = []
        for tp, r in appended:
            if r.required_offset is None:
                continue
            check = self._acks_check(tp, r.required_offset)
            done, error = check()
            if done:
                _acks_failed(r, error)
            else:
                waits.append((tp, r, check))
        if len(waits) == 1:
            tp, r, check = waits[0]
            _acks_failed(r, await self.delayed_produce.wait(tp, check, timeout_s))
        elif waits:
            errors = await asyncio.gather(*(self.delayed_produce.wait(tp, check, timeout_s) for tp, _, check in waits))
            for (_tp, r, _check), error in zip(waits, errors):
                _acks_failed(r, error)

    def _log_of(self, topic: str, partition: int) -> UnifiedLog | None:
        if self._topics is not None:
            return self._topics.get_partition_log(topic, partition)
        return self._logs.get_log(TopicPartition(topic, partition))

    # ---- fetches ----------------------------------------------------------------------------------

    async def fetch_messages(self, params: FetchParams, reads: list[PartitionRead],
                             cold_reads: Executor | None = None) -> None:
        """Kafka's fetchMessages: read each partition into its ``data`` from the local log or, below
        the local log start, from the remote tier (the delayed remote fetch); a fetch short of
        ``min_bytes`` parks until an append to one of its partitions or ``max_wait_ms`` (the delayed
        fetch). A follower's fetch records how far it has replicated, so the ISR and HW may move."""
        deadline = time.monotonic() + params.max_wait_ms / 1000
        keys = [(pr.topic, pr.partition) for pr in reads]
        follower = params.follower
        followed = False
        while True:
            total = 0
            errors = False
            for pr in reads:
                pr.remote = False
                # in request order, one at a time: each read's budget is what the earlier ones left
                total += await self.read_from_local_log(pr, params, params.max_bytes - total, total == 0, cold_reads)
                # a diverging epoch is answered at once, as an error is (Kafka's hasDivergingEpoch)
                errors = errors or pr.data.error_code != ErrorCode.none or pr.data.diverging_epoch is not None
            if follower and not followed:
                # the follower has everything below its fetch offset: the ISR and the HW may move now
                followed = True
                self._record_follower_fetch(params.replica_id, reads)
            remote = [pr for pr in reads if pr.remote]
            reader = self._remote_reader() if remote else None
            if reader is not None:
                await read_remote(reader, remote, params.max_bytes - total, total == 0, params.isolation,
                                  self._remote_fetch_max_wait_ms() / 1000, self.remote_fetch_stats)
                break
            remaining = deadline - time.monotonic()
            if total >= params.min_bytes or errors or not reads or remaining <= 0 or self._is_shutting_down() or (
                    params.client_rack and any(pr.data.preferred_read_replica >= 0 for pr in reads)):
                break
            await self.fetch_purgatory.wait(keys, remaining)
        if self._metrics is not None:
            for pr in reads:
                self._metrics.record_fetch(pr.topic, records_size(pr.data.records), follower)
        if follower:
            self._record_throttled(reads)

    async def read_from_local_log(self, pr: PartitionRead, params: FetchParams, budget: int, first: bool,
                                  cold_reads: Executor | None = None) -> int:
        """Read one partition into ``pr.data``; returns the bytes it adds to the response. A consumer's
        offset below the local log start marks ``pr.remote`` (read from the remote tier after).

        The log reads the batch headers at the fetch offset without waiting for the disk; when they are
        not in the page cache (a seek to old data, a catch-up's first fetch in a segment) the same read
        runs, blocking, on ``cold_reads`` while the loop serves others. The partition's offsets are
        taken again after it: the high watermark may have moved while the thread read."""
        d = pr.data
        d.records = b""
        plog = self._log_of(pr.topic, pr.partition)
        partition = self.partitions.get(TopicPartition(pr.topic, pr.partition))
        if plog is None or partition is None:
            d.error_code = ErrorCode.unknown_topic_or_partition
            return 0
        follower, client_rack = params.follower, params.client_rack
        try:
            # followers fetch from the leader; a consumer's Fetch v11+ (client_rack not None) may read a
            # follower up to its high watermark (KIP-392); at the epoch the client believes current (KIP-320)
            partition.check_leader_epoch(pr.current_leader_epoch, require_leader=follower or client_rack is None)
        except KafkaError as exc:
            d.error_code = exc.code
            if partition.leader_id >= 0:
                d.current_leader = (partition.leader_id, partition.leader_epoch)
            return 0
        fill_offsets(d, plog)
        if client_rack is not None and self._live_racks is not None and (
                preferred := self.preferred_read_replica(partition, client_rack, pr.fetch_offset,
                                                         self._live_racks())) >= 0:
            # no records: the consumer fetches from that follower from now on (answered at once)
            d.preferred_read_replica = preferred
            return 0
        if pr.last_fetched_epoch >= 0:
            try:
                d.diverging_epoch = diverging_epoch(pr, plog)
            except OffsetOutOfRangeError:
                d.error_code = ErrorCode.offset_out_of_range
                return 0
            if d.diverging_epoch is not None:
                return 0  # no records: the fetcher truncates to the epoch's end first
        if follower and pr.leader_end_offset < 0:
            pr.leader_end_offset = plog.log_end_offset
        max_bytes = min(pr.max_bytes, budget)
        if max_bytes <= 0 and not first:
            return 0
        if follower and self.leader_quota.should_throttle(partition.tp, plog.config, params.replica_id in partition.isr):
            return 0  # KIP-73: no records for an out-of-sync throttled replica while the leader's quota is spent
        return await self._read_records(pr, plog, params, max(max_bytes, 0), first, cold_reads)

    async def _read_records(self, pr: PartitionRead, plog: UnifiedLog, params: FetchParams, max_bytes: int,
                            first: bool, cold_reads: Executor | None) -> int:
        d = pr.data
        isolation = params.isolation
        try:
            try:
                info = plog.read(pr.fetch_offset, max_bytes, isolation, min_one_message=first, nowait=True)
            except PagesNotCached:
                read = functools.partial(plog.read, pr.fetch_offset, max_bytes, isolation, min_one_message=first)
                info = await asyncio.get_running_loop().run_in_executor(cold_reads, read)
                fill_offsets(d, plog)
        except OffsetMovedToTieredStorageError:
            if params.follower:
                d.error_code = ErrorCode.offset_moved_to_tiered_storage
            elif self._remote_reader() is not None:
                pr.remote = True
            else:
                d.error_code = ErrorCode.offset_out_of_range
            return 0
        except OffsetOutOfRangeError:
            d.error_code = ErrorCode.offset_out_of_range
            return 0
        except Exception as exc:  # noqa: BLE001
            d.error_code = error_code_of(exc)
            if d.error_code == ErrorCode.unknown_server_error:
                log.exception("read of %s-%d at %d failed", pr.topic, pr.partition, pr.fetch_offset)
            return 0
        d.error_code = ErrorCode.none
        d.records = info.records
        d.aborted_transactions = aborted_of(info) if isolation is FetchIsolation.TXN_COMMITTED else None
        return read_size(info)

    def _record_follower_fetch(self, replica_id: int, reads: list[PartitionRead]) -> None:
        for pr in reads:
            if pr.data.error_code == ErrorCode.none and pr.data.diverging_epoch is None and pr.leader_end_offset >= 0:
                self.update_follower_fetch_state(TopicPartition(pr.topic, pr.partition), replica_id, pr.fetch_offset,
                                                 pr.replica_log_start, pr.leader_end_offset)

    def _record_throttled(self, reads: list[PartitionRead]) -> None:
        """KIP-73: the record bytes a follower's fetch took of leader-throttled partitions count against
        the leader's quota (Kafka records them once the response is made)."""
        quota, nbytes = self.leader_quota, 0
        for pr in reads:
            p = self.partitions.get(TopicPartition(pr.topic, pr.partition))
            if p is not None and quota.is_throttled(p.tp, p.log.config):
                nbytes += records_size(pr.data.records)
        quota.record(nbytes)

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
