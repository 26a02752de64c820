"""RemoteLogManager: the broker's tiered-storage core (KIP-405).

For each partition this broker leads it runs a copy task (tier rolled segments below the LSO)
on the copier pool and an expiration task (remote retention) on the expiration pool; for each it
follows, a follower task keeps ``highest_offset_in_remote_storage`` current so local retention can
proceed. Consumer reads below the local log start go to a bounded reader pool. Nothing here runs on
the asyncio event loop except :meth:`read_async` and :meth:`try_read_cached`, which only queue work
or slice bytes already read ahead into memory.

Threads: copier pool (``remote.log.manager.copier.thread.pool.size``), expiration pool
(``remote.log.manager.expiration.thread.pool.size``, also follower tasks and partition
deletions), reader pool (``remote.log.reader.threads`` over ``remote.log.reader.max.pending.tasks``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tieredlog.errors import (
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
    UnknownTopicOrPartitionError,
)
from tieredlog.log.types import TopicPartition
from tieredlog.rlm import copier, expiration
from tieredlog.rlm.config import RemoteLogManagerConfig
from tieredlog.rlm.index_cache import RemoteIndexCache, uuid_from_kafka, uuid_to_kafka
from tieredlog.rlm.lineage import as_pairs, highest_remote_offset
from tieredlog.rlm.metrics import RemoteStorageMetrics, metrics
from tieredlog.rlm.pool import FixedDelayScheduler, RemoteReaderPool, TaskContext
from tieredlog.rlm.quota import RLMQuotaManager
from tieredlog.rlm.reader import RemoteReadPath
from tieredlog.rsm.api import (
    CustomMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    RemoteStorageManager,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

PENDING_DELETES_FILE = "remote-log-pending-partition-deletes"
_INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state", "__remote_log_metadata", "__cluster_metadata"}


@dataclass
class PartitionState:
    tp: TopicPartition
    tip: TopicIdPartition
    copied_offset: int | None = None  # highest offset known copied; None = ask the RLMM first
    log_start_checked: bool = False
    being_copied: set = field(default_factory=set)  # segment uuids the copy task is uploading
    copy_disabled_reason: str | None = None


class RemoteLogManager:
    def __init__(
        self,
        broker_config: Any,
        log_manager: Any,
        rsm: RemoteStorageManager,
        rlmm: Any,
        broker_id: int | None = None,
        *,
        config: RemoteLogManagerConfig | None = None,
    ) -> None:
        self.config = config or RemoteLogManagerConfig.from_broker_config(broker_config)
        self.broker_config = broker_config
        self.log_manager = log_manager
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker_id = self.config.broker_id if broker_id is None else broker_id
        self.metrics: RemoteStorageMetrics = metrics()
        c = self.config
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
        self.index_cache: RemoteIndexCache | None = None
        self.reader_pool: RemoteReaderPool | None = None
        self.copier: FixedDelayScheduler | None = None
        self.expirer: FixedDelayScheduler | None = None
        self.read_path = RemoteReadPath(self)
        self._pending_deletes_path = Path(c.first_log_dir) / PENDING_DELETES_FILE

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        c = self.config
        m = self.metrics
        self.index_cache = RemoteIndexCache(
            self.rsm,
            c.first_log_dir,
            c.index_cache_total_size_bytes,
            on_hit=m.index_cache_hits.inc,
            on_miss=m.index_cache_misses.inc,
            on_evict=m.index_cache_evictions.inc,
        )
        self.reader_pool = RemoteReaderPool(c.reader_threads, c.reader_max_pending_tasks)
        backoff = dict(
            backoff_ms=c.task_retry_backoff_ms, backoff_max_ms=c.task_retry_backoff_max_ms, jitter=c.task_retry_jitter
        )
        self.copier = FixedDelayScheduler("kafka-rlm-copy-thread-pool", c.effective_copier_threads, **backoff)
        self.expirer = FixedDelayScheduler("kafka-rlm-expiration-thread-pool", c.effective_expiration_threads, **backoff)
        pool = self.reader_pool
        m.reader_queue_size.set_function(lambda: pool.queue_size)
        m.reader_avg_idle.set_function(pool.idle.sample)
        copier_pool = self.copier
        m.tasks_avg_idle.set_function(copier_pool.idle.sample)
        self._started = True
        for tip in self._read_pending_deletes():
            self._schedule_partition_delete(tip)

    def shutdown(self) -> None:
        """Stop every task without waiting for a hung RSM call (threads are daemons)."""
        if not self._started or self.closing:
            return
        self.closing = True
        for sched in (self.copier, self.expirer):
            if sched is not None:
                sched.shutdown(timeout=2.0)
        if self.reader_pool is not None:
            self.reader_pool.shutdown(timeout=2.0)
        if self.index_cache is not None:
            self.index_cache.close()
        for closer in (getattr(self.rlmm, "close", None), getattr(self.rsm, "close", None)):
            if closer is not None:
                try:
                    closer()
                except Exception:
                    log.warning("close failed", exc_info=True)

    close = shutdown  # the broker calls close()

    # ---- partitions -----------------------------------------------------------------------------
    def _resolve(self, p: Any) -> tuple[TopicPartition, Any]:
        if hasattr(p, "topic_partition"):
            return TopicPartition(*p.topic_partition), p
        if isinstance(p, TopicIdPartition):
            tp = TopicPartition(p.topic, p.partition)
        else:
            tp = TopicPartition(*p)
        return tp, self.log_manager.get_log(tp)

    def _tip(self, tp: TopicPartition, plog: Any) -> TopicIdPartition:
        topic_id = getattr(plog, "topic_id", None) or self._topic_ids.get(tp)
        if topic_id is None:
            raise UnknownTopicOrPartitionError(f"{tp} has no topic id")
        self._topic_ids[tp] = topic_id
        return TopicIdPartition(topic_id, tp.topic, tp.partition)

    def is_tiered(self, plog: Any) -> bool:
        """Kafka's UnifiedLog.isRemoteLogEnabled."""
        cfg = plog.config
        tp = plog.topic_partition
        return (
            self.config.system_enable
            and bool(cfg.remote_storage_enable)
            and not cfg.compact
            and tp[0] not in _INTERNAL_TOPICS
        )

    def on_leadership_change(self, leader_partitions: Iterable[Any], follower_partitions: Iterable[Any] = ()) -> None:
        """The broker became leader / follower of these partitions (TopicPartition, TopicIdPartition
        or UnifiedLog). Schedules the copy + expiration tasks or the follower task."""
        leaders, followers = [], []
        for p in leader_partitions:
            tp, plog = self._resolve(p)
            if plog is not None and self.is_tiered(plog):
                leaders.append((tp, plog))
        for p in follower_partitions:
            tp, plog = self._resolve(p)
            if plog is not None and self.is_tiered(plog):
                followers.append((tp, plog))
        if not leaders and not followers:
            return
        self.rlmm.on_partition_leadership_changes(
            {self._tip(tp, plog) for tp, plog in leaders}, {self._tip(tp, plog) for tp, plog in followers}
        )
        interval = self.config.task_interval_ms
        with self._lock:
            for tp, plog in followers:
                self._cancel_leader_tasks(tp)
                state = PartitionState(tp, self._tip(tp, plog))
                self._followers[tp] = state
                self.expirer.schedule(("follower", tp), lambda ctx, s=state: self._follower_task(s, ctx), interval)
            for tp, plog in leaders:
                if tp in self._leaders:
                    continue
                self.expirer.cancel(("follower", tp))
                self._followers.pop(tp, None)
                state = PartitionState(tp, self._tip(tp, plog))
                self._leaders[tp] = state
                self.copier.schedule(("copy", tp), lambda ctx, s=state: self._copy_task(s, ctx), interval)
                self.expirer.schedule(("expire", tp), lambda ctx, s=state: expiration.expiration_task(self, s, ctx), interval)

    def _cancel_leader_tasks(self, tp: TopicPartition) -> PartitionState | None:
        state = self._leaders.pop(tp, None)
        self.copier.cancel(("copy", tp))
        self.expirer.cancel(("expire", tp))
        if state is not None:
            self.metrics.copy_lag_bytes.labels(tp.topic, str(tp.partition)).set(0)
            self.metrics.copy_lag_segments.labels(tp.topic, str(tp.partition)).set(0)
        return state

    def stop_partitions(self, partitions: Iterable[Any], delete_remote: bool = False) -> None:
        """StopReplica: cancel the partitions' tasks; with ``delete_remote`` also remove their
        remote data (topic deletion on the leader)."""
        tips = []
        with self._lock:
            for p in partitions:
                tp, plog = self._resolve(p)
                self._cancel_leader_tasks(tp)
                self.expirer.cancel(("follower", tp))
                self._followers.pop(tp, None)
                self.metrics.remove_partition(tp.topic, tp.partition)
                try:
                    tip = p if isinstance(p, TopicIdPartition) else self._tip(tp, plog)
                except UnknownTopicOrPartitionError:
                    continue
                tips.append(tip)
        if delete_remote:
            for tip in tips:
                self._mark_partition_deleted(tip)
        elif tips:
            self.rlmm.on_stop_partitions(set(tips))

    def on_topic_deleted(self, partitions: Iterable[Any]) -> None:
        """The topic is gone: delete all its remote data, in the background, surviving restarts.
        Call before the local logs are deleted (their topic id is needed), or pass TopicIdPartitions.
        Partitions that were never tiered are skipped. Cheap: safe to call on the event loop."""
        chosen = []
        for p in partitions:
            if isinstance(p, TopicIdPartition):
                chosen.append(p)
                continue
            tp, plog = self._resolve(p)
            if tp in self._leaders or tp in self._followers or (plog is not None and self.is_tiered(plog)):
                chosen.append(p)
        if chosen:
            self.stop_partitions(chosen, delete_remote=True)

    def on_remote_storage_disabled(self, partitions: Iterable[Any]) -> None:
        """KIP-950: ``remote.storage.enable`` went from true to false with
        ``remote.log.delete.on.disable=true``. Stop the partitions' tasks and delete their remote
        segments in the background (Kafka's deleteRemoteLogPartition). Unlike a topic deletion no
        partition-delete marker is written: the partition lives on, and tiering may be enabled again
        later. Not journaled, as in Kafka: a broker stopped midway leaves the rest of the objects.
        Cheap: safe to call on the event loop."""
        tips = []
        with self._lock:
            for p in partitions:
                tp, plog = self._resolve(p)
                self._cancel_leader_tasks(tp)
                self.expirer.cancel(("follower", tp))
                self._followers.pop(tp, None)
                self.metrics.remove_partition(tp.topic, tp.partition)
                try:
                    tips.append(p if isinstance(p, TopicIdPartition) else self._tip(tp, plog))
                except UnknownTopicOrPartitionError:
                    continue
        for tip in tips:
            self._schedule_remote_data_delete(tip)

    def _require_remote_metadata(self, tip: TopicIdPartition) -> None:
        """Load the partition's remote metadata (a task retries while it is still loading): the
        RLMM lists a partition's segments only once it has read them."""
        self.rlmm.on_partition_leadership_changes({tip}, set())
        if not self.rlmm_ready(tip):
            raise ReplicaNotAvailableError(f"{tip}: remote metadata not loaded yet")

    def _schedule_remote_data_delete(self, tip: TopicIdPartition) -> None:
        key = ("disable", tip)

        def run(ctx: TaskContext) -> None:
            self._require_remote_metadata(tip)
            for md in sorted(self.list_segments(tip), key=lambda m: m.start_offset):
                if ctx.cancelled or self.closing:
                    return
                if md.state != RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                    self.delete_remote_segment(md)
            self._remote_data_deleted(tip, key, "remote storage disabled, remote data deleted")

        # retried with backoff on failure; on success the task cancels itself
        self.expirer.schedule(key, run, self.config.task_interval_ms)

    # ---- single-broker leadership ------------------------------------------------------------------
    def watch_log_manager(self, interval_s: float = 0.5) -> None:
        """Without a replication layer this broker leads every partition it hosts: keep the tasks in
        step with the LogManager (new topics and partitions, remote.storage.enable switched on,
        logs removed). A cluster's replica manager calls on_leadership_change instead."""

        def loop() -> None:
            while not self.closing:
                try:
                    self.sync_with_log_manager()
                except Exception:
                    log.warning("partition sync failed", exc_info=True)
                time.sleep(interval_s)

        threading.Thread(target=loop, name="rlm-partition-watcher", daemon=True).start()

    def sync_with_log_manager(self) -> None:
        logs = list(self.log_manager.all_logs())
        hosted = {TopicPartition(*plog.topic_partition) for plog in logs}
        new = [plog for plog in logs if TopicPartition(*plog.topic_partition) not in self._leaders and self.is_tiered(plog)]
        if new:
            self.on_leadership_change(new, ())
        gone = [tp for tp in list(self._leaders) if tp not in hosted]
        with self._lock:
            for tp in gone:
                self._cancel_leader_tasks(tp)

    def _mark_partition_deleted(self, tip: TopicIdPartition) -> None:
        # Only local work here (the caller may be the event loop): the journal first, so a broker
        # that dies right after still finishes the job on restart; the RLMM and RSM calls run in
        # the background task.
        self._append_pending_delete(tip)
        self._schedule_partition_delete(tip)

    def _schedule_partition_delete(self, tip: TopicIdPartition) -> None:
        key = ("delete", tip)

        def run(ctx: TaskContext) -> None:
            self._require_remote_metadata(tip)
            self.rlmm_put_partition_delete(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
            if expiration.delete_partition(self, tip, ctx):
                self._remove_pending_delete(tip)
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

    def pending_partition_deletes(self) -> list[TopicIdPartition]:
        return self._read_pending_deletes()

    # pending-deletion journal: one "topicId partition topic" line per partition
    def _read_pending_deletes(self) -> list[TopicIdPartition]:
        try:
            text = self._pending_deletes_path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append(TopicIdPartition(uuid_from_kafka(parts[0]), parts[2], int(parts[1])))
        return out

    def _write_pending_deletes(self, tips: list[TopicIdPartition]) -> None:
        path = self._pending_deletes_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            for t in tips:
                f.write(f"{uuid_to_kafka(t.topic_id)} {t.partition} {t.topic}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _append_pending_delete(self, tip: TopicIdPartition) -> None:
        with self._lock:
            tips = self._read_pending_deletes()
            if tip not in tips:
                self._write_pending_deletes(tips + [tip])

    def _remove_pending_delete(self, tip: TopicIdPartition) -> None:
        with self._lock:
            self._write_pending_deletes([t for t in self._read_pending_deletes() if t != tip])

    # ---- tasks ----------------------------------------------------------------------------------
    def _copy_task(self, state: PartitionState, ctx: TaskContext) -> None:
        if state.copy_disabled_reason:
            return
        copier.copy_task(self, state, ctx)

    def _follower_task(self, state: PartitionState, ctx: TaskContext) -> None:
        plog = self.get_log(state)
        if plog is None or not self.rlmm_ready(state.tip):
            return
        offset, _ = highest_remote_offset(
            as_pairs(plog.leader_epoch_cache.epoch_entries()),
            plog.log_end_offset,
            lambda e: self.rlmm.highest_offset_for_epoch(state.tip, e),
        )
        plog.update_highest_offset_in_remote_storage(offset)

    def run_tasks_now(self, tp: TopicPartition | None = None) -> None:
        """Bring the next runs forward (tests, and config changes such as remote.log.copy.disable)."""
        for sched in (self.copier, self.expirer):
            for key in sched.keys():
                if tp is None or key[1] == tp:
                    sched.run_now(key)

    # ---- helpers the tasks use ------------------------------------------------------------------
    def get_log(self, state: PartitionState) -> Any:
        return self.log_manager.get_log(state.tp)

    def rlmm_ready(self, tip: TopicIdPartition) -> bool:
        is_ready = getattr(self.rlmm, "is_ready", None)
        return True if is_ready is None else bool(is_ready(tip))

    def list_segments(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        return list(self.rlmm.list_remote_log_segments(tip, leader_epoch))

    def rlmm_add(self, md: RemoteLogSegmentMetadata) -> None:
        self.rlmm.add_remote_log_segment_metadata(md)

    def rlmm_update(
        self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, custom: CustomMetadata | None = None
    ) -> RemoteLogSegmentMetadata:
        update = RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, int(time.time() * 1000), custom, state, self.broker_id
        )
        self.rlmm.update_remote_log_segment_metadata(update)
        return md.create_with_updates(update)

    def rlmm_put_partition_delete(self, tip: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        self.rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(tip, state, int(time.time() * 1000), self.broker_id)
        )

    def delete_remote_segment(self, md: RemoteLogSegmentMetadata) -> None:
        """DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED (each step idempotent)."""
        topic = md.topic_id_partition.topic
        if md.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            md = self.rlmm_update(md, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
        self.metrics.delete_requests.labels(topic).inc()
        try:
            self.rsm.delete_log_segment_data(md)
        except Exception:
            self.metrics.delete_errors.labels(topic).inc()
            raise
        if self.index_cache is not None:
            self.index_cache.remove(md.remote_log_segment_id.id)
        self.read_path.prefetch.drop_segment(md.remote_log_segment_id.id)
        try:
            self.rlmm_update(md, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
        except RemoteResourceNotFoundException:
            pass  # already finished by an earlier attempt

    def update_copy_lag(self, state: PartitionState, plog: Any) -> None:
        pending = plog.only_local_log_segments()[:-1]  # the active segment is not copied yet by design
        labels = (state.tp.topic, str(state.tp.partition))
        self.metrics.copy_lag_bytes.labels(*labels).set(sum(s.size for s in pending))
        self.metrics.copy_lag_segments.labels(*labels).set(len(pending))

    # ---- reads ----------------------------------------------------------------------------------
    def read_async(
        self, topic_partition: Any, fetch_offset: int, max_bytes: int, min_one_message: bool = True
    ) -> Future:
        """Queue a remote read of ``fetch_offset``; the future yields whole record batches (bytes,
        or a memoryview into read-ahead memory: send it, do not keep it),
        at least one batch when ``min_one_message``. Never blocks: safe on the event loop. A full
        reader queue or a missing partition gives a failed future; a read over the fetch quota
        gives empty bytes at once (Kafka: throttled partitions come back empty, without error).
        When a sequential reader's bytes are already in memory the future comes back done
        (:meth:`try_read_cached`)."""
        tp = TopicPartition(*topic_partition)
        self.metrics.fetch_requests.labels(tp.topic).inc()
        throttle_ms = self.fetch_quota.throttle_time_ms()
        if throttle_ms > 0:
            self.metrics.fetch_throttle_ms.inc(throttle_ms)
            fut: Future = Future()
            fut.set_result(b"")
            return fut
        try:
            plog = self.log_manager.get_log(tp)
            if plog is None:
                raise UnknownTopicOrPartitionError(f"{tp} is not hosted here")
            tip = self._tip(tp, plog)
            data = self._read_inline(tip, plog, fetch_offset, max_bytes, min_one_message)
            if data is not None:
                fut = Future()
                fut.set_result(data)
                return fut
            return self.reader_pool.submit(self._read, tip, plog, fetch_offset, max_bytes, min_one_message)
        except Exception as exc:
            self.metrics.fetch_errors.labels(tp.topic).inc()
            fut = Future()
            fut.set_exception(exc)
            return fut

    def try_read_cached(
        self, topic_partition: Any, fetch_offset: int, max_bytes: int, min_one_message: bool = True
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
        plog = self.log_manager.get_log(tp)
        if plog is None:
            return None
        try:
            tip = self._tip(tp, plog)
        except UnknownTopicOrPartitionError:
            return None
        data = self._read_inline(tip, plog, fetch_offset, max_bytes, min_one_message)
        if data is not None:
            self.metrics.fetch_requests.labels(tp.topic).inc()
        return data

    def _read_inline(self, tip: TopicIdPartition, plog: Any, fetch_offset: int, max_bytes: int,
                     min_one: bool) -> bytes | memoryview | None:
        if self.closing or self.reader_pool is None:
            return None
        data = self.read_path.read_inline(tip, plog, fetch_offset, max_bytes, min_one)
        if data is not None:
            self.fetch_quota.record(len(data))
            self.metrics.fetch_bytes.labels(tip.topic).inc(len(data))
        return data

    def _read(self, tip: TopicIdPartition, plog: Any, fetch_offset: int, max_bytes: int, min_one: bool) -> bytes:
        try:
            data = self.read_path.read(tip, plog, fetch_offset, max_bytes, min_one)
        except OffsetOutOfRangeError:
            raise  # a client error, not a remote-storage failure (Kafka does not count it)
        except KafkaError:
            self.metrics.fetch_errors.labels(tip.topic).inc()
            raise
        except Exception as exc:
            self.metrics.fetch_errors.labels(tip.topic).inc()
            log.warning("%s: remote read at %d failed: %r", tip, fetch_offset, exc)
            raise KafkaStorageError(f"remote read of {tip} at {fetch_offset} failed: {exc}") from exc
        self.fetch_quota.record(len(data))
        self.metrics.fetch_bytes.labels(tip.topic).inc(len(data))
        return data

    def read(self, topic_partition: Any, fetch_offset: int, max_bytes: int, timeout: float | None = None) -> bytes:
        """Blocking read (tools, tests): :meth:`read_async` and wait; a ``bytes`` copy."""
        return bytes(self.read_async(topic_partition, fetch_offset, max_bytes).result(timeout))

    def find_offset_by_timestamp(self, topic_partition: Any, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets by timestamp over the remote tier: (offset, timestamp, leader epoch) of the
        first record at or after ``timestamp``, or None when the answer is in the local log (or
        nowhere). Blocking: the server calls it in an executor."""
        tp = TopicPartition(*topic_partition)
        plog = self.log_manager.get_log(tp)
        if plog is None or not self.is_tiered(plog):
            return None
        try:
            return self.read_path.find_offset_by_timestamp(self._tip(tp, plog), plog, timestamp)
        except KafkaError:
            raise
        except Exception as exc:
            raise KafkaStorageError(f"remote timestamp lookup for {tp} failed: {exc}") from exc

    def find_max_timestamp(self, topic_partition: Any) -> tuple[int, int, int] | None:
        """ListOffsets -3 over the remote tier: (offset, timestamp, leader epoch) of the first record
        carrying the largest timestamp among the partition's live remote segments (those at or above
        the log start offset), or None when nothing readable is remote. The segment metadata's
        max_timestamp_ms picks the segment; the timestamp lookup then finds the record inside it.
        Blocking: the server calls it in an executor."""
        tp = TopicPartition(*topic_partition)
        plog = self.log_manager.get_log(tp)
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

    def fetch_remote_log_segment_metadata(self, topic_partition: Any, epoch: int, offset: int):
        """For the follower's rebuild of its aux state (KIP-405 BuildingRemoteLogAuxState)."""
        tp, plog = self._resolve(topic_partition)
        return self.rlmm.remote_log_segment_metadata(self._tip(tp, plog), epoch, offset)
