"""KIP-848's incremental reconciliation of one member towards its target assignment.

The rules, from KIP-848:
- a member keeps the partitions it has that are still in its target; those that are not must be revoked
  first: it stays at its epoch, in UNREVOKED_PARTITIONS, and is told only what it keeps;
- once it reports (its owned partitions in a heartbeat) that it gave them up, it moves to the target epoch
  and gets the new partitions that nobody else holds any more; while some are still held elsewhere it
  waits in UNRELEASED_PARTITIONS and picks them up on a later heartbeat;
- with nothing to revoke or wait for it is STABLE at the target epoch.
So a partition never has two owners at once, and a member's epoch advances as it converges.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable

from tieredlog.coordinator.consumer_group.assignors import Partitions
from tieredlog.coordinator.consumer_group.member import MemberState, normalize


@dataclass(frozen=True)
class MemberAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Partitions
    pending_revocation: Partitions


def reconcile(current: MemberAssignment, target_epoch: int, target: Partitions, owned: Partitions | None,
              held_elsewhere: Callable[[uuid.UUID, int], bool]) -> MemberAssignment:
    """The member's next assignment. ``owned``: the partitions its heartbeat says it owns (None when
    the heartbeat did not carry them); ``held_elsewhere``: whether another member still holds a partition."""
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or any(owned.get(t, frozenset()) & ps for t, ps in current.pending_revocation.items()):
            return current  # not revoked yet
        return _next(current.member_epoch, current.previous_member_epoch, current.assigned, target_epoch,
                     target, held_elsewhere)
    if current.state is MemberState.STABLE and current.member_epoch == target_epoch:
        return current
    return _next(current.member_epoch, current.previous_member_epoch, current.assigned, target_epoch, target,
                 held_elsewhere)


def _next(epoch: int, previous: int, assigned: Partitions, target_epoch: int, target: Partitions,
          held_elsewhere: Callable[[uuid.UUID, int], bool]) -> MemberAssignment:
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    gain: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic in set(assigned) | set(target):
        mine = assigned.get(topic, frozenset())
        wanted = target.get(topic, frozenset())
        keep[topic] = mine & wanted
        revoke[topic] = mine - wanted
        free = frozenset(p for p in wanted - mine if not held_elsewhere(topic, p))
        unreleased = unreleased or len(free) < len(wanted - mine)
        gain[topic] = keep[topic] | free
    if any(revoke.values()):
        return MemberAssignment(epoch, previous, MemberState.UNREVOKED_PARTITIONS, normalize(keep), normalize(revoke))
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    new_previous = epoch if epoch != target_epoch else previous
    return MemberAssignment(target_epoch, new_previous, state, normalize(gain), {})
