"""Broker registration and the cluster id (Kafka's ``KafkaServer.startup`` steps in ZooKeeper mode).

- ``resolve_cluster_id``: the id in ``/cluster/id``, created if absent, checked against every log dir's
  ``meta.properties`` before the broker touches its data.
- ``BrokerRegistration``: the ephemeral ``/brokers/ids/<id>``, registered again whenever ZooKeeper
  gives this broker a new session (the old session's ephemeral znodes died with it).

Blocking calls; see ``tieredlog.cluster.zk``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from tieredlog.cluster.errors import BrokerIdInUseError, ClusterError
from tieredlog.cluster.meta_properties import check_meta_properties, stored_cluster_id
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import BrokerInfo, generate_cluster_id

log = logging.getLogger(__name__)


def resolve_cluster_id(zk: ZkClient, log_dirs: list[Path], broker_id: int, configured: str | None = None) -> str:
    """The cluster's id, from /cluster/id. When the cluster has none yet, the first broker writes one:
    the ``cluster.id`` config if set, else the id its meta.properties already holds (a standalone broker
    becoming the first member of a cluster keeps its id), else a new random one as Kafka does.
    Raises InconsistentClusterIdError / InconsistentBrokerIdError when a log dir belongs elsewhere."""
    proposed = configured or stored_cluster_id(log_dirs) or generate_cluster_id()
    cluster_id = zk.create_or_get_cluster_id(proposed)
    log.info("Cluster ID = %s", cluster_id)
    check_meta_properties(log_dirs, cluster_id, broker_id)
    return cluster_id


class BrokerRegistration:
    """Keeps ``/brokers/ids/<id>`` registered for as long as it is open.

    ``register()`` refuses a broker id another live broker holds (BrokerIdInUseError, Kafka's one
    line). After a session expiry the registration is made again on the new session, on the ZooKeeper
    client's event thread; if another broker took the id meanwhile, that fails with one ERROR line and
    ``last_error`` holds it."""

    def __init__(self, zk: ZkClient, info: BrokerInfo) -> None:
        self.zk = zk
        self.info = info
        self._lock = threading.Lock()
        self._broker_epoch: int | None = None
        self._active = False
        self.last_error: BrokerIdInUseError | None = None
        self._stop_waiting = threading.Event()

    @property
    def broker_id(self) -> int:
        return self.info.broker_id

    @property
    def broker_epoch(self) -> int | None:
        """The czxid of the current registration (Kafka's broker epoch, KIP-380); None while a new
        session has not registered yet."""
        return self._broker_epoch

    def register(self) -> int:
        """Register and keep registered; returns the broker epoch. A registration left by a session that
        has not expired yet (this broker killed and started again at once) is waited for, at most
        until that session must have expired; if it is still there then, another live broker holds the
        id: BrokerIdInUseError."""
        try:
            epoch = self.zk.register_broker(self.info)
        except BrokerIdInUseError as exc:
            epoch = self._register_after_stale(exc)
        with self._lock:
            self._broker_epoch = epoch
            if not self._active:
                self._active = True
                self.zk.add_connection_listener(self)
        return epoch

    def _register_after_stale(self, refused: BrokerIdInUseError) -> int:
        # Kafka exits here and leaves the restart to a supervisor. ZooKeeper expires a session at most
        # one tick after its timeout, and grants no timeout below two ticks: waiting one and a half
        # session timeouts (this broker's, which the previous run most likely had too) covers it.
        wait_ms = self.zk.session_timeout_ms * 3 // 2
        log.info("Waiting up to %d ms for the registration of broker %d left by a previous session (0x%x) to expire",
                 wait_ms, self.broker_id, refused.owner)
        if not self.zk.wait_for_ephemeral_gone(refused.path, refused.owner, wait_ms / 1000, self._stop_waiting):
            if self._stop_waiting.is_set():
                raise ClusterError(f"shut down while waiting for the registration of broker {self.broker_id} left "
                                   f"by a previous session (0x{refused.owner:x}) to expire")
            raise refused
        return self.zk.register_broker(self.info)

    def stop_waiting(self) -> None:
        """End a ``register()`` waiting for a previous session's registration (the broker is told to
        shut down meanwhile): it raises ClusterError within half a second. Any thread."""
        self._stop_waiting.set()

    def on_connected(self, new_session: bool) -> None:
        if not new_session or not self._active:
            return  # same session: the ephemeral node is still there
        try:
            self._broker_epoch = self.zk.register_broker(self.info)
            self.last_error = None
        except BrokerIdInUseError as exc:
            self.last_error = exc
            log.error("%s", exc)

    def on_session_expired(self) -> None:
        self._broker_epoch = None

    def close(self) -> None:
        """Stop re-registering. The znode itself goes with the ZooKeeper session (``ZkClient.close``)."""
        with self._lock:
            self._active = False
        self.zk.remove_connection_listener(self)
