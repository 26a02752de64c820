"""One connection's SASL state on a SASL listener: Kafka's SaslServerAuthenticator and the checks its
SocketServer makes around it.

Until the connection has authenticated it may send, in this order, at most one ApiVersions, then a
SaslHandshake, then SaslAuthenticate requests until the mechanism is done; anything else closes it
(Kafka: "Unexpected Kafka request of type METADATA during SASL handshake."), without an answer before
the handshake and, as Kafka, after its API's error response (ILLEGAL_SASL_STATE) once the mechanism
runs. A SaslHandshake v0
(clients before KIP-152) is followed by the mechanism's tokens as bare size-prefixed frames instead.
A refused mechanism or failed login is answered (UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED
with Kafka's message) and then the connection closes.

Once authenticated, the principal is ``User:<authorization id>``. With ``connections.max.reauth.ms``
(KIP-368) the session ends that long after it began: a SaslHandshake then starts a re-authentication
(same mechanism, same principal, at most one a second), and any other request after the end closes
the connection.

The network layer calls ``admit`` for every request before it decodes it, hands SaslHandshake and
SaslAuthenticate to ``handshake`` / ``authenticate`` when ``admit`` says so, and sends the replies.
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from tieredlog.protocol.api import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE, api_name
from tieredlog.security.principal import USER_TYPE, KafkaPrincipal
from tieredlog.security.sasl.config import ListenerSasl
from tieredlog.security.sasl.mechanisms import (
    CredentialLookup,
    SaslAuthenticationError,
    SaslMechanismError,
    SaslServerMechanism,
    create_server,
)

# Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS: an attacker may not make the broker run
# the mechanism over and over on one connection
MIN_REAUTH_INTERVAL_S = 1.0


class SaslState(enum.Enum):
    INITIAL_REQUEST = "INITIAL_REQUEST"
    HANDSHAKE_OR_VERSIONS_REQUEST = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE_REQUEST = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"
    REAUTH_BAD_MECHANISM = "REAUTH_BAD_MECHANISM"


class Admit(enum.Enum):
    SERVE = "serve"  # the dispatcher answers the request as on any listener
    AUTHENTICATOR = "authenticator"  # handshake() / authenticate() answer it


class SaslClose(Exception):
    """The connection must close now, without an answer; the message is its one log line."""


class SaslIllegalState(SaslClose):
    """A request other than SaslAuthenticate while the mechanism runs: Kafka answers it with its API's
    error response carrying ILLEGAL_SASL_STATE (after connection.failed.authentication.delay.ms), then
    closes the connection."""


@dataclass(frozen=True)
class SaslReply:
    body: dict[str, Any]
    # set when the authentication failed: the reply goes out, then the connection closes; the log line
    failure: str | None = None


def kafka_api_name(api_key: int) -> str:
    """ApiKeys' enum name, as Kafka's messages print it: METADATA, API_VERSIONS."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", api_name(api_key)).upper()


