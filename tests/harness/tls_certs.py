"""Throwaway certificates for the TLS tests, made with ``cryptography`` (a dependency of moto, so
installed with the test extras) into a test's temporary folder; nothing is checked in.

    pki = Pki.create(tmp_path)              # a CA, a broker certificate (localhost, 127.0.0.1), a client's
    pki.broker_pem                          # PEM file: private key then certificate chain (ssl.keystore.location)
    pki.ca_pem                              # PEM file: the CA (ssl.truststore.location)
    pki.client("CN=alice,OU=eng,O=acme")    # a client certificate signed by the CA: (key file, cert file)

``tls_certs`` is the pytest fixture: one Pki per test module.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "k3y-pa55word-never-logged"

_ATTRS = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
          "L": NameOID.LOCALITY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME, "C": NameOID.COUNTRY_NAME,
          "EMAIL": NameOID.EMAIL_ADDRESS, "UID": NameOID.USER_ID, "DC": NameOID.DOMAIN_COMPONENT}


def name_of(dn: str) -> x509.Name:
    """An x509 Name from ``CN=alice,OU=eng,O=acme`` (RFC 2253 order: the last RDN first)."""
    attrs = []
    for part in dn.split(","):
        k, _, v = part.partition("=")
        attrs.append(x509.NameAttribute(_ATTRS[k.strip().upper()], v))
    return x509.Name(list(reversed(attrs)))


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class Ca:
    name: x509.Name
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, cn: str) -> "Ca":
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(name, key, cert)

    def issue(self, subject: x509.Name, *, server: bool) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return key, builder.sign(self.key, hashes.SHA256())


@dataclass
class Pki:
    folder: Path
    ca: Ca
    other_ca: Ca  # trusts nothing of ours: a client trusting it is refused
    broker_key: ec.EllipticCurvePrivateKey
    broker_cert: x509.Certificate
    files: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def create(cls, folder: Path) -> "Pki":
        folder.mkdir(parents=True, exist_ok=True)
        ca, other = Ca.create("tieredlog test CA"), Ca.create("some other CA")
        key, cert = ca.issue(name_of("CN=broker,O=tieredlog"), server=True)
        pki = cls(folder, ca, other, key, cert)
        pki._write("ca.pem", _cert_pem(ca.cert))
        pki._write("other-ca.pem", _cert_pem(other.cert))
        # Kafka's PEM key store: the private key, then the certificate chain (leaf, then the CA)
        pki._write("broker.pem", _key_pem(key) + _cert_pem(cert) + _cert_pem(ca.cert))
        pki._write("broker-encrypted.pem", _key_pem(key, KEY_PASSWORD) + _cert_pem(cert) + _cert_pem(ca.cert))
        pki._write("broker.key", _key_pem(key))
        pki._write("broker.crt", _cert_pem(cert) + _cert_pem(ca.cert))
        return pki

    def _write(self, name: str, data: bytes) -> Path:
        path = self.folder / name
        path.write_bytes(data)
        path.chmod(0o600)
        self.files[name] = path
        return path

    @property
    def ca_pem(self) -> Path:
        return self.files["ca.pem"]

    @property
    def other_ca_pem(self) -> Path:
        return self.files["other-ca.pem"]

    @property
    def broker_pem(self) -> Path:
        return self.files["broker.pem"]

    @property
    def broker_encrypted_pem(self) -> Path:
        return self.files["broker-encrypted.pem"]

    def broker_key_text(self) -> str:
        return self.files["broker.key"].read_text()

    def broker_chain_text(self) -> str:
        return self.files["broker.crt"].read_text()

    def client(self, dn: str, *, ca: Ca | None = None) -> tuple[Path, Path]:
        """(private key file, certificate file) of a client certificate with subject ``dn``."""
        key, cert = (ca or self.ca).issue(name_of(dn), server=False)
        stem = "client-" + "".join(c if c.isalnum() else "_" for c in dn)
        return self._write(f"{stem}.key", _key_pem(key)), self._write(f"{stem}.crt", _cert_pem(cert))

    def client_der(self, subject: x509.Name) -> bytes:
        """A client certificate of any subject, DER (for the DN tests)."""
        _, cert = self.ca.issue(subject, server=False)
        return cert.public_bytes(serialization.Encoding.DER)


@pytest.fixture(scope="module")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))
