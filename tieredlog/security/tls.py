"""TLS contexts from one listener's ssl.* settings (Kafka's names), for the listeners and for the
broker's own connections to other brokers.

The settings come as ``SslSettings``: tieredlog.security.tls_config reads them from the broker configs
(``listener.name.<listener>.<config>`` when set, else the plain config, Kafka's precedence) and says which
listeners get a server context and which client context the broker's own connections use. Nothing here
reads the broker configs.

Key and trust stores are PEM, in a file (``ssl.keystore.location``: the private key and its certificate
chain in one file; ``ssl.truststore.location``) or inline (``ssl.keystore.key`` with
``ssl.keystore.certificate.chain``; ``ssl.truststore.certificates``), with Kafka's rules on which may
be combined. A JKS or PKCS12 store is refused at start with one line saying to convert it. Nothing here
puts a key, a password or an inline PEM value in a message: an error names the config, never its value.

Differences from Kafka (the JVM's TLS against OpenSSL's): ``ssl.cipher.suites`` restricts TLS 1.2 and
older (OpenSSL's TLS 1.3 suites stay as they are, and a list naming no TLS 1.2 suite turns TLS 1.2
off); ``ssl.enabled.protocols`` is applied as the range from its lowest to its highest version. A key
store OpenSSL's security level refuses but the JVM takes (a private CA's SHA-1 signature, a 1024-bit RSA
key) lowers that level for its listener alone, with a warning (cert_strength.py).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from tieredlog.security import cert_strength
from tieredlog.security.cert_strength import SECURITY_LEVEL_REASONS
from tieredlog.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from tieredlog.security.ssl_principal import SslPrincipalMapper, subject_dn

log = logging.getLogger(__name__)

TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
PEM = "PEM"

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# ssl.protocol: the highest version the broker's own connections offer (Kafka's SSLContext protocol)
_PROTOCOL_CAPS = {"TLS": ssl.TLSVersion.TLSv1_3, **_VERSIONS}
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                           "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
# a JVM pseudo-suite Kafka configs list beside the real ones; it means nothing to OpenSSL
_SIGNALLING_SUITES = frozenset({"TLS_EMPTY_RENEGOTIATION_INFO_SCSV"})

# (listener, key store, what is weak) already warned about: a key store reloaded unchanged says it once
_WARNED: set[tuple[str, str, tuple[str, ...]]] = set()

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+?)-----(.*?)-----END \1-----", re.S)


class TlsConfigError(ValueError):
    """A TLS setting or store that cannot be used, in one line naming the config, never its value."""


class SslSettings(Protocol):
    """One listener's ssl.* configs, listener overrides applied (tls_config.SslConfig)."""

    @property
    def listener(self) -> str: ...

    @property
    def security_protocol(self) -> str: ...

    def get(self, name: str) -> Any:
        """The value, None when unset (a secret's too: only whether it is set is read this way)."""

    def secret(self, name: str) -> str | None:
        """A secret's text (a key, a password, an inline PEM value), None when unset."""

    def key(self, name: str) -> str:
        """The config the value came from, for messages: ``listener.name.<l>.<name>`` or ``name``."""


def _text(sc: SslSettings, name: str) -> str:
    value = sc.get(name)
    return "" if value is None else str(value).strip()


def client_auth(sc: SslSettings) -> str:
    # KIP-684: a SASL_SSL listener asks for client certificates only when its own
    # listener.name.<listener>.ssl.client.auth says so
    if sc.security_protocol == "SASL_SSL" and sc.key("ssl.client.auth") == "ssl.client.auth":
        return "none"
    return _text(sc, "ssl.client.auth") or "none"


@dataclass(frozen=True)
class ListenerTls:
    """The TLS side of one SSL or SASL_SSL listener."""

    listener: str
    security_protocol: str
    context: ssl.SSLContext
    mapper: SslPrincipalMapper
    client_auth: str
    # the key store's own certificate, DER: a key store changed live is compared with it (ensure_compatible)
    leaf: bytes | None = None
    # (path, modification time, size) of the store files read: a file rewritten in place is reloaded
    # by an AlterConfigs naming the same path again (Kafka's reload of updated files)
    stamp: tuple[tuple[str, int, int], ...] = ()
    has_truststore: bool = False

    def principal(self, ssl_object: ssl.SSLObject | None) -> KafkaPrincipal:
        """The connection's principal from its client certificate (``User:ANONYMOUS`` without one).
        NoMatchingRule when ``ssl.principal.mapping.rules`` maps none: the caller closes it."""
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return ANONYMOUS
        return KafkaPrincipal(USER_TYPE, self.mapper.name(subject_dn(der)))


