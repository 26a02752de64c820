"""A broker's membership of a ZooKeeper-coordinated cluster: the one object the broker holds.

Kafka's start-up order in ZooKeeper mode, in three steps the broker can call at the matching points
of its own start-up (or all at once with ``start``):
1. ``connect()``: ZooKeeper session (chroot created if missing), Kafka's top-level paths, the cluster
   id from /cluster/id checked against every log dir's meta.properties; before the logs load.
2. ``register()``: the ephemeral /brokers/ids/<id>, then meta.properties written; once the listeners
   accept connections, since other brokers and clients read the endpoints from there.
3. ``start_controller_election()``.

``close()`` leaves the election (resigning if controller) and closes the session, which deletes the
broker's ephemeral znodes. Every method blocks; from asyncio use ``start_async`` / ``close_async``,
which run them in an executor and deliver the controller callbacks on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Protocol

from tieredlog.cluster.controller_election import ControllerElector, ControllerEpochFence
from tieredlog.cluster.live_brokers import LiveBrokers
from tieredlog.cluster.meta_properties import write_meta_properties
from tieredlog.cluster.registration import BrokerRegistration, resolve_cluster_id
from tieredlog.cluster.zk import DEFAULT_SESSION_TIMEOUT_MS, ZkClient, ZkConnectString
from tieredlog.cluster.znodes import BrokerInfo, EndPoint, endpoints_for, parse_security_protocol_map
from tieredlog.config import BrokerConfig, BrokerConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZkClusterConfig:
    connect: str
    broker_id: int
    endpoints: tuple[EndPoint, ...]
    log_dirs: tuple[Path, ...]
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    connection_timeout_ms: int | None = None  # None: the session timeout, as in Kafka
    rack: str | None = None
    cluster_id: str | None = None  # the cluster.id config: only proposed when the cluster has no id yet

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> "ZkClusterConfig | None":
        """None when ``zookeeper.connect`` is not set: the broker runs alone, as before."""
        connect = config.get("zookeeper.connect")
        if not connect or not str(connect).strip():
            return None
        ZkConnectString.parse(str(connect))
        try:
            protocols = parse_security_protocol_map(config["listener.security.protocol.map"])
            endpoints = endpoints_for(((l.name, l.host or "127.0.0.1", l.port) for l in config.advertised_listeners),
                                      protocols)
        except ValueError as exc:
            raise BrokerConfigError(str(exc)) from None
        return cls(
            connect=str(connect).strip(),
            broker_id=config.node_id,
            endpoints=endpoints,
            log_dirs=tuple(config.log_dirs),
            session_timeout_ms=config["zookeeper.session.timeout.ms"],
            connection_timeout_ms=config["zookeeper.connection.timeout.ms"],
            rack=config.get("broker.rack"),
            cluster_id=config.get("cluster.id"),
        )


class ControllerHandle(Protocol):
    """The controller a broker runs when elected (``tieredlog.controller.KafkaController``). Its
    callbacks are called on the election thread and must only hand work to the controller's own thread."""

    def start(self) -> None: ...

    def close(self) -> None: ...

    def on_become_controller(self, epoch: int) -> None: ...

    def on_resign(self) -> None: ...


