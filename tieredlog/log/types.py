"""Small value types shared by the log package and everything above it."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        # Kafka's TopicPartition.toString, which is also the partition directory name.
        return f"{self.topic}-{self.partition}"


class EpochEntry(NamedTuple):
    """Leader epoch ``epoch`` began at ``start_offset`` (one line of leader-epoch-checkpoint)."""

    epoch: int
    start_offset: int

    def __str__(self) -> str:
        return f"EpochEntry(epoch={self.epoch}, startOffset={self.start_offset})"


def parse_partition_dir(name: str) -> TopicPartition:
    """``"my-topic-3"`` -> ``TopicPartition("my-topic", 3)``.

    Topic names may contain '-', partitions may not, so split at the last one.
    """
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or not partition.isascii():
        raise ValueError(f"{name!r} is not a partition directory name (expected <topic>-<partition>)")
    return TopicPartition(topic, int(partition))
