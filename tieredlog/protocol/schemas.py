"""Where a request or response class comes from: our inter-broker schemas first, then kio.

kio generates the schemas of Kafka 4, which dropped LeaderAndIsr, StopReplica, UpdateMetadata and
ControlledShutdown; a ZooKeeper-mode cluster needs them, so ``inter_broker`` supplies them in kio's
shape. Everything else, including the errors for unknown keys and versions, is kio's, so callers
that catch ``UnknownAPIKey`` / ``UnknownEntity`` keep working.
"""

from __future__ import annotations

from kio.index import UnknownAPIKey, UnknownEntity
from kio.index import load_request_schema as _kio_request_schema
from kio.index import load_response_schema as _kio_response_schema
from kio.static.protocol import RequestPayload, ResponsePayload

from tieredlog.protocol.inter_broker import REQUESTS, RESPONSES

__all__ = ["UnknownAPIKey", "UnknownEntity", "load_request_schema", "load_response_schema"]

_INTER_BROKER_KEYS = frozenset(key for key, _ in REQUESTS)


def _unknown_version(api_key: int, version: int, kind: str) -> UnknownEntity:
    # kio knows these keys' names but none of their versions; say which version we do serve
    served = sorted(v for k, v in REQUESTS if k == api_key)
    return UnknownEntity(f"no {kind} schema for api key {api_key} v{version} (inter-broker versions: {served})")


def load_request_schema(api_key: int, version: int) -> type[RequestPayload]:
    cls = REQUESTS.get((api_key, version))
    if cls is not None:
        return cls
    if api_key in _INTER_BROKER_KEYS:
        raise _unknown_version(api_key, version, "request")
    return _kio_request_schema(api_key, version)


def load_response_schema(api_key: int, version: int) -> type[ResponsePayload]:
    cls = RESPONSES.get((api_key, version))
    if cls is not None:
        return cls
    if api_key in _INTER_BROKER_KEYS:
        raise _unknown_version(api_key, version, "response")
    return _kio_response_schema(api_key, version)
