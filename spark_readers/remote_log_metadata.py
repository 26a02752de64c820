"""``metadataSource=brokers``: a topic's committed segments from ``__remote_log_metadata``, read through the
brokers of ``kafka.bootstrap.servers``, for a remote tier whose writer leaves no manifests, or an RSM
that cannot list its own objects (another plugin's layout).

What the brokers' topic-based metadata manager does, with its code: only the metadata partitions the
topic's partitions map to (Kafka's RemoteLogMetadataTopicPartitioner: a hash of topic id and partition
over the metadata topic's partition count) are read, from their log start to their high watermark,
decoded with Kafka's serde and replayed into the manager's own cache (COPY_SEGMENT_STARTED, FINISHED,
DELETE_SEGMENT_STARTED, FINISHED; invalid transitions dropped; a copy superseded in an epoch by a newer
copy of the same offsets unmapped there). The segments reads go to
(:meth:`~tieredlog.rlmm.cache.RemoteLogMetadataCache.readable_segments`) are then resolved to one copy
per offset on the catalog's leader-epoch lineage, as the manifests' are, and fetched through the RSM
contract with the very RemoteLogSegmentMetadata the broker published (its custom metadata included).

The topic id is the brokers' (DescribeTopics), so a topic recreated under the same name reads only the
live topic's segments, and a topic no longer on the brokers cannot be read this way. The partitions'
log start is the brokers' (ListOffsets EARLIEST, applied by the planner).

The brokers are talked to as in :mod:`spark_readers.brokers`: confluent-kafka (imported here only, on
the driver, with this option), configured by the ``kafka.*`` options; the consumer is assigned the
metadata partitions, never joins a group and never commits.

As the brokers' manager keeps its state between queries, one listing per brokers' configuration lives
as long as the driver's Python process (:func:`broker_metadata_listing`): each query, and each trigger
of a stream, reads only the metadata records added since the last one (a metadata partition whose log
start moved past what was read, or that was recreated, is read again whole).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Mapping

from spark_readers.brokers import BrokerError, require_confluent_kafka
from spark_readers.catalog import CatalogError, NothingTiered, Segment
from tieredlog.rlmm import serde
from tieredlog.rlmm.cache import RemotePartitionMetadataStore
from tieredlog.rlmm.partitioner import metadata_partition
from tieredlog.rsm.api import RemoteStorageException, TopicIdPartition

if TYPE_CHECKING:
    from confluent_kafka import Message
    from confluent_kafka.admin import AdminClient

METADATA_TOPIC = "__remote_log_metadata"
_BATCH = 10_000

_shared: dict[tuple[tuple[tuple[str, str], ...], float], BrokerMetadataListing] = {}
_shared_lock = threading.Lock()


def broker_metadata_listing(config: Mapping[str, str], timeout_s: float) -> BrokerMetadataListing:
    """The process's listing for these ``kafka.*`` options, made on first use."""
    key = (tuple(sorted(config.items())), timeout_s)
    with _shared_lock:
        listing = _shared.get(key)
        if listing is None:
            listing = _shared[key] = BrokerMetadataListing(config, timeout_s)
        return listing


