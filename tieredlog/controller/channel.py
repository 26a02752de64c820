"""The controller's connections to the brokers (Kafka's ``ControllerChannelManager``).

One queue and one sender thread per live broker (Kafka's RequestSendThread), so a slow or dead broker
never delays requests to the others, and the requests to one broker arrive in the order the controller
sent them. Each thread connects to the broker's endpoint of the inter-broker listener with a
``BlockingNodeConnection``, sends one request at a time and hands the response to the request's callback, which
puts an event on the controller's queue (callbacks run on the sender thread and must not block). A
failed request is sent again over a new connection, with backoff, for as long as the broker is live;
``remove_broker`` (the broker left /brokers/ids) drops its queue and stops the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from tieredlog.clients.node_clients import PLAINTEXT, BlockingNodeConnection, ListenerSecurity
from tieredlog.clients.retry import ExponentialBackoff
from tieredlog.clients.routing import inter_broker_endpoint
from tieredlog.cluster.znodes import BrokerInfo, EndPoint

log = logging.getLogger(__name__)

ResponseCallback = Callable[[Any, "BaseException | None"], None]
"""``callback(response, error)``: the decoded response entity, or None and the error that ended the
request (the broker left, the controller stopped)."""

RECONNECT_BACKOFF_S = 0.1
RECONNECT_BACKOFF_MAX_S = 1.0


class BrokerRequestSender(Protocol):
    """What the controller needs of its channel: tests put a recorder in its place."""

    def startup(self, brokers: Mapping[int, BrokerInfo]) -> None: ...

    def shutdown(self) -> None: ...

    def add_broker(self, broker: BrokerInfo) -> None: ...

    def remove_broker(self, broker_id: int) -> None: ...

    def send_request(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
                     callback: ResponseCallback | None = None) -> None: ...


class ChannelClosedError(Exception):
    """The request was dropped: its broker left, or the controller stopped."""


@dataclass
class _QueueItem:
    api_key: int
    version: int
    body: dict[str, Any]
    callback: ResponseCallback | None


_STOP = object()


class RequestSendThread:
    """Sends the queued requests to one broker, one at a time."""

    def __init__(self, controller_id: int, broker: BrokerInfo, endpoint: EndPoint | None, socket_timeout_s: float,
                 security: ListenerSecurity = PLAINTEXT) -> None:
        self.controller_id = controller_id
        self.broker = broker
        self.endpoint = endpoint
        self.socket_timeout_s = socket_timeout_s
        self.queue: queue.Queue[Any] = queue.Queue()
        self._stopped = threading.Event()
        self._connection = None if endpoint is None else BlockingNodeConnection(
            (endpoint.host, endpoint.port), client_id=f"controller-{controller_id}",
            security=security)
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"Controller-{controller_id}-to-broker-{broker.broker_id}-send-thread")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop without waiting: a thread blocked on the socket wakes up when it is closed here."""
        self._stopped.set()
        self.queue.put(_STOP)
        if self._connection is not None:
            self._connection.close()

    def _run(self) -> None:
        backoff = ExponentialBackoff(RECONNECT_BACKOFF_S, RECONNECT_BACKOFF_MAX_S)
        while not self._stopped.is_set():
            item = self.queue.get()
            if item is _STOP:
                break
            assert isinstance(item, _QueueItem)
            while not self._stopped.is_set():
                try:
                    response = self._send(item)
                except Exception as exc:
                    if self._stopped.is_set():
                        _call(item.callback, None, ChannelClosedError(f"broker {self.broker.broker_id} is gone"))
                        break
                    wait = backoff.failed()
                    log.warning("Controller %d's connection to broker %s was unsuccessful (%s); retrying in %.1f s",
                                self.controller_id, self._target(), exc, wait)
                    self._stopped.wait(wait)
                    continue
                backoff.reset()
                _call(item.callback, response, None)
                break
            else:
                _call(item.callback, None, ChannelClosedError(f"broker {self.broker.broker_id} is gone"))
        if self._connection is not None:
            self._connection.close()
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _QueueItem):
                _call(item.callback, None, ChannelClosedError(f"broker {self.broker.broker_id} is gone"))

    def _target(self) -> str:
        ep = self.endpoint
        return f"{ep.host}:{ep.port} (id: {self.broker.broker_id} rack: {self.broker.rack})" if ep else \
            f"{self.broker.broker_id} (no inter-broker endpoint)"

    def _send(self, item: _QueueItem) -> Any:
        if self._connection is None:
            raise ConnectionError("the broker registered no endpoint for the inter-broker listener")
        # a failed request closes the connection; the retry opens a new one
        return self._connection.request(item.api_key, item.body, item.version, self.socket_timeout_s)


def _call(callback: ResponseCallback | None, response: Any, error: BaseException | None) -> None:
    if callback is None:
        return
    try:
        callback(response, error)
    except Exception:
        log.exception("Controller request callback failed")


class ControllerChannelManager:
    """The ``BrokerRequestSender`` of a real controller."""

    def __init__(self, controller_id: int, *, inter_broker_listener_name: str | None = None,
                 security_inter_broker_protocol: str = "PLAINTEXT", socket_timeout_ms: int = 30000,
                 security: ListenerSecurity = PLAINTEXT) -> None:
        self.controller_id = controller_id
        self.listener_name = inter_broker_listener_name
        self.security_protocol = security_inter_broker_protocol
        self.socket_timeout_s = socket_timeout_ms / 1000.0
        self.security = security  # TLS and SASL of the inter-broker listener, as its protocol asks
        self._threads: dict[int, RequestSendThread] = {}
        self._lock = threading.Lock()

    def startup(self, brokers: Mapping[int, BrokerInfo]) -> None:
        for broker in brokers.values():
            self.add_broker(broker)

    def shutdown(self) -> None:
        with self._lock:
            threads, self._threads = list(self._threads.values()), {}
        for t in threads:
            t.stop()

    def add_broker(self, broker: BrokerInfo) -> None:
        endpoint = inter_broker_endpoint(broker, self.listener_name, self.security_protocol)
        if endpoint is None:
            log.error("Broker %d has no endpoint for the inter-broker listener %s: the controller cannot reach it",
                      broker.broker_id, self.listener_name or self.security_protocol)
        with self._lock:
            if broker.broker_id in self._threads:
                return
            thread = RequestSendThread(self.controller_id, broker, endpoint, self.socket_timeout_s, self.security)
            self._threads[broker.broker_id] = thread
        thread.start()

    def remove_broker(self, broker_id: int) -> None:
        with self._lock:
            thread = self._threads.pop(broker_id, None)
        if thread is not None:
            thread.stop()

    def send_request(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
                     callback: ResponseCallback | None = None) -> None:
        with self._lock:
            thread = self._threads.get(broker_id)
        if thread is None:
            log.warning("Not sending request (api key %d) to broker %d, since it is offline.", api_key, broker_id)
            _call(callback, None, ChannelClosedError(f"broker {broker_id} is offline"))
            return
        thread.queue.put(_QueueItem(api_key, version, body, callback))

    def broker_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._threads)
