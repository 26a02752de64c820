"""Where the console's snapshots come from: ``take`` scheduled onto the broker's event loop from the
HTTP server's thread, then the remote tier's part added on that thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import TYPE_CHECKING, Iterable

from tieredlog.console.history import History
from tieredlog.console.model import Prices, Snapshot
from tieredlog.console.snapshot import UsageSource, add_remote_tier, take, with_usage

if TYPE_CHECKING:
    from tieredlog.console.contracts import AssignmentDecoder, BrokerState


class LoopSnapshotSource:
    def __init__(self, broker: BrokerState, loop: asyncio.AbstractEventLoop, prices: Prices, usage: UsageSource,
                 history: History | None = None, timeout_s: float = 10.0,
                 decode_assignment: AssignmentDecoder | None = None) -> None:
        self._broker = broker
        self._decode_assignment = decode_assignment
        self._history = history
        self._loop = loop
        self._prices = prices
        self._usage = usage
        self._timeout_s = timeout_s
        self._started_ms = time.time_ns() // 1_000_000

    def __call__(self, topics: Iterable[str] | None) -> Snapshot:
        """An HTTP server thread: never the loop itself (it would wait on its own work)."""
        topics = None if topics is None else tuple(topics)
        fut: concurrent.futures.Future[Snapshot] = concurrent.futures.Future()

        def run() -> None:
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(take(self._broker, self._prices, self._started_ms, self._history, topics or (),
                                       self._decode_assignment))
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                    fut.set_exception(exc)

        try:
            self._loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop is closed: the broker is stopping
            raise TimeoutError("the broker's event loop is closed") from None
        try:
            snapshot = fut.result(self._timeout_s)
        finally:
            fut.cancel()
        return add_remote_tier(with_usage(snapshot, self._usage), self._broker, topics)
