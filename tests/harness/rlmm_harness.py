"""Helpers of the topic-based RLMM tests: an in-memory slice of a LogManager (``PartitionLogs``, the
metadata topic's partition logs under one folder), a manager over it, segment metadata and updates, and
``build``, a manager holding segments in each state."""

from __future__ import annotations

import uuid

from tieredlog.log.config import LogConfig
from tieredlog.log.types import TopicPartition
from tieredlog.log.unified_log import UnifiedLog
from tieredlog.rlmm.topic import LogMetadataTopic
from tieredlog.rlmm.topic_based import TopicBasedRemoteLogMetadataManager
from tieredlog.rsm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

NUM = 5


def tp(i: int) -> TopicIdPartition:
    return TopicIdPartition(uuid.UUID(int=1000 + i), f"topic{i % 3}", i)


TPS = [tp(i) for i in range(8)]


def seg(t, start, end, epochs=None, size=10) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(t, uuid.uuid4()), start, end, end, 0, 1, size,
                                    epochs or {0: start})


def upd(md, state) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 5, None, state, 0)


def manager(topic, log_dir=None, **extra) -> TopicBasedRemoteLogMetadataManager:
    configs = {"remote.log.metadata.topic.num.partitions": NUM, "broker.id": 0,
               "remote.log.metadata.snapshot.interval.ms": 0}
    if log_dir is not None:
        configs["log.dir"] = str(log_dir)
    configs.update(extra)
    m = TopicBasedRemoteLogMetadataManager(topic, configs)
    m.on_partition_leadership_changes(TPS[:4], TPS[4:])
    m.wait_until_ready(TPS, timeout=30)
    return m


class PartitionLogs:
    """The part of a LogManager the metadata topic uses: partition logs under one folder."""

    def __init__(self, root, segment_bytes=4096):
        self.root = root
        self.config = LogConfig(segment_bytes=segment_bytes)
        self.logs: dict[TopicPartition, UnifiedLog] = {}
        self.created = 0

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, configs: dict) -> int:
        existing = [t for t in self.logs if t.topic == name]
        if existing:
            return len(existing)
        assert configs["cleanup.policy"] == "delete" and configs["remote.storage.enable"] == "false"
        self.created += 1
        topic_id = uuid.uuid4()
        for p in range(num_partitions):
            t = TopicPartition(name, p)
            self.logs[t] = UnifiedLog(self.root / str(t), self.config, topic_id=topic_id)
        return num_partitions

    def get_log(self, t: TopicPartition):
        return self.logs.get(t)

    def restart(self) -> None:
        for t, plog in list(self.logs.items()):
            plog.close()
            self.logs[t] = UnifiedLog(plog.dir, self.config)


def log_manager_for(logs: PartitionLogs, log_dir=None) -> TopicBasedRemoteLogMetadataManager:
    return manager(LogMetadataTopic(logs, logs.create_topic), log_dir)


S = RemoteLogSegmentState


def build(tmp_path):
    logs = PartitionLogs(tmp_path)
    m = log_manager_for(logs, tmp_path)
    t = TPS[0]  # topic0, partition 0
    done = seg(t, 0, 99, size=1234)
    m.add_remote_log_segment_metadata(done)
    m.update_remote_log_segment_metadata(upd(done, S.COPY_SEGMENT_FINISHED))
    pending = seg(t, 100, 199)
    m.add_remote_log_segment_metadata(pending)
    gone = seg(t, 200, 299)
    m.add_remote_log_segment_metadata(gone)
    m.update_remote_log_segment_metadata(upd(gone, S.DELETE_SEGMENT_STARTED))
    m.update_remote_log_segment_metadata(upd(gone, S.DELETE_SEGMENT_FINISHED))
    other = seg(TPS[1], 0, 9)  # topic1
    m.add_remote_log_segment_metadata(other)
    return m, logs, done, pending, gone, other
