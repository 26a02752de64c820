"""Small helpers every test module shares: waiting for evidence, free loopback ports, a clock the
test moves, and the part of the LogManager the RLM uses."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from tieredlog.tools import dev_cluster_s3
from tieredlog.tools.dev_cluster_s3 import port_free

T = TypeVar("T")


def wait_for(cond: Callable[[], T], what: str = "condition", timeout_s: float = 40.0, interval_s: float = 0.05) -> T:
    """Poll ``cond`` until it returns something truthy and return that; fail the test after
    ``timeout_s`` (a hang guard, never a performance bound)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def free_port(also_free_plus: int | None = None) -> int:
    """A free loopback port; with ``also_free_plus`` (SeaweedFS derives gRPC ports as port+10000)
    the derived port is free too."""
    return dev_cluster_s3.free_port(also_free_plus or 0)


def consecutive_free_ports(n: int) -> int:
    """The first of ``n`` free loopback ports in a row, below the kernel's ephemeral range. A command
    told a base port binds the ports one after another, seconds apart; a port from the ephemeral range
    can meanwhile become the local end of any outgoing connection, or another test's free port."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10000, max(low - n, 10001))
        if all(port_free(base + i) for i in range(n)):  # as dev-cluster checks them
            return base
    raise AssertionError(f"no {n} consecutive free ports on 127.0.0.1 below {low}")


class FakeClock:
    """A monotonic clock that moves only when the test sets ``t``."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Logs:
    """The part of the LogManager the RLM uses (its ``LogProvider``), over the given logs."""

    def __init__(self, *logs: Any) -> None:
        self.logs = {tuple(plog.topic_partition): plog for plog in logs}

    def get_log(self, tp: Any) -> Any:
        return self.logs.get(tuple(tp))

    def all_logs(self) -> list[Any]:
        return list(self.logs.values())


def kio_sample(tp: Any) -> Any:
    """A value of a kio field type (a request class: a whole request) with one element in every array,
    so nested builders are exercised: "x", 1, False, zero bytes, a random uuid, a zero timedelta."""
    import dataclasses
    import datetime
    import types
    import typing
    import uuid

    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) is tuple:
        return (kio_sample(typing.get_args(tp)[0]),)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp(**{f.name: kio_sample(f.type) for f in dataclasses.fields(tp)})
    for base, value in ((bool, False), (bytes, b"\x00" * 32), (str, "x"), (datetime.timedelta, datetime.timedelta(0)),
                        (uuid.UUID, uuid.uuid4()), (float, 0.0)):
        if isinstance(tp, type) and issubclass(tp, base):
            return tp(value) if base not in (uuid.UUID, datetime.timedelta) else value
    return tp(1) if isinstance(tp, type) else 1
