"""TLS listeners of a real broker process, with confluent-kafka (librdkafka's OpenSSL) as the client:
produce and consume over SSL (server authentication; a key encrypted with ``ssl.key.password``), over
mutual TLS (``ssl.client.auth=required`` on one listener, inline PEM from a server.properties file, the
certificate's principal mapped and handed to the ACL authorizer), clients refused at the handshake
(no certificate, another CA), Metadata on each listener, and no secret in the broker's log or in
DescribeConfigs."""

from __future__ import annotations

import hashlib
import ssl
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from helpers import free_port
from tls_certs import KEY_PASSWORD, Pki, tls_certs  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import METADATA

pytestmark = pytest.mark.integration

COMMON = {"remote.log.storage.system.enable": "false", "offsets.topic.num.partitions": "1",
          "transaction.state.log.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}


def ssl_client(pki: Pki, address: str, cert: tuple[Path, Path] | None = None, ca: Path | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": address, "security.protocol": "SSL",
                            "ssl.ca.location": str(ca or pki.ca_pem)}
    if cert is not None:
        conf.update({"ssl.key.location": str(cert[0]), "ssl.certificate.location": str(cert[1])})
    return conf


def produce_and_consume(conf: dict[str, Any], topic: str, count: int, size: int = 1000) -> None:
    """``count`` records out and back, checked byte for byte (several fetch regions of several TLS chunks)."""
    values = [hashlib.sha256(b"%d" % i).digest() * (size // 32) for i in range(count)]
    p = Producer({**conf, "linger.ms": 5, "compression.type": "none"})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors, errors
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.max.bytes": 2 * 1024 * 1024})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    assert got == values


def refused(conf: dict[str, Any]) -> bool:
    """True when the client cannot get Metadata: its TLS handshake fails."""
    admin = AdminClient({**conf, "socket.connection.setup.timeout.ms": 3000})
    try:
        admin.list_topics(timeout=4)
    except KafkaException:
        return True
    return False


# ---- server authentication -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ssl_broker(tmp_path_factory: pytest.TempPathFactory, tls_certs: Pki) -> Iterator[BrokerProcess]:  # noqa: F811
    b = BrokerProcess(tmp_path_factory.mktemp("ssl") / "data", {
        **COMMON,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_certs.broker_encrypted_pem),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_certs.ca_pem),
    }, extra_listeners={"SSL": free_port()})
    b.overrides["advertised.listeners"] = f"SSL://{b.address('SSL')},PLAINTEXT://{b.bootstrap}"
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_produce_and_consume_over_ssl(ssl_broker: BrokerProcess, tls_certs: Pki) -> None:  # noqa: F811
    produce_and_consume(ssl_client(tls_certs, ssl_broker.address("SSL")), "over-ssl", 3000)


def test_a_client_trusting_another_ca_is_refused(ssl_broker: BrokerProcess, tls_certs: Pki) -> None:  # noqa: F811
    assert refused(ssl_client(tls_certs, ssl_broker.address("SSL"), ca=tls_certs.other_ca_pem))
    # the client gives up on the broker's certificate: the broker sees the handshake fail
    deadline = time.monotonic() + 10
    while "Failed authentication with /127.0.0.1 on listener SSL" not in ssl_broker.log_text():
        assert time.monotonic() < deadline, ssl_broker.log_text()
        time.sleep(0.1)


def test_no_secret_in_describe_configs_or_the_log(ssl_broker: BrokerProcess, tls_certs: Pki) -> None:  # noqa: F811
    admin = AdminClient(ssl_client(tls_certs, ssl_broker.address("SSL")))
    (entries,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")]).values()
    configs = entries.result(20)
    assert configs["ssl.keystore.location"].value == str(tls_certs.broker_encrypted_pem)
    for name in ("ssl.key.password", "ssl.keystore.key", "ssl.truststore.certificates"):
        assert configs[name].value is None and configs[name].is_sensitive, name
    assert all(KEY_PASSWORD not in (e.value or "") for e in configs.values())
    assert KEY_PASSWORD not in ssl_broker.log_text()


def test_metadata_answers_each_listener_with_its_own_endpoints(ssl_broker: BrokerProcess,
                                                                tls_certs: Pki) -> None:  # noqa: F811
    ctx = ssl.create_default_context(cafile=str(tls_certs.ca_pem))
    with KafkaClient(ssl_broker.address("SSL"), ssl_context=ctx, timeout=10) as c:
        over_ssl = c.request(METADATA, {"topics": None})
    with KafkaClient(ssl_broker.bootstrap, timeout=10) as c:
        over_plaintext = c.request(METADATA, {"topics": None})
    assert [(b.host, b.port) for b in over_ssl.brokers] == [("127.0.0.1", ssl_broker.extra_listeners["SSL"])]
    assert [(b.host, b.port) for b in over_plaintext.brokers] == [("127.0.0.1", ssl_broker.port)]


# ---- mutual TLS ------------------------------------------------------------------------------------------


def _continued(pem: str) -> str:
    """A PEM value as a Kafka server.properties holds it: one line per PEM line, joined by continuations."""
    return " \\\n    ".join(pem.strip().splitlines())


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory: pytest.TempPathFactory, tls_certs: Pki) -> Iterator[BrokerProcess]:  # noqa: F811
    folder = tmp_path_factory.mktemp("mtls")
    properties = folder / "server.properties"
    # inline PEM for the SSL listener alone, with its own client authentication and mapping rules
    properties.write_text(
        "listener.name.ssl.ssl.keystore.type=PEM\n"
        f"listener.name.ssl.ssl.keystore.key={_continued(tls_certs.broker_key_text())}\n"
        f"listener.name.ssl.ssl.keystore.certificate.chain={_continued(tls_certs.broker_chain_text())}\n"
        "listener.name.ssl.ssl.truststore.type=PEM\n"
        f"listener.name.ssl.ssl.truststore.certificates={_continued(tls_certs.ca_pem.read_text())}\n"
        "listener.name.ssl.ssl.client.auth=required\n"
        "ssl.principal.mapping.rules=RULE:^CN=([^,]+),OU=eng,O=acme$/$1/U,\\\n    DEFAULT\n"
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n"
        "super.users=User:ALICE\n")
    b = BrokerProcess(folder / "data", COMMON, config_file=properties, extra_listeners={"SSL": free_port()})
    b.overrides["advertised.listeners"] = f"SSL://{b.address('SSL')},PLAINTEXT://{b.bootstrap}"
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_produce_and_consume_over_mutual_tls(mtls_broker: BrokerProcess, tls_certs: Pki) -> None:  # noqa: F811
    alice = tls_certs.client("CN=alice,OU=eng,O=acme")
    produce_and_consume(ssl_client(tls_certs, mtls_broker.address("SSL"), alice), "over-mtls", 500)


def test_the_certificate_principal_reaches_the_authorizer(mtls_broker: BrokerProcess,
                                                          tls_certs: Pki) -> None:  # noqa: F811
    # User:ALICE is a super user; bob's certificate maps to User:CN=bob,OU=ops,O=acme, which no ACL allows
    bob = tls_certs.client("CN=bob,OU=ops,O=acme")
    p = Producer({**ssl_client(tls_certs, mtls_broker.address("SSL"), bob), "message.timeout.ms": 10000})
    errors: list[Any] = []
    p.produce("over-mtls-bob", value=b"x", on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors


def test_a_client_without_a_certificate_is_refused(mtls_broker: BrokerProcess, tls_certs: Pki) -> None:  # noqa: F811
    assert refused(ssl_client(tls_certs, mtls_broker.address("SSL")))
    stranger = tls_certs.client("CN=alice,OU=eng,O=acme", ca=tls_certs.other_ca)
    assert refused(ssl_client(tls_certs, mtls_broker.address("SSL"), stranger))
    deadline = time.monotonic() + 10
    while "Failed authentication with /127.0.0.1 on listener SSL (SSL handshake failed" not in mtls_broker.log_text():
        assert time.monotonic() < deadline, mtls_broker.log_text()
        time.sleep(0.1)


def test_no_inline_key_in_describe_configs_or_the_log(mtls_broker: BrokerProcess, tls_certs: Pki) -> None:  # noqa: F811
    alice = tls_certs.client("CN=alice,OU=eng,O=acme")
    admin = AdminClient(ssl_client(tls_certs, mtls_broker.address("SSL"), alice))
    (entries,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")]).values()
    configs = entries.result(20)
    key_body = "".join(tls_certs.broker_key_text().strip().splitlines()[1:-1])
    assert all(key_body[:40] not in (e.value or "") for e in configs.values())
    assert configs["ssl.principal.mapping.rules"].value == "RULE:^CN=([^,]+),OU=eng,O=acme$/$1/U,DEFAULT"
    log = mtls_broker.log_text()
    assert key_body[:40] not in log and "BEGIN PRIVATE KEY" not in log
