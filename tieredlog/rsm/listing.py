"""The listing part of the RemoteStorageManager contract, for readers without a broker (the Spark reader,
``tieredlog remote``): beside the object-key layout it returns, so the contract and the keys do not
import each other."""

from __future__ import annotations

import abc
import json
from typing import Any

from tieredlog.rsm.api import RemoteStorageException, RemoteStorageManager, TopicIdPartition
from tieredlog.rsm.cleaner_offset import RemoteCleanerOffsetStore
from tieredlog.rsm.keys import SegmentObjectKey


class ListableRemoteStorageManager(RemoteStorageManager, RemoteCleanerOffsetStore):
    """A RemoteStorageManager that can also say what it holds, for readers without a broker (the Spark
    reader, ``tieredlog remote``). Objects are named as :mod:`tieredlog.rsm.keys` lays them out, and a
    segment is committed once its manifest (:mod:`tieredlog.formats.manifest`, written last) exists.
    Keys that do not parse are skipped, never trusted. It keeps the remote clean offset beside the
    partition's segments too (:class:`~tieredlog.rsm.cleaner_offset.RemoteCleanerOffsetStore`)."""

    @abc.abstractmethod
    def list_segment_objects(self, topic_id_partition: TopicIdPartition | None = None) -> list[SegmentObjectKey]:
        """Every segment object (or those of one partition), ordered by topic, partition, offset, suffix."""

    @abc.abstractmethod
    def list_topic_segment_objects(self, topic: str) -> list[SegmentObjectKey]:
        """Every segment object of ``topic``, under all its topic ids and partitions."""

    @abc.abstractmethod
    def read_manifest(self, key: SegmentObjectKey | str) -> dict[str, Any]:
        """The body of the manifest at ``key``; RemoteStorageException when it is not one."""

    @abc.abstractmethod
    def write_log_start_offset(self, topic_id_partition: TopicIdPartition, offset: int | None) -> None:
        """Publish the partition's log start offset (Kafka's ``logStartOffset``) beside its segments,
        replacing the last one: records below it are gone in Kafka's view (DeleteRecords, retention)
        though the segment holding them may still be in the tier. The leader's RLM calls it, off the
        event loop, when the log start moves past a remote segment's start; ``None`` removes it (the
        partition's deletion)."""

    @abc.abstractmethod
    def read_log_start_offset(self, topic_id_partition: TopicIdPartition) -> int | None:
        """The offset last published by :meth:`write_log_start_offset`; None when there is none."""



# Each object is a few dozen bytes; a reader refuses anything this big.
MAX_LOG_START_BYTES = 4096
MAX_PARTITION_OFFSET_BYTES = MAX_LOG_START_BYTES


class MalformedPartitionObjectError(RemoteStorageException):
    """An object beside a partition's segments (log start, cleaner offset) that is not what its name says."""


def _encode_offset(name: str, offset: int) -> bytes:
    if offset < 0:
        raise ValueError(f"{name.replace('_', ' ')} {offset} is negative")
    return json.dumps({"version": 1, name: offset}, sort_keys=True).encode()


def _decode_offset(name: str, data: bytes, where: str) -> int:
    try:
        body = json.loads(data)
        offset = body[name]
        if body.get("version") != 1 or not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"not version 1 with a non-negative {name}")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise MalformedPartitionObjectError(
            f"{where} is not a {name.replace('_', ' ')}: {type(exc).__name__}: {exc}") from None
    return int(offset)


def encode_log_start_offset(offset: int) -> bytes:
    """The body of the log-start object: one small JSON document, so it can grow fields."""
    return _encode_offset("log_start_offset", offset)


def decode_log_start_offset(data: bytes, where: str) -> int:
    """The offset in a log-start object; RemoteStorageException naming ``where`` when it is not one."""
    return _decode_offset("log_start_offset", data, where)


def encode_cleaner_offset(offset: int) -> bytes:
    """The body of the cleaner-offset object, shaped as the log-start one."""
    return _encode_offset("cleaner_offset", offset)


def decode_cleaner_offset(data: bytes, where: str) -> int:
    """The offset in a cleaner-offset object; RemoteStorageException naming ``where`` when it is not one."""
    return _decode_offset("cleaner_offset", data, where)
