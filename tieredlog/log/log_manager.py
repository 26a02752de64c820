"""LogManager: every partition log under ``log.dirs``, their checkpoints, retention and flushing.

Per log dir, as Kafka: ``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint`` (high
watermarks), ``log-start-offset-checkpoint``, and a ``.kafka_cleanshutdown`` marker written on clean
shutdown and removed once the logs are loaded (so a crash later is seen as unclean). Partition dirs are
``<topic>-<partition>``; a deleted partition's dir is renamed ``<topic>-<partition>.<uuid hex>-delete``
at once and removed in the background, so a crash mid-delete leaves nothing that loads as a live
partition, and the next start finishes the job.

Retention, the flusher, the checkpoints, rolled-segment flushes and directory deletes run on the
LogManager's own scheduler threads (Kafka's KafkaScheduler), never on the event loop and never on a pool
remote-storage work uses.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Mapping

from tieredlog import errors
from tieredlog.atomic_file import fsync_dir
from tieredlog.formats.checkpoints import CorruptCheckpointError
from tieredlog.log.checkpoints import OffsetCheckpointFile
from tieredlog.log.cleaner.log_cleaner import CleanerConfig, LogCleaner
from tieredlog.log.config import LogConfig
from tieredlog.log.scheduler import KafkaScheduler
from tieredlog.log.storage_errors import describe_os_error, storage_error_log
from tieredlog.log.types import TopicPartition, parse_partition_dir
from tieredlog.log.unified_log import UnifiedLog

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"

# Folders other parts of the broker keep in a log dir (tieredlog.rlmm.snapshot.SNAPSHOT_DIR,
# tieredlog.rlm.index_cache.DIR_NAME, the local RSM's default "dir" in tieredlog.server.remote_tier, the remote
# cleaner's scratch directory, tieredlog.rlm.remote_cleaner.DIR_NAME). Named here
# rather than imported so the log layer does not depend on the tiering packages.
BROKER_OWNED_DIRS = frozenset({"remote-log-metadata-snapshots", "remote-log-index-cache", "remote-storage",
                               "remote-log-cleaner"})


def topics_in_log_dirs(log_dirs: Iterable[Path]) -> set[str]:
    """The topics whose partition directories are in ``log_dirs``: what a LogManager will load (a
    broker in a cluster reads their configs first, as Kafka's fetchTopicConfigOverrides)."""
    out: set[str] = set()
    for d in log_dirs:
        if not d.is_dir():
            continue
        for child in d.iterdir():
            if child.is_dir() and not child.name.endswith(DELETE_DIR_SUFFIX) and child.name not in BROKER_OWNED_DIRS:
                try:
                    out.add(parse_partition_dir(child.name).topic)
                except ValueError:
                    continue
    return out

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(topic: str) -> None:
    """Kafka's Topic.validate: raises InvalidTopicError before the name touches the file system."""
    if not topic:
        raise errors.InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise errors.InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise errors.InvalidTopicError(f"topic name is {len(topic)} characters, longer than {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.match(topic):
        raise errors.InvalidTopicError(f"topic name {topic!r} has characters outside [a-zA-Z0-9._-]")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read()
    except (CorruptCheckpointError, ValueError) as e:
        # A damaged checkpoint only costs extra recovery work: treat it as absent, as Kafka does.
        log.warning("ignoring unreadable checkpoint %s: %s", path, e)
        return {}


class LogManager:
    def __init__(
        self,
        log_dirs: Iterable[str | os.PathLike[str]],
        default_config: LogConfig,
        *,
        topic_configs: Mapping[str, LogConfig] | Callable[[str], LogConfig | None] | None = None,
        clock: Callable[[], int] = _now_ms,
        producer_id_expiration_ms: int = 86_400_000,
        num_recovery_threads_per_data_dir: int = 1,
        background_threads: int = 10,
        cleaner_config: CleanerConfig | None = None,
    ):
        """``background_threads``: Kafka's background.threads, the scheduler's threads. They start with the
        first task; a LogManager whose logs never roll nor delete starts none until ``startup``.
        ``cleaner_config``: the log cleaner (compaction), started by ``startup`` when enabled."""
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("at least one log dir is needed")
        self.default_config = default_config
        self._topic_configs = topic_configs
        self._clock = clock
        self.producer_id_expiration_ms = producer_id_expiration_ms
        # Kafka's num.recovery.threads.per.data.dir: values below 1 mean 1, as Kafka's validator requires.
        self.num_recovery_threads_per_data_dir = max(1, num_recovery_threads_per_data_dir)
        self._lock = threading.RLock()
        self.scheduler = KafkaScheduler(background_threads)
        # Concurrent writers of one checkpoint would share its ".tmp" file.
        self._checkpoint_lock = threading.Lock()
        # (renamed "-delete" dir, delete after ms): Kafka's logsToBeDeleted
        self._logs_to_be_deleted: list[tuple[Path, int]] = []
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        self.had_clean_shutdown: dict[Path, bool] = {}
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self._load_dirs()
        self.cleaner: LogCleaner | None = None
        if cleaner_config is not None:
            self.cleaner = LogCleaner(cleaner_config, self.log_dirs, self.all_logs, clock=clock)

    # ---- loading ----------------------------------------------------------------------------------
    def config_for(self, topic: str) -> LogConfig:
        tc = self._topic_configs
        cfg = None
        if callable(tc):
            cfg = tc(topic)
        elif tc is not None:
            cfg = tc.get(topic)
        return cfg or self.default_config

    def _partition_dirs(self, d: Path) -> list[tuple[TopicPartition, Path]]:
        out = []
        for child in sorted(d.iterdir()):
            if not child.is_dir():
                continue
            if child.name.endswith(DELETE_DIR_SUFFIX):
                # A delete the last run did not finish: no reader of that process can hold these files,
                # so they go at once, in the background once ``startup`` runs.
                self._logs_to_be_deleted.append((child, self._clock()))
                continue
            if child.name in BROKER_OWNED_DIRS:
                log.debug("skipping %s: kept in the log dir by the broker itself", child)
                continue
            try:
                tp = parse_partition_dir(child.name)
                validate_topic_name(tp.topic)
            except (ValueError, errors.InvalidTopicError):
                log.warning("ignoring %s: not a partition directory", child)
                continue
            out.append((tp, child))
        return out

    def _load_dirs(self) -> None:
        """Load every partition of every log dir.

        With num.recovery.threads.per.data.dir > 1, each dir gets a pool of that many threads and all dirs
        load at once (Kafka's loadLogs). The default, 1, loads inline: loading is CPU-bound under the GIL
        once the files are cached, and threads measured slower there (100 small partitions: 38 ms inline,
        52 ms with 2 threads, 79 ms with 4); they only pay off while reads wait on a cold disk."""
        jobs: list[tuple[Path, TopicPartition, Callable[[], UnifiedLog]]] = []
        where: dict[TopicPartition, Path] = {}
        for d in self.log_dirs:
            clean = (d / CLEAN_SHUTDOWN_FILE).exists()
            self.had_clean_shutdown[d] = clean
            recovery = _read_checkpoint(d / RECOVERY_POINT_CHECKPOINT)
            starts = _read_checkpoint(d / LOG_START_OFFSET_CHECKPOINT)
            hws = _read_checkpoint(d / REPLICATION_CHECKPOINT)
            for tp, child in self._partition_dirs(d):
                # Checked before anything loads, so a bad layout changes nothing on disk.
                if tp in where:
                    raise errors.KafkaStorageError(f"partition {tp} found in two log dirs: {where[tp]} and {child}")
                where[tp] = child
                jobs.append((d, tp, functools.partial(
                    UnifiedLog,
                    child,
                    self.config_for(tp.topic),
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp),
                    high_watermark=hws.get(tp),
                    had_clean_shutdown=clean,
                    clock=self._clock,
                    producer_id_expiration_ms=self.producer_id_expiration_ms,
                    scheduler=self.scheduler,
                )))
        threads = self.num_recovery_threads_per_data_dir
        if threads == 1:
            for _, tp, load in jobs:
                self._logs[tp] = load()
        else:
            self._load_in_pools(jobs, threads)
        for d in self.log_dirs:
            # The marker only describes the last shutdown; a crash from now on must look unclean.
            (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)

    def _load_in_pools(self, jobs: list[tuple[Path, TopicPartition, Callable[[], UnifiedLog]]], threads: int) -> None:
        pools = {d: ThreadPoolExecutor(threads, thread_name_prefix=f"log-recovery-{i}") for i, d in enumerate(self.log_dirs)}
        try:
            futures = [(tp, pools[d].submit(load)) for d, tp, load in jobs]
            failure: BaseException | None = None
            for tp, fut in futures:
                try:
                    self._logs[tp] = fut.result()
                except BaseException as e:  # noqa: BLE001 - re-raised below once every load has ended
                    log.error("loading %s failed: %s", tp, e)
                    failure = failure or e
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True)
        if failure is not None:
            # The broker will not start: release what did load before reporting the first failure.
            for plog in self._logs.values():
                plog.close_handles()
            self._logs.clear()
            raise failure

    # ---- partitions -------------------------------------------------------------------------------
    def get_log(self, tp: TopicPartition) -> UnifiedLog | None:
        return self._logs.get(TopicPartition(*tp))

    def all_logs(self) -> list[UnifiedLog]:
        with self._lock:
            return list(self._logs.values())

    def _next_log_dir(self) -> Path:
        """The log dir holding the fewest partitions (Kafka's choice for new partitions)."""
        counts = {d: 0 for d in self.log_dirs}
        for plog in self._logs.values():
            parent = plog.dir.parent
            if parent in counts:
                counts[parent] += 1
        return min(self.log_dirs, key=lambda d: (counts[d], self.log_dirs.index(d)))

    def get_or_create_log(
        self, tp: TopicPartition, topic_id: uuid.UUID | None = None, config: LogConfig | None = None
    ) -> UnifiedLog:
        tp = TopicPartition(*tp)
        validate_topic_name(tp.topic)
        if tp.partition < 0:
            raise errors.InvalidPartitionsError(f"partition {tp.partition} is negative")
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                if topic_id is not None and existing.topic_id is not None and existing.topic_id != topic_id:
                    raise errors.InconsistentTopicIdError(f"{tp} has topic id {existing.topic_id}, not {topic_id}")
                if topic_id is not None and existing.topic_id is None:
                    existing.assign_topic_id(topic_id)  # loaded without a readable partition.metadata
                return existing
            d = self._next_log_dir() / str(tp)
            plog = UnifiedLog(
                d,
                config or self.config_for(tp.topic),
                topic_id=topic_id,
                clock=self._clock,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
                scheduler=self.scheduler,
            )
            fsync_dir(d.parent)
            self._logs[tp] = plog
            return plog

    def delete_log(self, tp: TopicPartition) -> bool:
        """DeleteTopics for one partition, as Kafka's asyncDelete: the directory is renamed
        ``<topic>-<partition>.<uuid hex>-delete`` right away (a re-created partition of the same name gets
        a fresh directory) and removed in the background after ``file.delete.delay.ms``; the rename's
        directory fsync and the checkpoints without the partition are background work too."""
        tp = TopicPartition(*tp)
        with self._lock:
            plog = self._logs.pop(tp, None)
            if plog is None:
                return False
            if self.cleaner is not None:
                self.cleaner.abort_cleaning(tp)
            doomed = plog.dir.with_name(f"{tp}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
            # under the log's lock: the cleaner creates its files there only while the directory exists
            with plog.local_log.lock:
                plog.close_handles()
                os.rename(plog.dir, doomed)
            self._logs_to_be_deleted.append((doomed, self._clock() + plog.config.file_delete_delay_ms))
        self.scheduler.schedule_once(f"log-deleted {tp}", lambda: self._after_log_renamed(doomed.parent))
        self.scheduler.schedule_once("kafka-delete-logs", self.delete_logs, plog.config.file_delete_delay_ms)
        return True

    def _after_log_renamed(self, log_dir: Path) -> None:
        fsync_dir(log_dir)  # the rename is durable: a crash no longer brings the partition back
        self.write_checkpoints()

    def delete_logs(self, now_ms: int | None = None) -> int:
        """The "kafka-delete-logs" task: remove the renamed directories whose delay has passed. Returns how
        many went; a directory that cannot be removed is kept and retried by the next run."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            due = [(d, t) for d, t in self._logs_to_be_deleted if t <= now]
            self._logs_to_be_deleted = [(d, t) for d, t in self._logs_to_be_deleted if t > now]
        failed = []
        for d, t in due:
            try:
                shutil.rmtree(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                failed.append((d, t))
                storage_error_log.error(("delete-log", str(d)), "cannot delete %s, retrying: %s", d, describe_os_error(e))
        if failed:
            with self._lock:
                self._logs_to_be_deleted.extend(failed)
            self.scheduler.schedule_once("kafka-delete-logs", self.delete_logs, 10_000)
        return len(due) - len(failed)

    def pending_log_deletes(self) -> list[Path]:
        with self._lock:
            return [d for d, _ in self._logs_to_be_deleted]

    def startup(self, *, retention_check_ms: int = 300_000, flush_check_ms: int | None = None,
                checkpoint_ms: int = 60_000, high_watermark_checkpoint_ms: int = 5_000) -> None:
        """Kafka's LogManager.startup: the periodic tasks on the LogManager's scheduler, each first run one
        interval from now, and the deletes a previous run left unfinished, at once. ``flush_check_ms``
        None: no flusher (log.flush.scheduler.interval.ms at its default, Long.MAX_VALUE). High watermarks
        are checkpointed on their own, shorter interval (Kafka's ReplicaManager task, 5 s by default): a
        broker restarted after kill -9 starts from them, and may lead before its followers' fetches tell it more."""
        sched = self.scheduler
        sched.schedule("kafka-log-retention", self.cleanup_logs, retention_check_ms, retention_check_ms)
        if flush_check_ms is not None:
            sched.schedule("kafka-log-flusher", self.flush_dirty_logs, flush_check_ms, flush_check_ms)
        sched.schedule("kafka-checkpoints", self._write_offset_checkpoints, checkpoint_ms, checkpoint_ms)
        sched.schedule("highwatermark-checkpoint", self.checkpoint_high_watermarks, high_watermark_checkpoint_ms,
                       high_watermark_checkpoint_ms)
        if self.pending_log_deletes():
            sched.schedule_once("kafka-delete-logs", self.delete_logs)
        if self.cleaner is not None:
            self.cleaner.startup()

    def write_checkpoints(self) -> bool:
        """Recovery points, log start offsets and high watermarks (no replica manager owns those here)."""
        return all([self.checkpoint_recovery_points(), self.checkpoint_log_start_offsets(), self.checkpoint_high_watermarks()])

    def _write_offset_checkpoints(self) -> bool:
        """The "kafka-checkpoints" task: recovery points and log start offsets (high watermarks have theirs)."""
        return all([self.checkpoint_recovery_points(), self.checkpoint_log_start_offsets()])

    # ---- background tasks -------------------------------------------------------------------------
    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """The "log-retention" task: retention for every log, then due physical deletes."""
        now = self._clock() if now_ms is None else now_ms
        total = 0
        for plog in self.all_logs():
            # One log on a full disk (its roll or snapshot fails) must not stop retention of the others,
            # which is what frees space; it is retried on the next run.
            try:
                total += plog.delete_old_segments(now)
                plog.delete_expired_files(now)
            except OSError as e:
                storage_error_log.error(("retention", str(plog.topic_partition)),
                                        "partition %s: retention failed, retrying next run: %s",
                                        plog.topic_partition, describe_os_error(e))
        # Producer expiration rides on the same periodic task, so the broker needs no extra scheduler.
        self.remove_expired_producers(now)
        return total

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Kafka's producer-expiration task: every log forgets producers idle for
        ``producer.id.expiration.ms`` (open transactions are kept). Returns how many were removed."""
        now = self._clock() if now_ms is None else now_ms
        return sum(len(plog.remove_expired_producers(now)) for plog in self.all_logs())

    def flush_dirty_logs(self, now_ms: int | None = None) -> int:
        """The "log-flusher" task: flush.ms for every log."""
        now = self._clock() if now_ms is None else now_ms
        flushed = 0
        for plog in self.all_logs():
            try:
                flushed += plog.flush_if_due(now)
            except OSError as e:  # the recovery point stays where it was; retried next run
                storage_error_log.error(("flush", str(plog.topic_partition)),
                                        "partition %s: flush failed, retrying next run: %s",
                                        plog.topic_partition, describe_os_error(e))
        return flushed

    def _by_dir(self) -> dict[Path, list[UnifiedLog]]:
        out: dict[Path, list[UnifiedLog]] = {d: [] for d in self.log_dirs}
        for plog in self.all_logs():
            out.setdefault(plog.dir.parent, []).append(plog)
        return out

    def _write_checkpoint(self, path: Path, offsets: dict[TopicPartition, int]) -> bool:
        """Write one checkpoint file; on a full disk the old file stays intact (the new one goes through
        ``<file>.tmp``, removed here), one line is logged and the next run tries again. Returns success."""
        try:
            with self._checkpoint_lock:
                OffsetCheckpointFile(path).write(offsets)
            return True
        except OSError as e:
            path.with_name(path.name + ".tmp").unlink(missing_ok=True)
            storage_error_log.error(("checkpoint", str(path)), "cannot write checkpoint %s: %s", path, describe_os_error(e))
            return False

    def checkpoint_recovery_points(self) -> bool:
        ok = True
        for d, logs in self._by_dir().items():
            ok &= self._write_checkpoint(d / RECOVERY_POINT_CHECKPOINT, {plog.topic_partition: plog.recovery_point for plog in logs})
        return ok

    def checkpoint_log_start_offsets(self) -> bool:
        ok = True
        for d, logs in self._by_dir().items():
            ok &= self._write_checkpoint(
                d / LOG_START_OFFSET_CHECKPOINT,
                {plog.topic_partition: plog.log_start_offset for plog in logs
                 if plog.log_start_offset > 0 or plog.config.remote_storage_enable},  # Kafka: always for tiered logs
            )
        return ok

    def checkpoint_high_watermarks(self) -> bool:
        ok = True
        for d, logs in self._by_dir().items():
            ok &= self._write_checkpoint(d / REPLICATION_CHECKPOINT, {plog.topic_partition: plog.high_watermark for plog in logs})
        return ok

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown markers (last).

        A log dir where any of that fails (full disk) gets no marker: its next start recovers from the
        log itself instead of trusting files that could not be written. The background tasks stop first
        (a task stuck on a dead disk is waited for at most 30 s); unfinished directory deletes are done
        by the next start."""
        if self.cleaner is not None:
            self.cleaner.shutdown()  # a round in progress stops swapping nothing in, or finishes its swap
        self.scheduler.shutdown()
        logs = self.all_logs()
        failed: set[Path] = set()
        for plog in logs:
            try:
                plog.flush()
            except OSError as e:
                failed.add(plog.dir.parent)
                log.error("partition %s: cannot flush at shutdown: %s", plog.topic_partition, describe_os_error(e))
        if not self.write_checkpoints():
            failed.update(self.log_dirs)
        for plog in logs:
            try:
                plog.close(flush=False)
            except OSError as e:
                failed.add(plog.dir.parent)
                log.error("partition %s: cannot close cleanly at shutdown: %s", plog.topic_partition, describe_os_error(e))
        for d in self.log_dirs:
            if d in failed:
                log.error("log dir %s: shut down without the clean-shutdown marker; it is recovered at the next start", d)
                continue
            try:
                (d / CLEAN_SHUTDOWN_FILE).touch()
                fsync_dir(d)
            except OSError as e:
                log.error("log dir %s: cannot write the clean-shutdown marker: %s", d, describe_os_error(e))
