"""The listing part of the RemoteStorageManager contract, for readers without a broker (the Spark reader,
``tieredlog remote``): beside the object-key layout it returns, so the contract and the keys do not
import each other."""

from __future__ import annotations

import abc
from typing import Any

from tieredlog.rsm.api import RemoteStorageManager, TopicIdPartition
from tieredlog.rsm.keys import SegmentObjectKey


class ListableRemoteStorageManager(RemoteStorageManager):
    """A RemoteStorageManager that can also say what it holds, for readers without a broker (the Spark
    reader, ``tieredlog remote``). Objects are named as :mod:`tieredlog.rsm.keys` lays them out, and a
    segment is committed once its manifest (:mod:`tieredlog.formats.manifest`, written last) exists.
    Keys that do not parse are skipped, never trusted."""

    @abc.abstractmethod
    def list_segment_objects(self, topic_id_partition: TopicIdPartition | None = None) -> list[SegmentObjectKey]:
        """Every segment object (or those of one partition), ordered by topic, partition, offset, suffix."""

    @abc.abstractmethod
    def list_topic_segment_objects(self, topic: str) -> list[SegmentObjectKey]:
        """Every segment object of ``topic``, under all its topic ids and partitions."""

    @abc.abstractmethod
    def read_manifest(self, key: SegmentObjectKey | str) -> dict[str, Any]:
        """The body of the manifest at ``key``; RemoteStorageException when it is not one."""
