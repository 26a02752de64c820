"""Delayed operations: requests parked until a partition changes or their time runs out.

A Fetch that has less than ``min_bytes`` waits on the partitions it reads; an append to any of them
wakes it (Kafka's fetch purgatory, keyed by partition). Waiting is a future on the event loop and a
loop timer, so a parked request never blocks the loop and costs nothing while it sleeps.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Hashable, Iterable


class PartitionWatchers:
    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[asyncio.Future]] = defaultdict(set)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """Wait until ``notify`` is called for one of ``keys`` or ``timeout`` seconds pass.
        True if woken by an append."""
        if timeout <= 0:
            return False
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for k in keys:
            self._watchers[k].add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            for k in keys:
                s = self._watchers.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._watchers[k]
            if not fut.done():
                fut.cancel()

    def size(self) -> int:
        """Watches of parked requests over all keys (Kafka's PurgatorySize); any thread may ask."""
        return sum(len(s) for s in list(self._watchers.values()))

    def notify(self, key: Hashable) -> None:
        for fut in self._watchers.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._watchers):
            self.notify(key)
