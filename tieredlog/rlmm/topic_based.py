"""TopicBasedRemoteLogMetadataManager: remote segment metadata stored in ``__remote_log_metadata``.

As Kafka's: each user partition's events go, with Kafka's serde and partitioner, to one partition
of the metadata topic; the in-memory state is what replaying those records gives, so every broker
hosting a replica of the user partition ends in the same state. A write returns only after its
record was appended *and* read back into the state (read-your-write), and records written by
other brokers are picked up before every query.

Beyond Kafka: the state of each metadata partition is snapshotted to disk with the offset it covers
(periodically and at close), so a restart replays only the tail of the topic.

Configs (``rlmm.config.`` stripped), Kafka's names:
``remote.log.metadata.topic.num.partitions`` (50), ``remote.log.metadata.topic.replication.factor``
(3), ``remote.log.metadata.topic.retention.ms`` (-1), ``remote.log.metadata.consume.wait.ms``
(120000), ``remote.log.metadata.initialization.retry.max.timeout.ms`` (120000),
``remote.log.metadata.initialization.retry.interval.ms`` (100), ``broker.id``, ``log.dir``.
Ours: ``remote.log.metadata.snapshot.enable`` (true), ``remote.log.metadata.snapshot.interval.ms``
(60000), ``remote.log.metadata.snapshot.min.records`` (1000: fewer new records are not worth a
periodic rewrite; close always writes when anything changed).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from tieredlog.errors import ReplicaNotAvailableError
from tieredlog.rlmm import serde
from tieredlog.rlmm.api import (
    RemoteLogMetadataManager,
    RemoteLogMetadataManagerFatalError,
    check_new_segment,
    check_segment_update,
)
from tieredlog.rlmm.cache import RemoteLogMetadataCache, RemotePartitionMetadataStore
from tieredlog.rlmm.partitioner import metadata_partition
from tieredlog.rlmm.snapshot import (
    SNAPSHOT_DIR,
    SnapshotError,
    load_snapshot,
    snapshot_body,
    snapshot_path,
    write_snapshot,
)
from tieredlog.rlmm.topic import MetadataTopic
from tieredlog.rsm.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundException,
    TopicIdPartition,
)
from tieredlog.rsm.config import config_int

log = logging.getLogger(__name__)


def _int(configs: Mapping[str, object], key: str, default: int) -> int:
    v = configs.get(key)
    return default if v is None or v == "" else config_int(v)


def _bool(configs: Mapping[str, object], key: str, default: bool) -> bool:
    v = configs.get(key)
    if v is None or v == "":
        return default
    return v.strip().lower() == "true" if isinstance(v, str) else bool(v)


@dataclass(frozen=True, slots=True)
class TopicBasedRlmmConfig:
    num_partitions: int = 50
    replication_factor: int = 3
    retention_ms: int = -1
    consume_wait_ms: int = 120_000
    init_retry_max_timeout_ms: int = 120_000
    init_retry_interval_ms: int = 100
    snapshot_enable: bool = True
    snapshot_interval_ms: int = 60_000
    snapshot_min_records: int = 1000
    broker_id: int = -1
    log_dir: str | None = None

    @classmethod
    def from_configs(cls, configs: Mapping[str, object]) -> "TopicBasedRlmmConfig":
        d = cls()
        cfg = cls(
            num_partitions=_int(configs, "remote.log.metadata.topic.num.partitions", d.num_partitions),
            replication_factor=_int(configs, "remote.log.metadata.topic.replication.factor", d.replication_factor),
            retention_ms=_int(configs, "remote.log.metadata.topic.retention.ms", d.retention_ms),
            consume_wait_ms=_int(configs, "remote.log.metadata.consume.wait.ms", d.consume_wait_ms),
            init_retry_max_timeout_ms=_int(
                configs, "remote.log.metadata.initialization.retry.max.timeout.ms", d.init_retry_max_timeout_ms
            ),
            init_retry_interval_ms=_int(
                configs, "remote.log.metadata.initialization.retry.interval.ms", d.init_retry_interval_ms
            ),
            snapshot_enable=_bool(configs, "remote.log.metadata.snapshot.enable", d.snapshot_enable),
            snapshot_interval_ms=_int(configs, "remote.log.metadata.snapshot.interval.ms", d.snapshot_interval_ms),
            snapshot_min_records=_int(configs, "remote.log.metadata.snapshot.min.records", d.snapshot_min_records),
            broker_id=_int(configs, "broker.id", d.broker_id),
            log_dir=str(configs["log.dir"]) if configs.get("log.dir") else None,
        )
        if cfg.num_partitions <= 0:
            raise ValueError("remote.log.metadata.topic.num.partitions must be > 0")
        if cfg.replication_factor <= 0:
            raise ValueError("remote.log.metadata.topic.replication.factor must be > 0")
        return cfg


@dataclass(frozen=True, slots=True)
class MetadataPartitionState:
    """Where the reading of one metadata partition stands, for the broker's metrics."""

    partition: int
    end_offset: int  # the topic's end as last learned by the reads (never asked for by a scrape)
    consumed_offset: int  # the next offset to apply
    ready_time_s: float | None  # from the first request to load it until loaded; None while loading

    @property
    def lag(self) -> int:
        return max(0, self.end_offset - self.consumed_offset)


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    def __init__(self, metadata_topic: MetadataTopic, configs: Mapping[str, object] | None = None):
        self._topic = metadata_topic
        self.config = TopicBasedRlmmConfig()
        self._lock = threading.RLock()  # guards the stores and the consumed offsets
        self._stores: dict[int, RemotePartitionMetadataStore] = {}
        self._consumed: dict[int, int] = {}  # metadata partition -> next offset to apply
        self._unsnapshotted: dict[int, int] = {}  # records applied since the last snapshot
        self._read_locks: dict[int, threading.Lock] = {}
        self._loaded: set[int] = set()
        self._loads: dict[int, Future] = {}
        self._known_end: dict[int, int] = {}  # metadata partition -> its end offset as last read
        self._load_requested: dict[int, float] = {}  # metadata partition -> monotonic time first asked for
        self._ready_time_s: dict[int, float] = {}
        self._assigned: set[TopicIdPartition] = set()
        self._initialized = False
        self._init_lock = threading.Lock()
        self._closed = threading.Event()
        self._loader: ThreadPoolExecutor | None = None
        self._snapshotter: threading.Thread | None = None
        if configs is not None:
            self.configure(configs)

    # -- lifecycle ------------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, object]) -> None:
        self.config = TopicBasedRlmmConfig.from_configs(configs)
        n = self.config.num_partitions
        with self._lock:
            for p in range(n):
                self._stores.setdefault(p, RemotePartitionMetadataStore())
                self._consumed.setdefault(p, 0)
                self._unsnapshotted.setdefault(p, 0)
                self._read_locks.setdefault(p, threading.Lock())
        # a few loads at once: in a cluster, one metadata partition whose leader is unreachable must not
        # hold back the loading of the others behind it
        self._loader = ThreadPoolExecutor(max_workers=min(n, 4), thread_name_prefix="rlmm-loader")
        if self._snapshot_dir is not None and self.config.snapshot_interval_ms > 0:
            self._snapshotter = threading.Thread(target=self._snapshot_loop, name="rlmm-snapshot", daemon=True)
            self._snapshotter.start()

    @property
    def _snapshot_dir(self) -> Path | None:
        if not self.config.snapshot_enable or not self.config.log_dir:
            return None
        return Path(self.config.log_dir) / SNAPSHOT_DIR

    def _ensure_initialized(self) -> None:
        """Create or check the metadata topic, retrying as Kafka's initialization thread does."""
        if self._initialized:
            return
        if self._loader is None:
            raise RuntimeError("configure() the manager first")
        with self._init_lock:
            if self._initialized:
                return
            deadline = time.monotonic() + self.config.init_retry_max_timeout_ms / 1000
            while True:
                try:
                    self._topic.ensure_created(self.config.num_partitions)
                    break
                except RemoteLogMetadataManagerFatalError:
                    raise
                except Exception as exc:
                    if time.monotonic() >= deadline:
                        raise RemoteLogMetadataManagerFatalError(f"cannot initialize {exc!r}") from exc
                    log.info("metadata topic not ready yet (%r), retrying", exc)
                    time.sleep(self.config.init_retry_interval_ms / 1000)
            self._initialized = True

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        if self._loader is not None:
            self._loader.shutdown(wait=True, cancel_futures=True)
        if self._snapshotter is not None:
            self._snapshotter.join()
        self.snapshot_now(min_records=1)

    # -- assignment and loading -------------------------------------------------------------------

    def partition_for(self, tp: TopicIdPartition) -> int:
        return metadata_partition(tp, self.config.num_partitions)

    def on_partition_leadership_changes(
        self, leader_partitions: Iterable[TopicIdPartition], follower_partitions: Iterable[TopicIdPartition]
    ) -> None:
        tps = set(leader_partitions) | set(follower_partitions)
        with self._lock:
            self._assigned |= tps
        for p in sorted({self.partition_for(tp) for tp in tps}):
            self._schedule_load(p)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        # The state stays: it is shared with the other partitions of the same metadata partition and
        # is needed again if the replica comes back.
        with self._lock:
            self._assigned -= set(partitions)

    def load_metadata_partition(self, p: int) -> None:
        """Start reading metadata partition ``p`` whole, whatever user partitions this broker hosts:
        its leader removes the remote data of the deleted topics that map to it."""
        self._schedule_load(p)

    def partitions_pending_delete(self, p: int) -> list[TopicIdPartition]:
        """Partitions of metadata partition ``p`` marked for deletion and not yet deleted (MARKED, or
        STARTED by a broker that stopped midway); empty until ``p`` is loaded."""
        if p not in self._loaded:
            self._schedule_load(p)
            return []
        self._catch_up(p)
        with self._lock:
            return [tp for tp, md in self._stores[p].delete_metadata.items()
                    if md.state != RemotePartitionDeleteState.DELETE_PARTITION_FINISHED]

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        p = self.partition_for(topic_id_partition)
        if p in self._loaded:
            return True
        # A load that failed (the metadata partition had no leader for a while, as after every replica
        # restarted at once) is tried again here: the RLM's tasks and reads ask on every pass, as Kafka's
        # consumer task keeps polling until the partition is caught up. Cheap: only submits the load.
        try:
            self._schedule_load(p)
        except RuntimeError:
            pass  # not configured yet, or closing: nothing to load
        return False

    def wait_until_ready(self, partitions: Iterable[TopicIdPartition], timeout: float | None = None) -> None:
        """Block until the metadata of ``partitions`` is loaded (tests, benchmarks, broker startup)."""
        futures = [self._schedule_load(p) for p in {self.partition_for(tp) for tp in partitions}]
        for f in futures:
            f.result(timeout)

    def _schedule_load(self, p: int) -> Future:
        with self._lock:
            fut = self._loads.get(p)
            if fut is not None and (not fut.done() or (not fut.cancelled() and fut.exception() is None)):
                return fut  # loading or loaded; a failed or cancelled load is tried again
            if self._loader is None or self._closed.is_set():
                raise RuntimeError("manager is not running")
            self._load_requested.setdefault(p, time.monotonic())
            fut = self._loads[p] = self._loader.submit(self._load, p)
            return fut

    def _load(self, p: int) -> None:
        """Snapshot + tail replay of one metadata partition, then mark it ready. A failure is logged in
        one line and left in the future: the next ``_schedule_load`` of ``p`` tries again."""
        try:
            self._load_partition(p)
        except Exception as exc:
            if not self._closed.is_set():
                log.warning("%s-%d not loaded yet, tried again on the next request for it: %s",
                            "__remote_log_metadata", p, exc)
            raise

    def _load_partition(self, p: int) -> None:
        self._ensure_initialized()
        t0 = time.monotonic()
        with self._read_locks[p]:
            restored = self._restore_snapshot(p)
            replayed = self._consume(p, None)
            with self._lock:
                for cache in self._stores[p].caches.values():
                    cache.mark_initialized()
                self._loaded.add(p)
                self._ready_time_s[p] = time.monotonic() - self._load_requested.get(p, t0)
        log.info("%s-%d loaded in %.3f s (snapshot up to offset %s, %d records replayed)",
                 "__remote_log_metadata", p, time.monotonic() - t0, restored, replayed)
        if replayed >= self.config.snapshot_min_records:
            self.snapshot_partition(p)

    def _restore_snapshot(self, p: int) -> int | None:
        directory = self._snapshot_dir
        if directory is None:
            return None
        path = snapshot_path(directory, p)
        if not path.exists():
            return None
        try:
            snap = load_snapshot(path, p, self.config.num_partitions)
        except (SnapshotError, OSError) as exc:
            log.warning("ignoring metadata snapshot %s: %s", path, exc)
            return None
        end = self._learn_end(p)
        if snap.next_offset > end:
            # The topic holds less than the snapshot saw (recreated or truncated): trust the topic.
            log.warning("ignoring metadata snapshot %s: covers offset %d but the topic ends at %d",
                        path, snap.next_offset, end)
            return None
        with self._lock:
            self._stores[p] = snap.store
            self._consumed[p] = snap.next_offset
            self._unsnapshotted[p] = 0
        return snap.next_offset

    # -- consuming ------------------------------------------------------------------------------

    def _consume(self, p: int, until: int | None) -> int:
        """Apply the records of metadata partition ``p`` from the consumed offset up to ``until``
        (exclusive; the current end when None). Caller holds the partition's read lock."""
        end = self._learn_end(p) if until is None else until
        applied = 0
        if self._consumed[p] >= end:
            return 0
        for offset, value in self._topic.read(p, self._consumed[p]):
            self._apply(p, offset, value)
            applied += 1
            if offset + 1 >= end:
                break
        return applied

    def _learn_end(self, p: int) -> int:
        """The topic's end offset, kept for the lag metric: a scrape reports the end the reads last
        saw rather than ask a remote leader for it on the metrics thread."""
        end = self._topic.end_offset(p)
        self._known_end[p] = end  # one dict store, atomic: the read path takes no lock for it
        return end

    def _apply(self, p: int, offset: int, value: bytes) -> None:
        try:
            md = serde.deserialize(value)
        except serde.MetadataSerdeError as exc:
            log.error("skipping undecodable record at %s-%d offset %d: %s", "__remote_log_metadata", p, offset, exc)
            md = None
        with self._lock:
            if md is not None:
                store = self._stores[p]
                if p in self._loaded and not isinstance(md, serde.RemoteLogSegmentMetadataSnapshot):
                    # once loaded, an update for an unknown segment is an error, not retention
                    store.cache(md.topic_id_partition).mark_initialized()
                try:
                    if isinstance(md, RemoteLogSegmentMetadata):
                        store.handle_segment_metadata(md)
                    elif isinstance(md, RemoteLogSegmentMetadataUpdate):
                        store.handle_segment_update(md)
                    elif isinstance(md, RemotePartitionDeleteMetadata):
                        store.handle_partition_delete(md)
                    else:
                        log.error("unexpected %s record at offset %d", type(md).__name__, offset)
                except (RemoteResourceNotFoundException, ValueError) as exc:
                    log.error("dropping record at %s-%d offset %d: %s", "__remote_log_metadata", p, offset, exc)
            self._consumed[p] = max(self._consumed[p], offset + 1)
            self._unsnapshotted[p] += 1

    def _catch_up(self, p: int, until: int | None = None) -> None:
        """Read up to ``until`` (our own record + 1) or the current end, waiting up to
        remote.log.metadata.consume.wait.ms for the record to become readable."""
        if until is None and self._learn_end(p) <= self._consumed[p]:
            return  # the common read path: nothing new, no lock taken
        deadline = time.monotonic() + self.config.consume_wait_ms / 1000
        while True:
            with self._read_locks[p]:
                self._consume(p, until)
                if until is None or self._consumed[p] >= until:
                    return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"metadata record at offset {until - 1} not consumed in time")
            time.sleep(0.01)

    def _ready_store(self, p: int, tp: TopicIdPartition) -> RemotePartitionMetadataStore:
        if p not in self._loaded:
            self._schedule_load(p)
            raise ReplicaNotAvailableError(f"remote log metadata of {tp} is still loading")
        self._catch_up(p)
        return self._stores[p]

    def _wait_loaded(self, p: int) -> None:
        if p not in self._loaded:
            self._schedule_load(p).result(self.config.consume_wait_ms / 1000)

    # -- writes ---------------------------------------------------------------------------------

    def _publish(self, tp: TopicIdPartition, md) -> None:
        p = self.partition_for(tp)
        self._wait_loaded(p)
        offset = self._topic.append(p, serde.serialize(md))
        self._catch_up(p, offset + 1)

    def add_remote_log_segment_metadata(self, remote_log_segment_metadata: RemoteLogSegmentMetadata) -> None:
        check_new_segment(remote_log_segment_metadata)
        self._publish(remote_log_segment_metadata.topic_id_partition, remote_log_segment_metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        check_segment_update(update)
        tp = update.topic_id_partition
        p = self.partition_for(tp)
        self._wait_loaded(p)
        self._catch_up(p)
        with self._lock:
            cache = self._stores[p].caches.get(tp)
            if cache is None or cache.segment(update.remote_log_segment_id) is None:
                raise RemoteResourceNotFoundException(f"no remote log segment {update.remote_log_segment_id.id}")
        self._publish(tp, update)

    def put_remote_partition_delete_metadata(
        self, remote_partition_delete_metadata: RemotePartitionDeleteMetadata
    ) -> None:
        self._publish(remote_partition_delete_metadata.topic_id_partition, remote_partition_delete_metadata)

    # -- queries --------------------------------------------------------------------------------

    def _cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache | None:
        return self._ready_store(self.partition_for(tp), tp).caches.get(tp)

    def remote_log_segment_metadata(self, topic_id_partition, epoch_for_offset, offset):
        cache = self._cache(topic_id_partition)
        with self._lock:
            return None if cache is None else cache.remote_log_segment_metadata(epoch_for_offset, offset)

    def next_segment_with_txn_index(self, topic_id_partition, epoch, offset):
        cache = self._cache(topic_id_partition)
        with self._lock:
            return None if cache is None else cache.next_segment_with_txn_index(epoch, offset)

    def highest_offset_for_epoch(self, topic_id_partition, leader_epoch):
        cache = self._cache(topic_id_partition)
        with self._lock:
            return None if cache is None else cache.highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        cache = self._cache(topic_id_partition)
        with self._lock:
            return iter(() if cache is None else cache.list_remote_log_segments(leader_epoch))

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        return sum(m.segment_size_in_bytes for m in self.list_remote_log_segments(topic_id_partition, leader_epoch))

    def partition_delete_metadata(self, tp: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        store = self._ready_store(self.partition_for(tp), tp)
        with self._lock:
            return store.delete_metadata.get(tp)

    # -- metrics --------------------------------------------------------------------------------

    @property
    def consumer_client_id(self) -> str:
        """The client id Kafka's manager gives its metadata consumer, which labels its lag metric."""
        return f"__remote_log_metadata_client_{self.config.broker_id}_consumer"

    def metadata_partition_states(self) -> list[MetadataPartitionState]:
        """Each metadata partition this broker reads (asked to load), loaded or loading; no I/O."""
        with self._lock:
            return [MetadataPartitionState(p, max(self._known_end.get(p, 0), self._consumed[p]), self._consumed[p],
                                           self._ready_time_s.get(p)) for p in sorted(self._loads)]

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot_partition(self, p: int) -> Path | None:
        directory = self._snapshot_dir
        if directory is None or p not in self._loaded:
            return None
        with self._lock:
            body = snapshot_body(p, self.config.num_partitions, self._consumed[p], self._stores[p])
            self._unsnapshotted[p] = 0
        try:
            return write_snapshot(directory, body)
        except OSError as exc:
            log.warning("cannot write metadata snapshot of partition %d: %s", p, exc)
            with self._lock:
                self._unsnapshotted[p] += 1  # try again next time
            return None

    def snapshot_now(self, min_records: int = 1) -> int:
        """Snapshot every loaded metadata partition with at least ``min_records`` new records.
        Returns how many snapshots were written."""
        written = 0
        for p in sorted(self._loaded):
            if self._unsnapshotted.get(p, 0) >= min_records and self.snapshot_partition(p) is not None:
                written += 1
        return written

    def _snapshot_loop(self) -> None:
        interval = self.config.snapshot_interval_ms / 1000
        while not self._closed.wait(interval):
            try:
                self.snapshot_now(self.config.snapshot_min_records)
            except Exception:  # the next round retries; never kill the thread
                log.exception("periodic metadata snapshot failed")
