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
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

from tieredlog.kafka_uuid import kafka_str_to_uuid, uuid_to_kafka_str

MANIFEST_VERSION = 1
# A manifest is about 1 KiB; anything this big is not one.
MAX_MANIFEST_BYTES = 1 << 20


class ManifestError(ValueError):
    """Bytes that are not a manifest of a version this code reads."""


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """The fields of a manifest, typed."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int  # inclusive
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    tx_index_present: bool
    file_sizes: Mapping[str, int]  # suffix -> bytes of the object ``<stem>.<suffix>``


def encode_manifest(manifest: SegmentManifest, stem: str) -> bytes:
    m = manifest
    body = {
        "version": MANIFEST_VERSION,
        "topic": m.topic,
        "topic_id": uuid_to_kafka_str(m.topic_id),
        "partition": m.partition,
        "segment_id": uuid_to_kafka_str(m.segment_id),
        "start_offset": m.start_offset,
        "end_offset": m.end_offset,
        "max_timestamp_ms": m.max_timestamp_ms,
        "broker_id": m.broker_id,
        "event_timestamp_ms": m.event_timestamp_ms,
        "segment_size_in_bytes": m.segment_size_in_bytes,
        "segment_leader_epochs": [[e, o] for e, o in sorted(m.segment_leader_epochs.items())],
        "tx_index_present": m.tx_index_present,
        "files": {suffix: {"name": f"{stem}.{suffix}", "size": size} for suffix, size in m.file_sizes.items()},
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


def manifest_fields(body: Mapping[str, Any]) -> SegmentManifest:
    """The typed fields of a decoded manifest; ManifestError naming the first field that is missing or
    of the wrong type. Whether they describe the segment the reader expects is the reader's check."""
    try:
        return SegmentManifest(
            topic=str(body["topic"]),
            topic_id=kafka_str_to_uuid(str(body["topic_id"])),
            partition=int(body["partition"]),
            segment_id=kafka_str_to_uuid(str(body["segment_id"])),
            start_offset=int(body["start_offset"]),
            end_offset=int(body["end_offset"]),
            max_timestamp_ms=int(body["max_timestamp_ms"]),
            broker_id=int(body["broker_id"]),
            event_timestamp_ms=int(body["event_timestamp_ms"]),
            segment_size_in_bytes=int(body["segment_size_in_bytes"]),
            segment_leader_epochs={int(e): int(o) for e, o in body["segment_leader_epochs"]},
            tx_index_present=bool(body.get("tx_index_present", False)),
            file_sizes={str(suffix): int(f["size"]) for suffix, f in body["files"].items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ManifestError(f"{type(exc).__name__}: {exc}") from None
