"""The ``__remote_log_metadata`` topic as the topic-based RLMM sees it.

``MetadataTopic`` is the narrow interface the manager needs; ``LogMetadataTopic`` implements it over
the broker's own partition logs (tieredlog.log), so the metadata lives in an ordinary Kafka topic
that any client can read and that replicates like any other.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable, Iterator, Protocol, runtime_checkable

from tieredlog.rlmm.api import RemoteLogMetadataManagerFatalError

log = logging.getLogger(__name__)

METADATA_TOPIC = "__remote_log_metadata"


@runtime_checkable
class MetadataTopic(Protocol):
    def ensure_created(self, num_partitions: int) -> None:
        """Create the topic, or check it exists with exactly ``num_partitions`` partitions (raise
        RemoteLogMetadataManagerFatalError otherwise)."""

    def append(self, partition: int, value: bytes) -> int:
        """Append one record (null key) and return its offset. Blocking and thread safe."""

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes]]:
        """The records at or after ``from_offset`` as (offset, value), in offset order, up to the
        readable end (records with a null value are skipped)."""

    def end_offset(self, partition: int) -> int:
        """The offset the next appended record will get (the readable end)."""


# create_topic_fn(name, num_partitions, replication_factor, configs) -> the topic's partition
# count (the existing one if the topic already exists).
CreateTopicFn = Callable[[str, int, int, dict[str, str]], int]


class LogMetadataTopic:
    """``__remote_log_metadata`` over local UnifiedLogs of a LogManager.

    ``create_topic_fn`` is the broker's topic creation (it decides placement and registers the
    topic); after it returns, ``log_manager.get_log(TopicPartition(name, p))`` must give the local
    log of every partition. ``after_append(topic_partition, log)`` is called after each append so
    the broker can advance the high watermark (single broker) or wait for the ISR; without it the
    high watermark is moved to the log end, which is right for one broker.
    """

    def __init__(
        self,
        log_manager,
        create_topic_fn: CreateTopicFn,
        *,
        replication_factor: int = 1,
        retention_ms: int = -1,
        after_append: Callable[[object, object], None] | None = None,
    ):
        self._log_manager = log_manager
        self._create_topic_fn = create_topic_fn
        self._replication_factor = replication_factor
        self._retention_ms = retention_ms
        self._after_append = after_append
        self._logs: dict[int, object] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()
        self._unreadable: dict[int, int] = {}  # partition -> offset last reported as unreadable

    def ensure_created(self, num_partitions: int) -> None:
        from tieredlog.log.types import TopicPartition

        configs = {
            "retention.ms": str(self._retention_ms),
            "cleanup.policy": "delete",
            "remote.storage.enable": "false",
        }
        actual = self._create_topic_fn(METADATA_TOPIC, num_partitions, self._replication_factor, configs)
        if actual != num_partitions:
            raise RemoteLogMetadataManagerFatalError(
                f"{METADATA_TOPIC} has {actual} partitions, remote.log.metadata.topic.num.partitions is {num_partitions}"
            )
        with self._lock:
            for p in range(num_partitions):
                plog = self._log_manager.get_log(TopicPartition(METADATA_TOPIC, p))
                if plog is None:
                    raise RemoteLogMetadataManagerFatalError(f"no local log for {METADATA_TOPIC}-{p}")
                self._logs[p] = plog
                self._locks[p] = threading.Lock()

    def _log(self, partition: int):
        try:
            return self._logs[partition]
        except KeyError:
            raise RemoteLogMetadataManagerFatalError(f"{METADATA_TOPIC}-{partition} is not available") from None

    def append(self, partition: int, value: bytes) -> int:
        from tieredlog.records.record import build_batch

        plog = self._log(partition)
        with self._locks[partition]:
            epoch = plog.leader_epoch_cache.latest_epoch
            info = plog.append_as_leader(build_batch([(None, value)]), 0 if epoch is None else epoch)
            if self._after_append is not None:
                self._after_append(plog.topic_partition, plog)
            else:
                plog.update_high_watermark(plog.log_end_offset)
        return info.first_offset

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes]]:
        from tieredlog.errors import OffsetOutOfRangeError
        from tieredlog.formats.errors import RecordError
        from tieredlog.log.batch_reader import LogBatches

        def corrupt(offset: int, _header, exc: RecordError) -> None:
            # A record lost to damage is one line and a gap (Kafka's consumer task logs it and goes
            # on); failing the load instead would retry it, and fail, forever.
            log.error("%s-%d: skipping a corrupt batch after offset %d: %s", METADATA_TOPIC, partition, offset - 1, exc)

        batches = LogBatches(self._log(partition), from_offset, on_corrupt=corrupt)
        try:
            for _header, records in batches:
                for record in records:
                    if record.value is not None:
                        yield record.offset, bytes(record.value)
        except OffsetOutOfRangeError:
            return
        except (OSError, RecordError) as exc:
            # The next catch-up tries again from here: one line per place, not one per query.
            if self._unreadable.get(partition) != batches.offset:
                self._unreadable[partition] = batches.offset
                log.error("%s-%d: cannot read at offset %d: %s", METADATA_TOPIC, partition, batches.offset, exc)

    def end_offset(self, partition: int) -> int:
        return self._log(partition).log_end_offset


def iter_partition_dir(partition_dir: str | Path) -> Iterator[tuple[int, bytes]]:
    """Read one ``__remote_log_metadata-<p>`` folder offline (tools): every record of every ``.log``
    segment file, in offset order, as (offset, value)."""
    from tieredlog.records.record import iter_batches_records

    for path in sorted(Path(partition_dir).glob("*.log")):
        data = path.read_bytes()

        def corrupt(pos: int, _header, exc, path=path) -> None:
            log.warning("%s: skipping a corrupt batch at byte %d: %s", path, pos, exc)

        for _header, records in iter_batches_records(data, stop_at_partial=True, on_corrupt=corrupt):
            for record in records:
                if record.value is not None:
                    yield record.offset, bytes(record.value)
