"""Request decoding and response encoding over kio's generated schemas.

Handlers speak plain dicts (Kafka field names as kio spells them) so one handler serves every
version: ``build_entity`` fills the fields a version has, drops the ones it lacks and turns ints into
kio's error-code enum and timedeltas. Record batches stay opaque ``bytes`` throughout.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from tieredlog.protocol.api import api_name
from tieredlog.protocol.guard import Checker, FrameError, entity_checker
from tieredlog.protocol.schemas import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema

_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id: same in every header version
_I32 = struct.Struct(">i")


class InvalidRequest(Exception):
    """A frame that cannot be decoded: the connection is closed (Kafka does the same)."""


class UnsupportedVersion(Exception):
    """An API key or version the broker (or kio) does not know."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(payload: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id), readable even when the version is unknown."""
    if len(payload) < 8:
        raise InvalidRequest(f"request of {len(payload)} bytes is shorter than a header")
    return _HEADER_PREFIX.unpack_from(payload, 0)


_RequestCodec = tuple[type, Checker, Checker, Callable, Callable]
_reader_cache: dict[tuple[int, int], _RequestCodec] = {}


def _request_codec(api_key: int, version: int) -> _RequestCodec:
    key = (api_key, version)
    hit = _reader_cache.get(key)
    if hit is None:
        try:
            cls = load_request_schema(api_key, version)
        except (UnknownAPIKey, UnknownEntity) as exc:
            raise UnsupportedVersion(str(exc)) from None
        hdr = cls.__header_schema__
        hit = (cls, entity_checker(hdr), entity_checker(cls), entity_reader(hdr), entity_reader(cls))
        _reader_cache[key] = hit
    return hit


def decode_request(payload: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """Decode header and body of one request frame (without its size prefix).

    Unknown tagged fields are skipped by kio; trailing bytes after the body are tolerated, as Kafka
    does for requests from newer clients. Every length is checked against the bytes left before
    kio's native reader runs (``guard``): it would abort the process on a hostile array length.
    """
    api_key, version, _ = peek_header(payload)
    _, check_header, check_body, read_header, read_body = _request_codec(api_key, version)
    end = len(payload)
    try:
        check_body(payload, check_header(payload, 0, end), end)
    except FrameError as exc:
        raise InvalidRequest(f"cannot decode {api_name(api_key)} v{version}: {exc}") from None
    try:
        header, n = read_header(payload, 0)
        body, _m = read_body(payload, n)
    except Exception as exc:  # kio raises several types for short or garbled buffers
        raise InvalidRequest(f"cannot decode {api_name(api_key)} v{version}: {exc.__class__.__name__}: {exc}") from None
    return RequestHeader(api_key, version, header.correlation_id, header.client_id), body


def warm_up(versions: dict[int, tuple[int, int]]) -> int:
    """Load the request reader and response writer of the highest version of each API now.

    The first use of a kio schema imports and builds it (~35 ms for Fetch v16), which would
    otherwise land on a client's first request; the broker calls this from a background thread at
    start-up. Returns how many codecs were loaded; unknown versions are skipped."""
    loaded = 0
    for api_key, (_lo, hi) in versions.items():
        for version in range(hi, -1, -1):
            try:
                _request_codec(api_key, version)
                _response_codec(api_key, version)
            except (UnsupportedVersion, UnknownAPIKey, UnknownEntity):
                continue  # kio lacks this version: the dispatcher caps at the one below too
            loaded += 1
            break
    return loaded


# ---------------------------------------------------------------------------------------------------
# dict -> kio entity


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else tp), True
    return tp, False


def _is_subclass(tp: Any, base: type) -> bool:
    return isinstance(tp, type) and issubclass(tp, base)