def build_listener_tls(sc: SslSettings) -> ListenerTls:
    """One listener's TLS side (blocking: it reads the stores). TlsConfigError when a store cannot be used."""
    keystore = _keystore(sc)
    return ListenerTls(sc.listener, sc.security_protocol, server_context(sc),
                       SslPrincipalMapper(sc.get("ssl.principal.mapping.rules")), client_auth(sc),
                       _leaf(keystore) if keystore is not None else None, store_stamp(sc),
                       _truststore(sc) is not None)


def store_stamp(sc: SslSettings) -> tuple[tuple[str, int, int], ...]:
    """(path, modification time, size) of the listener's key and trust store files (blocking)."""
    out = []
    for name in ("ssl.keystore.location", "ssl.truststore.location"):
        path = sc.get(name)
        if path:
            try:
                st = os.stat(str(path).strip())
            except OSError:
                continue
            out.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(out)


def _leaf(store: _Store) -> bytes | None:
    certs = [block for label, _, block in _blocks(store.pem, store.source) if label == "CERTIFICATE"]
    if not certs:
        return None
    body = certs[0].split("-----")[2]
    return base64.b64decode("".join(body.split()))


def ensure_compatible(old: ListenerTls, new: ListenerTls, *, allow_dn_changes: bool, allow_san_changes: bool) -> None:
    """Kafka's SslFactory checks of stores changed live: a key store or a trust store is neither added
    nor removed, and the key store's certificate keeps the subject and every subject alternative name of
    the one in use, unless ssl.allow.dn.changes / ssl.allow.san.changes. TlsConfigError with Kafka's
    message (the alias of a PEM key store is ``kafka``)."""
    if old.leaf is None and new.leaf is not None:
        raise TlsConfigError("Cannot add SSL keystore to an existing listener for which no keystore was configured.")
    if old.leaf is not None and new.leaf is None:
        raise TlsConfigError("Cannot remove the SSL keystore from an existing listener for which a "
                             "keystore was configured.")
    if old.leaf is not None and new.leaf is not None:
        _same_names(old.leaf, new.leaf, allow_dn_changes, allow_san_changes)
    if not old.has_truststore and new.has_truststore:
        raise TlsConfigError("Cannot add SSL truststore to an existing listener for which no truststore was "
                             "configured.")
    if old.has_truststore and not new.has_truststore:
        raise TlsConfigError("Cannot remove the SSL truststore from an existing listener for which a truststore "
                             "was configured.")


def _same_names(old: bytes, new: bytes, allow_dn_changes: bool, allow_san_changes: bool) -> None:
    from cryptography import x509

    def names(der: bytes) -> tuple[str, set[str]]:
        cert = x509.load_der_x509_certificate(der)
        try:
            ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            sans = {f"{type(n).__name__}:{n.value}" for n in ext}
        except x509.ExtensionNotFound:
            sans = set()
        return cert.subject.rfc4514_string(), sans

    old_dn, old_san = names(old)
    new_dn, new_san = names(new)
    if not allow_dn_changes and old_dn != new_dn:
        raise TlsConfigError(f"Keystore DistinguishedName does not match:  existing={{alias=kafka, DN={old_dn}}}, "
                             f"new={{alias=kafka, DN={new_dn}}}")
    if not allow_san_changes and not old_san <= new_san:
        raise TlsConfigError(f"Keystore SubjectAltNames do not match:  existing={{alias=kafka, "
                             f"SAN={sorted(old_san)}}}, new={{alias=kafka, SAN={sorted(new_san)}}}")


