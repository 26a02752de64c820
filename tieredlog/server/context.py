"""What a request handler knows about the request it serves.

The context carries the broker as a type parameter: each handler module names, as a ``Protocol``, the
few things of the broker it uses (``RequestContext[AdminServer]``), and the dispatcher's table of handlers
for the real broker is where the type checker holds the broker to every one of them."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, TypeVar

from tieredlog.security.principal import ANONYMOUS, KafkaPrincipal

# covariant: a context of the broker is a context of every Protocol the broker satisfies (the field is
# read-only, the dataclass being frozen)
B_co = TypeVar("B_co", covariant=True)
B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class RequestContext(Generic[B_co]):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    client_port: int
    broker: B_co
    connection_id: str = ""
    # The server's pool for reads that would wait for the disk (KafkaServer.cold_reads); None: the
    # loop's default executor (handlers called without a server, in tests).
    cold_reads: Executor | None = None
    # who sent the request (SASL, mutual TLS; User:ANONYMOUS otherwise) and on which listener
    principal: KafkaPrincipal = ANONYMOUS
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"


# A handler gets the decoded kio request body and returns the response body: a kio entity or a dict
# of the response's fields (tieredlog.protocol.codec.build_entity fills the rest), or one of the
# sentinels below.
Handler = Callable[[RequestContext[B], Any], Awaitable[Any]]


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NO_RESPONSE = _Sentinel("NO_RESPONSE")  # Produce acks=0: the client expects nothing back
CLOSE_CONNECTION = _Sentinel("CLOSE_CONNECTION")  # Kafka closes the socket (e.g. acks=0 produce error)
