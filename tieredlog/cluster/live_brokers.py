"""The brokers registered under ``/brokers/ids``, cached and kept current by a child watch.

A broker answers Metadata and DescribeCluster from this view without any ZooKeeper call on its
event loop (Kafka's brokers get the same list from the controller's UpdateMetadata; until the
controller exists, each broker watches ``/brokers/ids`` itself).

Threads: the reads run on one ``live-brokers-<id>`` thread; the watch (kazoo's thread) and the
connection listener (the client's events thread) only hand work to it. ``brokers`` may be read from
any thread: it is an immutable snapshot replaced as a whole.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Callable, Mapping

from kazoo.exceptions import ConnectionClosedError
from kazoo.protocol.states import EventType, WatchedEvent

from tieredlog.cluster import znodes
from tieredlog.cluster.errors import MalformedZnodeError
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import BrokerInfo

log = logging.getLogger(__name__)

RETRY_DELAY_S = 0.5

_EMPTY: Mapping[int, BrokerInfo] = MappingProxyType({})


class LiveBrokers:
    def __init__(self, zk: ZkClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._brokers: Mapping[int, BrokerInfo] = _EMPTY
        self._changed = threading.Condition()
        self._closed = False
        self._started = False
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"live-brokers-{broker_id}")
        self._retry_timer: threading.Timer | None = None

    @property
    def brokers(self) -> Mapping[int, BrokerInfo]:
        """broker id -> its registration, as last read from ZooKeeper (empty before the first read)."""
        return self._brokers

    def wait_for(self, predicate: Callable[[Mapping[int, BrokerInfo]], bool], timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._brokers), timeout)

    def start(self) -> None:
        """Read /brokers/ids now (on the worker thread) and on every change; returns at once."""
        if self._started:
            return
        self._started = True
        self.zk.add_connection_listener(self)
        self._submit()

    def close(self) -> None:
        with self._changed:
            self._closed = True
        self.zk.remove_connection_listener(self)
        timer = self._retry_timer
        if timer is not None:
            timer.cancel()
        self._worker.shutdown(wait=False, cancel_futures=True)

    # ---- ZooKeeper events (never block) --------------------------------------------------------------

    def on_connected(self, new_session: bool) -> None:
        self._submit()  # watches do not survive a disconnection

    def on_session_expired(self) -> None:
        pass  # the other brokers are still there; the next session reads them again

    def _on_watch(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:  # NONE: disconnected; on_connected follows
            self._submit()

    def _submit(self) -> None:
        if self._closed:
            return
        try:
            self._worker.submit(self._run)
        except RuntimeError:  # shut down meanwhile
            pass

    # ---- the worker thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        if self._closed:
            return
        try:
            self._refresh()
        except Exception as exc:
            if self._closed or self.zk.closed:
                return
            if not isinstance(exc, (InterruptedError, ConnectionClosedError)):
                log.warning("Broker %d could not read %s (%s); trying again", self.broker_id,
                            znodes.BROKER_IDS_PATH, exc)
            timer = threading.Timer(RETRY_DELAY_S, self._submit)
            timer.daemon = True
            self._retry_timer = timer
            timer.start()

    def _refresh(self) -> None:
        ids = self.zk.get_all_broker_ids(watch=self._on_watch)
        found: dict[int, BrokerInfo] = {}
        for broker_id in ids:
            got = self.zk.get_data(znodes.broker_id_path(broker_id))
            if got is None:
                continue  # gone meanwhile; the child watch has fired already
            try:
                found[broker_id] = BrokerInfo.decode(broker_id, got[0])
            except MalformedZnodeError as exc:
                log.warning("%s", exc)
        old = self._brokers
        with self._changed:
            if self._closed:
                return
            self._brokers = MappingProxyType(found)
            self._changed.notify_all()
        if set(old) != set(found):
            log.info("Broker %d: live brokers are now %s", self.broker_id, sorted(found))
