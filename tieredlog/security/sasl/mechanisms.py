"""The server side of each SASL mechanism: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802).

A mechanism takes the client's tokens one at a time and returns its own, as javax.security.sasl's
SaslServer does in Kafka. Two kinds of failure, as Kafka has them:
- ``SaslAuthenticationError``: its message is sent to the client (Kafka's SaslAuthenticationException),
  e.g. "Authentication failed: Invalid username or password".
- ``SaslMechanismError``: logged; the client only learns "Authentication failed during authentication
  due to invalid credentials with SASL mechanism X" (Kafka's SaslException), so nothing about a user's
  existence leaks.
No message here ever holds a password or a token.
"""

from __future__ import annotations

import base64
import hmac
import logging
from typing import Callable, Protocol

from tieredlog.security import scram
from tieredlog.security.scram import MIN_ITERATIONS, ScramCredential, ScramMechanism

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
SCRAM_SHA_256 = scram.SCRAM_SHA_256.name
SCRAM_SHA_512 = scram.SCRAM_SHA_512.name
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

# ScramLoginModule.TOKEN_AUTH_CONFIG: the one SCRAM extension Kafka knows (delegation tokens)
TOKEN_AUTH_EXTENSION = "tokenauth"


class SaslAuthenticationError(Exception):
    """Authentication failed; the message is for the client."""


class SaslMechanismError(Exception):
    """Authentication failed; the message is for the broker's log only."""


class SaslServerMechanism(Protocol):
    name: str

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...

    def evaluate(self, token: bytes) -> bytes: ...


PasswordCheck = Callable[[str, str], bool]
"""(username, password) -> whether they match the configured user (PLAIN)."""

CredentialLookup = Callable[[str, str], "ScramCredential | None"]
"""(username, mechanism name) -> the user's stored SCRAM credential, or None (SCRAM)."""


class PlainServer:
    name = PLAIN

    def __init__(self, check: PasswordCheck) -> None:
        self._check = check
        self._authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._authorization_id is not None

    @property
    def authorization_id(self) -> str:
        if self._authorization_id is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id

    def evaluate(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        # [authzid] NUL authcid NUL passwd; missing parts read as empty, as Kafka's split does
        parts = (text.split("\0", 3) + ["", ""])[:3]
        authzid, username, password = parts
        if not username:
            raise SaslMechanismError("Authentication failed: username not specified")
        if not password:
            raise SaslMechanismError("Authentication failed: password not specified")
        try:
            ok = self._check(username, password)
        except Exception as exc:  # noqa: BLE001 - Kafka: the callback's failure is an authentication failure
            raise SaslAuthenticationError("Authentication failed: credentials for user could not be verified") from exc
        if not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._authorization_id = username
        return b""


def plain_users_check(users: dict[str, str]) -> PasswordCheck:
    """The JAAS ``user_<name>="<password>"`` options of a PlainLoginModule, compared in constant time."""

    def check(username: str, password: str) -> bool:
        expected = users.get(username)
        if expected is None:
            # the same work for an unknown user, so the answer's timing does not tell
            hmac.compare_digest(password.encode(), password.encode())
            return False
        return hmac.compare_digest(expected.encode("utf-8"), password.encode("utf-8"))

    return check


class ScramServer:
    """Kafka's ScramSaslServer: client-first, server-first, client-final, server-final."""

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup) -> None:
        self.name = mechanism.name
        self.mechanism = mechanism
        self._lookup = lookup
        self._state = "first"
        self._client_first: scram.ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        if self._authorization_id is None or not self.complete:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "first":
                return self._first(token)
            if self._state == "final":
                return self._final(token)
            raise SaslMechanismError(f"Unexpected challenge in Sasl server state {self._state}")
        except (SaslAuthenticationError, SaslMechanismError):
            self._credential = None
            self._state = "failed"
            raise

    def _first(self, token: bytes) -> bytes:
        try:
            first = scram.parse_client_first(token)
        except scram.ScramFormatError as exc:
            raise SaslMechanismError(str(exc)) from None
        except ValueError:
            raise SaslMechanismError("Authentication failed: Credentials could not be obtained") from None
        unknown = set(first.extensions) - {TOKEN_AUTH_EXTENSION}
        if unknown:
            log.debug("Unsupported extensions will be ignored, supported %s, provided %s",
                      [TOKEN_AUTH_EXTENSION], sorted(first.extensions))
        if first.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true":
            # delegation tokens are not issued here, so no token id can be valid
            raise SaslMechanismError(f"Token Authentication failed: Invalid tokenId : {first.username}")
        try:
            credential = self._lookup(first.username, self.mechanism.name)
        except Exception as exc:  # noqa: BLE001 - Kafka: any failure to read the credential fails the login
            raise SaslMechanismError("Authentication failed: Credentials could not be obtained") from exc
        if credential is None:
            raise SaslMechanismError("Authentication failed: Invalid user credentials")
        if first.authzid and first.authzid != first.username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslMechanismError(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} "
                                     f"for {self.mechanism.name}")
        self._client_first = first
        self._credential = credential
        self._authorization_id = first.username
        self._nonce = first.nonce + scram.random_nonce()
        self._server_first = scram.server_first_message(self._nonce, credential.salt, credential.iterations)
        self._state = "final"
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        first, credential = self._client_first, self._credential
        assert first is not None and credential is not None
        try:
            final = scram.parse_client_final(token)
        except scram.ScramFormatError as exc:
            raise SaslMechanismError(str(exc)) from None
        if final.nonce != self._nonce:
            raise SaslMechanismError("Invalid client nonce in the final client message.")
        if final.channel_binding != first.gs2_header.encode():
            # no channel binding is offered, so c= must repeat the gs2 header (RFC 5802 5.1)
            raise SaslMechanismError("Invalid channel binding in the final client message.")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}"
        if not scram.verify_client_proof(self.mechanism, credential, auth_message, final.proof):
            raise SaslMechanismError("Invalid client credentials")
        signature = scram.server_signature(self.mechanism, credential.server_key, auth_message)
        self._credential = None
        self._state = "complete"
        return b"v=" + base64.b64encode(signature)


def create_server(mechanism: str, plain_check: PasswordCheck | None, scram_lookup: CredentialLookup | None
                  ) -> SaslServerMechanism:
    if mechanism == PLAIN:
        if plain_check is None:
            raise SaslMechanismError("no PLAIN users are configured")
        return PlainServer(plain_check)
    scram_mechanism = scram.MECHANISMS.get(mechanism)
    if scram_mechanism is None or scram_lookup is None:
        raise SaslMechanismError(f"SASL mechanism {mechanism} is not available")
    return ScramServer(scram_mechanism, scram_lookup)
