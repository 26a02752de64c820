"""Kafka's RemoteLogMetadataTopicPartitioner: which ``__remote_log_metadata`` partition holds the
metadata of a user partition. Must match Java bit for bit so a topic can be shared with Kafka.

metadata_partition = toPositive(murmur2(int32_be(Objects.hash(topicId.lsb, topicId.msb, partition)))) % n
"""

from __future__ import annotations

import uuid

from tieredlog.rsm.api import TopicIdPartition

_M32 = 0xFFFFFFFF


def _to_int32(v: int) -> int:
    v &= _M32
    return v - (1 << 32) if v & 0x80000000 else v


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (seed 0x9747b28c), as a signed 32-bit int like the Java method."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & _M32
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & _M32
        k ^= k >> 24
        k = (k * m) & _M32
        h = (h * m) & _M32
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    h ^= h >> 15
    return _to_int32(h)


def to_positive(v: int) -> int:
    return v & 0x7FFFFFFF


def _long_hash(v: int) -> int:
    """Java Long.hashCode: (int)(v ^ (v >>> 32)) of the signed 64-bit value."""
    v &= 0xFFFFFFFFFFFFFFFF
    return _to_int32(v ^ (v >> 32))


def java_objects_hash(*values: int) -> int:
    """Java Objects.hash over ints already reduced to their hashCode()."""
    result = 1
    for v in values:
        result = _to_int32(31 * result + v)
    return result


def metadata_partition_key(topic_id: uuid.UUID, partition: int) -> bytes:
    msb = topic_id.int >> 64
    lsb = topic_id.int & 0xFFFFFFFFFFFFFFFF
    h = java_objects_hash(_long_hash(lsb), _long_hash(msb), _to_int32(partition))
    return (h & _M32).to_bytes(4, "big")


def metadata_partition(tp: TopicIdPartition, num_metadata_partitions: int) -> int:
    if num_metadata_partitions <= 0:
        raise ValueError(f"num_metadata_partitions must be > 0, got {num_metadata_partitions}")
    return to_positive(murmur2(metadata_partition_key(tp.topic_id, tp.partition))) % num_metadata_partitions
