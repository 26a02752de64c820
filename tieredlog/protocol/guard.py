"""Bounds every length in a request frame before kio's native reader sees it.

kio's reader sizes an array's storage from its length field before reading any item, and a failed
allocation in its native code aborts the process: one frame whose array length says 2^32 would end
the broker. Kafka's generated readers refuse such a frame ("tried to allocate a collection of size
N, but there are only M bytes remaining"); this module does the same walk first. It reads only the
lengths the schema says are there and allocates nothing per item, so what kio then builds is
bounded by a small multiple of the frame's size.

A checker is built once per kio entity class from the same field metadata kio's writer uses
(``kafka_type``, nullability from the type, tags) and then called as ``check(buf, pos, end) -> pos``.
It runs before every request's decode, so it is generated as straight-line Python per class (one
function call per struct, fixed-width fields skipped together): a walk of interpreted steps cost
more than kio's own decode.
Kafka's rules are applied where they are stricter than "fits in the frame": a null in a field the
schema does not allow to be null is malformed ("non-nullable field was serialized as null"), and an
unsigned varint has at most five bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
import types
import typing
from typing import Any, Callable

from kio.serial._introspect import get_field_tag

from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.varint import read_uvarint

Checker = Callable[[Any, int, int], int]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_FIXED_WIDTH = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip


class FrameError(ValueError):
    """A length or value that the frame cannot hold; the message says which field and where."""


def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    # Kafka's unsigned varints in the protocol are 32-bit: at most five bytes
    if end - pos >= 5 and all(b >= 0x80 for b in buf[pos : pos + 5]):
        raise FrameError(f"varint longer than 5 bytes at byte {pos}")
    try:
        value, after = read_uvarint(buf, pos)
    except CorruptRecordError:
        after = end + 1
    if after > end:
        raise FrameError(f"varint cut off at byte {pos}")
    return value, after


def _short(name: str, pos: int, size: int, end: int) -> FrameError:
    return FrameError(f"{name}: {size} bytes at byte {pos}, only {max(end - pos, 0)} left")


def _null(name: str) -> FrameError:
    return FrameError(f"non-nullable field {name} was serialized as null")


def _bad_length(name: str, n: int) -> FrameError:
    return FrameError(f"{name}: length {n}")


def _too_many(name: str, n: int, pos: int, end: int) -> FrameError:
    return FrameError(f"{name}: array of {n} items at byte {pos}, only {end - pos} bytes left")


def _tags(name: str, buf: Any, pos: int, end: int, known: dict[int, Checker]) -> int:
    count, pos = _uvarint(buf, pos, end)
    if count * 2 > end - pos:  # each tag takes a tag and a size varint at least
        raise FrameError(f"{name}: {count} tagged fields at byte {pos}, only {end - pos} bytes left")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        if size > end - pos:
            raise _short(f"{name} tag {tag}", pos, size, end)
        inner = known.get(tag)
        if inner is not None:
            inner(buf, pos, pos + size)
        pos += size
    return pos


def _optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


class _Source:
    """Python source of checker functions; ``compile`` turns one into a function."""

    _ids = itertools.count()

    def __init__(self) -> None:
        self.env: dict[str, Any] = {
            "_uvarint": _uvarint, "_short": _short, "_null": _null, "_bad_length": _bad_length,
            "_too_many": _too_many, "_tags": _tags, "_I16": _I16, "_I32": _I32,
        }  # fmt: skip

    def ref(self, value: Any) -> str:
        """A global name of the generated code bound to ``value``."""
        name = f"_g{next(self._ids)}"
        self.env[name] = value
        return name

    def compile(self, lines: list[str]) -> Checker:
        src = "def check(buf, pos, end):\n" + "".join(f"    {ln}\n" for ln in lines) + "    return pos\n"
        scope: dict[str, Any] = {}
        exec(compile(src, "<tieredlog.protocol.guard>", "exec"), self.env, scope)
        return typing.cast(Checker, scope["check"])


def _indent(lines: list[str]) -> list[str]:
    return ["    " + ln for ln in lines]


def _read_uvarint(name: str) -> list[str]:
    """Code leaving an unsigned varint in ``n``; one byte inline, longer ones by ``_uvarint``."""
    return [
        f"if pos >= end: raise _short({name!r}, pos, 1, end)",
        "n = buf[pos]",
        "if n < 0x80: pos += 1",
        "else: n, pos = _uvarint(buf, pos, end)",
    ]


def _fixed_code(name: str, width: int) -> list[str]:
    return [f"pos += {width}", f"if pos > end: raise _short({name!r}, pos - {width}, {width}, end)"]


def _string_code(name: str, kafka_type: str, flexible: bool, nullable: bool) -> list[str]:
    null = "pass" if nullable else f"raise _null({name!r})"
    if flexible:
        return _read_uvarint(name) + [
            "if n:",
            "    pos += n - 1",
            f"    if pos > end: raise _short({name!r}, pos - n + 1, n - 1, end)",
            f"else: {null}",
        ]
    prefix, width = ("_I16", 2) if kafka_type == "string" else ("_I32", 4)
    return [
        f"if pos + {width} > end: raise _short({name!r}, pos, {width}, end)",
        f"n = {prefix}.unpack_from(buf, pos)[0]",
        f"pos += {width}",
        "if n >= 0:",
        "    pos += n",
        f"    if pos > end: raise _short({name!r}, pos - n, n, end)",
        f"elif n != -1: raise _bad_length({name!r}, n)",
        f"else: {null}",
    ]


def _scalar(name: str, kafka_type: str, flexible: bool, nullable: bool) -> tuple[list[str], int]:
    """(code, fixed width or 0) of one non-array, non-struct value."""
    width = _FIXED_WIDTH.get(kafka_type)
    if width is not None:
        return _fixed_code(name, width), width
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"no length rule for kafka type {kafka_type!r} of {name}")
    return _string_code(name, kafka_type, flexible, nullable), 0


def _array_code(src: _Source, name: str, flexible: bool, nullable: bool, item: str, item_width: int) -> list[str]:
    """``item_width`` > 0: fixed-size items skipped in one step; else ``item`` names their checker."""
    if flexible:
        head = _read_uvarint(name) + ["n -= 1"]
    else:
        head = [
            f"if pos + 4 > end: raise _short({name!r}, pos, 4, end)",
            "n = _I32.unpack_from(buf, pos)[0]",
            "pos += 4",
        ]
    # every item takes at least one byte: a count the rest of the frame cannot hold is refused
    # before kio allocates anything for it
    body = [f"if n * {max(item_width, 1)} > end - pos: raise _too_many({name!r}, n, pos, end)"]
    if item_width:
        body.append(f"pos += n * {item_width}")
    else:
        body.append(f"for _ in range(n): pos = {item}(buf, pos, end)")
    null = "pass" if nullable else f"raise _null({name!r})"
    return head + ["if n >= 0:", *_indent(body), f"elif n != -1: raise _bad_length({name!r}, n)", f"else: {null}"]


def _field_code(src: _Source, owner: type, field: dataclasses.Field, flexible: bool, tagged: bool) -> tuple[list[str], int]:
    name = f"{owner.__name__}.{field.name}"
    if owner.__name__ == "RequestHeader" and field.name == "client_id":
        # Kafka keeps the header's client id a legacy nullable string in every header version
        return _string_code(name, "string", False, True), 0
    tp, nullable = _optional(field.type)
    if tagged:
        # a tagged string or array may carry null, kio decides whether the field allows it; a tagged
        # struct is written without a null marker (its absence is the tag's absence)
        nullable = not dataclasses.is_dataclass(tp)
    if typing.get_origin(tp) is tuple:
        item_tp, _ = _optional(typing.get_args(tp)[0])
        if dataclasses.is_dataclass(item_tp):
            item, width = src.ref(entity_checker(typing.cast(type, item_tp))), 0
        else:
            code, width = _scalar(name, field.metadata["kafka_type"], flexible, False)
            item = "" if width else src.ref(src.compile(code))
        return _array_code(src, name, flexible, nullable, item, width), 0
    if dataclasses.is_dataclass(tp):
        inner = src.ref(entity_checker(typing.cast(type, tp)))
        if not nullable:
            return [f"pos = {inner}(buf, pos, end)"], 0
        return [
            f"if pos >= end: raise _short({name!r}, pos, 1, end)",
            "if buf[pos] >= 0x80: pos += 1",  # a negative int8 marker: null (KIP-893)
            f"else: pos = {inner}(buf, pos + 1, end)",
        ], 0
    return _scalar(name, field.metadata["kafka_type"], flexible, nullable)


_checkers: dict[type, Checker] = {}


def entity_checker(cls: type) -> Checker:
    """The length checker of one kio entity class (cached)."""
    hit = _checkers.get(cls)
    if hit is not None:
        return hit
    src = _Source()
    flexible = bool(getattr(cls, "__flexible__", False))
    lines: list[str] = []
    run = 0  # adjacent fixed-width fields are skipped as one step
    tags: dict[int, Checker] = {}
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        code, width = _field_code(src, cls, field, flexible, tag is not None)
        if tag is not None:
            tags[int(tag)] = src.compile(code)
        elif width:
            run += width
        else:
            if run:
                lines += _fixed_code(cls.__name__, run)
                run = 0
            lines += code
    if run:
        lines += _fixed_code(cls.__name__, run)
    if flexible:
        lines += [
            "if pos < end and buf[pos] == 0: pos += 1",  # no tagged fields: the common case
            f"else: pos = _tags({cls.__name__!r}, buf, pos, end, {src.ref(tags)})",
        ]
    check = src.compile(lines)
    _checkers[cls] = check
    return check
