"""The client side of the SASL mechanisms: the credentials, and the tokens PLAIN and SCRAM send in
answer to the broker's challenges. No I/O and no protocol: ``tieredlog.clients.sasl`` carries the
tokens in SaslHandshake / SaslAuthenticate requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tieredlog.security import scram
from tieredlog.security.sasl.mechanisms import PLAIN


class SaslClientError(ConnectionError):
    """The broker refused the mechanism or the credentials (Kafka's SaslAuthenticationException /
    UnsupportedSaslMechanismException); a ConnectionError, so callers that retry a lost connection
    retry this too."""


@dataclass(frozen=True)
class SaslClientCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)


class PlainClient:
    def __init__(self, creds: SaslClientCredentials) -> None:
        self._creds = creds
        self._sent = False

    def initial(self) -> bytes:
        self._sent = True
        return b"\0" + self._creds.username.encode() + b"\0" + self._creds.password.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        return None


class ScramClient:
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


def mechanism_client(creds: SaslClientCredentials) -> PlainClient | ScramClient:
    """The client of ``creds.mechanism``: ``initial()`` is the first token, ``respond(challenge)`` the
    next one (None: done); SaslClientError when the mechanism is unknown or the server's answer is wrong."""
    if creds.mechanism == PLAIN:
        return PlainClient(creds)
    if creds.mechanism in scram.MECHANISMS:
        return ScramClient(creds)
    raise SaslClientError(f"SASL mechanism {creds.mechanism} is not supported by this client")
