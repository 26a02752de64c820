"""The remote segment manifest: the JSON object every built-in RemoteStorageManager writes **last**
beside a segment's objects (``<stem>.manifest``), so its presence is the commit marker a reader without
a broker trusts, and its body is everything such a reader needs of the segment. Keys are sorted so
the same segment always gives the same bytes.

Version 1: ``version``, ``topic``, ``topic_id`` and ``segment_id`` (Kafka's base64url UUIDs),
``partition``, ``start_offset``, ``end_offset`` (inclusive), ``max_timestamp_ms``, ``broker_id``,
``event_timestamp_ms``, ``segment_size_in_bytes``, ``segment_leader_epochs`` (``[[epoch, start
offset], ...]`` by epoch), ``tx_index_present`` and ``files`` (suffix -> ``{"name", "size"}``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

MANIFEST_VERSION = 1
# A manifest is about 1 KiB; anything this big is not one.
MAX_MANIFEST_BYTES = 1 << 20


class ManifestError(ValueError):
    """Bytes that are not a manifest of a version this code reads."""


def encode_manifest(
    *,
    topic: str,
    topic_id: str,
    partition: int,
    segment_id: str,
    start_offset: int,
    end_offset: int,
    max_timestamp_ms: int,
    broker_id: int,
    event_timestamp_ms: int,
    segment_size_in_bytes: int,
    segment_leader_epochs: Mapping[int, int],
    tx_index_present: bool,
    stem: str,
    object_sizes: Mapping[str, int],
) -> bytes:
    """``object_sizes`` maps each stored file's suffix to its size; its object is ``<stem>.<suffix>``."""
    body = {
        "version": MANIFEST_VERSION,
        "topic": topic,
        "topic_id": topic_id,
        "partition": partition,
        "segment_id": segment_id,
        "start_offset": start_offset,
        "end_offset": end_offset,
        "max_timestamp_ms": max_timestamp_ms,
        "broker_id": broker_id,
        "event_timestamp_ms": event_timestamp_ms,
        "segment_size_in_bytes": segment_size_in_bytes,
        "segment_leader_epochs": [[e, o] for e, o in sorted(segment_leader_epochs.items())],
        "tx_index_present": tx_index_present,
        "files": {suffix: {"name": f"{stem}.{suffix}", "size": size} for suffix, size in object_sizes.items()},
    }
    return json.dumps(body, sort_keys=True).encode()


def decode_manifest(data: bytes) -> dict[str, Any]:
    """The manifest's JSON object; its fields are checked by whoever uses them."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"segment manifest is over {MAX_MANIFEST_BYTES} bytes")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:  # deep nesting is a RecursionError
        raise ManifestError(f"segment manifest is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ManifestError("segment manifest is not an object")
    if body.get("version") != MANIFEST_VERSION:
        raise ManifestError(f"unsupported segment manifest version {body.get('version')!r}")
    return body
