"""Which node a request goes to, from the cluster's metadata: a broker's inter-broker endpoint, calls
to a partition's leader that ask again when the leader moves, calls to the active controller that ask
again after NOT_CONTROLLER, and FindCoordinator for group and transaction coordinators."""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient
from tieredlog.clients.errors import KafkaProtocolError
from tieredlog.clients.versions import format_address
from tieredlog.cluster.znodes import BrokerInfo, EndPoint
from tieredlog.protocol.api import FIND_COORDINATOR, METADATA

log = logging.getLogger(__name__)

T = TypeVar("T")
Endpoint = tuple[str, int]


def inter_broker_endpoint(broker: BrokerInfo, listener_name: str | None, security_protocol: str) -> EndPoint | None:
    """The endpoint brokers and the controller talk to each other on: ``inter.broker.listener.name``,
    else the listener named after ``security.inter.broker.protocol`` (Kafka's default), else the first
    listener using that protocol."""
    if listener_name:
        return next((e for e in broker.endpoints if e.listener_name == listener_name.upper()), None)
    protocol = security_protocol.upper()
    return next((e for e in broker.endpoints if e.listener_name == protocol), None) or \
        next((e for e in broker.endpoints if e.security_protocol == protocol), None)



class Retry:
    """An attempt's answer that means: ask for the leader again and try after the backoff."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def call_leader(leader: Callable[[], Endpoint | None], attempt: Callable[[Endpoint, float], T | Retry], *,
                what: str, timeout_s: float, backoff_s: float, check_open: Callable[[], None]) -> T:
    """Run ``attempt(leader endpoint, deadline)`` until it gives an answer, asking ``leader()`` before
    each try (None: no leader known). A failed connection (OSError, TimeoutError included, or
    KafkaProtocolError) or a ``Retry`` answer waits ``backoff_s`` and tries again; TimeoutError naming
    ``what`` and the last reason once ``timeout_s`` have passed. ``check_open`` raises when the caller
    was closed meanwhile. Blocking: for worker threads."""
    deadline = time.monotonic() + timeout_s
    reason = "no leader known"
    while True:
        check_open()
        endpoint = leader()
        if endpoint is None:
            reason = "no leader known"
        else:
            try:
                result = attempt(endpoint, deadline)
            except (OSError, KafkaProtocolError) as exc:
                reason = f"{format_address(endpoint)}: {exc!r}"
            else:
                if not isinstance(result, Retry):
                    return result
                reason = result.reason
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what}: gave up after {timeout_s:g} s: {reason}")
        log.debug("%s: %s; retrying", what, reason)
        time.sleep(min(backoff_s, remaining))


# ---- the active controller (blocking, for the tools) --------------------------------------------------

class ControllerNotFound(TimeoutError):
    """No controller answered before the wait was over; ``reason`` says what happened last."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def find_controller(client: KafkaClient) -> tuple[int, str] | None:
    """The active controller Metadata names, as (broker id, "host:port"); None while none is elected
    (or it is not among the live brokers)."""
    md = client.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})
    node = next((b for b in md.brokers if b.node_id == md.controller_id), None)
    return None if node is None else (int(node.node_id), format_address((node.host, int(node.port))))


def _top_level_not_controller(answer: Any) -> bool:
    return getattr(answer, "error_code", ErrorCode.none) == ErrorCode.not_controller


def call_controller(client: KafkaClient, api_key: int, body: Any, *, version: int | None = None, wait_s: float,
                    backoff_s: float, not_controller: Callable[[Any], bool] = _top_level_not_controller) -> Any:
    """Send ``body`` to the active controller, found through ``client``'s broker and reached with its
    settings (Kafka's admin client routes ElectLeaders, the reassignment APIs and the SCRAM alterations
    so). NOT_CONTROLLER (``not_controller(answer)``: the office moved between Metadata and the request),
    no controller yet or an unreachable one means: look again after ``backoff_s``, until ``wait_s`` has
    passed; then ControllerNotFound with the last reason."""
    deadline = time.monotonic() + wait_s
    reason = "no controller is elected"
    while True:
        controller = find_controller(client)
        if controller is not None:
            node_id, address = controller
            try:
                with client.for_node(address) as c:
                    answer = c.request(api_key, body, version=version)
            except OSError as exc:  # ConnectionError and the socket's TimeoutError included
                reason = f"cannot reach the controller (broker {node_id} at {address}): {exc}"
            else:
                if not not_controller(answer):
                    return answer
                reason = f"broker {node_id} is no longer the controller"
        if time.monotonic() >= deadline:
            raise ControllerNotFound(reason)
        time.sleep(backoff_s)


# ---- coordinators --------------------------------------------------------------------------------------

class CoordinatorType(enum.IntEnum):
    """Kafka's FindCoordinatorRequest.CoordinatorType (FindCoordinator's key_type)."""

    GROUP = 0
    TRANSACTION = 1


# What Kafka's admin client answers by asking FindCoordinator again (CoordinatorStrategy): the
# coordinator moved, is not up yet, or is still loading its partition.
COORDINATOR_RETRIABLE = frozenset({
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
})


@dataclass(frozen=True, slots=True)
class Coordinator:
    """One key's FindCoordinator answer: the coordinator, or the error (``error_code`` not NONE)."""

    key: str
    error_code: ErrorCode
    error_message: str | None
    node_id: int
    host: str
    port: int

    @property
    def retriable(self) -> bool:
        return self.error_code in COORDINATOR_RETRIABLE


def find_coordinators(client: KafkaClient, key_type: CoordinatorType, keys: list[str], *,
                      version: int | None = None) -> list[Coordinator]:
    """FindCoordinator for ``keys`` at ``client``'s broker: one batched request from v4 (KIP-699), one
    request per key before. ``version`` None: the highest both sides speak."""
    if version is None:
        version = client.version_for(FIND_COORDINATOR)
    if version >= 4:
        r = client.request(FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": keys}, version=version)
        answers = [(c.key, c) for c in r.coordinators]
    else:
        answers = [(key, client.request(FIND_COORDINATOR, {"key": key, "key_type": key_type}, version=version))
                   for key in keys]
    return [Coordinator(key, ErrorCode(c.error_code), c.error_message, int(c.node_id), c.host, int(c.port))
            for key, c in answers]
