"""Internal topics created with fewer replicas than configured get the others once brokers register.

``__remote_log_metadata`` is created with as many replicas as there are registered brokers when there
are fewer than ``remote.log.metadata.topic.replication.factor``; Kafka leaves such a topic
under-replicated until an operator reassigns it. Here the controller raises every internal topic whose
partitions have fewer replicas than its configured factor (``offsets.topic.replication.factor``,
``transaction.state.log.replication.factor`` likewise) to as many as the live brokers allow, by the
ordinary reassignment (``PartitionReassigner``): the replicas it has stay, the new ones catch up from
the leader and join the ISR. A topic being moved or deleted is left alone, and a factor is never lowered.

Placement follows ``placement.assign_replicas`` (rack-aware when every live broker has a rack): a new
replica is taken from where a fresh layout of the topic would put that partition's replicas, on a rack
the partition does not use yet when there is one.

Runs on the controller event thread only.
"""

from __future__ import annotations

import random
from typing import Mapping, Sequence

from tieredlog.controller.context import ControllerContext
from tieredlog.controller.placement import RackAwareMode, assign_replicas
from tieredlog.controller.reassignment import is_being_reassigned
from tieredlog.log.types import TopicPartition

__all__ = ["INTERNAL_TOPIC_REPLICATION_CONFIGS", "raised_replicas"]

# internal topic -> the config naming its replication factor
INTERNAL_TOPIC_REPLICATION_CONFIGS = {
    "__consumer_offsets": "offsets.topic.replication.factor",
    "__transaction_state": "transaction.state.log.replication.factor",
    "__remote_log_metadata": "remote.log.metadata.topic.replication.factor",
}


def raised_replicas(ctx: ControllerContext, topic: str, replication_factor: int,
                    rng: random.Random | None = None) -> dict[TopicPartition, tuple[int, ...]]:
    """The target replicas of the partitions of ``topic`` that have fewer than ``replication_factor``
    (capped at the live brokers); empty when there is nothing to raise or the topic is busy."""
    parts = sorted(ctx.partitions_for_topic(topic), key=lambda tp: tp.partition)
    if not parts or ctx.is_topic_queued_up_for_deletion(topic):
        return {}
    assignments = {tp: ctx.full_assignment(tp) for tp in parts}
    if any(is_being_reassigned(a) for a in assignments.values()):
        return {}
    racks = {b: ctx.live_brokers[b].rack for b in sorted(ctx.live_broker_ids)}
    wanted = min(replication_factor, len(racks))
    short = {tp: a.replicas for tp, a in assignments.items() if len(a.replicas) < wanted}
    if not short:
        return {}
    layout = assign_replicas(racks, max(tp.partition for tp in parts) + 1, wanted,
                             rack_aware_mode=RackAwareMode.SAFE, rng=rng)
    return {tp: _extend(replicas, layout[tp.partition], racks, wanted) for tp, replicas in short.items()}


def _extend(replicas: Sequence[int], preferred: Sequence[int], racks: Mapping[int, str | None],
            wanted: int) -> tuple[int, ...]:
    out = list(replicas)
    candidates = [b for b in (*preferred, *sorted(racks)) if b not in out]
    candidates = list(dict.fromkeys(candidates))
    rack_aware = all(r is not None for r in racks.values())
    while len(out) < wanted and candidates:
        used = {racks.get(b) for b in out}
        pick = next((b for b in candidates if not rack_aware or racks[b] not in used), candidates[0])
        out.append(pick)
        candidates.remove(pick)
    return tuple(out)
