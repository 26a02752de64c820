"""Listeners and TLS without a broker process: Kafka's listener checks and per-listener configs, PEM key
and trust stores (file, inline, encrypted, refused kinds), cipher suite names, the server's handshake
and principal on real TLS sockets, and the buffered send of a file region through TLS. The subject DN
and the mapping rules alone: test_tls_principal.py."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tls_certs import KEY_PASSWORD, Pki, tls_certs  # noqa: F401

from tieredlog.config import (
    DEFAULT_SECURITY_PROTOCOL_MAP,
    BrokerConfig,
    BrokerConfigError,
    Password,
    is_sensitive_config,
    read_properties,
)
from tieredlog.security.principal import ANONYMOUS, KafkaPrincipal
from tieredlog.security.ssl_principal import SslPrincipalMapper
from tieredlog.security.tls import client_context, iana_cipher_name, server_context
from tieredlog.security.tls_config import SslConfig, inter_broker_client_context, listener_tls
from tieredlog.server import file_regions, network
from tieredlog.server.file_regions import OpenRegion
from tieredlog.server.network import Connection

# ---- listeners and their configs -------------------------------------------------------------------------


def cfg(**props: str) -> BrokerConfig:
    return BrokerConfig.from_props({k.replace("_", "."): v for k, v in props.items()}, warn=False)


def config(props: dict[str, str]) -> BrokerConfig:
    return BrokerConfig.from_props(props, warn=False)


def test_default_protocol_map_is_kafkas() -> None:
    c = config({})
    assert DEFAULT_SECURITY_PROTOCOL_MAP == "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    assert c.security_protocol_map == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                                       "SASL_SSL": "SASL_SSL"}
    c = config({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://:9093"})
    assert [(l.name, l.port, l.security_protocol) for l in c.listeners] == [("PLAINTEXT", 9092, "PLAINTEXT"),
                                                                            ("SSL", 9093, "SSL")]
    assert c.inter_broker_listener == ("PLAINTEXT", "PLAINTEXT")


def test_named_listeners_and_inter_broker_listener() -> None:
    c = config({"listeners": "INTERNAL://127.0.0.1:9093,EXTERNAL://0.0.0.0:9094",
                "advertised.listeners": "INTERNAL://b1:9093,EXTERNAL://b1.example.com:9094",
                "listener.security.protocol.map": "INTERNAL:SSL,external:SASL_SSL",
                "inter.broker.listener.name": "internal"})
    assert [(l.name, l.security_protocol) for l in c.advertised_listeners] == [("INTERNAL", "SSL"),
                                                                              ("EXTERNAL", "SASL_SSL")]
    assert c.inter_broker_listener == ("INTERNAL", "SSL")
    assert c.advertised_listener("external").host == "b1.example.com"  # type: ignore[union-attr]
    assert c.listeners[0].config_prefix == "listener.name.internal."
    # security.inter.broker.protocol names the listener of that name
    c = config({"listeners": "PLAINTEXT://:9092,SSL://:9093", "security.inter.broker.protocol": "SSL"})
    assert c.inter_broker_listener == ("SSL", "SSL")


@pytest.mark.parametrize("props,message", [
    ({"listeners": "CLIENT://h:9093"},
     "Error creating broker listeners from 'CLIENT://h:9093': No security protocol defined for listener CLIENT"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "CLIENT://h:9093",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"},
     "No security protocol defined for listener CLIENT"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAIN"},
     "Invalid security protocol `PLAIN` defined in listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "Each listener must have a different name"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "Each listener must have a different port"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", "inter.broker.listener.name": "SSL",
      "security.inter.broker.protocol": "SSL"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    ({"inter.broker.listener.name": "REPLICATION"},
     "Listener with name REPLICATION defined in inter.broker.listener.name not found in listener.security.protocol.map."),
    ({"listeners": "SSL://:9093"},
     "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options based "
     "on currently configured listeners are SSL"),
    ({"security.inter.broker.protocol": "TLS"}, "Invalid security protocol `TLS` defined in security.inter.broker.protocol"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://h:9092,SSL://h:9093"},
     "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners"),
    ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0"),
    ({"ssl.client.auth": "REQUIRED"},
     "Invalid value REQUIRED for configuration ssl.client.auth: String must be one of: required, requested, none"),
    ({"listener.name.plaintext.ssl.client.auth": "always"},
     "configuration listener.name.plaintext.ssl.client.auth: String must be one of"),
    ({"ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/X"},
     "ssl.principal.mapping.rules: Invalid rule: `RULE:^CN=(.*)$/$1/X`, unmatched substring: `X`"),
])
def test_listener_configs_refused_as_kafka(props: dict[str, str], message: str) -> None:
    with pytest.raises(BrokerConfigError) as e:
        config(props)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_listener_prefixed_configs_take_precedence() -> None:
    c = config({"listeners": "PLAINTEXT://:9092,EXTERNAL://:9093", "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,EXTERNAL:SSL", "ssl.keystore.location": "/plain.pem",
                "listener.name.external.ssl.keystore.location": "/external.pem",
                "listener.name.external.ssl.key.password": "secret", "listener.name.EXTERNAL.ssl.client.auth": "x"})
    assert c.listener_value("EXTERNAL", "ssl.keystore.location") == "/external.pem"
    assert c.listener_key("EXTERNAL", "ssl.keystore.location") == "listener.name.external.ssl.keystore.location"
    assert c.listener_value("PLAINTEXT", "ssl.keystore.location") == "/plain.pem"
    assert c.listener_key("PLAINTEXT", "ssl.keystore.location") == "ssl.keystore.location"
    secret = c.listener_value("EXTERNAL", "ssl.key.password")
    assert isinstance(secret, Password) and secret.value == "secret" and str(secret) == "[hidden]"
    # Kafka reads a listener's configs under its lower-case name only: the upper-case key is unknown
    assert c.unknown == ("listener.name.EXTERNAL.ssl.client.auth",)


def test_secrets_are_hidden_and_sensitive() -> None:
    c = config({"ssl.key.password": "p4ss", "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"})
    for name in ("ssl.key.password", "ssl.keystore.key"):
        assert repr(c[name]) == "[hidden]" and f"{c[name]}" == "[hidden]"
        assert "p4ss" not in repr(c.values)
    for name in ("ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key",
                 "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
                 "listener.name.external.ssl.key.password", "listener.name.ext.scram-sha-256.sasl.jaas.config"):
        assert is_sensitive_config(name), name
    for name in ("ssl.keystore.location", "ssl.client.auth", "listeners", "listener.name.external.ssl.keystore.type"):
        assert not is_sensitive_config(name), name


def test_properties_file_continuations_and_escapes(tmp_path: Path) -> None:
    f = tmp_path / "server.properties"
    f.write_text("ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\\\n"
                 "    RULE:^CN=([a-z]+)\\\\.x,.*$/$1/L,\\\n"
                 "    DEFAULT\n"
                 "listeners PLAINTEXT://:9092\n"
                 "key\\ with\\ spaces = a\\tb\\u0041\n"
                 "# comment \\\n"
                 "num.partitions : 3\n")
    props = read_properties(f)
    assert props["ssl.principal.mapping.rules"] == (
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=([a-z]+)\\.x,.*$/$1/L,DEFAULT")
    assert props["listeners"] == "PLAINTEXT://:9092"
    assert props["key with spaces"] == "a\tbA"
    assert props["num.partitions"] == "3"
    mapper = SslPrincipalMapper(props["ssl.principal.mapping.rules"])
    assert mapper.name("CN=bob.x,O=acme") == "bob"


# ---- key and trust stores --------------------------------------------------------------------------------


def ssl_listener(pki: Pki, **extra: str) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.broker_pem), "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem), **{k.replace("__", "."): v for k, v in extra.items()}}


def build(props: dict[str, str]) -> dict[str, Any]:
    return listener_tls(config(props))


def test_pem_file_inline_and_single_line(tls_certs: Pki) -> None:  # noqa: F811
    assert build(ssl_listener(tls_certs))["SSL"].client_auth == "none"
    key, chain = tls_certs.broker_key_text(), tls_certs.broker_chain_text()
    inline = {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", "ssl.keystore.type": "PEM",
              "ssl.keystore.key": key, "ssl.keystore.certificate.chain": chain, "ssl.truststore.type": "PEM",
              "ssl.truststore.certificates": tls_certs.ca_pem.read_text(), "ssl.client.auth": "required"}
    assert build(inline)["SSL"].context.verify_mode == ssl.CERT_REQUIRED
    # a PEM block written on one line in server.properties
    one_line = {**inline, "ssl.keystore.key": " ".join(key.split("\n")),
                "ssl.keystore.certificate.chain": " ".join(chain.split("\n"))}
    assert "SSL" in build(one_line)


def test_encrypted_key_and_its_password(tls_certs: Pki) -> None:  # noqa: F811
    props = ssl_listener(tls_certs, ssl__keystore__location=str(tls_certs.broker_encrypted_pem))
    with pytest.raises(BrokerConfigError, match="is encrypted: set ssl.key.password"):
        build(props)
    assert "SSL" in build({**props, "ssl.key.password": KEY_PASSWORD})
    with pytest.raises(BrokerConfigError, match="cannot be decrypted with ssl.key.password") as e:
        build({**props, "ssl.key.password": "wrong-" + KEY_PASSWORD})
    assert KEY_PASSWORD not in str(e.value)
    with pytest.raises(BrokerConfigError, match="ssl.key.password is set but the private key .* is not encrypted"):
        build(ssl_listener(tls_certs, ssl__key__password=KEY_PASSWORD))


@pytest.mark.parametrize("extra,message", [
    ({"ssl.keystore.type": "JKS"},
     "ssl.keystore.type=JKS is not supported (ssl.keystore.location {broker}): tieredlog reads PEM keystores only; "
     "convert it to PEM (the private key and its certificate chain in one file) and set ssl.keystore.type=PEM"),
    ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type=PKCS12 is not supported"),
    ({"listener.name.ssl.ssl.keystore.type": "PKCS12"},
     "listener.name.ssl.ssl.keystore.type=PKCS12 is not supported"),
    ({"ssl.keystore.location": "", "ssl.keystore.type": "JKS", "ssl.keystore.key": "k", "ssl.keystore.certificate.chain": "c"},
     "SSL private key can be specified only for PEM, but key store type is JKS"),
    ({"ssl.keystore.key": "k", "ssl.keystore.certificate.chain": "c"},
     "Both SSL key store location and separate private key are specified"),
    ({"ssl.keystore.location": "", "ssl.keystore.key": "k"}, "SSL private key is specified (ssl.keystore.key), but certificate chain is not"),
    ({"ssl.keystore.location": "", "ssl.keystore.certificate.chain": "c"}, "SSL certificate chain is specified"),
    ({"ssl.keystore.password": "storepass"},
     "SSL key store password cannot be specified with PEM format, only key password may be specified"),
    ({"ssl.truststore.password": "storepass"}, "SSL trust store password cannot be specified for PEM format"),
    ({"ssl.truststore.certificates": "c"}, "Both SSL trust store location and separate trust certificates"),
    ({"ssl.keystore.location": ""}, "listener SSL (SSL) has no key store: set ssl.keystore.location"),
    ({"ssl.keystore.location": "/nonexistent/ks.pem"}, "cannot read ssl.keystore.location /nonexistent/ks.pem"),
    ({"ssl.truststore.location": "{broker_key}"}, "at least one certificate expected, but none found"),
    ({"ssl.keystore.location": "{ca}"}, "expected one private key, found 0"),
    ({"ssl.enabled.protocols": "TLSv1.2,TLSv1.4"}, "TLSv1.4 is not one of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3"),
    ({"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_NOTHING"}, "no cipher suite TLS_ECDHE_RSA_WITH_NOTHING"),
])
def test_stores_refused_with_one_line(tls_certs: Pki, extra: dict[str, str], message: str) -> None:  # noqa: F811
    files = {"broker": str(tls_certs.broker_pem), "ca": str(tls_certs.ca_pem),
             "broker_key": str(tls_certs.files["broker.key"])}
    props = {k: v.format(**files) for k, v in {**ssl_listener(tls_certs), **extra}.items() if v != ""}
    props = {**props, **{k: "" for k, v in extra.items() if v == ""}}
    props = {k: v for k, v in props.items() if v != "" or k not in ("ssl.keystore.location",)}
    with pytest.raises(BrokerConfigError) as e:
        build(props)
    text = str(e.value)
    assert message.format(**files) in text
    assert "\n" not in text and "storepass" not in text and "BEGIN" not in text


def test_client_auth_and_kip_684(tls_certs: Pki) -> None:  # noqa: F811
    props = {**ssl_listener(tls_certs), "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,"
             "SASL_SSL://127.0.0.1:9094,MTLS://127.0.0.1:9095",
             "listener.security.protocol.map": f"{DEFAULT_SECURITY_PROTOCOL_MAP},MTLS:SSL",
             "ssl.client.auth": "requested", "listener.name.mtls.ssl.client.auth": "required"}
    tls = build(props)
    assert {n: t.client_auth for n, t in tls.items()} == {"SSL": "requested", "SASL_SSL": "none", "MTLS": "required"}
    assert tls["SSL"].context.verify_mode == ssl.CERT_OPTIONAL
    # a SASL_SSL listener asks for certificates only when its own listener.name.<l>.ssl.client.auth does
    tls = build({**props, "listener.name.sasl_ssl.ssl.client.auth": "required"})
    assert tls["SASL_SSL"].client_auth == "required"


def test_inter_broker_client_context(tls_certs: Pki) -> None:  # noqa: F811
    assert inter_broker_client_context(config(ssl_listener(tls_certs))) is None
    c = config({**ssl_listener(tls_certs), "security.inter.broker.protocol": "SSL"})
    ctx = inter_broker_client_context(c)
    assert ctx is not None and ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    c = config({**ssl_listener(tls_certs), "security.inter.broker.protocol": "SSL",
                "ssl.endpoint.identification.algorithm": "", "ssl.protocol": "TLSv1.2"})
    ctx = inter_broker_client_context(c)
    assert ctx is not None and not ctx.check_hostname
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2  # ssl.protocol caps what the broker offers


@pytest.mark.skipif(not Path("/usr/bin/openssl").exists(), reason="needs the openssl command")
def test_cipher_suite_names_match_openssl() -> None:
    out = subprocess.run(["/usr/bin/openssl", "ciphers", "-stdname", "ALL:@SECLEVEL=0"], capture_output=True,
                         text=True, check=True).stdout
    expected = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "-":
            expected[parts[2]] = parts[0]
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    checked = 0
    for cipher in probe.get_ciphers():
        name = iana_cipher_name(cipher)
        if name is not None and cipher["protocol"] != "TLSv1.3":
            assert name == expected[cipher["name"]], cipher["name"]
            checked += 1
    assert checked > 30


def test_cipher_suites_restrict_tls12(tls_certs: Pki) -> None:  # noqa: F811
    c = config({**ssl_listener(tls_certs), "ssl.cipher.suites":
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,ECDHE-ECDSA-AES128-GCM-SHA256,TLS_AES_256_GCM_SHA384,"
                "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"})
    ctx = server_context(SslConfig(c, "SSL", "SSL"))
    tls12 = {x["name"] for x in ctx.get_ciphers() if x["protocol"] != "TLSv1.3"}
    assert tls12 == {"ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-GCM-SHA256"}
    only13 = config({**ssl_listener(tls_certs), "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})
    assert server_context(SslConfig(only13, "SSL", "SSL")).minimum_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.integration
def test_cli_refuses_a_jks_keystore_with_one_line(tmp_path: Path, tls_certs: Pki) -> None:  # noqa: F811
    r = subprocess.run(
        [sys.executable, "-m", "tieredlog.cli", "broker", "--override", f"log.dirs={tmp_path}",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
         "--override", "ssl.keystore.location=/etc/kafka/broker.keystore.jks",
         "--override", "ssl.keystore.password=changeit", "--override", f"ssl.key.password={KEY_PASSWORD}"],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert "cannot start: ssl.keystore.type=JKS is not supported (ssl.keystore.location " \
           "/etc/kafka/broker.keystore.jks): tieredlog reads PEM keystores only" in lines[0]
    assert "changeit" not in r.stderr and KEY_PASSWORD not in r.stderr
    # a listener missing from the map: the configuration is refused before anything starts
    r = subprocess.run([sys.executable, "-m", "tieredlog.cli", "broker", "--override", f"log.dirs={tmp_path}",
                        "--override", "listeners=PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "tieredlog broker: invalid configuration: Error creating broker listeners from "
        "'PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0': No security protocol defined for listener CLIENT"]


# ---- the handshake and the principal, on real sockets ----------------------------------------------------


async def _handshake_principal(pki: Pki, props: dict[str, str], client: ssl.SSLContext) -> tuple[Any, Any]:
    """(the server's principal or None, the client's exception or None) of one connection."""
    tls = listener_tls(config(props))["SSL"]
    loop = asyncio.get_running_loop()
    got: asyncio.Future[Any] = loop.create_future()
    listening = socket.create_server(("127.0.0.1", 0))
    listening.setblocking(False)
    port = listening.getsockname()[1]

    async def accept() -> None:
        accepted, address = await loop.sock_accept(listening)
        opened = await network.open_accepted("SSL", tls, accepted, address[0])
        got.set_result(None if opened is None else opened[0])
        if opened is not None:
            writer = opened[2]
            writer.write(b"ok")
            await writer.drain()
            writer.close()

    server = loop.create_task(accept())
    error = None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        # TLS 1.3: a refused client certificate shows on the first read
        if await reader.read(2) != b"ok":
            error = ConnectionError("closed")
        writer.close()
    except (OSError, ConnectionError) as exc:
        error = exc
    principal = await asyncio.wait_for(got, 10)
    await server
    listening.close()
    return principal, error


def _client(pki: Pki, cert: tuple[Path, Path] | None = None, trust: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(trust or pki.ca_pem))
    if cert is not None:
        ctx.load_cert_chain(str(cert[1]), str(cert[0]))
    return ctx


def test_handshake_principals(tls_certs: Pki, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    caplog.set_level(logging.INFO, logger="tieredlog.server.network")
    alice = tls_certs.client("CN=alice,OU=eng,O=acme")
    required = {**ssl_listener(tls_certs), "ssl.client.auth": "required"}
    principal, error = asyncio.run(_handshake_principal(tls_certs, required, _client(tls_certs, alice)))
    assert principal == KafkaPrincipal("User", "CN=alice,OU=eng,O=acme") and error is None
    mapped = {**required, "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,.*$/$1/U,DEFAULT"}
    principal, _ = asyncio.run(_handshake_principal(tls_certs, mapped, _client(tls_certs, alice)))
    assert principal == KafkaPrincipal("User", "ALICE")
    # no certificate: refused when required, ANONYMOUS when requested or not asked for
    principal, error = asyncio.run(_handshake_principal(tls_certs, required, _client(tls_certs)))
    assert principal is None and error is not None
    assert "Failed authentication with /127.0.0.1 on listener SSL (SSL handshake failed" in caplog.text
    for auth in ("requested", "none"):
        principal, error = asyncio.run(_handshake_principal(
            tls_certs, {**ssl_listener(tls_certs), "ssl.client.auth": auth}, _client(tls_certs)))
        assert principal == ANONYMOUS and error is None
    # with ssl.client.auth=none the server does not ask: a client certificate is not even sent
    principal, _ = asyncio.run(_handshake_principal(tls_certs, ssl_listener(tls_certs), _client(tls_certs, alice)))
    assert principal == ANONYMOUS
    # a certificate no rule maps fails the authentication
    strict = {**required, "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=ops,.*$/$1/"}
    principal, error = asyncio.run(_handshake_principal(tls_certs, strict, _client(tls_certs, alice)))
    assert principal is None and error is not None
    assert "No rules apply to CN=alice,OU=eng,O=acme" in caplog.text
    # a client certificate from another CA, and a client trusting another CA
    mallory = tls_certs.client("CN=mallory", ca=tls_certs.other_ca)
    principal, error = asyncio.run(_handshake_principal(tls_certs, required, _client(tls_certs, mallory)))
    assert principal is None and error is not None
    principal, error = asyncio.run(_handshake_principal(tls_certs, ssl_listener(tls_certs),
                                                        _client(tls_certs, trust=tls_certs.other_ca_pem)))
    assert principal is None and isinstance(error, ssl.SSLCertVerificationError)


def test_inter_broker_client_verifies_the_broker(tls_certs: Pki) -> None:  # noqa: F811
    c = config({**ssl_listener(tls_certs), "security.inter.broker.protocol": "SSL"})
    ctx = client_context(SslConfig(c, "SSL", "SSL"))
    principal, error = asyncio.run(_handshake_principal(tls_certs, ssl_listener(tls_certs), ctx))
    assert principal == ANONYMOUS and error is None


# ---- the buffered send of a region through TLS --------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()
        self.drains = 0

    def write(self, data: Any) -> None:
        self.out += data

    async def drain(self) -> None:
        self.drains += 1


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.mark.parametrize("cold", [False, True])
def test_tls_region_write_reads_in_chunks(tmp_path: Path, cold: bool) -> None:
    data = os.urandom(file_regions.TLS_CHUNK * 2 + 12345)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"head" + data + b"tail")
    if cold:
        _evict(path)
    conn = Connection.__new__(Connection)
    writer = _Writer()
    with ThreadPoolExecutor(2) as pool:
        conn.writer = writer  # type: ignore[assignment]
        conn.server = type("S", (), {"cold_reads": pool})()  # type: ignore[assignment]
        with open(path, "rb") as f:
            asyncio.run(conn._write_region(OpenRegion(f, 4, len(data))))
            assert bytes(writer.out) == data and writer.drains == 3
            with pytest.raises(ConnectionError, match="bytes short of a fetch region"):
                asyncio.run(conn._write_region(OpenRegion(f, len(data), 100)))
