"""Kafka's string form of a Uuid (``Uuid.toString()``): URL-safe base64 of the 16 bytes, no padding.

Topic ids in ``partition.metadata``, remote object keys and manifests, the remote index cache's file
names and the tools all print or parse this form. It lives here, outside every layer and with nothing
but the standard library, because both the log (below the RSM) and the RSM (which must not import
the broker: a plugin author imports only ``tieredlog.rsm``) need it.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid

__all__ = ["uuid_to_kafka_str", "kafka_str_to_uuid", "KAFKA_UUID_PATTERN"]

# 22 characters carry 132 bits: the last one holds 2 bits of the uuid and 4 spare bits.
KAFKA_UUID_PATTERN = r"[A-Za-z0-9_-]{22}"
_KAFKA_UUID = re.compile(KAFKA_UUID_PATTERN)


def uuid_to_kafka_str(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: 22 characters."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def kafka_str_to_uuid(s: str) -> uuid.UUID:
    """Inverse of :func:`uuid_to_kafka_str`; ValueError for anything it would not have written.

    Non-zero spare bits are refused: two strings naming one uuid would let one segment or topic
    appear under two keys (Kafka's parser ignores them, and writes only the canonical form)."""
    if not isinstance(s, str) or not _KAFKA_UUID.fullmatch(s):
        raise ValueError(f"{s!r} is not a Kafka uuid (expected 22 URL-safe base64 characters)")
    try:
        raw = base64.b64decode(s + "==", altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{s!r} is not a Kafka uuid (invalid base64url)") from None
    u = uuid.UUID(bytes=raw)
    if uuid_to_kafka_str(u) != s:
        raise ValueError(f"{s!r} is not a canonical Kafka uuid (its spare low bits are not zero)")
    return u