def _converter(tp: Any) -> Callable[[Any], Any]:
    inner, optional = _strip_optional(tp)
    if typing.get_origin(inner) is tuple:
        item_conv = _converter(typing.get_args(inner)[0])
        conv: Callable[[Any], Any] = lambda v: tuple(item_conv(x) for x in v)  # noqa: E731
    elif isinstance(inner, type) and dataclasses.is_dataclass(inner):
        cls = inner
        conv = lambda v: v if isinstance(v, cls) else build_entity(cls, v)  # noqa: E731
    elif _is_subclass(inner, ErrorCode):
        conv = lambda v: v if isinstance(v, ErrorCode) else ErrorCode(int(v))  # noqa: E731
    elif _is_subclass(inner, datetime.timedelta) or inner is datetime.timedelta:
        conv = lambda v: v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=int(v))  # noqa: E731
    elif _is_subclass(inner, datetime.datetime) or inner is datetime.datetime:
        # Kafka's -1 "no timestamp" is a null datetime in kio where the field is nullable; where it is not
        # (DescribeTransactions' start time) the instant -1 ms from the epoch, which kio writes as -1.
        # Other ints are epoch milliseconds.
        conv = lambda v: v if isinstance(v, datetime.datetime) or v is None else (  # noqa: E731
            None if v < 0 and optional else datetime.datetime.fromtimestamp(v / 1000, tz=datetime.timezone.utc)
        )
    elif _is_subclass(inner, bool):
        conv = bool
    else:
        conv = lambda v: v  # noqa: E731
    if optional:
        base = conv
        conv = lambda v: None if v is None else base(v)  # noqa: E731
    return conv


def _zero(tp: Any) -> Any:
    inner, optional = _strip_optional(tp)
    if optional:
        return None
    if typing.get_origin(inner) is tuple:
        return ()
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        return build_entity(inner, {})
    if _is_subclass(inner, ErrorCode):
        return ErrorCode(0)
    if _is_subclass(inner, datetime.timedelta) or inner is datetime.timedelta:
        return datetime.timedelta(0)
    if _is_subclass(inner, bool):
        return False
    if _is_subclass(inner, bytes):
        return b""
    if _is_subclass(inner, str):
        return ""
    if _is_subclass(inner, uuid.UUID) or inner is uuid.UUID:
        return uuid.UUID(int=0)
    if _is_subclass(inner, float):
        return 0.0
    return 0


_plans: dict[type, list[tuple[str, Callable[[Any], Any], bool, Any]]] = {}


def _plan(cls: type) -> list[tuple[str, Callable[[Any], Any], bool, Any]]:
    plan = _plans.get(cls)
    if plan is None:
        plan = []
        for f in dataclasses.fields(cls):
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            plan.append((f.name, _converter(f.type), has_default, f.type))
        _plans[cls] = plan
    return plan


def build_entity(cls: type, data: dict[str, Any]) -> Any:
    """Build a kio entity of ``cls`` from a dict; keys the version lacks are ignored, missing
    required fields get Kafka's zero value (0, "", empty array, null for nullable fields)."""
    kwargs: dict[str, Any] = {}
    for name, conv, has_default, tp in _plan(cls):
        if name in data:
            kwargs[name] = conv(data[name])
        elif name[-1] == "_" and name[:-1] in data:
            # kio appends "_" to names that shadow Python builtins (type_, id_); Kafka's name works too
            kwargs[name] = conv(data[name[:-1]])
        elif not has_default:
            kwargs[name] = _zero(tp)
    return cls(**kwargs)


_writer_cache: dict[tuple[int, int], tuple[type, Callable, Callable, type]] = {}


def _response_codec(api_key: int, version: int) -> tuple[type, Callable, Callable, type]:
    key = (api_key, version)
    hit = _writer_cache.get(key)
    if hit is None:
        cls = load_response_schema(api_key, version)
        hdr = cls.__header_schema__
        hit = (cls, entity_writer(hdr), entity_writer(cls), hdr)
        _writer_cache[key] = hit
    return hit


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A complete response frame (size prefix included). ``body`` is a dict or a kio entity."""
    cls, write_header, write_body, hdr_cls = _response_codec(api_key, version)
    if isinstance(body, dict):
        body = build_entity(cls, body)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, hdr_cls(correlation_id=correlation_id))
    write_body(buf, body)
    out = buf.getbuffer()
    _I32.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def response_class(api_key: int, version: int) -> type:
    return _response_codec(api_key, version)[0]


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """A complete request frame; used by our own client and tests."""
    cls = load_request_schema(api_key, version)
    if isinstance(body, dict):
        body = build_entity(cls, body)
    hdr_cls = cls.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(hdr_cls)(
        buf,
        hdr_cls(
            request_api_key=i16(api_key), request_api_version=i16(version), correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    entity_writer(cls)(buf, body)
    data = bytearray(buf.getvalue())
    _I32.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(api_key: int, version: int, payload: bytes | memoryview) -> tuple[int, Any]:
    """(correlation_id, body) of a response frame without its size prefix."""
    cls = load_response_schema(api_key, version)
    header, n = entity_reader(cls.__header_schema__)(payload, 0)
    body, _ = entity_reader(cls)(payload, n)
    return header.correlation_id, body
