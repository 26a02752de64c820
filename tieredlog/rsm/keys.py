"""Object-key layout shared by every object-store backend, and validation of every name in a key.

Layout (Kafka/Aiven style, one object per file of a segment)::

    <key.prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segment id>.<suffix>

``topicId`` and ``segment id`` are Kafka's URL-safe base64 of the UUID without padding (22 chars).
The end offset is not in the key: it lives in the ``.manifest`` object, written last.

Every name that becomes part of a key is validated on the way in, and every key read back from a
listing is parsed and validated again before anything trusts it (buckets are shared with other
writers; a key we did not write must never become a path, a topic or an offset).
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from typing import Iterable

from tieredlog.kafka_uuid import KAFKA_UUID_PATTERN, kafka_str_to_uuid, uuid_to_kafka_str
from tieredlog.rsm.api import IndexType, RemoteLogSegmentMetadata, TopicIdPartition

log = logging.getLogger(__name__)

LOG_SUFFIX = "log"
# Same name and JSON schema as LocalTieredStorage writes, so broker-less readers see one shape.
MANIFEST_SUFFIX = "manifest"
# Kafka's local file suffixes, so a listing reads like a partition directory.
INDEX_SUFFIXES: dict[IndexType, str] = {
    IndexType.OFFSET: "index",
    IndexType.TIMESTAMP: "timeindex",
    IndexType.TRANSACTION: "txnindex",
    IndexType.PRODUCER_SNAPSHOT: "snapshot",
    IndexType.LEADER_EPOCH: "leader_epoch_checkpoint",
}
ALL_SUFFIXES: tuple[str, ...] = (LOG_SUFFIX, *INDEX_SUFFIXES.values(), MANIFEST_SUFFIX)

MAX_TOPIC_LENGTH = 249
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+")
# Printable ASCII without backslash; no "." / ".." path segments are checked separately.
_PREFIX_RE = re.compile(r"[A-Za-z0-9!\-_.*'()/=+,:@]*")
_PARTITION_DIR_RE = re.compile(rf"(?P<topic>[a-zA-Z0-9._-]+)-(?P<topic_id>{KAFKA_UUID_PATTERN})")
_FILE_RE = re.compile(rf"(?P<offset>\d{{20}})-(?P<segment_id>{KAFKA_UUID_PATTERN})\.(?P<suffix>[a-z_-]+)")


class InvalidKeyError(ValueError):
    """A name that would become (or came back as) part of an object key is not valid."""


def validate_topic(topic: str) -> str:
    """Kafka's topic rules: 1..249 chars of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if not isinstance(topic, str) or not topic:
        raise InvalidKeyError("topic name must be a non-empty string")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidKeyError(f"topic name is longer than {MAX_TOPIC_LENGTH} characters")
    if topic in (".", ".."):
        raise InvalidKeyError(f"topic name {topic!r} is not allowed")
    if not _TOPIC_RE.fullmatch(topic):
        raise InvalidKeyError(f"topic name {topic!r} has characters outside [a-zA-Z0-9._-]")
    return topic


def validate_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < 2**31:
        raise InvalidKeyError(f"partition {partition!r} must be an int in [0, 2^31)")
    return partition


def validate_offset(offset: int) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 10**20:
        raise InvalidKeyError(f"offset {offset!r} must be an int in [0, 10^20)")
    return offset


def validate_key_prefix(prefix: str) -> str:
    """``key.prefix`` is concatenated verbatim (like Aiven's), so ``a/`` and ``a-`` both work; it must
    not climb out of its folder on file systems nor start with ``/``."""
    if not isinstance(prefix, str):
        raise InvalidKeyError("key.prefix must be a string")
    if len(prefix) > 512:
        raise InvalidKeyError("key.prefix is longer than 512 characters")
    if not _PREFIX_RE.fullmatch(prefix):
        raise InvalidKeyError(f"key.prefix {prefix!r} has characters outside printable URL-safe ASCII")
    if prefix.startswith("/") or "//" in prefix:
        raise InvalidKeyError(f"key.prefix {prefix!r} must not start with '/' or contain '//'")
    if any(part in (".", "..") for part in prefix.split("/")):
        raise InvalidKeyError(f"key.prefix {prefix!r} must not contain '.' or '..' path segments")
    return prefix


# The name this module has always exported (objectstore, tests); one implementation.
uuid_to_base64 = uuid_to_kafka_str


def uuid_from_base64(text: str) -> uuid.UUID:
    try:
        return kafka_str_to_uuid(text)
    except ValueError as exc:
        raise InvalidKeyError(str(exc)) from None