class ZkClusterMembership:
    def __init__(self, config: ZkClusterConfig, *,
                 on_become_controller: Callable[[int], None] | None = None,
                 on_resign: Callable[[], None] | None = None,
                 loop: asyncio.AbstractEventLoop | None = None,
                 controller_factory: Callable[[ZkClient], ControllerHandle] | None = None) -> None:
        """With ``loop``, the ``on_*`` callbacks are scheduled on that loop instead of being called on
        the election thread. ``controller_factory(zk)`` builds the controller on this membership's
        ZooKeeper client (``self.controller``): the elector calls it directly, before the ``on_*``
        callbacks; it starts with the election and is closed after the elector."""
        self.config = config
        self.zk = ZkClient(config.connect, session_timeout_ms=config.session_timeout_ms,
                           connection_timeout_ms=config.connection_timeout_ms, name=f"broker-{config.broker_id}")
        self.cluster_id: str | None = None
        self.fence = ControllerEpochFence()
        self.registration = BrokerRegistration(self.zk, BrokerInfo(config.broker_id, config.endpoints, config.rack))
        self.controller = controller_factory(self.zk) if controller_factory is not None else None
        ctl = self.controller
        self.elector = ControllerElector(self.zk, config.broker_id, fence=self.fence,
                                         on_become_controller=_chain(ctl.on_become_controller if ctl else None,
                                                                     _on_loop(loop, on_become_controller)),
                                         on_resign=_chain(ctl.on_resign if ctl else None, _on_loop(loop, on_resign)))
        self.live_brokers = LiveBrokers(self.zk, config.broker_id)

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def controller_id(self) -> int | None:
        """The elected controller's broker id; None while none is known (before the election, between a
        controller's end and the next one)."""
        return self.elector.controller_id

    @property
    def brokers(self) -> Mapping[int, BrokerInfo]:
        """Every broker registered under /brokers/ids, as cached by a watch (empty before ``register``).
        Never calls ZooKeeper: safe on the event loop."""
        return self.live_brokers.brokers

    @property
    def broker_epoch(self) -> int | None:
        return self.registration.broker_epoch

    def connect(self) -> str:
        """Open the session and return the cluster id; refuses (and closes the session) when a log dir
        belongs to another cluster or broker, or ZooKeeper does not answer in time."""
        try:
            self.zk.start()
            self.cluster_id = resolve_cluster_id(self.zk, list(self.config.log_dirs), self.config.broker_id,
                                                 self.config.cluster_id)
        except BaseException:
            self.zk.close()
            raise
        return self.cluster_id

    def register(self) -> int:
        """Register /brokers/ids/<id> (BrokerIdInUseError if another live broker has the id), then keep
        the cluster id in meta.properties and start watching /brokers/ids (``brokers``). Returns the
        broker epoch."""
        if self.cluster_id is None:
            raise RuntimeError("connect() first")
        epoch = self.registration.register()
        for d in self.config.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            write_meta_properties(d, self.config.broker_id, self.cluster_id)
        self.live_brokers.start()
        return epoch

    def stop_registering(self) -> None:
        """The broker shuts down: a ``register()`` still waiting for a previous session's registration to
        expire gives up (ClusterError). Any thread; never blocks."""
        self.registration.stop_waiting()

    def start_controller_election(self) -> None:
        if self.controller is not None:
            self.controller.start()
        self.elector.start()

    def wait_for_controller(self) -> int | None:
        """Block until the election's first round has named a controller (None after the connection
        timeout): a client's first Metadata then names it rather than -1."""
        timeout_ms = self.config.connection_timeout_ms or self.config.session_timeout_ms
        return self.elector.wait_for_controller(timeout_ms / 1000)

    def start(self) -> str:
        """All three steps; returns the cluster id. On failure nothing stays registered."""
        cluster_id = self.connect()
        try:
            self.register()
            self.start_controller_election()
        except BaseException:
            self.close()
            raise
        return cluster_id

    def close(self) -> None:
        self.live_brokers.close()
        self.elector.close()
        if self.controller is not None:
            self.controller.close()  # after the elector: its on_resign is processed first
        self.registration.close()
        self.zk.close()

    async def start_async(self) -> str:
        return await asyncio.get_running_loop().run_in_executor(None, self.start)

    async def close_async(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)


def _on_loop(loop: asyncio.AbstractEventLoop | None, callback: Callable[..., None] | None) -> Callable[..., None] | None:
    if loop is None or callback is None:
        return callback
    target = callback

    def schedule(*args: int) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(target, *args)

    return schedule


def _chain(first: Callable[..., None] | None, second: Callable[..., None] | None) -> Callable[..., None] | None:
    if first is None or second is None:
        return first or second
    a, b = first, second

    def both(*args: int) -> None:
        try:
            a(*args)
        finally:
            b(*args)

    return both
