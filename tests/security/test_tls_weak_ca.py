"""Key stores signed by a private CA with SHA-1 (as several client suites' own test certificates are):
Kafka's JVM takes them, OpenSSL's default security level does not. The broker serves them on that
listener with one warning naming the algorithm; a key store the JVM refuses too (an MD5 signature)
still stops the broker with one line."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID
from helpers import free_port

from tieredlog.config import BrokerConfig, BrokerConfigError
from tieredlog.security.tls_config import listener_tls

# sha256WithRSAEncryption and the algorithms swapped in for it, DER-encoded OIDs of the same length
_SHA256_RSA = bytes.fromhex("06092a864886f70d01010b")
_OIDS = {"sha1": bytes.fromhex("06092a864886f70d010105"), "md5": bytes.fromhex("06092a864886f70d010104")}


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def weak_pki(folder: Path, digest: hashes.HashAlgorithm, key: Any = None) -> tuple[Path, Path]:
    """(CA file, key store file) where the broker certificate (of ``key``, a 2048-bit RSA key by default)
    is signed with ``digest`` by a private CA. cryptography no longer signs certificates with SHA-1 or
    MD5, so one is signed with SHA-256 and its signature replaced: the algorithm identifiers swapped and
    the to-be-signed part signed again."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(65537, 2048)
    ca = (x509.CertificateBuilder().subject_name(_name("weak test CA")).issuer_name(_name("weak test CA"))
          .public_key(ca_key.public_key()).serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = key or rsa.generate_private_key(65537, 2048)
    cert = (x509.CertificateBuilder().subject_name(_name("broker")).issuer_name(_name("weak test CA"))
            .public_key(key.public_key()).serial_number(2).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    if digest.name == "sha256":
        oid = _SHA256_RSA
    else:
        oid = _OIDS[digest.name]
    tbs = cert.tbs_certificate_bytes.replace(_SHA256_RSA, oid)
    der = cert.public_bytes(serialization.Encoding.DER).replace(cert.signature,
                                                                ca_key.sign(tbs, padding.PKCS1v15(), digest))
    weak = x509.load_der_x509_certificate(der.replace(_SHA256_RSA, oid))
    assert weak.signature_algorithm_oid.dotted_string.endswith({"sha1": ".5", "md5": ".4", "sha256": ".11"}[digest.name])
    folder.mkdir(parents=True, exist_ok=True)
    ca_file, store = folder / "ca.pem", folder / "broker.pem"
    ca_file.write_bytes(_pem(ca))
    store.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()) + _pem(weak) + _pem(ca))
    return ca_file, store


@pytest.mark.integration
def test_a_private_ca_sha1_key_store_is_served_with_one_warning(tmp_path: Path) -> None:
    ca, store = weak_pki(tmp_path / "pki", hashes.SHA1())
    broker = BrokerProcess(tmp_path / "data", {
        "remote.log.storage.system.enable": "false", "offsets.topic.num.partitions": "1",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(store),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
    }, extra_listeners={"SSL": free_port()}).start()
    try:
        # librdkafka's OpenSSL refuses a SHA-1 signature at its own default level too, as the JVM's clients do not
        conf = {"bootstrap.servers": broker.address("SSL"), "security.protocol": "SSL", "ssl.ca.location": str(ca),
                "ssl.cipher.suites": "DEFAULT:@SECLEVEL=0"}
        p = Producer(conf)
        p.produce("weak-ca", value=b"over TLS")
        assert p.flush(30) == 0
        c = Consumer({**conf, "group.id": "weak-ca", "enable.auto.commit": False})
        try:
            c.assign([TopicPartition("weak-ca", 0, 0)])
            m = c.poll(30)
            assert m is not None and m.error() is None and m.value() == b"over TLS"
        finally:
            c.close()
        warnings = [line for line in broker.log_text().splitlines() if "SHA1withRSA" in line]
        assert len(warnings) == 1, warnings
        assert "WARN" in warnings[0] and "CN=broker is signed with SHA1withRSA" in warnings[0]
        assert "security level 0" in warnings[0]
    finally:
        broker.stop()


@pytest.mark.integration
def test_an_md5_signed_key_store_still_stops_the_broker_with_one_line(tmp_path: Path) -> None:
    _, store = weak_pki(tmp_path / "pki", hashes.MD5())
    r = subprocess.run(
        [sys.executable, "-m", "tieredlog.cli", "broker", "--override", f"log.dirs={tmp_path / 'data'}",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
         "--override", "ssl.keystore.type=PEM", "--override", f"ssl.keystore.location={store}"],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert f"ssl.keystore.location {store}: the certificate CN=broker is signed with MD5withRSA" in lines[0]
    assert "Traceback" not in r.stderr


def ssl_listener_tls(ca: Path, store: Path) -> Any:
    return listener_tls(BrokerConfig.from_props({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(store), "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)},
        warn=False))["SSL"]


def test_each_key_store_gets_the_level_it_needs_and_no_lower(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    strong = ssl_listener_tls(*weak_pki(tmp_path / "strong", hashes.SHA256()))
    default_level = strong.context.security_level
    assert default_level >= 2 and not caplog.records
    # a 1024-bit RSA key: Kafka's JVM takes it (RSA keySize < 1024 is what it refuses), OpenSSL wants level 1
    rsa1024 = ssl_listener_tls(*weak_pki(tmp_path / "rsa1024", hashes.SHA256(), rsa.generate_private_key(65537, 1024)))
    assert rsa1024.context.security_level == 1
    assert "CN=broker has a 1024-bit RSA key" in caplog.text and "security level 1" in caplog.text
    sha1 = ssl_listener_tls(*weak_pki(tmp_path / "sha1", hashes.SHA1()))
    assert sha1.context.security_level == 0
    # an EC key under 224 bits: refused by the JVM too
    with pytest.raises(BrokerConfigError, match="CN=broker has a 192-bit EC key, which Kafka's JVM refuses too"):
        ssl_listener_tls(*weak_pki(tmp_path / "p192", hashes.SHA256(), ec.generate_private_key(ec.SECP192R1())))
