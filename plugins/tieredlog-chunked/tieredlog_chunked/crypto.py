"""Envelope encryption: one random AES-256 data key per segment, wrapped (AES-GCM) by a master key
from the key ring. The wrapped key is stored as ``<key id>:<base64(nonce + ciphertext)>`` so old
master keys keep decrypting old segments after the active key id changes (rotation)."""

from __future__ import annotations

import base64
import binascii
import os
import re
import uuid

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tieredlog.rsm import RemoteStorageException

NONCE_SIZE = 12
TAG_SIZE = 16
OVERHEAD = NONCE_SIZE + TAG_SIZE
KEY_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


class KeyRing:
    """Master keys by id; ``active`` wraps new data keys. Key bytes are never logged or shown."""

    def __init__(self, keys: dict[str, bytes], active: str) -> None:
        for key_id, key in keys.items():
            if not KEY_ID_RE.fullmatch(key_id):
                raise ValueError(f"encryption key id {key_id!r} must match [A-Za-z0-9._-]{{1,64}}")
            if len(key) != 32:
                raise ValueError(f"encryption key {key_id!r} must be 32 bytes (AES-256), got {len(key)}")
        if active not in keys:
            raise ValueError(f"active encryption key id {active!r} is not in encryption.keys.*")
        self._keys = dict(keys)
        self.active = active

    @staticmethod
    def decode_key(key_id: str, text: str) -> bytes:
        try:
            return base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"encryption key {key_id!r} is not valid base64") from None

    def wrap(self, data_key: bytes, segment_id: uuid.UUID) -> str:
        nonce = os.urandom(NONCE_SIZE)
        sealed = AESGCM(self._keys[self.active]).encrypt(nonce, data_key, b"dek:" + segment_id.bytes)
        return f"{self.active}:{base64.b64encode(nonce + sealed).decode()}"

    def unwrap(self, wrapped: str, segment_id: uuid.UUID) -> bytes:
        key_id, _, payload = wrapped.partition(":")
        if key_id not in self._keys:
            raise RemoteStorageException(f"segment {segment_id} is encrypted with key id {key_id!r}, "
                                         "which is not in encryption.keys.*")
        try:
            raw = base64.b64decode(payload)
            return AESGCM(self._keys[key_id]).decrypt(raw[:NONCE_SIZE], raw[NONCE_SIZE:], b"dek:" + segment_id.bytes)
        except (InvalidTag, ValueError, binascii.Error):
            raise RemoteStorageException(
                f"cannot unwrap the data key of segment {segment_id} with key id {key_id!r} (wrong key?)") from None


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def seal(data_key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """``nonce | ciphertext | tag``. A random nonce is safe: each data key seals at most a few
    thousand messages (one per chunk and index of one segment)."""
    nonce = os.urandom(NONCE_SIZE)
    return nonce + AESGCM(data_key).encrypt(nonce, plaintext, aad)


def open_sealed(data_key: bytes, sealed: bytes, aad: bytes) -> bytes:
    try:
        return AESGCM(data_key).decrypt(sealed[:NONCE_SIZE], sealed[NONCE_SIZE:], aad)
    except InvalidTag:
        raise RemoteStorageException("encrypted chunk failed authentication (corrupt or tampered)") from None
