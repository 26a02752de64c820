"""Topic config changes across the cluster, in Kafka's ZooKeeper layout.

A broker that changes a topic's configs writes ``/config/topics/<t>`` and then a sequential
notification ``/config/changes/config_change_<seq>`` holding ``{"version":2,"entity_path":"topics/<t>"}``
(Kafka's ZkConfigChangeNotification). Every broker watches ``/config/changes``, reads each
notification newer than the last it handled, reads the topic's configs again and hands them to
``on_topic_config``, which applies them to its logs. A user's notification (``users/<u>``, SCRAM
credentials) goes to ``on_user_config``.

Blocking, on its own worker thread (ZooKeeper calls never run on the event loop).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from kazoo.exceptions import ConnectionClosedError
from kazoo.protocol.states import EventType, WatchedEvent

from tieredlog.cluster import znodes
from tieredlog.cluster.errors import MalformedZnodeError
from tieredlog.cluster.zk import ZkClient

log = logging.getLogger(__name__)

CONFIG_CHANGES_PATH = "/config/changes"
CHANGE_PREFIX = "config_change_"
RETRY_DELAY_S = 0.5


def encode_change(entity_path: str) -> bytes:
    return znodes.encode_json({"version": 2, "entity_path": entity_path})


def decode_change(data: bytes) -> str:
    js = znodes.decode_json(data, "a config change notification")
    path = js.get("entity_path")
    if js.get("version") == 1:  # Kafka before 1.1: entity_type and entity_name
        return f"{js.get('entity_type')}/{js.get('entity_name')}"
    if not isinstance(path, str):
        raise MalformedZnodeError(f"config change notification without an entity_path: {data!r}")
    return path


def notify_topic_config_change(zk: ZkClient, topic: str) -> None:
    """After ``/config/topics/<topic>`` was written: tell every broker."""
    notify_config_change(zk, f"topics/{topic}")


def notify_config_change(zk: ZkClient, entity_path: str) -> None:
    """After ``/config/<entity_path>`` was written: tell every broker."""
    zk.kazoo.create(f"{CONFIG_CHANGES_PATH}/{CHANGE_PREFIX}", encode_change(entity_path),
                    sequence=True, makepath=True)


class ConfigChangeListener:
    def __init__(self, zk: ZkClient, on_topic_config: Callable[[str, dict[str, str]], None], name: str = "",
                 on_user_config: Callable[[str], None] | None = None) -> None:
        self.zk = zk
        self._on_topic_config = on_topic_config
        # on_user_config(sanitized user name): a users/<u> notification (SCRAM credentials); the callback
        # reads the user's znode itself. Set when the SCRAM credential store opens.
        self.on_user_config = on_user_config
        # on_broker_config(entity: "<default>" or a broker id): a brokers/<entity> notification (dynamic
        # broker configs); the callback reads the entity's znode itself
        self.on_broker_config: Callable[[str], None] | None = None
        self._last_seq: int | None = None  # None: not read yet; older notifications are history
        self._closed = False
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"config-changes{'-' + name if name else ''}")

    def start(self) -> None:
        self.zk.add_connection_listener(self)
        self._submit()

    def close(self) -> None:
        self._closed = True
        self.zk.remove_connection_listener(self)
        self._worker.shutdown(wait=False, cancel_futures=True)

    def on_connected(self, new_session: bool) -> None:
        self._submit()  # watches do not survive a disconnection

    def on_session_expired(self) -> None:
        pass

    def _on_watch(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._submit()

    def _submit(self) -> None:
        if self._closed:
            return
        try:
            self._worker.submit(self._run)
        except RuntimeError:
            pass

    def _run(self) -> None:
        if self._closed:
            return
        try:
            self._process()
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away or a bad znode: try again shortly
            if self._closed or self.zk.closed:
                return
            if not isinstance(exc, (InterruptedError, ConnectionClosedError)):
                log.warning("could not read %s (%s); trying again", CONFIG_CHANGES_PATH, exc)
            timer = threading.Timer(RETRY_DELAY_S, self._submit)
            timer.daemon = True
            timer.start()

    def _process(self) -> None:
        children = self.zk.get_children(CONFIG_CHANGES_PATH, watch=self._on_watch)
        seqs = sorted(int(c[len(CHANGE_PREFIX):]) for c in children
                      if c.startswith(CHANGE_PREFIX) and c[len(CHANGE_PREFIX):].isdigit())
        if self._last_seq is None:
            # a starting broker reads every topic's configs when it learns the topic
            self._last_seq = seqs[-1] if seqs else -1
            return
        for seq in seqs:
            if seq <= self._last_seq:
                continue
            got = self.zk.get_data(f"{CONFIG_CHANGES_PATH}/{CHANGE_PREFIX}{seq:010d}")
            self._last_seq = seq
            if got is None:
                continue  # purged meanwhile
            try:
                entity = decode_change(got[0])
            except MalformedZnodeError as exc:
                log.warning("%s", exc)
                continue
            kind, _, name = entity.partition("/")
            if kind == "users" and name and self.on_user_config is not None:
                self.on_user_config(name)
                continue
            if kind == "brokers" and name and self.on_broker_config is not None:
                self.on_broker_config(name)
                continue
            if kind != "topics" or not name:
                continue  # client configs are not served from ZooKeeper yet
            self._on_topic_config(name, self.zk.get_topic_config(name))