def partition_prefix(key_prefix: str, tp: TopicIdPartition) -> str:
    """``<prefix><topic>-<topicId>/<partition>/`` for one partition (used for listing)."""
    validate_key_prefix(key_prefix)
    validate_topic(tp.topic)
    validate_partition(tp.partition)
    return f"{key_prefix}{tp.topic}-{uuid_to_base64(tp.topic_id)}/{tp.partition}/"


# Beside a partition's segments, never parsed as one: the log start offset its leader published.
LOG_START_OFFSET_NAME = "log-start-offset.json"


def log_start_offset_key(key_prefix: str, tp: TopicIdPartition) -> str:
    """``<prefix><topic>-<topicId>/<partition>/log-start-offset.json``."""
    return partition_prefix(key_prefix, tp) + LOG_START_OFFSET_NAME


# Beside them too: where the remote cleaner of a compacted partition has cleaned the tier up to.
CLEANER_OFFSET_NAME = "cleaner-offset-checkpoint.json"


def cleaner_offset_key(key_prefix: str, tp: TopicIdPartition) -> str:
    """``<prefix><topic>-<topicId>/<partition>/cleaner-offset-checkpoint.json``."""
    return partition_prefix(key_prefix, tp) + CLEANER_OFFSET_NAME


# the objects kept beside a partition's segments: listed with them, known, never a segment
PARTITION_OBJECT_NAMES = frozenset({LOG_START_OFFSET_NAME, CLEANER_OFFSET_NAME})


def segment_stem(metadata: RemoteLogSegmentMetadata) -> str:
    """``<20-digit start offset>-<segment id>``: every object of a segment is named this plus a suffix."""
    return f"{metadata.start_offset:020d}-{uuid_to_base64(metadata.remote_log_segment_id.id)}"


def segment_key(key_prefix: str, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    if suffix not in ALL_SUFFIXES:
        raise InvalidKeyError(f"unknown object suffix {suffix!r}")
    validate_offset(metadata.start_offset)
    return f"{partition_prefix(key_prefix, metadata.topic_id_partition)}{segment_stem(metadata)}.{suffix}"


def is_segment_file_name(name: str) -> bool:
    """Whether ``name`` (the last part of a key) has the form :func:`segment_key` gives it."""
    return _FILE_RE.fullmatch(name) is not None


def segment_keys(key_prefix: str, metadata: RemoteLogSegmentMetadata) -> dict[str, str]:
    """Every key one segment may own, by suffix."""
    return {suffix: segment_key(key_prefix, metadata, suffix) for suffix in ALL_SUFFIXES}


@dataclass(frozen=True, slots=True)
class SegmentObjectKey:
    """A key read back from storage, parsed and validated."""

    key: str
    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    segment_id: uuid.UUID
    suffix: str

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, self.partition)


def parse_segment_key(key: str, key_prefix: str = "") -> SegmentObjectKey:
    """Parse a key produced by :func:`segment_key`; anything else raises :class:`InvalidKeyError`."""
    if not isinstance(key, str) or not key.startswith(key_prefix):
        raise InvalidKeyError(f"key {key!r} is outside prefix {key_prefix!r}")
    parts = key[len(key_prefix):].split("/")
    if len(parts) != 3:
        raise InvalidKeyError(f"key {key!r} does not have the form <topic>-<topicId>/<partition>/<file>")
    dir_match = _PARTITION_DIR_RE.fullmatch(parts[0])
    file_match = _FILE_RE.fullmatch(parts[2])
    if not dir_match or not file_match or not parts[1].isdigit() or parts[1] != str(int(parts[1])):
        raise InvalidKeyError(f"key {key!r} does not follow the segment key layout")
    suffix = file_match["suffix"]
    if suffix not in ALL_SUFFIXES:
        raise InvalidKeyError(f"key {key!r} has unknown suffix {suffix!r}")
    return SegmentObjectKey(
        key=key,
        topic=validate_topic(dir_match["topic"]),
        topic_id=uuid_from_base64(dir_match["topic_id"]),
        partition=validate_partition(int(parts[1])),
        start_offset=validate_offset(int(file_match["offset"])),
        segment_id=uuid_from_base64(file_match["segment_id"]),
        suffix=suffix,
    )


def parse_listing(keys: Iterable[str], key_prefix: str = "") -> list[SegmentObjectKey]:
    """The segment keys among listed ``keys``, ordered by topic, partition, start offset and suffix.
    Keys that do not parse (foreign objects, hand-made keys) are skipped with a warning, never trusted."""
    found = []
    for key in keys:
        if key.rsplit("/", 1)[-1] in PARTITION_OBJECT_NAMES:
            continue
        try:
            found.append(parse_segment_key(key, key_prefix))
        except InvalidKeyError as exc:
            log.warning("ignoring object that is not a tieredlog segment key: %s", str(exc)[:300])
    return sorted(found, key=lambda k: (k.topic, k.partition, k.start_offset, k.suffix))
