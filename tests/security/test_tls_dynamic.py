"""A TLS listener's key store changed without a restart (Kafka's dynamic listener SSL configs): one
broker with an SSL listener serving certificate A; a confluent-kafka producer trusting both CAs; the
key store moved to certificate B (same subject, another CA, an encrypted key) with
IncrementalAlterConfigs; new connections see B while the producer keeps producing; bad key stores and
wrong levels refused with Kafka's messages and nothing changed; the password hidden by DescribeConfigs,
stored encrypted with password.encoder.secret (in ZooKeeper in a cluster), and B still served after a
restart."""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest
from cluster_harness import member
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from cryptography.hazmat.primitives import serialization
from helpers import free_port
from tls_certs import KEY_PASSWORD, Pki, _cert_pem, _key_pem, name_of
from zk_harness import wait_until, zk_connect, zookeeper  # noqa: F401

from tieredlog.clients.blocking import KafkaClient
from tieredlog.cluster.zk import ZkClient
from tieredlog.protocol.api import INCREMENTAL_ALTER_CONFIGS
from tieredlog.security.password_encoder import PasswordEncoder, PasswordEncoderError

pytestmark = pytest.mark.integration

BROKER = ConfigResource.Type.BROKER
LOCATION = "listener.name.ssl.ssl.keystore.location"
KEY_PW = "listener.name.ssl.ssl.key.password"
SECRET = "encoder-s3cret-never-logged"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _peer_cert(address: str, cafile: Path) -> bytes:
    """The DER certificate a new TLS connection to ``address`` is served."""
    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection((host, int(port)), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return der


def _alter(admin: AdminClient, name: str, configs: dict[str, str]) -> None:
    res = ConfigResource(BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(30)


def _refused(admin: AdminClient, name: str, configs: dict[str, str]) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        _alter(admin, name, configs)
    return info.value.args[0]


def _produce(producer: Producer, n: int) -> None:
    errors: list[Any] = []
    for i in range(n):
        producer.produce("rotating", value=b"v%d" % i, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors, errors


def test_keystore_changed_without_a_restart(broker_factory, tmp_path: Path) -> None:
    pki = Pki.create(tmp_path / "pki")
    der = serialization.Encoding.DER
    cert_a = pki.broker_cert.public_bytes(der)
    # B: the same subject and names, another CA, its key encrypted
    key_b, b = pki.other_ca.issue(name_of("CN=broker,O=tieredlog"), server=True)
    b_pem = _write(tmp_path / "b.pem", _key_pem(key_b, KEY_PASSWORD) + _cert_pem(b) + _cert_pem(pki.other_ca.cert))
    # C: another subject, refused as Kafka refuses a key store changing the listener's DN
    key_c, c = pki.ca.issue(name_of("CN=impostor,O=tieredlog"), server=True)
    c_pem = _write(tmp_path / "c.pem", _key_pem(key_c) + _cert_pem(c))
    not_pem = _write(tmp_path / "garbage.pem", b"not a key store\n")
    both_cas = _write(tmp_path / "both.pem", pki.ca_pem.read_bytes() + pki.other_ca_pem.read_bytes())

    ssl_port = free_port()
    broker = broker_factory({
        "remote.log.storage.system.enable": "false", "offsets.topic.num.partitions": "1",
        "listener.name.ssl.ssl.keystore.type": "PEM", LOCATION: str(pki.broker_pem),
        "password.encoder.secret": SECRET,
    }, start=False, extra_listeners={"SSL": ssl_port})
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://{broker.bootstrap},SSL://{broker.address('SSL')}"
    broker.start()
    address = broker.address("SSL")
    assert _peer_cert(address, both_cas) == cert_a

    producer = Producer({"bootstrap.servers": address, "security.protocol": "SSL",
                         "ssl.ca.location": str(both_cas), "linger.ms": 0})
    _produce(producer, 10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    _alter(admin, "0", {LOCATION: str(b_pem), KEY_PW: KEY_PASSWORD})
    assert _peer_cert(address, both_cas) == b.public_bytes(der)
    _produce(producer, 10)  # its connection, made with A, keeps working

    # refused, nothing changed: a file that is not a key store, a key store without its password,
    # another subject, the unprefixed config, the cluster-wide level
    for configs, words in (({LOCATION: str(not_pem)}, "Validation of dynamic config update of SSLFactory failed"),
                           ({KEY_PW: "wrong-password"}, "cannot be decrypted"),
                           ({LOCATION: str(c_pem)}, "is set but the private key"),
                           ({"listener.name.ssl.ssl.truststore.type": "PEM",
                             "listener.name.ssl.ssl.truststore.location": str(both_cas)},
                            "Cannot add SSL truststore to an existing listener")):
        err = _refused(admin, "0", configs)
        assert err.code() == KafkaError.INVALID_REQUEST and words in err.str(), (configs, err)
    # C with its unencrypted key (the password removed): its subject differs from B's
    res = ConfigResource(BROKER, "0", incremental_configs=[
        ConfigEntry(LOCATION, str(c_pem), incremental_operation=AlterConfigOpType.SET),
        ConfigEntry(KEY_PW, None, incremental_operation=AlterConfigOpType.DELETE)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([res])[res].result(30)
    assert "Keystore DistinguishedName does not match" in info.value.args[0].str()
    err = _refused(admin, "0", {"ssl.keystore.location": str(b_pem)})
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "can be dynamically updated only per-listener using the listener prefix" in err.str()
    # the cluster-wide level (resource name "", which librdkafka does not send)
    with KafkaClient(broker.bootstrap) as client:
        resp = client.request(INCREMENTAL_ALTER_CONFIGS, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": LOCATION, "config_operation": 0, "value": str(b_pem)}]}], "validate_only": False}, version=1)
    (r,) = resp.responses
    assert r.error_code.name == "invalid_request", r
    assert "Cannot update these configs at default cluster level, broker id must be specified" in r.error_message
    assert _peer_cert(address, both_cas) == b.public_bytes(der)

    # the file rewritten in place (a renewed certificate) and named again: reloaded, as Kafka does
    key_b2, b2 = pki.other_ca.issue(name_of("CN=broker,O=tieredlog"), server=True)
    _write(b_pem, _key_pem(key_b2, KEY_PASSWORD) + _cert_pem(b2) + _cert_pem(pki.other_ca.cert))
    _alter(admin, "0", {LOCATION: str(b_pem)})
    assert _peer_cert(address, both_cas) == b2.public_bytes(der)

    (future,) = admin.describe_configs([ConfigResource(BROKER, "0")]).values()
    configs = future.result(30)
    assert configs[LOCATION].value == str(b_pem)
    assert configs[LOCATION].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert configs[KEY_PW].value is None and configs[KEY_PW].is_sensitive
    assert configs[KEY_PW].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    stored = json.loads((broker.data_dir / "dynamic-broker-configs.json").read_text())["brokers"]["0"]
    assert stored[LOCATION] == str(b_pem)
    assert KEY_PASSWORD not in stored[KEY_PW] and "encryptedPassword:" in stored[KEY_PW]
    producer.flush(10)
    del producer

    broker.restart()  # the stored key store, its password decrypted, serves from the first connection
    assert _peer_cert(address, both_cas) == b2.public_bytes(der)
    log = broker.log_text()
    assert KEY_PASSWORD not in log and SECRET not in log


def test_a_password_needs_password_encoder_secret(broker_factory, tmp_path: Path) -> None:
    pki = Pki.create(tmp_path / "pki")
    ssl_port = free_port()
    broker = broker_factory({"remote.log.storage.system.enable": "false",
                             "listener.name.ssl.ssl.keystore.type": "PEM", LOCATION: str(pki.broker_pem)},
                            extra_listeners={"SSL": ssl_port})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    err = _refused(admin, "0", {LOCATION: str(pki.broker_encrypted_pem), KEY_PW: KEY_PASSWORD})
    assert err.code() == KafkaError.INVALID_REQUEST and "Password encoder secret not configured" in err.str()
    assert _peer_cert(broker.address("SSL"), pki.ca_pem) == pki.broker_cert.public_bytes(serialization.Encoding.DER)


def test_password_encoder_round_trip_and_old_secret() -> None:
    new = PasswordEncoder("new-secret", old_secret="old-secret")
    stored_old = PasswordEncoder("old-secret").encode("pässword")
    assert new.decode(new.encode("pässword")) == "pässword"
    assert new.decode(stored_old) == "pässword"
    fields = dict(item.split(":", 1) for item in stored_old.split(","))
    assert fields["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512" and fields["keyLength"] == "128"
    with pytest.raises(PasswordEncoderError):
        PasswordEncoder("another").decode(stored_old)
    with pytest.raises(PasswordEncoderError, match="Password encoder secret not configured"):
        PasswordEncoder(None).encode("x")


def test_in_a_cluster_the_password_is_stored_encrypted_in_zookeeper(broker_factory, zk_connect: str,
                                                                    tmp_path: Path) -> None:  # noqa: F811
    pki = Pki.create(tmp_path / "pki")
    ssl_port = free_port()
    broker = broker_factory({**member(zk_connect, 1), "password.encoder.secret": SECRET,
                             "listener.name.ssl.ssl.keystore.type": "PEM", LOCATION: str(pki.broker_pem)},
                            start=False, extra_listeners={"SSL": ssl_port})
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://{broker.bootstrap},SSL://{broker.address('SSL')}"
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _alter(admin, "1", {LOCATION: str(pki.broker_encrypted_pem), KEY_PW: KEY_PASSWORD})
    with ZkClient(zk_connect) as zk:
        got = zk.get_data("/config/brokers/1")
    assert got is not None
    stored = json.loads(got[0])["config"]
    assert stored[LOCATION] == str(pki.broker_encrypted_pem)
    assert KEY_PASSWORD not in stored[KEY_PW] and PasswordEncoder(SECRET).decode(stored[KEY_PW]) == KEY_PASSWORD
    # the broker's own change notification comes back to it: applied again, its password hidden in the log
    wait_until(lambda: "dynamic broker configs of 1 are now" in broker.log_text(), timeout=20,
               message="the change notification applied")
    broker.restart()  # read back from ZooKeeper and decrypted
    assert _peer_cert(broker.address("SSL"), pki.ca_pem) == pki.broker_cert.public_bytes(serialization.Encoding.DER)
    (future,) = admin.describe_configs([ConfigResource(BROKER, "1")]).values()
    assert future.result(30)[LOCATION].value == str(pki.broker_encrypted_pem)
    assert KEY_PASSWORD not in broker.log_text() and SECRET not in broker.log_text()
