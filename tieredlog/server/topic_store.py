"""Topic metadata of a single broker: names, ids, partition counts and topic config overrides.

Persisted as one JSON file in the first log dir, replaced atomically (``tieredlog.atomic_file``), so
a topic's id and its altered configs survive a restart. Partition dirs carry their own
``partition.metadata`` (written by the log); on start-up both must agree.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tieredlog.atomic_file import atomic_write
from tieredlog.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__remote_log_metadata"})
STORE_FILE = "tieredlog-topics.json"


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate: raises InvalidTopicError before the name touches the file system."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )


def collision_key(name: str) -> str:
    """Kafka forbids names equal after '.' -> '_' (their metric names would collide)."""
    return name.replace(".", "_")


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # topic-level overrides, Kafka names

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def to_json(self) -> dict:
        return {"topic_id": str(self.topic_id), "partitions": self.partitions, "configs": self.configs}


class TopicStore:
    """The topics file. A change is staged where it is made (``stage``: the JSON text, no I/O) and made
    durable by ``sync`` on any thread: the broker's request handlers run ``sync`` in an executor, so
    the fsyncs never block the event loop. Writes are serialised by a lock the event loop never takes;
    each writes the newest staged snapshot, so an older one never replaces a newer one on disk and a
    waiter whose change a later write already carried returns at once."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / STORE_FILE
        self._staged: tuple[int, bytes] = (0, b"")  # (version, JSON); replaced whole, so read without the lock
        self._durable = 0  # the version on disk
        self._write_lock = threading.Lock()

    def load(self) -> dict[str, TopicMetadata]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return {
            name: TopicMetadata(name, uuid.UUID(t["topic_id"]), int(t["partitions"]), dict(t.get("configs", {})))
            for name, t in raw.get("topics", {}).items()
        }

    @property
    def staged_version(self) -> int:
        return self._staged[0]

    def stage(self, topics: dict[str, TopicMetadata]) -> int:
        """Snapshot ``topics`` as the next version to write; call it from the thread that changes them."""
        data = json.dumps({"version": 1, "topics": {n: t.to_json() for n, t in sorted(topics.items())}}, indent=1)
        version = self._staged[0] + 1
        self._staged = (version, data.encode())
        return version

    def sync(self, version: int | None = None) -> None:
        """Return once ``version`` (default: the newest staged one), or a newer one, is on disk."""
        with self._write_lock:
            newest, data = self._staged
            if self._durable >= (newest if version is None else version):
                return
            atomic_write(self.path, data)
            self._durable = newest

    def save(self, topics: dict[str, TopicMetadata]) -> None:
        self.sync(self.stage(topics))
