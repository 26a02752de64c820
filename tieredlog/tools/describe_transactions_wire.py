"""DescribeTransactions (65) v0 responses read by hand, for the transactions tool.

Kafka answers a start time of -1 for a transaction that has not begun (state Empty) and for a
transactional id it does not know; kio's reader refuses negative timestamps, so this frame is not
given to kio. Flexible-version primitives only: compact strings and arrays, tagged fields skipped.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, TypeVar

from tieredlog.clients.errors import KafkaProtocolError
from tieredlog.formats.errors import CorruptRecordError
from tieredlog.formats.varint import read_uvarint

T = TypeVar("T")


class _Reader:
    """Kafka's flexible-version primitives over one response frame."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _fixed(self, fmt: struct.Struct) -> Any:
        if self.pos + fmt.size > len(self.buf):
            raise KafkaProtocolError(f"DescribeTransactions response truncated at byte {self.pos}")
        (v,) = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return v

    def i16(self) -> int:
        return int(self._fixed(_I16))

    def i32(self) -> int:
        return int(self._fixed(_I32))

    def i64(self) -> int:
        return int(self._fixed(_I64))

    def uvarint(self) -> int:
        try:
            v, self.pos = read_uvarint(self.buf, self.pos)
        except CorruptRecordError as exc:
            raise KafkaProtocolError(f"DescribeTransactions response: {exc}") from None
        return v

    def string(self) -> str:
        n = self.uvarint() - 1
        if n < 0 or self.pos + n > len(self.buf):
            raise KafkaProtocolError(f"DescribeTransactions response: bad string of {n} bytes at {self.pos}")
        s = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def array(self, item: Callable[[], T]) -> list[T]:
        return [item() for _ in range(max(self.uvarint() - 1, 0))]

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.pos += self.uvarint()


_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def decode_describe_transactions(payload: bytes) -> tuple[int, list[dict[str, Any]]]:
    """(correlation id, transaction states) of a DescribeTransactions v0 response frame."""
    r = _Reader(bytes(payload))
    correlation_id = r.i32()
    r.tagged_fields()  # response header v1
    r.i32()  # throttle time

    def topic() -> tuple[str, list[int]]:
        name = r.string()
        partitions = r.array(r.i32)
        r.tagged_fields()
        return name, partitions

    def state() -> dict[str, Any]:
        s = {"error_code": r.i16(), "transactional_id": r.string(), "transaction_state": r.string(),
             "transaction_timeout_ms": r.i32(), "transaction_start_time_ms": r.i64(), "producer_id": r.i64(),
             "producer_epoch": r.i16(), "topics": r.array(topic)}
        r.tagged_fields()
        return s

    states = r.array(state)
    r.tagged_fields()
    return correlation_id, states
