"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: mechanisms, credentials, the messages, both sides.

A stored credential is what Kafka keeps per user and mechanism: salt, StoredKey, ServerKey and the
iteration count, never the password; in Kafka's text form
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``. Passwords are UTF-8 encoded with
no SASLprep, as Kafka's ScramFormatter does, so a credential made here works on Kafka and back.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

# Kafka's ScramMechanism: (type id on the wire, hash) and the iterations the broker accepts.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    type_id: int  # AlterUserScramCredentials / DescribeUserScramCredentials' int8
    hash_name: str

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE: dict[int, ScramMechanism] = {m.type_id: m for m in MECHANISMS.values()}
UNKNOWN_TYPE = 0


class ScramFormatError(ValueError):
    """A SCRAM message or stored credential that does not parse."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def to_text(self) -> str:
        """Kafka's ScramCredentialUtils form, as stored in ``/config/users/<user>``."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        props: dict[str, str] = {}
        for token in text.split(","):
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise ScramFormatError("Credentials not valid")  # Kafka's words, without the secret
            props[key] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ScramFormatError("Credentials not valid")
        try:
            return cls(base64.b64decode(props["salt"], validate=True),
                       base64.b64decode(props["stored_key"], validate=True),
                       base64.b64decode(props["server_key"], validate=True), int(props["iterations"]))
        except (binascii.Error, ValueError):
            raise ScramFormatError("Credentials not valid") from None


def hi(mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC and one block of output."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def _hmac(mechanism: ScramMechanism, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, mechanism.hash_name).digest()


def _hash(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hi(mechanism, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """What AlterUserScramCredentials stores from the salt and salted password a client sent."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, _hash(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"), iterations)


def random_salt() -> bytes:
    """A salt as Kafka's tools make one: the bytes of a random 130-bit number written in base 36."""
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out.encode()


def random_nonce() -> str:
    return random_salt().decode()


def credential_from_password(mechanism: ScramMechanism, password: str,
                             iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> ScramCredential:
    salt = random_salt() if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)


# ---- usernames on the wire (RFC 5802 saslname) ----------------------------------------------------

def sasl_name(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(saslname: str) -> str:
    """The username a saslname encodes; ValueError for a lone '=' (Kafka's "Invalid username")."""
    decoded = saslname.replace("=2C", ",")
    if "=" in decoded.replace("=3D", ""):
        raise ValueError("Invalid username")
    return decoded.replace("=3D", "=")


# ---- the messages (Kafka's ScramMessages grammar) ------------------------------------------------

_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_VALUE_RE = r"[\x01-\x2B\x2D-\x7F]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE_RE})*"

_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?:m={_VALUE_RE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE_RE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+){_EXTENSIONS}")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})")
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>[\x01-\x2B\x2D-\x3C\x3E-\x7F]+))|(?:v=(?P<signature>{_BASE64})){_EXTENSIONS}")


@dataclass(frozen=True)
class ClientFirst:
    gs2_header: str
    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str


def parse_client_first(data: bytes) -> ClientFirst:
    """ScramFormatError for a message outside Kafka's grammar (only gs2 flag "n": no channel
    binding); ValueError for a saslname that does not decode."""
    text = data.decode("utf-8", "replace")
    m = _CLIENT_FIRST.fullmatch(text)
    if m is None:
        raise ScramFormatError("Invalid SCRAM client first message format")
    authzid = m.group("authzid") or ""
    extensions: dict[str, str] = {}
    for item in filter(None, m.group("extensions").split(",")):
        key, _, value = item.partition("=")
        extensions[key] = value
    return ClientFirst(m.group("gs2"), username_of(authzid) if authzid else "",
                       username_of(m.group("saslname")), m.group("nonce"), extensions, m.group("bare"))


@dataclass(frozen=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes = field(repr=False)
    without_proof: str


def parse_client_final(data: bytes) -> ClientFinal:
    m = _CLIENT_FINAL.fullmatch(data.decode("utf-8", "replace"))
    if m is None:
        raise ScramFormatError("Invalid SCRAM client final message format")
    return ClientFinal(base64.b64decode(m.group("channel")), m.group("nonce"), base64.b64decode(m.group("proof")),
                       m.group("without_proof"))


def server_first_message(nonce: str, salt: bytes, iterations: int) -> str:
    return f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"


def client_signature(mechanism: ScramMechanism, stored_key: bytes, auth_message: str) -> bytes:
    return _hmac(mechanism, stored_key, auth_message.encode("utf-8"))


def verify_client_proof(mechanism: ScramMechanism, credential: ScramCredential, auth_message: str,
                        proof: bytes) -> bool:
    """StoredKey == H(ClientSignature XOR ClientProof), compared in constant time."""
    signature = client_signature(mechanism, credential.stored_key, auth_message)
    if len(proof) != len(signature):
        return False
    return hmac.compare_digest(_hash(mechanism, _xor(signature, proof)), credential.stored_key)


def server_signature(mechanism: ScramMechanism, server_key: bytes, auth_message: str) -> bytes:
    return _hmac(mechanism, server_key, auth_message.encode("utf-8"))


# ---- the client side -----------------------------------------------------------------------------

class ScramClient:
    """One SCRAM exchange as a client (the CLI, a broker's inter-broker connections):
    ``first()``, then ``final(server_first)``, then ``verify(server_final)``."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce or random_nonce()
        self._bare = f"n={sasl_name(username)},r={self._nonce}"
        self._auth_message = ""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        m = _SERVER_FIRST.fullmatch(text)
        if m is None:
            raise ScramFormatError("Invalid SCRAM server first message format")
        nonce, iterations = m.group("nonce"), int(m.group("iterations"))
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramFormatError("Invalid server nonce: does not start with client nonce")
        if iterations < MIN_ITERATIONS:
            raise ScramFormatError(f"Requested iterations {iterations} is less than the minimum "
                                   f"{MIN_ITERATIONS} for {self.mechanism.name}")
        salt = base64.b64decode(m.group("salt"))
        self._salted = salted_password(self.mechanism, self._password, salt, iterations)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        self._auth_message = f"{self._bare},{text},{without_proof}"
        client_key = _hmac(self.mechanism, self._salted, b"Client Key")
        signature = client_signature(self.mechanism, _hash(self.mechanism, client_key), self._auth_message)
        proof = base64.b64encode(_xor(client_key, signature)).decode()
        return f"{without_proof},p={proof}".encode()

    def verify(self, server_final: bytes) -> None:
        """ScramFormatError unless the server proved it knows the credential."""
        m = _SERVER_FINAL.fullmatch(server_final.decode("utf-8", "replace"))
        if m is None:
            raise ScramFormatError("Invalid SCRAM server final message format")
        if m.group("error"):
            raise ScramFormatError(f"Sasl authentication using {self.mechanism.name} failed with error: {m.group('error')}")
        server_key = _hmac(self.mechanism, self._salted, b"Server Key")
        expected = server_signature(self.mechanism, server_key, self._auth_message)
        if not hmac.compare_digest(expected, base64.b64decode(m.group("signature") or "")):
            raise ScramFormatError("Invalid server signature in server final message")