class SaslServerAuthenticator:
    def __init__(self, settings: ListenerSasl, scram_lookup: CredentialLookup | None, *,
                 api_versions_max: int = 4, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._scram_lookup = scram_lookup
        self._api_versions_max = api_versions_max
        self._clock = clock
        self.state = SaslState.INITIAL_REQUEST
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self._server: SaslServerMechanism | None = None
        self._raw_tokens = False  # SaslHandshake v0: tokens without Kafka headers
        self._session_expires: float | None = None
        self._last_reauth_start: float | None = None
        self._reauth_from: tuple[str, KafkaPrincipal] | None = None  # (mechanism, principal) being renewed
        self._bad_mechanism_message = ""

    # ---- what the network layer asks -------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        """The connection has a principal (also while it re-authenticates)."""
        return self.principal is not None

    @property
    def expects_raw_token(self) -> bool:
        return self._raw_tokens and self.state is SaslState.AUTHENTICATE

    @property
    def max_receive_size(self) -> int | None:
        """Bound of a frame before authentication (``sasl.server.max.receive.size``); None after."""
        return None if self.state is SaslState.COMPLETE else self.settings.max_receive_size

    def _reauthenticating(self) -> bool:
        return self._reauth_from is not None

    def _what(self) -> str:
        return "re-authentication" if self._reauthenticating() else "authentication"

    def admit(self, api_key: int, api_version: int) -> Admit:
        """May this request be served now? SaslClose when the connection must close instead."""
        state = self.state
        if state is SaslState.COMPLETE:
            now = self._clock()
            if api_key == SASL_HANDSHAKE and self._session_expires is not None and (
                    self._last_reauth_start is None or now - self._last_reauth_start >= MIN_REAUTH_INTERVAL_S):
                assert self.mechanism is not None and self.principal is not None
                self._last_reauth_start = now
                self._reauth_from = (self.mechanism, self.principal)
                self.state = SaslState.HANDSHAKE_REQUEST
                return Admit.AUTHENTICATOR
            if self._session_expires is not None and now >= self._session_expires:
                raise SaslClose("SASL session expired (connections.max.reauth.ms) without re-authentication")
            return Admit.SERVE  # SaslHandshake / SaslAuthenticate here: the dispatcher's ILLEGAL_SASL_STATE
        if state in (SaslState.INITIAL_REQUEST, SaslState.HANDSHAKE_OR_VERSIONS_REQUEST):
            if api_key == API_VERSIONS:
                # after a version it can answer, the next request must be the handshake; after an
                # unknown version the client may ask again at another (Kafka's UNSUPPORTED_VERSION path)
                self.state = (SaslState.HANDSHAKE_REQUEST if api_version <= self._api_versions_max
                              else SaslState.HANDSHAKE_OR_VERSIONS_REQUEST)
                return Admit.SERVE
            if api_key == SASL_HANDSHAKE:
                return Admit.AUTHENTICATOR
            if state is SaslState.INITIAL_REQUEST:
                raise SaslClose("Invalid request, potential reasons: kafka client configured with the wrong security "
                                f"protocol, it does not support KIP-43 or it is not a kafka client. (Unexpected Kafka "
                                f"request of type {kafka_api_name(api_key)} during SASL handshake.)")
            raise SaslClose(f"Unexpected Kafka request of type {kafka_api_name(api_key)} during SASL handshake.")
        if state is SaslState.HANDSHAKE_REQUEST:
            if api_key == SASL_HANDSHAKE:
                return Admit.AUTHENTICATOR
            if api_key == API_VERSIONS:
                raise SaslClose(f"Unexpected ApiVersions request received during SASL authentication state {state.value}")
            raise SaslClose(f"Unexpected Kafka request of type {kafka_api_name(api_key)} during SASL handshake.")
        if state is SaslState.AUTHENTICATE:
            if api_key == SASL_AUTHENTICATE and not self._raw_tokens:
                return Admit.AUTHENTICATOR
            self.state = SaslState.FAILED
            raise SaslIllegalState(f"Unexpected Kafka request of type {kafka_api_name(api_key)} during SASL "
                                   f"{self._what()}.")
        if state is SaslState.REAUTH_BAD_MECHANISM:
            self.state = SaslState.FAILED
            raise SaslClose(self._bad_mechanism_message)
        raise SaslClose(f"request after a failed SASL {self._what()}")

    # ---- SaslHandshake / SaslAuthenticate -------------------------------------------------------

    def handshake(self, api_version: int, mechanism: str) -> SaslReply:
        enabled = list(self.settings.mechanisms)
        if mechanism not in enabled:
            self.state = SaslState.FAILED
            return SaslReply({"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled},
                             failure=f"Unsupported SASL mechanism {mechanism}")
        reply = SaslReply({"error_code": ErrorCode.none, "mechanisms": enabled})
        if self._reauth_from is not None and mechanism != self._reauth_from[0]:
            # Kafka answers the handshake, then fails the next request (its REAUTH_BAD_MECHANISM)
            self._bad_mechanism_message = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                           f"re-authentication of mechanism '{self._reauth_from[0]}'")
            self.state = SaslState.REAUTH_BAD_MECHANISM
            return reply
        self._server = create_server(mechanism, self.settings.plain_check, self._scram_lookup)
        self.mechanism = mechanism
        self._raw_tokens = api_version == 0
        self.state = SaslState.AUTHENTICATE
        return reply

    def authenticate(self, api_version: int, auth_bytes: bytes) -> SaslReply:
        try:
            token = self._evaluate(auth_bytes)
        except SaslAuthenticationError as exc:
            return self._failed(str(exc), str(exc))
        except SaslMechanismError as exc:
            # the client learns nothing of why (a user's existence, say); the log does
            return self._failed(f"Authentication failed during {self._what()} due to invalid credentials with SASL "
                                f"mechanism {self.mechanism}", str(exc))
        lifetime_ms = self._complete() if self._server is not None and self._server.complete else 0
        if isinstance(lifetime_ms, str):
            return self._failed(lifetime_ms, lifetime_ms)
        return SaslReply({"error_code": ErrorCode.none, "error_message": None, "auth_bytes": token,
                          "session_lifetime": lifetime_ms})

    def raw_token(self, token: bytes) -> bytes:
        """A v0 handshake's bare token: the mechanism's answer (sent size-prefixed). SaslClose when the
        login failed: Kafka closes such a connection without a word."""
        try:
            answer = self._evaluate(token)
        except (SaslAuthenticationError, SaslMechanismError) as exc:
            self.state = SaslState.FAILED
            raise SaslClose(f"Failed authentication with SASL mechanism {self.mechanism}: {exc}") from None
        if self._server is not None and self._server.complete:
            failure = self._complete()
            if isinstance(failure, str):
                self.state = SaslState.FAILED
                raise SaslClose(failure)
        return answer

    def _evaluate(self, token: bytes) -> bytes:
        if self._server is None or self.state is not SaslState.AUTHENTICATE:
            raise SaslMechanismError(f"Unexpected SASL token in state {self.state.value}")
        return self._server.evaluate(token)

    def _complete(self) -> int | str:
        """The mechanism is done: the session begins. Its lifetime in ms (0: unbounded), or the failure
        message of a re-authentication that changed principals."""
        assert self._server is not None and self.mechanism is not None
        principal = KafkaPrincipal(USER_TYPE, self._server.authorization_id)
        if self._reauth_from is not None and principal != self._reauth_from[1]:
            old = self._reauth_from[1]
            return (f"Cannot change principals during re-authentication from {old.principal_type}.{old.name}: "
                    f"{principal.principal_type}.{principal.name}")
        lifetime_ms = self.settings.reauth_ms.get(self.mechanism, 0)
        self._session_expires = self._clock() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        self.principal = principal
        self.state = SaslState.COMPLETE
        self._server = None
        self._raw_tokens = False
        self._reauth_from = None
        return lifetime_ms

    def _failed(self, message: str, log_line: str) -> SaslReply:
        self.state = SaslState.FAILED
        self._server = None
        return SaslReply({"error_code": ErrorCode.sasl_authentication_failed, "error_message": message,
                          "auth_bytes": b"", "session_lifetime": 0},
                         failure=f"Failed {self._what()} with SASL mechanism {self.mechanism}: {log_line}")
