"""The client side of SASL over Kafka's protocol: SaslHandshake v1, then SaslAuthenticate until the
mechanism is done (KIP-152). Used by a broker's own connections to other brokers (the inter-broker
listener) and by the tools.

The exchange is written once as a generator of requests; ``authenticate_blocking`` drives it over
the blocking ``KafkaClient``, ``authenticate_async`` over ``AsyncKafkaConnection``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generator

from tieredlog.protocol.api import SASL_AUTHENTICATE, SASL_HANDSHAKE
from tieredlog.security import scram
from tieredlog.security.sasl.mechanisms import PLAIN

HANDSHAKE_VERSION = 1  # v1: the tokens travel in SaslAuthenticate requests


class SaslClientError(ConnectionError):
    """The broker refused the mechanism or the credentials (Kafka's SaslAuthenticationException /
    UnsupportedSaslMechanismException); a ConnectionError, so callers that retry a lost connection
    retry this too."""


@dataclass(frozen=True)
class SaslClientCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)


class _PlainClient:
    def __init__(self, creds: SaslClientCredentials) -> None:
        self._creds = creds
        self._sent = False

    def initial(self) -> bytes:
        self._sent = True
        return b"\0" + self._creds.username.encode() + b"\0" + self._creds.password.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        return None


class _ScramClient:
    def __init__(self, creds: SaslClientCredentials) -> None:
        self._scram = scram.ScramClient(scram.MECHANISMS[creds.mechanism], creds.username, creds.password)
        self._step = 0

    def initial(self) -> bytes:
        return self._scram.first()

    def respond(self, challenge: bytes) -> bytes | None:
        self._step += 1
        try:
            if self._step == 1:
                return self._scram.final(challenge)
            self._scram.verify(challenge)
        except scram.ScramFormatError as exc:
            raise SaslClientError(str(exc)) from None
        return None


def _mechanism_client(creds: SaslClientCredentials) -> _PlainClient | _ScramClient:
    if creds.mechanism == PLAIN:
        return _PlainClient(creds)
    if creds.mechanism in scram.MECHANISMS:
        return _ScramClient(creds)
    raise SaslClientError(f"SASL mechanism {creds.mechanism} is not supported by this client")


Step = tuple[int, dict[str, Any], int]


def exchange(creds: SaslClientCredentials, versions: dict[int, tuple[int, int]]) -> Generator[Step, Any, None]:
    """Yields (api key, body, version) for each request; is sent each response; returns once the
    broker accepted the credentials, raises SaslClientError when it did not."""
    handshake = versions.get(SASL_HANDSHAKE)
    authenticate = versions.get(SASL_AUTHENTICATE)
    if handshake is None or handshake[1] < HANDSHAKE_VERSION or authenticate is None:
        raise SaslClientError("the broker does not serve SaslHandshake v1 and SaslAuthenticate")
    client = _mechanism_client(creds)
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