def server_context(sc: SslSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(ctx, sc, client=False)
    _set_cipher_suites(ctx, sc)
    keystore = _keystore(sc)
    if keystore is None:
        raise TlsConfigError(
            f"listener {sc.listener} ({sc.security_protocol}) has no key store: set "
            f"{_prefixed(sc, 'ssl.keystore.location')} (a PEM file with the private key and its certificate chain) "
            f"or {_prefixed(sc, 'ssl.keystore.key')} and {_prefixed(sc, 'ssl.keystore.certificate.chain')}")
    _load_keystore(ctx, sc, keystore)
    trust = _truststore(sc)
    if trust is not None:
        _load_truststore(ctx, trust)
    auth = client_auth(sc)
    if auth != "none":
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
        if trust is None:
            # as the JVM falls back on its cacerts
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    log.info("listener %s (%s): TLS %s to %s, client authentication %s, key store %s%s",
             sc.listener, sc.security_protocol, ctx.minimum_version.name, ctx.maximum_version.name, auth,
             keystore.source, f", trust store {trust.source}" if trust is not None else "")
    return ctx


def client_context(sc: SslSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(ctx, sc, client=True)
    _set_cipher_suites(ctx, sc)
    algorithm = _text(sc, "ssl.endpoint.identification.algorithm")
    if algorithm.lower() == "https":
        ctx.check_hostname = True
    elif not algorithm:
        ctx.check_hostname = False
    else:
        raise TlsConfigError(f"Invalid value {algorithm} for configuration "
                             f"{sc.key('ssl.endpoint.identification.algorithm')}: https or empty")
    ctx.verify_mode = ssl.CERT_REQUIRED
    trust = _truststore(sc)
    if trust is not None:
        _load_truststore(ctx, trust)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    keystore = _keystore(sc)
    if keystore is not None:
        # the client certificate, sent when the other broker asks for one (ssl.client.auth)
        _load_keystore(ctx, sc, keystore)
    return ctx


# ---- versions and cipher suites ------------------------------------------------------------------------

def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _set_versions(ctx: ssl.SSLContext, sc: SslSettings, *, client: bool) -> None:
    raw = _text(sc, "ssl.enabled.protocols")
    versions = []
    for name in _names(raw) or ["TLSv1.2", "TLSv1.3"]:
        version = _VERSIONS.get(name)
        if version is None:
            raise TlsConfigError(f"Invalid value {raw} for configuration {sc.key('ssl.enabled.protocols')}: "
                                 f"{name} is not one of {', '.join(_VERSIONS)}")
        versions.append(version)
    low, high = min(versions), max(versions)
    protocol = _text(sc, "ssl.protocol") or "TLSv1.3"
    cap = _PROTOCOL_CAPS.get(protocol)
    if cap is None:
        raise TlsConfigError(f"Invalid value {protocol} for configuration {sc.key('ssl.protocol')}: "
                             f"one of {', '.join(_PROTOCOL_CAPS)}")
    if client:
        # Kafka's clients offer no version above ssl.protocol, whatever ssl.enabled.protocols lists
        high = min(high, cap)
        if low > high:
            raise TlsConfigError(f"{sc.key('ssl.enabled.protocols')}={raw} enables no version up to "
                                 f"{sc.key('ssl.protocol')}={protocol}")
    ctx.minimum_version = low
    ctx.maximum_version = high


def iana_cipher_name(cipher: Mapping[str, Any]) -> str | None:
    """The IANA (and Java) name of one of OpenSSL's TLS 1.2 cipher suites, from what
    ``SSLContext.get_ciphers()`` says of it; None for the kinds no Kafka config names (PSK, anonymous)."""
    kx = {"kx-ecdhe": "ECDHE", "kx-dhe": "DHE", "kx-rsa": "RSA"}.get(cipher.get("kea") or "")
    auth = {"auth-rsa": "RSA", "auth-ecdsa": "ECDSA", "auth-dss": "DSS"}.get(cipher.get("auth") or "")
    symmetric = cipher.get("symmetric") or ""
    if kx is None or auth is None or not symmetric or (kx == "RSA" and auth != "RSA"):
        return None
    name = cipher["name"]
    suite = symmetric.upper().replace("-", "_")
    if suite.endswith("_CCM"):
        mac = "8" if name.endswith("CCM8") else ""
    elif cipher.get("aead"):
        mac = "SHA384" if name.endswith("SHA384") else "SHA256"
    else:
        mac = {"sha1": "SHA", "sha256": "SHA256", "sha384": "SHA384"}.get(cipher.get("digest") or "", "")
        if not mac:
            return None
    exchange = "RSA" if kx == "RSA" else f"{kx}_{auth}"
    return f"TLS_{exchange}_WITH_{suite}" + (f"_{mac}" if mac else "")


def _openssl_names() -> dict[str, str]:
    """IANA name -> OpenSSL name of every TLS 1.2 suite this OpenSSL has."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    out = {}
    for cipher in probe.get_ciphers():
        if cipher.get("protocol") == "TLSv1.3":
            continue
        iana = iana_cipher_name(cipher)
        if iana is not None:
            out[iana] = cipher["name"]
    return out


def _set_cipher_suites(ctx: ssl.SSLContext, sc: SslSettings) -> None:
    raw = _text(sc, "ssl.cipher.suites")
    names = _names(raw)
    if not names:
        return
    by_iana = _openssl_names()
    known = set(by_iana.values())
    chosen: list[str] = []
    for name in names:
        if name in _TLS13_SUITES or name in _SIGNALLING_SUITES:
            continue
        openssl_name = by_iana.get(name) or (name if name in known else None)
        if openssl_name is None:
            raise TlsConfigError(f"Invalid value {raw} for configuration {sc.key('ssl.cipher.suites')}: "
                                 f"no cipher suite {name} in {ssl.OPENSSL_VERSION}")
        chosen.append(openssl_name)
    if chosen:
        ctx.set_ciphers(":".join(chosen))
    else:
        # only TLS 1.3 suites listed: TLS 1.2 has none left, as in the JVM
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        if ctx.maximum_version < ssl.TLSVersion.TLSv1_3:
            raise TlsConfigError(f"{sc.key('ssl.cipher.suites')} lists only TLS 1.3 suites but "
                                 f"{sc.key('ssl.enabled.protocols')} does not enable TLSv1.3")


# ---- key and trust stores ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Store:
    pem: str  # normalised PEM: the private key first, then the certificates
    source: str  # which configs it came from, for messages: never the value of one
    encrypted: bool = False


def _prefixed(sc: SslSettings, name: str) -> str:
    """A config as it would be set for this listener alone (in messages telling what to set)."""
    return sc.key(name) if sc.key(name) != name else name


def _read(sc: SslSettings, name: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {sc.key(name)} {path}: {exc.strerror or exc}") from None


def _not_pem(sc: SslSettings, store: str, location: str) -> TlsConfigError:
    kind = _text(sc, f"ssl.{store}.type")
    return TlsConfigError(
        f"{sc.key(f'ssl.{store}.type')}={kind} is not supported ({sc.key(f'ssl.{store}.location')} {location}): "
        f"tieredlog reads PEM {store}s only; convert it to PEM"
        + (" (the private key and its certificate chain in one file)" if store == "keystore" else "")
        + f" and set {_prefixed(sc, f'ssl.{store}.type')}=PEM")


def _blocks(text: str, source: str) -> list[tuple[str, str, str]]:
    """(label, headers, normalised block) of every PEM block in ``text``. A block may have been written
    on one line (as a property value often is): its base64 is re-wrapped."""
    out = []
    for m in _PEM_BLOCK.finditer(text):
        label = m.group(1).strip()
        lines = m.group(2).strip().splitlines()
        headers = [l.strip() for l in lines if ":" in l]
        data = "".join("".join(l.split()) for l in lines if ":" not in l)
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise TlsConfigError(f"{source}: its {label} is not valid PEM") from None
        body = "\n".join(data[i : i + 64] for i in range(0, len(data), 64))
        head = "\n".join(headers) + "\n\n" if headers else ""
        out.append((label, "\n".join(headers), f"-----BEGIN {label}-----\n{head}{body}\n-----END {label}-----\n"))
    return out


def _key_and_chain(key_text: str, key_source: str, chain_text: str, chain_source: str) -> _Store:
    keys = [(label, headers, block) for label, headers, block in _blocks(key_text, key_source)
            if label.endswith("PRIVATE KEY")]
    if len(keys) != 1:
        raise TlsConfigError(f"{key_source}: expected one private key, found {len(keys)}")
    certs = [block for label, _, block in _blocks(chain_text, chain_source) if label == "CERTIFICATE"]
    if not certs:
        raise TlsConfigError(f"{chain_source}: no certificate found")
    label, headers, block = keys[0]
    encrypted = label == "ENCRYPTED PRIVATE KEY" or "ENCRYPTED" in headers
    source = key_source if key_source == chain_source else f"{key_source} and {chain_source}"
    return _Store(block + "".join(certs), source, encrypted)


def _keystore(sc: SslSettings) -> _Store | None:
    """The key store's PEM, Kafka's rules on what may be set together applied."""
    kind = _text(sc, "ssl.keystore.type") or "JKS"
    location = _text(sc, "ssl.keystore.location")
    password = sc.get("ssl.keystore.password")
    key = sc.secret("ssl.keystore.key")
    chain = sc.secret("ssl.keystore.certificate.chain")
    if key is not None:
        if kind.upper() != PEM:
            raise TlsConfigError(f"SSL private key can be specified only for PEM, but key store type is {kind} "
                                 f"({sc.key('ssl.keystore.type')}).")
        if chain is None:
            raise TlsConfigError(f"SSL private key is specified ({sc.key('ssl.keystore.key')}), but certificate "
                                 f"chain is not specified ({_prefixed(sc, 'ssl.keystore.certificate.chain')}).")
        if location:
            raise TlsConfigError("Both SSL key store location and separate private key are specified "
                                 f"({sc.key('ssl.keystore.location')}, {sc.key('ssl.keystore.key')}).")
        if password is not None:
            raise TlsConfigError("SSL key store password cannot be specified with PEM format, only key password "
                                 f"may be specified ({sc.key('ssl.keystore.password')}).")
        return _key_and_chain(key, sc.key("ssl.keystore.key"), chain, sc.key("ssl.keystore.certificate.chain"))
    if chain is not None:
        raise TlsConfigError(f"SSL certificate chain is specified ({sc.key('ssl.keystore.certificate.chain')}), "
                             "but private key is not specified.")
    if not location:
        if password is not None:
            raise TlsConfigError("SSL key store is not specified, but key store password is specified "
                                 f"({sc.key('ssl.keystore.password')}).")
        return None
    if kind.upper() != PEM:
        raise _not_pem(sc, "keystore", location)
    if password is not None:
        raise TlsConfigError("SSL key store password cannot be specified with PEM format, only key password "
                             f"may be specified ({sc.key('ssl.keystore.password')}).")
    source = f"{sc.key('ssl.keystore.location')} {location}"
    text = _read(sc, "ssl.keystore.location", location)
    return _key_and_chain(text, source, text, source)


def _truststore(sc: SslSettings) -> _Store | None:
    kind = _text(sc, "ssl.truststore.type") or "JKS"
    location = _text(sc, "ssl.truststore.location")
    password = sc.get("ssl.truststore.password")
    certificates = sc.secret("ssl.truststore.certificates")
    if certificates is not None:
        if kind.upper() != PEM:
            raise TlsConfigError(f"SSL trust store certs can be specified only for PEM, but trust store type is "
                                 f"{kind} ({sc.key('ssl.truststore.type')}).")
        if location:
            raise TlsConfigError("Both SSL trust store location and separate trust certificates are specified "
                                 f"({sc.key('ssl.truststore.location')}, {sc.key('ssl.truststore.certificates')}).")
        if password is not None:
            raise TlsConfigError("SSL trust store password cannot be specified for PEM format "
                                 f"({sc.key('ssl.truststore.password')}).")
        text, source = certificates, sc.key("ssl.truststore.certificates")
    elif location:
        if kind.upper() != PEM:
            raise _not_pem(sc, "truststore", location)
        if password is not None:
            raise TlsConfigError("SSL trust store password cannot be specified for PEM format "
                                 f"({sc.key('ssl.truststore.password')}).")
        source = f"{sc.key('ssl.truststore.location')} {location}"
        text = _read(sc, "ssl.truststore.location", location)
    else:
        if password is not None:
            raise TlsConfigError("SSL trust store is not specified, but trust store password is specified "
                                 f"({sc.key('ssl.truststore.password')}).")
        return None
    certs = [block for label, _, block in _blocks(text, source) if label == "CERTIFICATE"]
    if not certs:
        raise TlsConfigError(f"{source}: at least one certificate expected, but none found")
    return _Store("".join(certs), source)


def _load_truststore(ctx: ssl.SSLContext, store: _Store) -> None:
    try:
        ctx.load_verify_locations(cadata=store.pem)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"{store.source}: a certificate cannot be read ({exc.reason or exc})") from None


def _load_keystore(ctx: ssl.SSLContext, sc: SslSettings, store: _Store) -> None:
    key_password = sc.secret("ssl.key.password")
    if store.encrypted and key_password is None:
        raise TlsConfigError(f"the private key of {store.source} is encrypted: set {_prefixed(sc, 'ssl.key.password')}")
    if not store.encrypted and key_password is not None:
        # as Kafka, which reads a key given a password as an encrypted PKCS#8 key
        raise TlsConfigError(f"{sc.key('ssl.key.password')} is set but the private key of {store.source} "
                             "is not encrypted")

    def password() -> str:
        # a callable, so OpenSSL never prompts on the terminal for a key it cannot decrypt
        return key_password or ""

    def load(path: str) -> None:
        ctx.load_cert_chain(path, password=password)

    try:
        _with_private_file(store.pem, load)
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc)
        if reason in SECURITY_LEVEL_REASONS and _load_at_lower_level(ctx, sc, store, load, reason):
            return
        if "MISMATCH" in reason.upper():
            raise TlsConfigError(f"{store.source}: the private key does not match the certificate") from None
        if store.encrypted:
            raise TlsConfigError(f"{store.source}: the private key cannot be decrypted with "
                                 f"{sc.key('ssl.key.password')} ({reason})") from None
        raise TlsConfigError(f"{store.source}: the private key or certificate cannot be used ({reason})") from None


def _load_at_lower_level(ctx: ssl.SSLContext, sc: SslSettings, store: _Store, load: Callable[[str], None],
                         reason: str) -> bool:
    """A key store under OpenSSL's security level: refused in one line when Kafka's JVM refuses it too,
    else loaded at the highest level that takes it, for this context alone. False: nothing weak was
    found, the caller reports OpenSSL's own reason."""
    certs = [block for label, _, block in _blocks(store.pem, store.source) if label == "CERTIFICATE"]
    verdict = cert_strength.judge(certs)
    if verdict.refused:
        raise TlsConfigError(f"{store.source}: the certificate {'; '.join(verdict.refused)}, which Kafka's JVM "
                             f"refuses too (jdk.certpath.disabledAlgorithms) ({reason})")
    if not verdict.weak:
        return False
    # TLS 1.2 suites as chosen so far; the level rides on the cipher string (TLS 1.3 suites are apart)
    suites = [c["name"] for c in ctx.get_ciphers() if c.get("protocol") != "TLSv1.3"] or ["DEFAULT"]
    for level in (1, 0):
        ctx.set_ciphers(":".join(suites) + f":@SECLEVEL={level}")
        try:
            _with_private_file(store.pem, load)
        except ssl.SSLError as exc:
            if str(exc.reason or exc) in SECURITY_LEVEL_REASONS:
                continue
            raise
        warning = (sc.listener, store.source, tuple(verdict.weak))
        if warning not in _WARNED:
            _WARNED.add(warning)
            log.warning("listener %s: %s: the certificate %s, which OpenSSL's default security level refuses and "
                        "Kafka's JVM accepts: this listener's TLS runs at OpenSSL security level %d "
                        "(@SECLEVEL=%d), the other listeners keep the default", sc.listener, store.source,
                        "; ".join(verdict.weak), level, level)
        return True
    return False


def _with_private_file(text: str, use: Callable[[str], None]) -> None:
    """Call ``use`` with a path whose content is ``text`` (OpenSSL reads key stores by path): an
    anonymous memory file where the OS has one, else a file readable by this user alone, removed at once.
    An inline key never reaches the disk where memfd_create exists (Linux)."""
    data = text.encode()
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("tieredlog-keystore", os.MFD_CLOEXEC)
        try:
            _write_all(fd, data)
            use(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="tieredlog-tls-") as folder:
        path = os.path.join(folder, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        use(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
