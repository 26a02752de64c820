"""The journal of partitions whose remote data must still be deleted (topic deletion).

A deleted topic's remote segments are removed in the background; a broker that stops midway must
finish the job when it starts again. The journal is written before the delete task is scheduled
and the entry removed only once DELETE_PARTITION_FINISHED is recorded. One line per partition:
``<topic id, Kafka base64> <partition> <topic>`` in ``<first log dir>/remote-log-pending-partition-deletes``.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tieredlog.atomic_file import atomic_write
from tieredlog.kafka_uuid import kafka_str_to_uuid, uuid_to_kafka_str
from tieredlog.rsm.api import TopicIdPartition

PENDING_DELETES_FILE = "remote-log-pending-partition-deletes"


class PendingDeleteJournal:
    def __init__(self, log_dir: str | Path) -> None:
        self.path = Path(log_dir) / PENDING_DELETES_FILE
        self._lock = threading.Lock()

    def read(self) -> list[TopicIdPartition]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append(TopicIdPartition(kafka_str_to_uuid(parts[0]), parts[2], int(parts[1])))
        return out

    def add(self, tip: TopicIdPartition) -> None:
        with self._lock:
            tips = self.read()
            if tip not in tips:
                self._write([*tips, tip])

    def remove(self, tip: TopicIdPartition) -> None:
        with self._lock:
            self._write([t for t in self.read() if t != tip])

    def _write(self, tips: list[TopicIdPartition]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{uuid_to_kafka_str(t.topic_id)} {t.partition} {t.topic}\n" for t in tips)
        atomic_write(self.path, text.encode())
