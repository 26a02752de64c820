"""``metadataSource=brokers``: a topic's committed segments from ``__remote_log_metadata``, read through the
brokers of ``kafka.bootstrap.servers``, for a remote tier whose writer leaves no manifests, or an RSM
that cannot list its own objects (another plugin's layout).

What the broker's topic-based RLMM does, with its code: only the metadata partitions the topic's
partitions map to (Kafka's RemoteLogMetadataTopicPartitioner, a hash of topic id and partition over
the metadata topic's partition count) are read, from their log start to their high watermark, decoded
with Kafka's serde and replayed into the RLMM's own cache (COPY_SEGMENT_STARTED, FINISHED,
DELETE_SEGMENT_STARTED, FINISHED; invalid transitions dropped; a copy superseded in an epoch by a newer
copy of the same offsets unmapped there). The segments reads go to
(:meth:`~tieredlog.rlmm.cache.RemoteLogMetadataCache.readable_segments`) are then resolved to one copy
per offset by the catalog's leader-epoch lineage, as the manifests' are, and fetched through the RSM
contract with the very RemoteLogSegmentMetadata the broker published (its custom metadata included).

The topic id is the brokers' (Metadata), so a topic recreated under the same name reads only the live
topic's segments, and a topic no longer on the brokers cannot be read this way. The partition's log
start is the brokers' (ListOffsets EARLIEST, applied by the planner).

The clients are the project's own blocking ones, not confluent-kafka. Of the ``kafka.*`` options
(librdkafka's names) they take ``security.protocol``, ``sasl.mechanism`` (``sasl.mechanisms``),
``sasl.username``, ``sasl.password``, ``ssl.ca.location`` and ``ssl.endpoint.identification.algorithm``.
"""

from __future__ import annotations

from typing import Mapping

from kio.schema.errors import ErrorCode

from spark_readers.catalog import CatalogError, NothingTiered, Segment
from spark_readers.options import OptionError
from tieredlog.clients.errors import KafkaProtocolError
from tieredlog.rlmm.cache import RemotePartitionMetadataStore
from tieredlog.rlmm.partitioner import metadata_partition
from tieredlog.rlmm.topic import METADATA_TOPIC
from tieredlog.rsm.api import TopicIdPartition
from tieredlog.tools.command_config import ClientSettings, CommandConfigError
from tieredlog.tools.partition_admin import PartitionAdmin
from tieredlog.tools.topic_tiers import read_metadata
from tieredlog.tools.transaction_admin import AdminApiError

CLIENT_ID = "tieredlog-reader"
# kafka.* options the project's client understands under the same name as librdkafka's
_SAME_NAMES = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
               "ssl.endpoint.identification.algorithm")


def client_settings(kafka: Mapping[str, str]) -> ClientSettings:
    """The ``kafka.*`` options (librdkafka's names) as the project's client takes them (Kafka's names)."""
    props = {k: kafka[k] for k in _SAME_NAMES if k in kafka}
    if "sasl.mechanism" not in props and "sasl.mechanisms" in kafka:
        props["sasl.mechanism"] = kafka["sasl.mechanisms"]
    if kafka.get("ssl.ca.location"):
        props["ssl.truststore.location"] = kafka["ssl.ca.location"]
    if props.get("ssl.endpoint.identification.algorithm", "").strip().lower() == "none":
        props["ssl.endpoint.identification.algorithm"] = ""  # librdkafka's word for no host name check
    try:
        return ClientSettings(props)
    except CommandConfigError as exc:
        raise OptionError(f"kafka.* options: {exc}") from None


class BrokerMetadataListing:
    """A :class:`~spark_readers.catalog.SegmentListing` over ``__remote_log_metadata``. Each metadata
    partition is read once per listing however many of the query's topics map to it."""

    def __init__(self, bootstrap: str, settings: ClientSettings, timeout_s: float) -> None:
        self._bootstrap = bootstrap
        self._settings = settings
        self._timeout_s = timeout_s
        self._store = RemotePartitionMetadataStore()
        self._read: set[int] = set()

    def _admin(self) -> PartitionAdmin:
        return PartitionAdmin(self._bootstrap, client_id=CLIENT_ID, timeout_s=self._timeout_s,
                              settings=self._settings)

    def topics(self) -> list[str]:
        try:
            with self._admin() as admin:
                view = admin.cluster(None)
        except (AdminApiError, KafkaProtocolError, OSError) as exc:
            raise CatalogError(f"cannot list the topics on the brokers (kafka.bootstrap.servers): {exc}") from None
        return sorted(name for name, t in view.topics.items()
                      if t.error_code == ErrorCode.none and not t.is_internal and not name.startswith("__"))

    def committed_segments(self, topic: str) -> dict[int, list[Segment]]:
        try:
            with self._admin() as admin:
                view = admin.cluster([topic, METADATA_TOPIC])
                t = view.topics.get(topic)
                if t is None or t.error_code == ErrorCode.unknown_topic_or_partition:
                    raise NothingTiered(f"topic {topic!r} is not on the brokers")
                if t.error_code != ErrorCode.none:
                    raise AdminApiError(t.error_code, f"Metadata of {topic}")
                partitions = [TopicIdPartition(t.topic_id, topic, p.partition) for p in t.partitions]
                meta = view.topics.get(METADATA_TOPIC)
                if meta is None or meta.error_code != ErrorCode.none or not meta.partitions:
                    raise NothingTiered(f"topic {topic!r} has no committed segments: the brokers have no "
                                        f"{METADATA_TOPIC}")
                needed = {metadata_partition(tp, len(meta.partitions)) for tp in partitions}
                read_metadata(admin, needed - self._read, self._store)
                self._read |= needed
        except (AdminApiError, KafkaProtocolError, OSError) as exc:
            raise CatalogError(f"cannot read {METADATA_TOPIC} through the brokers (kafka.bootstrap.servers): "
                               f"{exc}") from None
        out: dict[int, list[Segment]] = {}
        for tp in partitions:
            cache = self._store.caches.get(tp)
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
