"""Which key store certificates Kafka's JVM would use, judged where OpenSSL's security level is stricter.

Debian's OpenSSL runs at security level 2 (and OpenSSL 3 counts SHA-1 below level 1): it refuses a
certificate signed with SHA-1 (CA_MD_TOO_WEAK) or holding an RSA/DSA key under 2048 bits
(EE_KEY_TOO_SMALL, CA_KEY_TOO_SMALL). JDK 17's defaults (``jdk.certpath.disabledAlgorithms``,
``jdk.tls.disabledAlgorithms``) refuse less: MD2 and MD5 signatures, RSA and DSA keys under 1024 bits and
EC keys under 224 bits; SHA-1 only in chains ending at a CA the JDK ships, never in a private CA's, which
is where a SHA-1 key store comes from. So a key store OpenSSL refuses is judged here: one the JVM would
refuse too stays refused, one it takes gets the lowest OpenSSL security level that loads it, for its
listener's context alone, with a warning naming what is weak.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import dsa, ec, rsa

# OpenSSL's reasons for a certificate or key under the context's security level
SECURITY_LEVEL_REASONS = frozenset({"CA_MD_TOO_WEAK", "EE_KEY_TOO_SMALL", "CA_KEY_TOO_SMALL"})

# signature algorithms by OID, the JVM's names
_REFUSED_SIGNATURES = {
    "1.2.840.113549.1.1.2": "MD2withRSA",
    "1.2.840.113549.1.1.3": "MD4withRSA",
    "1.2.840.113549.1.1.4": "MD5withRSA",
}
_WEAK_SIGNATURES = {
    "1.2.840.113549.1.1.5": "SHA1withRSA",
    "1.2.840.10045.4.1": "SHA1withECDSA",
    "1.2.840.10040.4.3": "SHA1withDSA",
}
_MIN_RSA_DSA_BITS = 1024  # JDK: RSA keySize < 1024, DSA keySize < 1024
_MIN_EC_BITS = 224  # JDK: EC keySize < 224
_OPENSSL_RSA_DSA_BITS = 2048  # what security level 2 asks


@dataclass(frozen=True)
class Verdict:
    refused: list[str]  # what the JVM refuses too, per certificate
    weak: list[str]  # what the JVM takes and OpenSSL's default level does not


def judge(cert_pems: list[str]) -> Verdict:
    """The key store's certificates (leaf first) as Kafka's JVM sees them. A self-signed certificate's
    own signature is not judged: neither the JVM nor OpenSSL checks a trust anchor's."""
    refused: list[str] = []
    weak: list[str] = []
    for pem in cert_pems:
        cert = x509.load_pem_x509_certificate(pem.encode())
        subject = cert.subject.rfc4514_string() or "(no subject)"
        if cert.issuer != cert.subject:
            oid = cert.signature_algorithm_oid.dotted_string
            if oid in _REFUSED_SIGNATURES:
                refused.append(f"{subject} is signed with {_REFUSED_SIGNATURES[oid]}")
            elif oid in _WEAK_SIGNATURES:
                weak.append(f"{subject} is signed with {_WEAK_SIGNATURES[oid]}")
        key = cert.public_key()
        if isinstance(key, (rsa.RSAPublicKey, dsa.DSAPublicKey)):
            kind = "RSA" if isinstance(key, rsa.RSAPublicKey) else "DSA"
            if key.key_size < _MIN_RSA_DSA_BITS:
                refused.append(f"{subject} has a {key.key_size}-bit {kind} key")
            elif key.key_size < _OPENSSL_RSA_DSA_BITS:
                weak.append(f"{subject} has a {key.key_size}-bit {kind} key")
        elif isinstance(key, ec.EllipticCurvePublicKey) and key.key_size < _MIN_EC_BITS:
            refused.append(f"{subject} has a {key.key_size}-bit EC key")
    return Verdict(refused, weak)
