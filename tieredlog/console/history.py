"""The last hour of a few broker totals, for the console's small charts: a task on the event loop
samples them every 10 seconds into a ring; a page turns consecutive samples into rates.

The totals are counters (bytes produced, bytes fetched, remote copy and fetch bytes, remote errors)
except ``loop_lag``, a gauge (the event loop's largest lag lately), charted as it is.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

INTERVAL_S = 10.0
SAMPLES = 361  # an hour of intervals, both ends included

# name -> (title, unit, counter?); the order is the charts' order
SERIES: dict[str, tuple[str, str, bool]] = {
    "bytes_in": ("produced", "B/s", True),
    "bytes_out": ("fetched by consumers", "B/s", True),
    "remote_copy_bytes": ("copied to the remote tier", "B/s", True),
    "remote_fetch_bytes": ("read from the remote tier", "B/s", True),
    "remote_errors": ("remote copy, fetch and delete errors", "/s", True),
    "loop_lag": ("event-loop lag (max)", "s", False),
}

Totals = Callable[[], dict[str, float]]


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # time.time()
    values: dict[str, float]


class History:
    def __init__(self, totals: Totals, interval_s: float = INTERVAL_S) -> None:
        self._totals = totals
        self.interval_s = interval_s
        self._samples: deque[Sample] = deque(maxlen=SAMPLES)

    def sample(self, now: float | None = None) -> None:
        """On the event loop: the totals read from memory."""
        self._samples.append(Sample(time.time() if now is None else now, self._totals()))

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval_s)

    def samples(self) -> tuple[Sample, ...]:
        return tuple(self._samples)


def points(samples: tuple[Sample, ...], name: str) -> list[tuple[float, float]]:
    """(time, value) per interval: a counter's rate per second (0 across a reset), a gauge as sampled."""
    counter = SERIES[name][2]
    if not counter:
        return [(s.at, s.values.get(name, 0.0)) for s in samples]
    out = []
    for a, b in zip(samples, samples[1:]):
        dt = b.at - a.at
        delta = b.values.get(name, 0.0) - a.values.get(name, 0.0)
        out.append((b.at, max(delta, 0.0) / dt if dt > 0 else 0.0))
    return out
