"""Which node a request goes to, from the cluster's metadata: a broker's inter-broker endpoint, and
calls to a partition's leader that ask again when the leader moves."""

from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

from tieredlog.clients.errors import KafkaProtocolError
from tieredlog.clients.versions import format_address
from tieredlog.cluster.znodes import BrokerInfo, EndPoint

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
