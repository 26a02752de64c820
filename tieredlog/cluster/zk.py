"""A typed client for Kafka's ZooKeeper layout, over kazoo (Kafka's ``KafkaZkClient``).

**Blocking.** Every method waits for ZooKeeper round trips, and while the connection is down, until it
is back. Call them from a thread (the cluster layer's own threads, ``loop.run_in_executor``), never
on the asyncio event loop.

Callbacks run on threads this client owns, never on the event loop:
- watch callbacks (``watch=`` arguments) run on kazoo's callback thread and must not block: hand the
  work to a thread of your own. Watches are one-shot, and kazoo drops every watch when the connection
  drops (the callback receives an event of type ``NONE``); re-read and re-watch in ``on_connected``.
- ``ConnectionListener``s run, in the order they were added, on one ``<name>-zk-events`` thread, so a
  listener may call this client.

Conditional writes: ``update_*`` take the znode version that was read and fail with
``ZkVersionConflictError`` when someone wrote in between. A controller passes
``expected_controller_epoch_zk_version`` as well: the write then runs in one ZooKeeper transaction with
a check of ``/controller_epoch``'s version, and a controller that lost its office gets
``ControllerMovedError`` instead of overwriting its successor's decisions (Kafka's KAFKA-6082 fencing).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from tieredlog.cluster import znodes
from tieredlog.cluster.errors import (
    BrokerIdInUseError,
    ClusterError,
    ControllerMovedError,
    EphemeralOwnedByAnotherSession,
    InvalidZkConnectError,
    ReassignmentInProgressError,
    ZkConnectionTimeoutError,
    ZkVersionConflictError,
)
from tieredlog.cluster.znodes import (
    BrokerInfo,
    LeaderIsrAndControllerEpoch,
    PartitionReassignment,
    TopicAssignment,
)
from tieredlog.errors import TopicAlreadyExistsError

log = logging.getLogger(__name__)

T = TypeVar("T")
Watch = Callable[[WatchedEvent], None]


DEFAULT_SESSION_TIMEOUT_MS = 18000  # Kafka's zookeeper.session.timeout.ms since 2.5


@dataclass(frozen=True)
class ZkConnectString:
    """``zookeeper.connect``: ``host:port[,host:port...][/chroot]``; every path of the cluster lives
    under the chroot, so several clusters can share one ensemble."""

    hosts: str
    chroot: str | None = None

    @classmethod
    def parse(cls, value: str) -> "ZkConnectString":
        text = value.strip()
        slash = text.find("/")
        hosts, chroot = (text[:slash], text[slash:]) if slash >= 0 else (text, None)
        if not hosts:
            raise InvalidZkConnectError(f"Invalid zookeeper.connect {value!r}: no host")
        for item in hosts.split(","):
            host, colon, port = item.strip().rpartition(":")
            if not item.strip() or (colon and (not host or not port.isdigit() or not 0 < int(port) < 65536)):
                raise InvalidZkConnectError(f"Invalid zookeeper.connect {value!r}: bad host:port {item!r}")
        if chroot == "/":
            chroot = None
        if chroot is not None:
            parts = chroot[1:].split("/")
            if chroot.endswith("/") or any(p in ("", ".", "..") for p in parts):
                raise InvalidZkConnectError(f"Invalid zookeeper.connect {value!r}: bad chroot path {chroot!r}")
        return cls(",".join(h.strip() for h in hosts.split(",")), chroot)

    def __str__(self) -> str:
        return self.hosts + (self.chroot or "")


class ConnectionListener(Protocol):
    def on_connected(self, new_session: bool) -> None:
        """Connected, after start-up or after a disconnection. ``new_session``: the previous session
        expired, so its ephemeral znodes are gone (re-create them). Watches are gone either way."""

    def on_session_expired(self) -> None:
        """The session expired: every ephemeral znode of this client is gone. A new session follows."""


class ZkClient:
    def __init__(self, connect: str | ZkConnectString, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 connection_timeout_ms: int | None = None, name: str = "tieredlog") -> None:
        self.connect = connect if isinstance(connect, ZkConnectString) else ZkConnectString.parse(connect)
        self.session_timeout_ms = session_timeout_ms
        # Kafka: zookeeper.connection.timeout.ms defaults to the session timeout
        self.connection_timeout_ms = connection_timeout_ms if connection_timeout_ms is not None else session_timeout_ms
        self.name = name
        self._closing = threading.Event()
        self._kz = self._new_kazoo(str(self.connect))
        self._kz.add_listener(self._on_state)
        self._session_id: int | None = None  # None while there is no live session
        self._last_session_id: int | None = None
        self._listeners: list[ConnectionListener] = []
        self._events = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-zk-events")
        self._events_thread: threading.Thread | None = None
        # ephemeral path -> the session that created it, to recognise our own node after an expiry
        self._ephemeral_owners: dict[str, int] = {}

    def _new_kazoo(self, hosts: str) -> KazooClient:
        # Reconnect quickly and forever (ZooKeeper's own client waits at most ~1 s between hosts);
        # commands retry through disconnections and expiries until the client is closed.
        conn_retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0)
        cmd_retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, ignore_expire=True,
                               interrupt=self._closing.is_set)
        return KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000.0,
                           connection_retry=conn_retry, command_retry=cmd_retry)

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect within ``connection_timeout_ms`` (creating the chroot first if it is missing) and
        create Kafka's persistent top-level paths. Raises ZkConnectionTimeoutError, closed."""
        try:
            if self.connect.chroot:
                self._ensure_chroot()
            self._start_kazoo(self._kz)
            self.create_top_level_paths()
        except BaseException:
            self.close()  # a failed start leaves no session and no thread behind
            raise

    def _start_kazoo(self, client: KazooClient) -> None:
        try:
            client.start(timeout=self.connection_timeout_ms / 1000.0)
        except KazooTimeoutError:
            raise ZkConnectionTimeoutError(
                f"Timed out waiting for connection to ZooKeeper at {self.connect} while in state: CONNECTING "
                f"(zookeeper.connection.timeout.ms={self.connection_timeout_ms})") from None

    def _ensure_chroot(self) -> None:
        # Kafka creates a missing chroot through a client without it (createChrootIfNecessary)
        root = self._new_kazoo(self.connect.hosts)
        self._start_kazoo(root)
        try:
            root.retry(root.ensure_path, self.connect.chroot)
        finally:
            root.stop()
            root.close()

    def close(self) -> None:
        """Close the session: ZooKeeper deletes its ephemeral znodes at once. Idempotent; returns
        promptly even when ZooKeeper is unreachable (calls blocked on it fail). Not from a watch
        callback: kazoo joins its callback thread."""
        if self._closing.is_set():
            return
        self._closing.set()
        try:
            self._kz.stop()
            self._kz.close()
        finally:
            self._events.shutdown(wait=threading.current_thread() is not self._events_thread)

    def __enter__(self) -> "ZkClient":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closing.is_set()

    @property
    def connected(self) -> bool:
        return bool(self._kz.connected)

    @property
    def session_id(self) -> int | None:
        """The live session's id; None before the first connection and between an expiry and the next
        session."""
        return self._session_id

    @property
    def kazoo(self) -> KazooClient:
        """The underlying kazoo client (tests, and recipes this layer does not wrap)."""
        return self._kz

    def add_connection_listener(self, listener: ConnectionListener) -> None:
        self._listeners.append(listener)

    def remove_connection_listener(self, listener: ConnectionListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: never block here
        if self._closing.is_set():
            return
        if state == KazooState.LOST:
            self._session_id = None
            self._submit(self._fire_expired)
        elif state == KazooState.CONNECTED:
            cid = self._kz.client_id
            sid = cid[0] if cid else None
            new_session = self._last_session_id is not None and sid != self._last_session_id
            self._session_id = self._last_session_id = sid
            self._submit(self._fire_connected, new_session)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._events.submit(fn, *args)
        except RuntimeError:  # shut down by close() meanwhile
            pass

    def _fire_connected(self, new_session: bool) -> None:
        self._events_thread = threading.current_thread()
        if new_session:
            log.info("ZooKeeper session re-established (session 0x%x)", self._session_id or 0)
        for listener in list(self._listeners):
            if self._closing.is_set():
                return
            try:
                listener.on_connected(new_session)
            except Exception:
                self._log_listener_failure(listener)

    def _fire_expired(self) -> None:
        self._events_thread = threading.current_thread()
        log.warning("ZooKeeper session expired: its ephemeral znodes are gone; waiting for a new session")
        for listener in list(self._listeners):
            if self._closing.is_set():
                return
            try:
                listener.on_session_expired()
            except Exception:
                self._log_listener_failure(listener)

    def _log_listener_failure(self, listener: ConnectionListener) -> None:
        if self._closing.is_set():
            return  # close() interrupted its ZooKeeper calls: nothing went wrong
        log.exception("ZooKeeper connection listener %r failed", listener)

    def _retry(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        result: T = self._kz.retry(fn, *args, **kwargs)
        return result

    # ---- generic znode access -------------------------------------------------------------------

    def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        """The znode's stat or None; ``watch`` fires on its creation, change or deletion."""
        stat: ZnodeStat | None = self._retry(self._kz.exists, path, watch=watch)
        return stat

    def get_data(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat] | None:
        try:
            data, stat = self._retry(self._kz.get, path, watch=watch)
        except NoNodeError:
            return None
        return data or b"", stat

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        """Children of ``path`` ([] when it does not exist; then no watch is set)."""
        try:
            children: list[str] = self._retry(self._kz.get_children, path, watch=watch)
        except NoNodeError:
            return []
        return children

    def ensure_path(self, path: str) -> None:
        self._retry(self._kz.ensure_path, path)

    def delete_path(self, path: str, version: int = -1, *,
                    expected_controller_epoch_zk_version: int | None = None) -> None:
        """Delete ``path`` (no error if it is already gone)."""
        try:
            if expected_controller_epoch_zk_version is None:
                self._retry(self._kz.delete, path, version=version)
                return
            (result,) = self._multi(lambda tx: tx.delete(path, version), expected_controller_epoch_zk_version)
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise result
        except NoNodeError:
            pass

    def delete_if_owned(self, path: str, *, expected_controller_epoch_zk_version: int | None = None,
                        timeout_s: float = 2.0) -> bool:
        """Delete the ephemeral ``path`` if this session owns it: best effort and bounded (no retries,
        ``timeout_s`` per round trip), for shutdown paths that must not wait on an unreachable
        ZooKeeper. True when it was deleted."""
        if not self.connected:
            return False
        try:
            stat = self._kz.exists_async(path).get(timeout=timeout_s)
            if stat is None or stat.ephemeralOwner != self.session_id:
                return False
            tx = self._kz.transaction()
            if expected_controller_epoch_zk_version is not None:
                tx.check(znodes.CONTROLLER_EPOCH_PATH, expected_controller_epoch_zk_version)
            tx.delete(path, stat.version)
            results = tx.commit_async().get(timeout=timeout_s)
        except Exception as exc:  # timeouts, connection loss: the end of the session deletes it anyway
            log.info("Could not delete %s: %s", path, exc or type(exc).__name__)
            return False
        return not any(isinstance(r, Exception) for r in results)

    def create_top_level_paths(self) -> None:
        for path in znodes.PERSISTENT_PATHS:
            self.ensure_path(path)

    def create_checked_ephemeral(self, path: str, data: bytes) -> ZnodeStat:
        """Create the ephemeral ``path`` for this session (Kafka's CheckedEphemeral). A node already
        there is accepted if this session owns it (a create whose reply was lost), replaced if the
        session that registered it before has expired (ZOOKEEPER-2985, KAFKA-7165), and otherwise
        refused with EphemeralOwnedByAnotherSession."""
        while True:
            try:
                _, stat = self._retry(self._kz.create, path, data, ephemeral=True, makepath=True, include_data=True)
                self._ephemeral_owners[path] = stat.ephemeralOwner
                return stat
            except NodeExistsError:
                pass
            got = self.get_data(path)
            if got is None:
                continue  # it went away while we looked: create it again
            stat = got[1]
            owner, current = stat.ephemeralOwner, self.session_id
            if owner == current:
                self._ephemeral_owners[path] = owner
                return stat
            if owner == self._ephemeral_owners.get(path):
                log.info("Was not possible to create the ephemeral at %s, node already exists and owner '0x%x' does not "
                         "match current session '0x%x', trying to delete and re-create it with the newest Zookeeper "
                         "session", path, owner, current or 0)
                try:
                    self._retry(self._kz.delete, path, version=stat.version)
                except (NoNodeError, BadVersionError):
                    pass
                continue
            raise EphemeralOwnedByAnotherSession(
                f"Error while creating ephemeral at {path}, node already exists and owner '0x{owner:x}' does not "
                f"match current session '0x{current or 0:x}'", path, owner)

    def wait_for_ephemeral_gone(self, path: str, owner: int, timeout_s: float,
                                stop: threading.Event | None = None) -> bool:
        """Block until ``path`` no longer belongs to session ``owner`` (deleted, or re-created by another
        session), at most ``timeout_s``, or until ``stop`` is set (looked at twice a second); True when
        it went. ZooKeeper is asked again only when the watch fires."""
        changed = threading.Event()
        changed.set()
        deadline = time.monotonic() + timeout_s
        while True:
            if changed.is_set():  # first, a deletion, or a dropped connection (the watch is gone)
                changed.clear()
                stat = self.exists(path, watch=lambda _event: changed.set())
                if stat is None or stat.ephemeralOwner != owner:
                    return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stop is not None and stop.is_set()):
                return False
            changed.wait(min(remaining, 0.5))

    def _multi(self, build: Callable[[TransactionRequest], None],
               expected_controller_epoch_zk_version: int | None) -> list[Any]:
        """One ZooKeeper transaction; with a controller epoch zk version, checked against
        /controller_epoch first. Returns the results of ``build``'s operations (exceptions for failed ones)."""
        cezv = expected_controller_epoch_zk_version

        def attempt() -> list[Any]:
            tx = self._kz.transaction()
            if cezv is not None:
                tx.check(znodes.CONTROLLER_EPOCH_PATH, cezv)
            build(tx)
            results: list[Any] = tx.commit()
            return results

        results = self._retry(attempt)
        if cezv is None:
            return results
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise ControllerMovedError(f"Controller epoch zkVersion check fails. Expected zkVersion = {cezv}")
        return results[1:]

    def _conditional_set(self, path: str, data: bytes, expected_version: int,
                         expected_controller_epoch_zk_version: int | None) -> ZnodeStat:
        try:
            if expected_controller_epoch_zk_version is None:
                stat: ZnodeStat = self._retry(self._kz.set, path, data, version=expected_version)
                return stat
            (result,) = self._multi(lambda tx: tx.set_data(path, data, expected_version),
                                    expected_controller_epoch_zk_version)
            if isinstance(result, Exception):
                raise result
            return result
        except BadVersionError:
            # A retry after a lost reply meets its own write: the next version holding these bytes.
            got = self.get_data(path)
            if got is not None and got[0] == data and got[1].version == expected_version + 1:
                return got[1]
            raise ZkVersionConflictError(path, expected_version) from None

    # ---- /latest_producer_id_block --------------------------------------------------------------

    def allocate_producer_id_block(self, broker_id: int, block_size: int) -> tuple[int, int]:
        """Claim the next ``block_size`` producer ids for this broker: (first, last inclusive), as
        Kafka's ZkProducerIdManager (a conditional update of /latest_producer_id_block, retried when
        another broker claimed a block in between)."""
        path = znodes.PRODUCER_ID_BLOCK_PATH
        while True:
            got = self.get_data(path)
            if got is None:
                self.ensure_path(path)
                continue
            data, stat = got
            start = znodes.decode_producer_id_block_end(data) + 1
            end = start + block_size - 1
            try:
                self._conditional_set(path, znodes.encode_producer_id_block(broker_id, start, end), stat.version, None)
            except ZkVersionConflictError:
                continue
            return start, end

    # ---- /cluster/id ------------------------------------------------------------------------------

    def get_cluster_id(self) -> str | None:
        got = self.get_data(znodes.CLUSTER_ID_PATH)
        return znodes.decode_cluster_id(got[0]) if got else None

    def create_or_get_cluster_id(self, proposed: str) -> str:
        """The cluster's id: the one in /cluster/id, or ``proposed`` written there if there is none."""
        existing = self.get_cluster_id()
        if existing is not None:
            return existing
        try:
            self._retry(self._kz.create, znodes.CLUSTER_ID_PATH, znodes.encode_cluster_id(proposed), makepath=True)
        except NodeExistsError:
            pass  # another broker won, or our own create's reply was lost
        cluster_id = self.get_cluster_id()
        if cluster_id is None:
            raise ClusterError(f"{znodes.CLUSTER_ID_PATH} was deleted while this broker was creating it")
        return cluster_id

    # ---- /brokers/ids -----------------------------------------------------------------------------

    def register_broker(self, info: BrokerInfo) -> int:
        """Create ``/brokers/ids/<id>`` (ephemeral) and return the broker epoch: the znode's czxid."""
        path = znodes.broker_id_path(info.broker_id)
        try:
            stat = self.create_checked_ephemeral(path, info.encode())
        except EphemeralOwnedByAnotherSession as exc:
            raise BrokerIdInUseError(str(exc), exc.path, exc.owner) from None
        log.info("Registered broker %d at path %s with addresses: %s, czxid (broker epoch): %d", info.broker_id, path,
                 ",".join(e.connection_string for e in info.endpoints), stat.czxid)
        return int(stat.czxid)

    def get_broker(self, broker_id: int) -> BrokerInfo | None:
        got = self.get_data(znodes.broker_id_path(broker_id))
        return BrokerInfo.decode(broker_id, got[0]) if got else None

    def get_all_broker_ids(self, watch: Watch | None = None) -> list[int]:
        return sorted(int(c) for c in self.get_children(znodes.BROKER_IDS_PATH, watch) if c.isdigit())

    def get_all_brokers(self) -> list[BrokerInfo]:
        brokers = (self.get_broker(b) for b in self.get_all_broker_ids())
        return [b for b in brokers if b is not None]

    def get_all_broker_and_epochs(self, watch: Watch | None = None) -> dict[int, tuple[BrokerInfo, int]]:
        """Every registered broker and its epoch (the czxid of its znode; a broker that registered
        again has a higher one). ``watch`` is a child watch on /brokers/ids."""
        out: dict[int, tuple[BrokerInfo, int]] = {}
        for broker_id in self.get_all_broker_ids(watch):
            got = self.get_data(znodes.broker_id_path(broker_id))
            if got is not None:  # gone meanwhile: the child watch reports it
                out[broker_id] = (BrokerInfo.decode(broker_id, got[0]), int(got[1].czxid))
        return out

    # ---- /controller, /controller_epoch -----------------------------------------------------------

    def get_controller(self, watch: Watch | None = None) -> tuple[int, ZnodeStat] | None:
        """The controller's broker id and its znode's stat, or None. ``watch`` fires when /controller
        is created, changed or deleted."""
        if self.exists(znodes.CONTROLLER_PATH, watch) is None:
            return None
        got = self.get_data(znodes.CONTROLLER_PATH)
        return (znodes.decode_controller(got[0]), got[1]) if got else None

    def get_controller_id(self, watch: Watch | None = None) -> int | None:
        got = self.get_controller(watch)
        return got[0] if got else None

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """(controller epoch, zk version of /controller_epoch), or None before the first election."""
        got = self.get_data(znodes.CONTROLLER_EPOCH_PATH)
        return (znodes.decode_controller_epoch(got[0]), got[1].version) if got else None

    def register_controller_and_increment_epoch(self, broker_id: int) -> tuple[int, int]:
        """Create the ephemeral /controller for ``broker_id`` and raise /controller_epoch by one, in one
        transaction conditional on the epoch's znode version, so two brokers can never both win one
        epoch. /controller_epoch is created with 1 by the first election. Returns (new epoch, its zk
        version); raises ControllerMovedError when another broker won."""
        current = self.get_controller_epoch()
        new_epoch = 1 if current is None else current[0] + 1
        data = znodes.encode_controller(broker_id)

        def build(tx: TransactionRequest) -> None:
            tx.create(znodes.CONTROLLER_PATH, data, ephemeral=True)
            if current is None:
                tx.create(znodes.CONTROLLER_EPOCH_PATH, znodes.encode_controller_epoch(new_epoch))
            else:
                tx.set_data(znodes.CONTROLLER_EPOCH_PATH, znodes.encode_controller_epoch(new_epoch), current[1])

        results = self._multi(build, None)
        errors = [r for r in results if isinstance(r, Exception)]
        if not errors:
            return new_epoch, 0 if current is None else int(results[1].version)
        if any(isinstance(e, (NodeExistsError, BadVersionError)) for e in errors):
            return self._check_controller_and_epoch(broker_id, new_epoch)
        raise next(e for e in errors if not isinstance(e, (RolledBackError, RuntimeInconsistency)))

    def _check_controller_and_epoch(self, broker_id: int, new_epoch: int) -> tuple[int, int]:
        # The transaction failed, or its reply was lost and a retry met our own nodes: ours only if
        # /controller is this session's and the epoch is the one we wrote.
        got = self.get_controller()
        if got is None:
            raise ControllerMovedError(f"The ephemeral node at {znodes.CONTROLLER_PATH} went away while checking whether "
                                       "the controller election succeeds. Aborting controller startup procedure")
        controller_id, stat = got
        if controller_id == broker_id and stat.ephemeralOwner == self.session_id:
            epoch = self.get_controller_epoch()
            if epoch is not None and epoch[0] == new_epoch:
                return epoch
        raise ControllerMovedError("Controller moved to another broker. Aborting controller startup procedure")

    # ---- /brokers/topics ----------------------------------------------------------------------------

    def get_all_topics(self, watch: Watch | None = None) -> list[str]:
        return sorted(self.get_children(znodes.TOPICS_PATH, watch))

    def create_topic_assignment(self, topic: str, assignment: TopicAssignment) -> int:
        try:
            self._retry(self._kz.create, znodes.topic_path(topic), assignment.encode(), makepath=True)
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.") from None
        return 0

    def get_topic_assignment(self, topic: str, watch: Watch | None = None) -> tuple[TopicAssignment, int] | None:
        got = self.get_data(znodes.topic_path(topic), watch)
        return (TopicAssignment.decode(topic, got[0]), got[1].version) if got else None

    def update_topic_assignment(self, topic: str, assignment: TopicAssignment, expected_version: int, *,
                                expected_controller_epoch_zk_version: int | None = None) -> int:
        stat = self._conditional_set(znodes.topic_path(topic), assignment.encode(), expected_version,
                                     expected_controller_epoch_zk_version)
        return int(stat.version)

    # ---- /brokers/topics/<t>/partitions/<p>/state --------------------------------------------------

    def create_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch, *,
                               expected_controller_epoch_zk_version: int | None = None) -> int:
        """Create the partition's state znode (its parents too); returns its version, 0."""
        self.ensure_path(znodes.topic_partition_path(topic, partition))
        path = znodes.partition_state_path(topic, partition)
        try:
            if expected_controller_epoch_zk_version is None:
                self._retry(self._kz.create, path, state.encode())
            else:
                (result,) = self._multi(lambda tx: tx.create(path, state.encode()), expected_controller_epoch_zk_version)
                if isinstance(result, Exception):
                    raise result
        except NodeExistsError:
            got = self.get_data(path)
            if got is None or got[0] != state.encode() or got[1].version != 0:
                raise
        return 0

    def get_partition_state(self, topic: str, partition: int,
                            watch: Watch | None = None) -> tuple[LeaderIsrAndControllerEpoch, int] | None:
        """(state, zk version) or None; pass the version to ``update_partition_state``."""
        path = znodes.partition_state_path(topic, partition)
        got = self.get_data(path, watch)
        return (LeaderIsrAndControllerEpoch.decode(got[0], path), got[1].version) if got else None

    def update_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                               expected_version: int, *, expected_controller_epoch_zk_version: int | None = None) -> int:
        """Write the state only if the znode is still at ``expected_version``; returns the new version.
        ZkVersionConflictError: someone wrote in between (read again, decide again);
        ControllerMovedError: the controller epoch moved on (this controller must stop)."""
        stat = self._conditional_set(znodes.partition_state_path(topic, partition), state.encode(), expected_version,
                                     expected_controller_epoch_zk_version)
        return int(stat.version)

    # ---- /config/topics ------------------------------------------------------------------------------

    def get_topic_config(self, topic: str) -> dict[str, str]:
        got = self.get_data(znodes.topic_config_path(topic))
        return znodes.decode_topic_config(got[0]) if got else {}

    def set_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        """Create or replace the topic's overrides (Kafka's setOrCreateEntityConfigs)."""
        path, data = znodes.topic_config_path(topic), znodes.encode_topic_config(configs)
        try:
            self._retry(self._kz.set, path, data)
        except NoNodeError:
            try:
                self._retry(self._kz.create, path, data, makepath=True)
            except NodeExistsError:
                self._retry(self._kz.set, path, data)

    def delete_topic_config(self, topic: str, *, expected_controller_epoch_zk_version: int | None = None) -> None:
        self.delete_path(znodes.topic_config_path(topic),
                         expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)

    def delete_recursive(self, path: str, *, expected_controller_epoch_zk_version: int | None = None) -> None:
        """Delete ``path`` and everything below it, children first, each delete fenced like
        ``delete_path`` (Kafka's deleteRecursive); no error if it is gone."""
        for child in self.get_children(path):
            self.delete_recursive(f"{path}/{child}",
                                  expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)
        self.delete_path(path, expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)

    # ---- /admin ----------------------------------------------------------------------------------------

    def mark_topic_for_deletion(self, topic: str) -> None:
        try:
            self._retry(self._kz.create, znodes.delete_topic_path(topic), b"", makepath=True)
        except NodeExistsError:
            pass

    def get_topics_marked_for_deletion(self, watch: Watch | None = None) -> list[str]:
        return sorted(self.get_children(znodes.DELETE_TOPICS_PATH, watch))

    def remove_topic_deletion_marker(self, topic: str, *, expected_controller_epoch_zk_version: int | None = None) -> None:
        self.delete_path(znodes.delete_topic_path(topic),
                         expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)

    def create_partition_reassignment(self, reassignment: PartitionReassignment) -> None:
        try:
            self._retry(self._kz.create, znodes.REASSIGN_PARTITIONS_PATH, reassignment.encode(), makepath=True)
        except NodeExistsError:
            raise ReassignmentInProgressError("There is an existing assignment running.") from None

    def get_partition_reassignment(self, watch: Watch | None = None) -> PartitionReassignment | None:
        if self.exists(znodes.REASSIGN_PARTITIONS_PATH, watch) is None:
            return None
        got = self.get_data(znodes.REASSIGN_PARTITIONS_PATH)
        return PartitionReassignment.decode(got[0]) if got else None

    def delete_partition_reassignment(self, *, expected_controller_epoch_zk_version: int | None = None) -> None:
        self.delete_path(znodes.REASSIGN_PARTITIONS_PATH,
                         expected_controller_epoch_zk_version=expected_controller_epoch_zk_version)
