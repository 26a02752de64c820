"""acks=all appends parked until the ISR has them: Kafka's produce purgatory, keyed by partition.

A waiter is a future on the event loop; every high-watermark move, ISR change or leadership change of
its partition checks it again. Nothing polls and nothing blocks.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Callable

from tieredlog.errors import RequestTimedOutError
from tieredlog.log.types import TopicPartition

# (done, error class or None), as Partition.check_enough_replicas_reach_offset answers
Check = Callable[[], tuple[bool, "type[Exception] | None"]]


class DelayedProduce:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, list[tuple[Check, asyncio.Future]]] = defaultdict(list)

    async def wait(self, tp: TopicPartition, check: Check, timeout_s: float) -> type[Exception] | None:
        """Wait until ``check`` says done; its error, or RequestTimedOutError after ``timeout_s``."""
        done, error = check()
        if done:
            return error
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = (check, fut)
        self._waiters[tp].append(entry)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            return RequestTimedOutError
        finally:
            waiters = self._waiters.get(tp)
            if waiters is not None:
                try:
                    waiters.remove(entry)
                except ValueError:
                    pass
                if not waiters:
                    del self._waiters[tp]

    def size(self) -> int:
        """Parked appends (Kafka's PurgatorySize of the Produce purgatory); any thread may ask."""
        return sum(len(w) for w in list(self._waiters.values()))

    def check(self, tp: TopicPartition) -> None:
        """The partition changed: complete every waiter that is done now."""
        waiters = self._waiters.get(tp)
        if not waiters:
            return
        for check, fut in list(waiters):
            if fut.done():
                continue
            done, error = check()
            if done:
                fut.set_result(error)

    def check_all(self) -> None:
        for tp in list(self._waiters):
            self.check(tp)

    def __len__(self) -> int:
        return sum(len(w) for w in self._waiters.values())


class DelayedDeleteRecords(DelayedProduce):
    """DeleteRecords parked until every live replica's log start offset has reached the requested offset
    (Kafka's delete-records purgatory): the same waiters, checked when a follower's fetch reports a new
    log start offset or leadership moves."""
