"""The broker's event loop: uvloop on Linux where it is installed, else asyncio's own.

uvloop runs the loop, its transports and its timers in C (libuv): per request the broker spends a
good part less CPU on the loop's own bookkeeping (callbacks, stream reads, writes), which is CPU per
byte served. ``TIEREDLOG_EVENT_LOOP=asyncio`` forces asyncio's loop (a comparison, or a bug hunt in
either loop).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

ENV = "TIEREDLOG_EVENT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory where it applies, None for asyncio's default loop."""
    if os.environ.get(ENV, "").strip().lower() == "asyncio" or not sys.platform.startswith("linux"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the loop ``loop_factory()`` chooses."""
    factory = loop_factory()
    log.debug("event loop: %s", "uvloop" if factory is not None else "asyncio")
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
