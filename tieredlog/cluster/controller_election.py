"""Controller election on ``/controller`` and controller-epoch fencing (Kafka's KafkaController.elect).

Every broker runs a ``ControllerElector``. When ``/controller`` is absent each one tries to create it
(ephemeral) and, in the same ZooKeeper transaction, to raise ``/controller_epoch`` by one from the
version it read; ZooKeeper lets exactly one succeed. Everyone watches ``/controller`` and runs again
when it disappears (the controller's session closed or expired). A controller whose session expires
resigns: its ``/controller`` is gone and someone else may already hold a higher epoch.

The epoch fences zombies twice: brokers reject requests carrying an older epoch
(``ControllerEpochFence``, STALE_CONTROLLER_EPOCH), and a controller's ZooKeeper writes pass
``controller_epoch_zk_version`` so they fail once a successor has raised the epoch.

Threads: the election runs on one thread per elector; ``on_become_controller(epoch)`` and
``on_resign()`` are called there, one at a time, never on an asyncio loop (hand work over with
``loop.call_soon_threadsafe``). The properties may be read from any thread.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from kazoo.exceptions import ConnectionClosedError
from kazoo.protocol.states import EventType, WatchedEvent

from tieredlog.cluster import znodes
from tieredlog.cluster.errors import ControllerMovedError
from tieredlog.cluster.zk import ZkClient
from tieredlog.errors import StaleControllerEpochError

log = logging.getLogger(__name__)

RETRY_DELAY_S = 0.5


class ControllerEpochFence:
    """The broker side of controller fencing (ReplicaManager's controllerEpoch check): a controller
    request whose epoch is older than the newest this broker has seen is rejected with
    STALE_CONTROLLER_EPOCH (11); an equal or newer one is accepted and remembered. Thread-safe."""

    def __init__(self, latest: int = 0) -> None:
        self._latest = latest
        self._lock = threading.Lock()

    @property
    def latest(self) -> int:
        return self._latest

    def observe(self, epoch: int) -> None:
        """Remember an epoch learnt elsewhere (from ZooKeeper)."""
        with self._lock:
            self._latest = max(self._latest, epoch)

    def check(self, controller_epoch: int, controller_id: int | None = None) -> None:
        """Accept a request from a controller of ``controller_epoch`` or raise StaleControllerEpochError."""
        with self._lock:
            if controller_epoch < self._latest:
                who = f" from controller {controller_id}" if controller_id is not None else ""
                raise StaleControllerEpochError(
                    f"Request{who} with controller epoch {controller_epoch} is older than the latest known "
                    f"controller epoch {self._latest}")
            self._latest = controller_epoch


@dataclass(frozen=True)
class ControllerState:
    controller_id: int | None  # None: no controller known right now
    epoch: int  # the newest controller epoch seen; 0 before any election
    epoch_zk_version: int  # /controller_epoch's version when this broker won; -1 otherwise
    is_controller: bool


_NO_CONTROLLER = ControllerState(None, 0, -1, False)


class ControllerElector:
    def __init__(self, zk: ZkClient, broker_id: int, *,
                 on_become_controller: Callable[[int], None] | None = None,
                 on_resign: Callable[[], None] | None = None,
                 fence: ControllerEpochFence | None = None) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.fence = fence or ControllerEpochFence()
        self._on_become = on_become_controller
        self._on_resign = on_resign
        self._state = _NO_CONTROLLER
        self._changed = threading.Condition()
        self._closed = False
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"controller-election-{broker_id}")
        self._retry_timer: threading.Timer | None = None
        self._controller_session: int | None = None  # the session that holds /controller for us

    # ---- state, readable from any thread -----------------------------------------------------------

    @property
    def state(self) -> ControllerState:
        return self._state

    @property
    def is_controller(self) -> bool:
        return self._state.is_controller

    @property
    def controller_id(self) -> int | None:
        return self._state.controller_id

    @property
    def controller_epoch(self) -> int:
        return self._state.epoch

    @property
    def controller_epoch_zk_version(self) -> int:
        """Pass it as ``expected_controller_epoch_zk_version`` to every ZooKeeper write made as controller."""
        return self._state.epoch_zk_version

    def wait_for(self, predicate: Callable[[ControllerState], bool], timeout: float) -> bool:
        """Block until ``predicate(state)`` holds (True) or ``timeout`` seconds pass (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._state), timeout)

    def wait_for_controller(self, timeout: float) -> int | None:
        """The controller's id once one is known, or None after ``timeout`` seconds."""
        self.wait_for(lambda s: s.controller_id is not None, timeout)
        return self._state.controller_id

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Join the election (returns at once; the election runs on the elector's thread)."""
        self.zk.add_connection_listener(self)
        self._submit(self._elect)

    def close(self) -> None:
        """Leave the election; never waits on an unreachable ZooKeeper. A controller resigns:
        ``on_resign`` runs, and /controller is deleted (if this session still holds it for the epoch it
        won) so another broker takes over without waiting for the session to end."""
        with self._changed:
            if self._closed:
                return
            self._closed = True  # under the lock: no election thread becomes controller after this
            state = self._state
            if state.is_controller:
                self._state = ControllerState(None, state.epoch, -1, False)
                self._changed.notify_all()
        self.zk.remove_connection_listener(self)
        timer = self._retry_timer
        if timer is not None:
            timer.cancel()
        # no waiting: an election thread stuck on an unreachable ZooKeeper ends when the client closes
        self._worker.shutdown(wait=False, cancel_futures=True)
        if state.is_controller:
            self.zk.delete_if_owned(znodes.CONTROLLER_PATH, expected_controller_epoch_zk_version=state.epoch_zk_version)
            self._call(self._on_resign)

    # ---- ZooKeeper events (kazoo threads: never block) ---------------------------------------------

    def on_connected(self, new_session: bool) -> None:
        # watches do not survive a disconnection: read /controller again and watch it again
        self._submit(self._elect)

    def on_session_expired(self) -> None:
        self._submit(self._on_expired)

    def _on_watch(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:  # NONE: the connection dropped; on_connected follows
            self._submit(self._elect)

    def _submit(self, fn: Callable[[], None]) -> None:
        if self._closed:
            return
        try:
            self._worker.submit(self._run, fn)
        except RuntimeError:  # shut down meanwhile
            pass

    # ---- the election thread -----------------------------------------------------------------------

    def _run(self, fn: Callable[[], None]) -> None:
        if self._closed:
            return
        try:
            fn()
        except (InterruptedError, ConnectionClosedError):
            if not self._closed and not self.zk.closed:
                self._retry_later()
        except Exception:
            if not self._closed and not self.zk.closed:
                log.exception("Controller election failed on broker %d; trying again", self.broker_id)
                self._retry_later()

    def _retry_later(self) -> None:
        timer = threading.Timer(RETRY_DELAY_S, self._submit, (self._elect,))
        timer.daemon = True
        self._retry_timer = timer
        timer.start()

    def _elect(self) -> None:
        got = self.zk.get_controller(watch=self._on_watch)
        if got is None:
            try:
                epoch, epoch_zk_version = self.zk.register_controller_and_increment_epoch(self.broker_id)
            except ControllerMovedError as exc:
                log.debug("Broker %d lost the controller election: %s", self.broker_id, exc)
                got = self.zk.get_controller(watch=self._on_watch)
            else:
                self._become_controller(epoch, epoch_zk_version)
                return
        if got is None:
            return  # it vanished again; its deletion event runs the election again
        controller_id, stat = got
        mine = controller_id == self.broker_id and stat.ephemeralOwner == self.zk.session_id
        if mine:
            if not self._state.is_controller:
                current = self.zk.get_controller_epoch()
                if current is not None:
                    self._become_controller(*current)
            return
        if self._state.is_controller:
            self._resign()
        current = self.zk.get_controller_epoch()
        epoch = current[0] if current else 0
        self.fence.observe(epoch)
        if self._state.controller_id != controller_id or self._state.epoch != epoch:
            log.info("Broker %d: the controller is broker %d (epoch %d)", self.broker_id, controller_id, epoch)
        self._set_state(ControllerState(controller_id, epoch, -1, False))

    def _become_controller(self, epoch: int, epoch_zk_version: int) -> None:
        self.fence.observe(epoch)
        with self._changed:
            if self._closed:
                return
            self._state = ControllerState(self.broker_id, epoch, epoch_zk_version, True)
            self._controller_session = self.zk.session_id
            self._changed.notify_all()
        log.info("Broker %d is now the controller (controller epoch %d)", self.broker_id, epoch)
        self._call(self._on_become, epoch)

    def _resign(self) -> None:
        epoch = self._state.epoch
        self._set_state(ControllerState(None, epoch, -1, False))
        log.info("Broker %d resigned as the controller (controller epoch %d)", self.broker_id, epoch)
        self._call(self._on_resign)

    def _on_expired(self) -> None:
        # An election queued before this event may already have won again on the next session: only
        # an office held through an older session is lost.
        if self._state.is_controller and self._controller_session == self.zk.session_id:
            return
        if self._state.is_controller:
            self._resign()
        else:
            self._set_state(ControllerState(None, self._state.epoch, -1, False))

    def _set_state(self, state: ControllerState) -> None:
        with self._changed:
            self._state = state
            self._changed.notify_all()

    def _call(self, callback: Callable[..., None] | None, *args: int) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:
            log.exception("Controller callback %r failed on broker %d", callback, self.broker_id)
