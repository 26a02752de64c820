"""Server-side assignors of KIP-848 consumer groups: `uniform` and `range` (group.consumer.assignors).

An assignor sees the members' subscriptions (topic ids), the partition counts of the subscribed topics and
the group's current target assignment, and returns the next target assignment. The coordinator then moves
each member towards it incrementally (reconciliation.py); an assignor never has to care about revocation.
"""

from __future__ import annotations

import uuid
from typing import Mapping, Protocol

# topic id -> partitions
Partitions = dict[uuid.UUID, frozenset[int]]


class Assignor(Protocol):
    name: str

    def assign(self, subscriptions: Mapping[str, frozenset[uuid.UUID]], partition_counts: Mapping[uuid.UUID, int],
               current: Mapping[str, Partitions]) -> dict[str, Partitions]: ...


def _freeze(owned: dict[uuid.UUID, set[int]]) -> Partitions:
    return {t: frozenset(ps) for t, ps in owned.items() if ps}


class UniformAssignor:
    """Balanced and sticky: every member ends with floor or ceil of its fair share of the partitions it
    can take, and keeps as many of its current partitions as that allows, so a scale-out or scale-in
    moves only the partitions that must move."""

    name = "uniform"

    def assign(self, subscriptions: Mapping[str, frozenset[uuid.UUID]], partition_counts: Mapping[uuid.UUID, int],
               current: Mapping[str, Partitions]) -> dict[str, Partitions]:
        members = sorted(subscriptions)
        result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        if not members:
            return {}
        # Groups whose members share one subscription (the usual case) are balanced over all their
        # partitions together; mixed subscriptions are balanced topic by topic among their subscribers.
        by_subscription: dict[frozenset[uuid.UUID], list[str]] = {}
        for m in members:
            by_subscription.setdefault(frozenset(t for t in subscriptions[m] if t in partition_counts), []).append(m)
        if len(by_subscription) == 1:
            topics = sorted(next(iter(by_subscription)), key=str)
            self._balance(members, [(t, p) for t in topics for p in range(partition_counts[t])], current, result)
        else:
            for topic in sorted(partition_counts, key=str):
                subscribers = [m for m in members if topic in subscriptions[m]]
                if subscribers:
                    self._balance(subscribers, [(topic, p) for p in range(partition_counts[topic])], current, result)
        return {m: _freeze(owned) for m, owned in result.items()}

    @staticmethod
    def _balance(members: list[str], partitions: list[tuple[uuid.UUID, int]], current: Mapping[str, Partitions],
                 result: dict[str, dict[uuid.UUID, set[int]]]) -> None:
        base, extra = divmod(len(partitions), len(members))
        wanted = set(partitions)
        taken: set[tuple[uuid.UUID, int]] = set()
        kept: dict[str, list[tuple[uuid.UUID, int]]] = {}
        # members with the most current partitions first get the ceil quotas, so fewer partitions move
        order = sorted(members, key=lambda m: (-sum(len(v) for v in current.get(m, {}).values()), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
        for m in order:
            mine = sorted(((t, p) for t, ps in current.get(m, {}).items() for p in ps
                           if (t, p) in wanted and (t, p) not in taken), key=lambda tp: (str(tp[0]), tp[1]))
            kept[m] = mine[:quota[m]]
            taken.update(kept[m])
        free = [tp for tp in partitions if tp not in taken]
        for m in order:
            while len(kept[m]) < quota[m] and free:
                kept[m].append(free.pop(0))
        for m, tps in kept.items():
            for t, p in tps:
                result[m].setdefault(t, set()).add(p)


class RangeAssignor:
    """Per topic, its subscribers in member-id order get contiguous ranges (the first ones one more when
    the count does not divide): co-partitioned topics land together, as the client-side range assignor
    does. Not sticky."""

    name = "range"

    def assign(self, subscriptions: Mapping[str, frozenset[uuid.UUID]], partition_counts: Mapping[uuid.UUID, int],
               current: Mapping[str, Partitions]) -> dict[str, Partitions]:
        result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
        for topic, count in partition_counts.items():
            subscribers = sorted(m for m, topics in subscriptions.items() if topic in topics)
            if not subscribers:
                continue
            base, extra = divmod(count, len(subscribers))
            start = 0
            for i, m in enumerate(subscribers):
                n = base + (1 if i < extra else 0)
                if n:
                    result[m][topic] = set(range(start, start + n))
                start += n
        return {m: _freeze(owned) for m, owned in result.items()}


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
