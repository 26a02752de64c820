"""Kafka's PasswordEncoder: how a password config set as a dynamic broker config is stored.

A password (``ssl.key.password``, an inline key store...) is stored encrypted with a key derived from
``password.encoder.secret``: PBKDF2 (``password.encoder.keyfactory.algorithm``, ``.iterations``,
``.key.length``, a random 256-byte salt) then AES/CBC/PKCS5Padding with a random IV. The stored text is
Kafka's: ``name:value`` pairs joined by commas (``keyFactoryAlgorithm``, ``cipherAlgorithm``,
``keyLength``, ``salt``, ``iterations``, ``encryptedPassword``, ``passwordLength``,
``initializationVector``; binary values base64), so a store written by one reads in the other given
the same secret. Without a secret a password cannot be stored: Kafka's "Password encoder secret not
configured".
"""

from __future__ import annotations

import base64
import hashlib
import os

from tieredlog.config import BrokerConfig, Password

SALT_BYTES = 256
_DEFAULT_KEY_FACTORY = "PBKDF2WithHmacSHA512"
_HASHES = {"PBKDF2WithHmacSHA512": "sha512", "PBKDF2WithHmacSHA256": "sha256", "PBKDF2WithHmacSHA1": "sha1"}
_CIPHER = "AES/CBC/PKCS5Padding"


class PasswordEncoderError(ValueError):
    """A password cannot be encoded or decoded: the message names no secret and no password."""


def _secret(value: object) -> str | None:
    if value is None:
        return None
    return value.value if isinstance(value, Password) else str(value)


def _key(secret: str, key_factory: str, salt: bytes, iterations: int, key_length: int) -> bytes:
    digest = _HASHES.get(key_factory)
    if digest is None:
        raise PasswordEncoderError(f"unsupported password.encoder.keyfactory.algorithm {key_factory}")
    if key_length not in (128, 192, 256):
        raise PasswordEncoderError(f"password.encoder.key.length {key_length}: AES takes 128, 192 or 256")
    return hashlib.pbkdf2_hmac(digest, secret.encode(), salt, iterations, key_length // 8)


def _aes_cbc(key: bytes, iv: bytes, data: bytes, *, encrypt: bool) -> bytes:
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    cipher = Cipher(algorithms.AES(key), modes.CBC(iv))
    if encrypt:
        padder = padding.PKCS7(128).padder()
        enc = cipher.encryptor()
        return enc.update(padder.update(data) + padder.finalize()) + enc.finalize()
    dec = cipher.decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(dec.update(data) + dec.finalize()) + unpadder.finalize()


class PasswordEncoder:
    def __init__(self, secret: str | None, old_secret: str | None = None, key_factory: str | None = None,
                 cipher: str = _CIPHER, key_length: int = 128, iterations: int = 4096) -> None:
        self.secret = secret
        self.old_secret = old_secret
        self.key_factory = key_factory or _DEFAULT_KEY_FACTORY
        self.cipher = cipher
        self.key_length = key_length
        self.iterations = iterations

    @classmethod
    def of(cls, config: BrokerConfig) -> PasswordEncoder:
        return cls(_secret(config["password.encoder.secret"]), _secret(config["password.encoder.old.secret"]),
                   config["password.encoder.keyfactory.algorithm"], config["password.encoder.cipher.algorithm"],
                   config["password.encoder.key.length"], config["password.encoder.iterations"])

    def encode(self, password: str) -> str:
        if self.secret is None:
            raise PasswordEncoderError("Password encoder secret not configured")
        if self.cipher != _CIPHER:
            raise PasswordEncoderError(f"unsupported password.encoder.cipher.algorithm {self.cipher}")
        salt, iv = os.urandom(SALT_BYTES), os.urandom(16)
        key = _key(self.secret, self.key_factory, salt, self.iterations, self.key_length)
        raw = password.encode()
        encrypted = _aes_cbc(key, iv, raw, encrypt=True)
        fields = {"keyFactoryAlgorithm": self.key_factory, "cipherAlgorithm": self.cipher,
                  "keyLength": str(self.key_length), "salt": base64.b64encode(salt).decode(),
                  "iterations": str(self.iterations), "encryptedPassword": base64.b64encode(encrypted).decode(),
                  "passwordLength": str(len(raw)), "initializationVector": base64.b64encode(iv).decode()}
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        """The password of ``encoded``, tried with the secret then the old secret (Kafka's
        password.encoder.old.secret, for a secret being rotated)."""
        secrets = [s for s in (self.secret, self.old_secret) if s is not None]
        if not secrets:
            raise PasswordEncoderError("Password encoder secret not configured")
        try:
            fields = dict(item.split(":", 1) for item in encoded.split(","))
            salt, iv = base64.b64decode(fields["salt"]), base64.b64decode(fields["initializationVector"])
            data = base64.b64decode(fields["encryptedPassword"])
            key_factory, iterations = fields["keyFactoryAlgorithm"], int(fields["iterations"])
            key_length, length = int(fields["keyLength"]), int(fields["passwordLength"])
            if fields["cipherAlgorithm"] != _CIPHER:
                raise PasswordEncoderError(f"unsupported cipher {fields['cipherAlgorithm']}")
        except (KeyError, ValueError) as exc:
            if isinstance(exc, PasswordEncoderError):
                raise
            raise PasswordEncoderError("not an encoded password") from None
        for secret in secrets:
            try:
                raw = _aes_cbc(_key(secret, key_factory, salt, iterations, key_length), iv, data, encrypt=False)
            except ValueError:
                continue  # bad padding: another secret
            if len(raw) == length:
                return raw.decode()
        raise PasswordEncoderError("the stored password cannot be decoded with password.encoder.secret "
                                   "or password.encoder.old.secret")
