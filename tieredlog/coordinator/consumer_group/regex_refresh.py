"""When and how a consumer group's regexes are resolved: Kafka's GroupMetadataManager
maybeUpdateRegularExpressions (the conditions) and refreshRegularExpressions (the work).

Kafka resolves them on an executor, apart from the heartbeat that asked: that heartbeat is answered
without the regex's topics, and the result, when it lands, may bump the group epoch. Here the work runs on
the event loop after the heartbeat, a slice of topic names per loop turn, so a large metadata never
holds the loop for long. A group has at most one resolution under way, and resolves again at most every
REGEX_BATCH_REFRESH_INTERVAL_MS, when a regex is unresolved or topics changed.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable, Iterable, Mapping

from tieredlog.coordinator.consumer_group.group import ConsumerGroup
from tieredlog.coordinator.consumer_group.regex import matching_topics
from tieredlog.coordinator.timer import Cancellable, Scheduler

# Kafka's GroupMetadataManager.REGEX_BATCH_REFRESH_INTERVAL_MS
REGEX_BATCH_REFRESH_INTERVAL_MS = 10_000
# topic names matched per loop turn: a few milliseconds of the loop each
RESOLVE_SLICE = 5_000


def fingerprint(names: Iterable[str]) -> int:
    """Of a set of topic names, in any order and any number of slices (XOR the slices' fingerprints)."""
    return functools.reduce(operator.xor, map(hash, names), 0)


def subscribed_regexes(group: ConsumerGroup) -> set[str]:
    return {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}


def needs_refresh(group: ConsumerGroup, require: bool, now_ms: int,
                  topics: Callable[[], Mapping[str, object]]) -> bool:
    """Kafka's conditions: the group has regexes, none is being resolved, the last resolution (or the
    last look for new topics) is over REGEX_BATCH_REFRESH_INTERVAL_MS old, and ``require`` (a regex new
    to the group), a regex without resolution, or topics that changed since the last one."""
    used = subscribed_regexes(group)
    if not used or group.regex_refresh is not None:
        return False
    last = max([r.timestamp_ms for r in group.resolved_regexes.values()] + [group.regex_checked_ms])
    if now_ms <= last + REGEX_BATCH_REFRESH_INTERVAL_MS:
        return False
    if require or not used <= group.resolved_regexes.keys():
        return True
    # Kafka compares metadata offsets; without one the topic names are compared, and at most once an interval
    group.regex_checked_ms = now_ms
    return group.regex_topics_fingerprint != fingerprint(topics())


class RegexResolution:
    """One resolution of ``regexes`` over a snapshot of the topic names, a slice per loop turn; ``done``
    gets each regex's matching topics unless the resolution was cancelled or ``wanted`` says the group
    is no longer served here."""

    def __init__(self, scheduler: Scheduler, regexes: list[str], names: list[str],
                 wanted: Callable[[], bool], done: Callable[[dict[str, frozenset[str]]], None]) -> None:
        self.scheduler = scheduler
        self.regexes = regexes
        self.names = names
        self.wanted = wanted
        self.done = done
        self.matched: dict[str, set[str]] = {r: set() for r in regexes}
        # the names' fingerprint, built a slice at a time too: what the regexes were resolved against
        self.fingerprint = 0
        self._next: Cancellable | None = None
        self._cancelled = False

    def start(self) -> None:
        self._schedule(0)

    def cancel(self) -> None:
        self._cancelled = True
        if self._next is not None:
            self._next.cancel()

    def _schedule(self, start: int) -> None:
        self._next = self.scheduler.call_later(0, lambda: self._step(start))

    def _step(self, start: int) -> None:
        if self._cancelled or not self.wanted():
            return
        names = self.names[start:start + RESOLVE_SLICE]
        for regex in self.regexes:
            self.matched[regex] |= matching_topics(regex, names)
        self.fingerprint ^= fingerprint(names)
        if start + RESOLVE_SLICE < len(self.names):
            self._schedule(start + RESOLVE_SLICE)
            return
        self.done({r: frozenset(m) for r, m in self.matched.items()})
