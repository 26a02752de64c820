"""RemoteLogManager: the broker's tiered-storage core (KIP-405).

For each partition this broker leads it runs a copy task (tier rolled segments below the LSO)
on the copier pool and an expiration task (remote retention) on the expiration pool; for each it
follows, a follower task keeps ``highest_offset_in_remote_storage`` current so local retention can
proceed. Consumer reads below the local log start go to a bounded reader pool, remote ListOffsets
lookups to a pool of their own. Nothing here runs on the asyncio event loop except
:meth:`read_async`, :meth:`read_committed_async`, :meth:`try_read_cached` and the ``*_async``
lookups, which only queue work, slice bytes already read ahead into memory or filter aborted
transactions already walked.

Collaborators (wired by ``tieredlog.server.remote_tier``): a ``LogProvider`` of the partition logs,
the RSM and the RLMM. The tasks share a ``RemoteSegmentLifecycle`` (every metadata + object-store
transition) and see the logs only through the ``TieredLog`` contract.

Threads: copier pool (``remote.log.manager.copier.thread.pool.size``), expiration pool
(``remote.log.manager.expiration.thread.pool.size``, also follower tasks and partition
deletions), reader pool (``remote.log.reader.threads`` over ``remote.log.reader.max.pending.tasks``),
list-offsets pool.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from tieredlog.errors import (
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.index import CorruptIndexError
from tieredlog.formats.txn_index import AbortedTxn
from tieredlog.log.cleaner.cleaner import Cleaner
from tieredlog.log.cleaner.throttler import Throttler
from tieredlog.log.types import FetchDataInfo, TopicPartition
from tieredlog.rate_limited_log import RateLimitedLog, one_line
from tieredlog.rlm.aborted_txns import RemoteAbortedTxns, in_range
from tieredlog.rlm.config import RemoteLogManagerConfig
from tieredlog.rlm.contracts import LogProvider, TieredLog
from tieredlog.rlm.copier import RLMCopyTask
from tieredlog.rlm.expiration import RLMExpirationTask
from tieredlog.rlm.follower import RemoteLogAuxState, RLMFollowerTask, fetch_aux_state
from tieredlog.rlm.index_cache import RemoteIndexCache
from tieredlog.rlm.lifecycle import RemoteSegmentLifecycle
from tieredlog.rlm.metrics import RemoteStorageMetrics, metrics
from tieredlog.rlm.partition_state import PartitionState
from tieredlog.rlm.pending_deletes import PendingDeleteJournal
from tieredlog.rlm.pool import FixedDelayScheduler, RemoteReaderPool, TaskContext
from tieredlog.rlm.quota import RLMQuotaManager
from tieredlog.rlm.reader import RemoteReadPath, RemoteRecords
from tieredlog.rlm.remote_cleaner import DIR_NAME as REMOTE_CLEANER_DIR
from tieredlog.rlm.remote_cleaner import THROTTLE_DEFER_S as REMOTE_CLEANER_THROTTLE_DEFER_S
from tieredlog.rlm.remote_cleaner import RemoteCleaner, RLMRemoteCleaningTask
from tieredlog.rlmm.api import RemoteLogMetadataManager
from tieredlog.rsm.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageException,
    RemoteStorageManager,
    TopicIdPartition,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state", "__remote_log_metadata", "__cluster_metadata"}
# remote ListOffsets lookups read a segment's index and a little data: a few threads, queued apart
# from consumer reads so that a slow object store delays one kind of request, not both
_LIST_OFFSETS_THREADS = 2
FAILURE_LOG_MIN_INTERVAL_S = 10.0
# a remote read failing on a transient store error is tried again after these pauses (doubling),
# for as long as remote.fetch.max.wait.ms leaves room for another try
READ_RETRY_BACKOFF_S = 0.05
READ_RETRY_BACKOFF_MAX_S = 1.0
# failures that another try cannot mend: the object is gone or its bytes are wrong
_PERMANENT_READ_ERRORS = (RemoteResourceNotFoundException, CorruptIndexError, CorruptRecordError)


class RemoteLogManager:
    def __init__(
        self,
        config: RemoteLogManagerConfig,
        logs: LogProvider,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
    ) -> None:
        self.config = c = config
        self.logs = logs
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker_id = c.broker_id
        self.metrics: RemoteStorageMetrics = metrics()
        self.lifecycle = RemoteSegmentLifecycle(rsm, rlmm, c.broker_id, self.metrics, self._forget_segment)
        self.pending_deletes = PendingDeleteJournal(c.first_log_dir)
        self.copy_quota = RLMQuotaManager(c.copy_max_bytes_per_second, c.copy_quota_window_size_seconds, name="RLMCopy")
        self.fetch_quota = RLMQuotaManager(
            c.fetch_max_bytes_per_second, c.fetch_quota_window_size_seconds, name="RLMFetch"
        )
        self.remote_fetch_max_wait_s = c.remote_fetch_max_wait_ms / 1000.0
        self.closing = False
        self._started = False
        self._lock = threading.RLock()
        self._leaders: dict[TopicPartition, PartitionState] = {}
        self._followers: dict[TopicPartition, PartitionState] = {}
        self._topic_ids: dict[TopicPartition, uuid.UUID] = {}
        m = self.metrics
        self.index_cache = RemoteIndexCache(
            rsm,
            c.first_log_dir,
            c.index_cache_total_size_bytes,
            on_hit=m.index_cache_hits.inc,
            on_miss=m.index_cache_misses.inc,
            on_evict=m.index_cache_evictions.inc,
        )
        self.reader_pool = RemoteReaderPool(c.reader_threads, c.reader_max_pending_tasks)
        self.list_offsets_pool = RemoteReaderPool(
            _LIST_OFFSETS_THREADS, c.reader_max_pending_tasks, name="remote-list-offsets"
        )
        # a failing task or partition's reads: one line per this interval (the task interval, at
        # least FAILURE_LOG_MIN_INTERVAL_S so that short test intervals do not flood the log either)
        failure_log_s = max(c.task_interval_ms / 1000.0, FAILURE_LOG_MIN_INTERVAL_S)
        self.copier = FixedDelayScheduler(
            "kafka-rlm-copy-thread-pool", c.effective_copier_threads,
            c.task_retry_backoff_ms, c.task_retry_backoff_max_ms, c.task_retry_jitter, failure_log_s,
        )
        self.expirer = FixedDelayScheduler(
            "kafka-rlm-expiration-thread-pool", c.effective_expiration_threads,
            c.task_retry_backoff_ms, c.task_retry_backoff_max_ms, c.task_retry_jitter, failure_log_s,
        )
        self.read_failures = RateLimitedLog(log, failure_log_s)
        self.read_path = RemoteReadPath(self.lifecycle, rsm, self.index_cache, self.reader_pool, c.read_ahead_max_bytes)
        self.aborted_txns = RemoteAbortedTxns(self.lifecycle, self.index_cache)
        self.remote_cleaner = RemoteCleaner(
            self.lifecycle,
            Cleaner(-1, c.cleaner_dedupe_buffer_size,
                    throttler=Throttler(c.cleaner_io_max_bytes_per_second, defer_s=REMOTE_CLEANER_THROTTLE_DEFER_S)),
            Path(c.first_log_dir) / REMOTE_CLEANER_DIR, c.broker_id, c.custom_metadata_max_bytes,
        )

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Publish the pool metrics and resume the partition deletions a stopped broker left."""
        if self._started:
            return
        m = self.metrics
        reader_pool, copier = self.reader_pool, self.copier
        m.reader_queue_size.set_function(lambda: reader_pool.queue_size)
        m.reader_avg_idle.set_function(reader_pool.idle.sample)
        m.tasks_avg_idle.set_function(copier.idle.sample)
        expirer = self.expirer
        m.pool_threads.labels("reader").set_function(lambda: reader_pool.live_threads)
        m.pool_threads.labels("copier").set_function(lambda: copier.live_threads)
        m.pool_threads.labels("expiration").set_function(lambda: expirer.live_threads)
        prefetch = self.read_path.prefetch
        m.read_ahead_bytes.set_function(lambda: prefetch.bytes_held)
        m.read_ahead_max_bytes.set_function(lambda: prefetch.max_bytes)
        self._started = True
        for tip in self.pending_deletes.read():
            self._schedule_partition_delete(tip)

    def shutdown(self) -> None:
        """Stop every task without waiting for a hung RSM call (threads are daemons)."""
        if self.closing:
            return
        self.closing = True
        for sched in (self.copier, self.expirer):
            sched.shutdown(timeout=2.0)
        self.remote_cleaner.close()
        for pool in (self.reader_pool, self.list_offsets_pool):
            pool.shutdown(timeout=2.0)
        self.index_cache.close()
        for plugin in (self.rlmm, self.rsm):
            try:
                plugin.close()
            except Exception:
                log.warning("closing %s failed", type(plugin).__name__, exc_info=True)

    close = shutdown  # the broker calls close()

    def resize_thread_pools(self, config: RemoteLogManagerConfig) -> None:
        """Dynamic ``remote.log.reader.threads`` and copier / expiration pool sizes (Kafka's
        RemoteLogManager.resize*ThreadPool): new threads start at once; a shrink lets the reads and
        the copy / expiration runs under way finish."""
        for what, pool, size in (("reader", self.reader_pool, config.reader_threads),
                                 ("copier", self.copier, config.effective_copier_threads),
                                 ("expiration", self.expirer, config.effective_expiration_threads)):
            if pool.size != size:
                log.info("resizing the remote log %s thread pool from %d to %d", what, pool.size, size)
                pool.resize(size)
        self.config = dataclasses.replace(
            self.config, reader_threads=config.reader_threads, thread_pool_size=config.thread_pool_size,
            copier_thread_pool_size=config.copier_thread_pool_size,
            expiration_thread_pool_size=config.expiration_thread_pool_size)

    def _is_closing(self) -> bool:
        return self.closing

    def _forget_segment(self, segment_id: uuid.UUID) -> None:
        """A deleted remote segment: its cached indexes and read-ahead go too."""
        self.index_cache.remove(segment_id)
        self.read_path.prefetch.drop_segment(segment_id)
        self.aborted_txns.forget(segment_id)

    # ---- partitions -----------------------------------------------------------------------------
    def _tip(self, tp: TopicPartition, plog: TieredLog | None) -> TopicIdPartition:
        topic_id = (plog.topic_id if plog is not None else None) or self._topic_ids.get(tp)
        if topic_id is None:
            raise UnknownTopicOrPartitionError(f"{tp} has no topic id")
        self._topic_ids[tp] = topic_id
        return TopicIdPartition(topic_id, tp.topic, tp.partition)

    def is_tiered(self, plog: TieredLog) -> bool:
        """Kafka's UnifiedLog.isRemoteLogEnabled."""
        cfg = plog.config
        return (
            self.config.system_enable
            and bool(cfg.remote_storage_enable)
            and plog.topic_partition.topic not in _INTERNAL_TOPICS
        )

    def _tiered_logs(self, partitions: Iterable[TopicPartition]) -> list[tuple[TopicPartition, TieredLog]]:
        out = []
        for p in partitions:
            tp = TopicPartition(*p)
            plog = self.logs.get_log(tp)
            if plog is not None and self.is_tiered(plog):
                out.append((tp, plog))
        return out

    def copy_task(self, state: PartitionState) -> RLMCopyTask:
        c = self.config
        return RLMCopyTask(state, self.logs, self.lifecycle, self.copy_quota, self.metrics, self.is_tiered,
                           self._is_closing, c.broker_id, c.custom_metadata_max_bytes)

    def expiration_task(self, state: PartitionState) -> RLMExpirationTask:
        return RLMExpirationTask(state, self.logs, self.lifecycle, self.metrics, self.is_tiered, self._is_closing)

    def remote_cleaning_task(self, state: PartitionState) -> RLMRemoteCleaningTask:
        return RLMRemoteCleaningTask(state, lambda: self.logs.get_log(state.tp), self.lifecycle, self.remote_cleaner,
                                     self._is_closing)

    def on_leadership_change(
        self, leader_partitions: Iterable[TopicPartition], follower_partitions: Iterable[TopicPartition] = ()
    ) -> None:
        """The broker became leader / follower of these partitions. Schedules the copy and
        expiration tasks or the follower task of the tiered ones."""
        leaders = self._tiered_logs(leader_partitions)
        followers = self._tiered_logs(follower_partitions)
        if not leaders and not followers:
            return
        self.rlmm.on_partition_leadership_changes(
            {self._tip(tp, plog) for tp, plog in leaders}, {self._tip(tp, plog) for tp, plog in followers}
        )
        for tp, _ in leaders + followers:
            self.metrics.touch_topic(tp.topic)
        interval = self.config.task_interval_ms
        with self._lock:
            for tp, plog in followers:
                self._cancel_leader_tasks(tp)
                state = PartitionState(tp, self._tip(tp, plog))
                self._followers[tp] = state
                self.expirer.schedule(("follower", tp), RLMFollowerTask(state, self.logs, self.lifecycle).run, interval)
            for tp, plog in leaders:
                if tp in self._leaders:
                    continue
                self.expirer.cancel(("follower", tp))
                self._followers.pop(tp, None)
                state = PartitionState(tp, self._tip(tp, plog))
                self._leaders[tp] = state
                self.copier.schedule(("copy", tp), self.copy_task(state).run, interval)
                self.expirer.schedule(("expire", tp), self.expiration_task(state).run, interval)
                # for every tiered leader: cleanup.policy may turn compact later, and a run of a
                # non-compacted log returns at once
                self.expirer.schedule(("remote-clean", tp), self.remote_cleaning_task(state).run, interval)

    def _cancel_leader_tasks(self, tp: TopicPartition) -> PartitionState | None:
        state = self._leaders.pop(tp, None)
        self.copier.cancel(("copy", tp))
        self.expirer.cancel(("expire", tp))
        self.expirer.cancel(("remote-clean", tp))
        if state is not None:
            self.metrics.copy_lag_bytes.labels(tp.topic, str(tp.partition)).set(0)
            self.metrics.copy_lag_segments.labels(tp.topic, str(tp.partition)).set(0)
        return state

    def _stop_tasks(self, partitions: Iterable[TopicPartition | TopicIdPartition]) -> list[TopicIdPartition]:
        """Cancel every task of these partitions; their TopicIdPartitions (those with a topic id)."""
        tips = []
        with self._lock:
            for p in partitions:
                tp = TopicPartition(p.topic, p.partition)
                self._cancel_leader_tasks(tp)
                self.expirer.cancel(("follower", tp))
                self._followers.pop(tp, None)
                self.metrics.remove_partition(tp.topic, tp.partition)
                self.read_failures.forget(tp)
                if isinstance(p, TopicIdPartition):
                    tips.append(p)
                    continue
                try:
                    tips.append(self._tip(tp, self.logs.get_log(tp)))
                except UnknownTopicOrPartitionError:
                    continue
        return tips

    def stop_partitions(self, partitions: Iterable[TopicPartition | TopicIdPartition]) -> None:
        """StopReplica without deletion: cancel the partitions' tasks, the RLMM forgets them."""
        tips = self._stop_tasks(partitions)
        if tips:
            self.rlmm.on_stop_partitions(set(tips))

    def on_topic_deleted(self, partitions: Iterable[TopicPartition | TopicIdPartition]) -> None:
        """The topic is gone: delete all its remote data, in the background, surviving restarts.
        Call before the local logs are deleted (their topic id is needed), or pass TopicIdPartitions.
        Partitions that were never tiered are skipped. Cheap: safe to call on the event loop."""
        chosen: list[TopicPartition | TopicIdPartition] = []
        for p in partitions:
            if isinstance(p, TopicIdPartition):
                chosen.append(p)
                continue
            tp = TopicPartition(*p)
            plog = self.logs.get_log(tp)
            if tp in self._leaders or tp in self._followers or (plog is not None and self.is_tiered(plog)):
                chosen.append(tp)
        for tip in self._stop_tasks(chosen):
            # Only local work here (the caller may be the event loop): the journal first, so a broker
            # that dies right after still finishes the job on restart; the RLMM and RSM calls run in
            # the background task.
            self.pending_deletes.add(tip)
            self._schedule_partition_delete(tip)

    def on_remote_storage_disabled(self, partitions: Iterable[TopicPartition]) -> None:
        """KIP-950: ``remote.storage.enable`` went from true to false with
        ``remote.log.delete.on.disable=true``. Stop the partitions' tasks and delete their remote
        segments in the background (Kafka's deleteRemoteLogPartition). Unlike a topic deletion no
        partition-delete marker is written: the partition lives on, and tiering may be enabled again
        later. Not journaled, as in Kafka: a broker stopped midway leaves the rest of the objects.
        Cheap: safe to call on the event loop."""
        for tip in self._stop_tasks(partitions):
            self._schedule_remote_data_delete(tip)

    def _schedule_remote_data_delete(self, tip: TopicIdPartition) -> None:
        key = ("disable", tip)

        def run(ctx: TaskContext) -> None:
            self.lifecycle.require_loaded(tip)
            if self.lifecycle.delete_all_segments(tip, lambda: ctx.cancelled or self.closing):
                self.lifecycle.publish_cleaner_offset(tip, None)  # tiered again later, the tier starts dirty
                self._remote_data_deleted(tip, key, "remote storage disabled, remote data deleted")

        # retried with backoff on failure; on success the task cancels itself
        self.expirer.schedule(key, run, self.config.task_interval_ms)

    def _schedule_partition_delete(self, tip: TopicIdPartition) -> None:
        key = ("delete", tip)

        def run(ctx: TaskContext) -> None:
            self.lifecycle.require_loaded(tip)
            self.lifecycle.mark_partition(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
            if self.lifecycle.delete_partition(tip, lambda: ctx.cancelled or self.closing):
                self.pending_deletes.remove(tip)
                self._remote_data_deleted(tip, key, "remote data deleted")

        # retried with backoff on failure; on success the task cancels itself
        self.expirer.schedule(key, run, self.config.task_interval_ms)

    def _remote_data_deleted(self, tip: TopicIdPartition, key: tuple, what: str) -> None:
        """The end of a successful delete task: the RLMM stops tracking ``tip``, the task stops."""
        try:
            self.rlmm.on_stop_partitions({tip})
        except Exception:
            log.debug("on_stop_partitions failed", exc_info=True)
        self.expirer.cancel(key)
        log.info("%s: %s", tip, what)

    # ---- single-broker leadership ------------------------------------------------------------------
    def watch_log_manager(self, interval_s: float = 0.5) -> None:
        """Without a replication layer this broker leads every partition it hosts: keep the tasks in
        step with the logs (new topics and partitions, remote.storage.enable switched on, logs
        removed). A cluster's replica manager calls on_leadership_change instead."""

        def loop() -> None:
            while not self.closing:
                try:
                    self.sync_with_log_manager()
                except Exception:
                    log.warning("partition sync failed", exc_info=True)
                time.sleep(interval_s)

        threading.Thread(target=loop, name="rlm-partition-watcher", daemon=True).start()

    def sync_with_log_manager(self) -> None:
        logs = list(self.logs.all_logs())
        hosted = {plog.topic_partition for plog in logs}
        new = [plog.topic_partition for plog in logs if plog.topic_partition not in self._leaders and self.is_tiered(plog)]
        if new:
            self.on_leadership_change(new, ())
        gone = [tp for tp in list(self._leaders) if tp not in hosted]
        with self._lock:
            for tp in gone:
                self._cancel_leader_tasks(tp)

    def run_tasks_now(self, tp: TopicPartition | None = None) -> None:
        """Bring the next runs forward (tests, and config changes such as remote.log.copy.disable)."""
        for sched in (self.copier, self.expirer):
            for key in sched.keys():
                if tp is None or key[1] == tp:
                    sched.run_now(key)

    # ---- helpers the read path uses -------------------------------------------------------------
    def rlmm_ready(self, tip: TopicIdPartition) -> bool:
        return self.lifecycle.ready(tip)

    def list_segments(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        return self.lifecycle.segments(tip, leader_epoch)

    # ---- reads ----------------------------------------------------------------------------------
    def read_async(
        self, topic_partition: TopicPartition, fetch_offset: int, max_bytes: int, min_one_message: bool = True
    ) -> Future:
        """Queue a remote read of ``fetch_offset``; the future yields whole record batches (bytes,
        or a memoryview into read-ahead memory: send it, do not keep it),
        at least one batch when ``min_one_message``. Never blocks: safe on the event loop. A full
        reader queue or a missing partition gives a failed future; a read over the fetch quota
        gives empty bytes at once (Kafka: throttled partitions come back empty, without error).
        When a sequential reader's bytes are already in memory the future comes back done
        (:meth:`try_read_cached`)."""
        return self._read_async(topic_partition, fetch_offset, max_bytes, min_one_message, committed=False)

    def read_committed_async(
        self, topic_partition: TopicPartition, fetch_offset: int, max_bytes: int, min_one_message: bool = True
    ) -> Future:
        """:meth:`read_async` for a read_committed consumer (FetchIsolation.TXN_COMMITTED): the future
        yields a ``FetchDataInfo`` whose ``aborted_transactions`` are those overlapping the batches
        returned, the consumer's means to drop their records (Kafka's RemoteLogManager.read with
        READ_COMMITTED). Tiered data lies below the last stable offset, so the batches are the same.
        Done at once when the bytes are in memory and the segment's aborted transactions were
        walked before (:mod:`tieredlog.rlm.aborted_txns`); otherwise the reader pool reads or walks."""
        return self._read_async(topic_partition, fetch_offset, max_bytes, min_one_message, committed=True)

    def _read_async(
        self, topic_partition: TopicPartition, fetch_offset: int, max_bytes: int, min_one: bool, committed: bool
    ) -> Future:
        tp = TopicPartition(*topic_partition)
        self.metrics.fetch_requests.labels(tp.topic).inc()
        fut: Future = Future()
        deadline = time.monotonic() + self.remote_fetch_max_wait_s
        throttle_ms = self.fetch_quota.throttle_time_ms()
        if throttle_ms > 0:
            self.metrics.fetch_throttle_ms.inc(throttle_ms)
            fut.set_result(FetchDataInfo(b"", fetch_offset, []) if committed else b"")
            return fut
        try:
            plog = self.logs.get_log(tp)
            if plog is None:
                raise UnknownTopicOrPartitionError(f"{tp} is not hosted here")
            tip = self._tip(tp, plog)
            rec = self._read_inline(tip, plog, fetch_offset, max_bytes, min_one)
            if rec is None:
                read = self._read_committed if committed else self._read
                return self.reader_pool.submit(read, tip, plog, fetch_offset, max_bytes, min_one, deadline)
            if not committed:
                fut.set_result(rec.records)
                return fut
            txns = self._aborted_in(rec, plog, fetch_offset) if rec.records else []
            if txns is None:
                # the bytes are read; only the segment's aborted transactions are still to walk
                return self.reader_pool.submit(self._with_aborted, tip, plog, rec, fetch_offset, deadline)
            fut.set_result(FetchDataInfo(rec.records, fetch_offset, txns))
            return fut
        except Exception as exc:
            self.metrics.fetch_errors.labels(tp.topic).inc()
            fut = Future()
            fut.set_exception(exc)
            return fut

    def try_read_cached(
        self, topic_partition: TopicPartition, fetch_offset: int, max_bytes: int, min_one_message: bool = True
    ) -> bytes | memoryview | None:
        """The answer :meth:`read_async` would give, at once on the caller's thread, when the
        sequential reader at ``fetch_offset`` has those bytes read ahead in memory (the next
        read-ahead is queued on the reader pool); None otherwise: call :meth:`read_async` then.
        Never does I/O or waits for a read in flight: safe on the event loop. Counted like
        :meth:`read_async` (requests, bytes, fetch quota) only when it answers; a throttled
        fetch, an unknown partition or a stopped RLM give None (read_async answers those)."""
        if self.closing or not self._started or self.fetch_quota.throttle_time_ms() > 0:
            return None
        tp = TopicPartition(*topic_partition)
        plog = self.logs.get_log(tp)
        if plog is None:
            return None
        try:
            tip = self._tip(tp, plog)
        except UnknownTopicOrPartitionError:
            return None
        rec = self._read_inline(tip, plog, fetch_offset, max_bytes, min_one_message)
        if rec is None:
            return None
        self.metrics.fetch_requests.labels(tp.topic).inc()
        return rec.records

    def _read_inline(self, tip: TopicIdPartition, plog: TieredLog, fetch_offset: int, max_bytes: int,
                     min_one: bool) -> RemoteRecords | None:
        if self.closing or not self._started:
            return None
        rec = self.read_path.read_inline(tip, plog, fetch_offset, max_bytes, min_one)
        if rec is not None:
            self.fetch_quota.record(len(rec.records))
            self.metrics.fetch_bytes.labels(tip.topic).inc(len(rec.records))
        return rec

    def _read(
        self, tip: TopicIdPartition, plog: TieredLog, fetch_offset: int, max_bytes: int, min_one: bool,
        deadline: float | None = None,
    ) -> bytes | memoryview:
        """Blocking, on the reader pool; ``deadline`` (time.monotonic) bounds retries, by default
        remote.fetch.max.wait.ms from now."""
        if deadline is None:
            deadline = time.monotonic() + self.remote_fetch_max_wait_s
        return self._read_records(tip, plog, fetch_offset, max_bytes, min_one, deadline).records

    def _read_committed(
        self, tip: TopicIdPartition, plog: TieredLog, fetch_offset: int, max_bytes: int, min_one: bool,
        deadline: float,
    ) -> FetchDataInfo:
        rec = self._read_records(tip, plog, fetch_offset, max_bytes, min_one, deadline)
        return self._with_aborted(tip, plog, rec, fetch_offset, deadline)

    def _read_records(
        self, tip: TopicIdPartition, plog: TieredLog, fetch_offset: int, max_bytes: int, min_one: bool,
        deadline: float,
    ) -> RemoteRecords:
        rec = self._retrying(tip, fetch_offset, deadline,
                             lambda: self.read_path.read(tip, plog, fetch_offset, max_bytes, min_one))
        self.fetch_quota.record(len(rec.records))
        self.metrics.fetch_bytes.labels(tip.topic).inc(len(rec.records))
        return rec

    def _with_aborted(self, tip: TopicIdPartition, plog: TieredLog, rec: RemoteRecords, fetch_offset: int,
                      deadline: float) -> FetchDataInfo:
        """``rec`` with the aborted transactions overlapping it (reader pool: may walk txn indexes)."""
        segment = rec.segment
        if not rec.records or segment is None:
            return FetchDataInfo(rec.records, fetch_offset, [])
        txns = self._retrying(tip, fetch_offset, deadline, lambda: self.aborted_txns.for_segment(tip, plog, segment))
        return FetchDataInfo(rec.records, fetch_offset, in_range(txns, fetch_offset, rec.next_offset))

    def _retrying(self, tip: TopicIdPartition, fetch_offset: int, deadline: float, read: Callable[[], _T]) -> _T:
        """``read()``, tried again after a transient store error while ``deadline`` (the fetch's
        remote.fetch.max.wait.ms) leaves room. A failure that stays is an UnknownServerError, the code
        Kafka's broker answers for a failed remote read; failures are logged once per partition per
        interval, and once when the partition's reads work again."""
        tp = TopicPartition(tip.topic, tip.partition)
        backoff = READ_RETRY_BACKOFF_S
        while True:
            try:
                result = read()
            except OffsetOutOfRangeError:
                raise  # a client error, not a remote-storage failure (Kafka does not count it)
            except KafkaError:
                self.metrics.fetch_errors.labels(tip.topic).inc()
                raise
            except Exception as exc:
                self.read_failures.failed(tp, exc, "%s: remote read at %d failed", tip, fetch_offset)
                if (isinstance(exc, _PERMANENT_READ_ERRORS) or self.closing
                        or time.monotonic() + 2 * backoff >= deadline):
                    self.metrics.fetch_errors.labels(tip.topic).inc()
                    raise UnknownServerError(
                        f"remote read of {tip} at {fetch_offset} failed: {one_line(exc)}") from exc
                time.sleep(backoff)
                backoff = min(2 * backoff, READ_RETRY_BACKOFF_MAX_S)
                continue
            self.read_failures.succeeded(tp, "%s: remote reads succeed", tip)
            return result

    def read_failure(self, topic_partition: TopicPartition) -> UnknownServerError | None:
        """What to answer for a remote read of ``topic_partition`` that outlasted
        remote.fetch.max.wait.ms: an error when this partition's reads have failed, without a success
        since, for longer than that wait (a store that keeps failing, each try slower than the wait);
        None otherwise, and the partition comes back empty, as Kafka answers a slow read."""
        tp = TopicPartition(*topic_partition)
        failing = self.read_failures.failing(tp)
        if failing is None or time.monotonic() - failing[0] < self.remote_fetch_max_wait_s:
            return None
        return UnknownServerError(f"remote reads of {tp} have failed for {time.monotonic() - failing[0]:.1f} s: "
                                  f"{one_line(failing[1])}")

    def _aborted_in(self, rec: RemoteRecords, plog: TieredLog, fetch_offset: int) -> list[AbortedTxn] | None:
        """The aborted transactions overlapping ``rec`` from a kept walk, without I/O; None when its
        segment was not walked yet."""
        txns = None if rec.segment is None else self.aborted_txns.cached(plog, rec.segment)
        return None if txns is None else in_range(txns, fetch_offset, rec.next_offset)

    def read(self, topic_partition: TopicPartition, fetch_offset: int, max_bytes: int, timeout: float | None = None) -> bytes:
        """Blocking read (tools, tests): :meth:`read_async` and wait; a ``bytes`` copy."""
        return bytes(self.read_async(topic_partition, fetch_offset, max_bytes).result(timeout))

    def find_offset_by_timestamp_async(self, topic_partition: TopicPartition, timestamp: int) -> Future:
        """:meth:`find_offset_by_timestamp` on the list-offsets pool; never blocks (a full queue
        gives a failed future)."""
        return self.list_offsets_pool.submit(self.find_offset_by_timestamp, topic_partition, timestamp)

    def find_max_timestamp_async(self, topic_partition: TopicPartition) -> Future:
        """:meth:`find_max_timestamp` on the list-offsets pool; never blocks."""
        return self.list_offsets_pool.submit(self.find_max_timestamp, topic_partition)

    def find_offset_by_timestamp(self, topic_partition: TopicPartition, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets by timestamp over the remote tier: (offset, timestamp, leader epoch) of the
        first record at or after ``timestamp``, or None when the answer is in the local log (or
        nowhere). Blocking: the server uses :meth:`find_offset_by_timestamp_async`."""
        tp = TopicPartition(*topic_partition)
        plog = self.logs.get_log(tp)
        if plog is None or not self.is_tiered(plog):
            return None
        try:
            return self.read_path.find_offset_by_timestamp(self._tip(tp, plog), plog, timestamp)
        except KafkaError:
            raise
        except Exception as exc:
            raise KafkaStorageError(f"remote timestamp lookup for {tp} failed: {exc}") from exc

    def find_max_timestamp(self, topic_partition: TopicPartition) -> tuple[int, int, int] | None:
        """ListOffsets -3 over the remote tier: (offset, timestamp, leader epoch) of the first record
        carrying the largest timestamp among the partition's live remote segments (those at or above
        the log start offset), or None when nothing readable is remote. The segment metadata's
        max_timestamp_ms picks the segment; the timestamp lookup then finds the record inside it.
        Blocking: the server uses :meth:`find_max_timestamp_async`."""
        tp = TopicPartition(*topic_partition)
        plog = self.logs.get_log(tp)
        if plog is None or not self.is_tiered(plog):
            return None
        try:
            tip = self._tip(tp, plog)
            live = [m for m in self.list_segments(tip)
                    if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and m.end_offset >= plog.log_start_offset]
            if not live:
                return None
            max_ts = max(m.max_timestamp_ms for m in live)
            # the first record at or after max_ts is the first one with exactly max_ts (none is larger);
            # None means that segment also starts in the local log, where the caller looks anyway
            return self.read_path.find_offset_by_timestamp(tip, plog, max_ts)
        except KafkaError:
            raise
        except Exception as exc:
            raise KafkaStorageError(f"remote max-timestamp lookup for {tp} failed: {exc}") from exc

    def fetch_remote_log_segment_metadata(
        self, topic_partition: TopicPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The finished remote segment holding ``offset`` of ``epoch``, if the RLMM knows one."""
        tp = TopicPartition(*topic_partition)
        return self.lifecycle.segment_for(self._tip(tp, self.logs.get_log(tp)), epoch, offset)

    def fetch_aux_state_async(self, topic_partition: TopicPartition, target_epoch: int, target_offset: int) -> Future:
        """KIP-405 BuildingRemoteLogAuxState: a future of the ``RemoteLogAuxState`` of the remote
        segment holding ``target_offset`` of ``target_epoch`` (its leader-epoch lineage and producer
        snapshot), read on the remote reader pool, never on the caller's thread. A partition that is
        not tiered here, or whose segment the RLMM does not know yet, fails the future: the
        follower's fetcher retries after its backoff."""
        tp = TopicPartition(*topic_partition)
        try:
            plog = self.logs.get_log(tp)
            if plog is None:
                raise UnknownTopicOrPartitionError(f"{tp} is not hosted here")
            if not self.is_tiered(plog):
                raise RemoteStorageException(
                    f"{tp}: the leader's data is tiered but remote storage is not enabled for it here")
            tip = self._tip(tp, plog)
            self.metrics.build_aux_state_requests.inc()
            return self.reader_pool.submit(self._fetch_aux_state, tip, target_epoch, target_offset)
        except Exception as exc:
            fut: Future = Future()
            fut.set_exception(exc)
            return fut

    def _fetch_aux_state(self, tip: TopicIdPartition, target_epoch: int, target_offset: int) -> RemoteLogAuxState:
        try:
            return fetch_aux_state(self.lifecycle, self.rsm, tip, target_epoch, target_offset)
        except Exception:
            self.metrics.build_aux_state_errors.inc()
            raise