class BrokerMetadataListing:
    """A :class:`~spark_readers.catalog.SegmentListing` over ``__remote_log_metadata``: the state of each
    metadata partition read so far and where its reading stands, caught up on every listing of a topic
    that maps to it. Thread safe. The state is kept for the process; the clients that ask the brokers
    are made for each listing and let go after it, so a kept listing holds no connection between
    queries."""

    def __init__(self, config: Mapping[str, str], timeout_s: float) -> None:
        require_confluent_kafka()
        self._config: dict[str, str | int | float | bool] = dict(config)
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._stores: dict[int, RemotePartitionMetadataStore] = {}
        self._next: dict[int, int] = {}  # metadata partition -> the offset to read from

    def topics(self) -> list[str]:
        return sorted(t for t in self._partition_counts(self._admin()) if not t.startswith("__"))

    def committed_segments(self, topic: str) -> dict[int, list[Segment]]:
        admin = self._admin()
        counts = self._partition_counts(admin)
        if topic not in counts:
            raise NothingTiered(f"topic {topic!r} is not on the brokers")
        if not counts.get(METADATA_TOPIC):
            raise NothingTiered(f"topic {topic!r} has no committed segments: the brokers have no {METADATA_TOPIC}")
        topic_id = self._topic_id(admin, topic)
        mapped = {TopicIdPartition(topic_id, topic, p): metadata_partition(TopicIdPartition(topic_id, topic, p),
                                                                           counts[METADATA_TOPIC])
                  for p in range(counts[topic])}
        out: dict[int, list[Segment]] = {}
        with self._lock:
            self._catch_up(sorted(set(mapped.values())))
            for tp, p in mapped.items():
                cache = self._stores[p].caches.get(tp)
                if cache is not None:
                    # the metadata's own size: a plugin may store the segment chunked or encrypted, and
                    # fetch_log_segment takes positions in the segment
                    segments = [Segment(md, md.segment_size_in_bytes, "") for md in cache.readable_segments()]
                    if segments:
                        out[tp.partition] = segments
        if not out:
            raise NothingTiered(f"topic {topic!r} has no committed segments in {METADATA_TOPIC}")
        return out

    def log_start_offset(self, tp: TopicIdPartition) -> int | None:
        # the planner takes the brokers' log start (ListOffsets EARLIEST), which is never behind this
        return None

    def _admin(self) -> AdminClient:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._config)

    def _partition_counts(self, admin: AdminClient) -> dict[str, int]:
        from confluent_kafka import KafkaException

        try:
            md = admin.list_topics(timeout=self._timeout_s)
        except KafkaException as exc:
            raise CatalogError(f"cannot reach the brokers (kafka.bootstrap.servers): {exc.args[0]}") from None
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def _topic_id(self, admin: AdminClient, topic: str) -> uuid.UUID:
        from confluent_kafka import KafkaException, TopicCollection

        try:
            (future,) = admin.describe_topics(TopicCollection([topic]), request_timeout=self._timeout_s).values()
            tid = future.result().topic_id
        except KafkaException as exc:
            raise CatalogError(f"cannot describe topic {topic!r} on the brokers: {exc.args[0]}") from None
        msb, lsb = tid.get_most_significant_bits(), tid.get_least_significant_bits()
        return uuid.UUID(int=((msb & (2**64 - 1)) << 64) | (lsb & (2**64 - 1)))

    def _catch_up(self, metadata_partitions: list[int]) -> None:
        """The records of these metadata partitions from where their reading stands (their log start the
        first time) to their high watermark, into their stores, as the brokers' manager replays them (an
        undecodable record is skipped, as it does). Caller holds the lock."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({**self._config, "group.id": f"tieredlog-reader-{uuid.uuid4()}",
                             "enable.auto.commit": "false", "isolation.level": "read_uncommitted",
                             # retention moved the log start since the watermarks were asked: go on from there
                             "auto.offset.reset": "earliest"})
        try:
            ends: dict[int, int] = {}
            starts: list[TopicPartition] = []
            for p in metadata_partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(METADATA_TOPIC, p), self._timeout_s)
                position = self._next.get(p)
                if position is None or not low <= position <= high:
                    # first read, or records not read yet are gone (retention, a recreated topic): from scratch
                    self._stores[p], self._next[p] = RemotePartitionMetadataStore(), low
                    position = low
                if high > position:
                    ends[p] = high
                    starts.append(TopicPartition(METADATA_TOPIC, p, position))
            if not starts:
                return
            consumer.assign(starts)
            deadline = time.monotonic() + self._timeout_s
            while ends:
                if time.monotonic() > deadline:
                    raise CatalogError(f"{METADATA_TOPIC} not read to its end within kafkaConsumer.pollTimeoutMs "
                                       f"(partitions {sorted(ends)} left)")
                messages = consumer.consume(_BATCH, 0.5)
                if messages:
                    deadline = time.monotonic() + self._timeout_s
                for m in messages:
                    self._apply(m, ends)
        except KafkaException as exc:
            raise CatalogError(f"cannot read {METADATA_TOPIC} from the brokers: {exc.args[0]}") from None
        finally:
            consumer.close()

    def _apply(self, m: Message, ends: dict[int, int]) -> None:
        err = m.error()
        if err is not None:
            raise CatalogError(f"cannot read {METADATA_TOPIC}-{m.partition()} from the brokers: {err.str()}")
        partition, offset, value = m.partition(), m.offset(), m.value()
        if partition is None or offset is None:
            raise BrokerError(f"{METADATA_TOPIC}: the consumer returned a message without a partition or offset")
        if value is not None:
            try:
                self._stores[partition].apply(serde.deserialize(value))
            except (ValueError, RemoteStorageException):  # MetadataSerdeError is a ValueError
                pass  # the brokers' manager drops an event it cannot read or apply too
        # record by record: a read that fails half way goes on from here next time, applying nothing twice
        self._next[partition] = offset + 1
        if offset + 1 >= ends.get(partition, 0):
            ends.pop(partition, None)
