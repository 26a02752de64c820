"""SASL over Kafka's protocol, the client side: SaslHandshake v1, then SaslAuthenticate until the
mechanism is done (KIP-152). Used by a broker's own connections to other brokers (the inter-broker
listener) and by the tools.

The exchange is written once as a generator of requests; ``authenticate_blocking`` drives it over
the blocking ``KafkaClient``, ``authenticate_async`` over ``AsyncKafkaConnection``. The mechanisms'
tokens come from ``tieredlog.security.sasl.client``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator

from tieredlog.protocol.api import SASL_AUTHENTICATE, SASL_HANDSHAKE
from tieredlog.security.sasl.client import SaslClientCredentials, SaslClientError, mechanism_client

HANDSHAKE_VERSION = 1  # v1: the tokens travel in SaslAuthenticate requests

Step = tuple[int, dict[str, Any], int]


def exchange(creds: SaslClientCredentials, versions: dict[int, tuple[int, int]]) -> Generator[Step, Any, None]:
    """Yields (api key, body, version) for each request; is sent each response; returns once the
    broker accepted the credentials, raises SaslClientError when it did not."""
    handshake = versions.get(SASL_HANDSHAKE)
    authenticate = versions.get(SASL_AUTHENTICATE)
    if handshake is None or handshake[1] < HANDSHAKE_VERSION or authenticate is None:
        raise SaslClientError("the broker does not serve SaslHandshake v1 and SaslAuthenticate")
    client = mechanism_client(creds)
    resp = yield SASL_HANDSHAKE, {"mechanism": creds.mechanism}, HANDSHAKE_VERSION
    if int(resp.error_code) != 0:
        raise SaslClientError(f"Client SASL mechanism '{creds.mechanism}' not enabled in the server, enabled "
                              f"mechanisms are [{', '.join(resp.mechanisms)}]")
    version = min(authenticate[1], 2)
    token: bytes | None = client.initial()
    while token is not None:
        resp = yield SASL_AUTHENTICATE, {"auth_bytes": token}, version
        if int(resp.error_code) != 0:
            raise SaslClientError(resp.error_message or f"SASL authentication failed (error {int(resp.error_code)})")
        token = client.respond(bytes(resp.auth_bytes))


def authenticate_blocking(request: Callable[[int, dict[str, Any], int], Any], creds: SaslClientCredentials,
                          versions: dict[int, tuple[int, int]]) -> None:
    steps = exchange(creds, versions)
    try:
        step = next(steps)
        while True:
            step = steps.send(request(*step))
    except StopIteration:
        return


async def authenticate_async(request: Callable[[int, dict[str, Any], int], Awaitable[Any]],
                             creds: SaslClientCredentials, versions: dict[int, tuple[int, int]]) -> None:
    steps = exchange(creds, versions)
    try:
        step = next(steps)
        while True:
            step = steps.send(await request(*step))
    except StopIteration:
        return
