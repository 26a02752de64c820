"""The console's copy of broker state, taken in two steps.

``take`` runs ON the event loop: the partitions, offsets, segment maps, group state and the metadata
cache belong to it, and reading them from another thread would race with appends, rolls and
rebalances. It reads memory only (offsets, segment base offsets and sizes, dicts) and copies it into
frozen values (tieredlog.console.model).

``add_remote_tier`` runs OFF the loop (the HTTP server's thread): listing a partition's remote
segments may read the remote log metadata topic, and a rolled segment's largest timestamp may read
its time index, both disk or network waits the loop must not make.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable

from tieredlog.console.contracts import AssignmentDecoder, BrokerState
from tieredlog.console.history import History
from tieredlog.console.model import (
    BrokerInfo,
    ClusterPartition,
    FollowerState,
    GroupMember,
    GroupPartitionLag,
    GroupView,
    LocalSegment,
    PartitionView,
    Prices,
    RemoteSegment,
    Snapshot,
    TieringLag,
    TopicUsage,
    TopicView,
)
from tieredlog.log.types import TopicPartition

if TYPE_CHECKING:
    from tieredlog.coordinator.group_coordinator import GroupCoordinator
    from tieredlog.replication.partition import Partition
    from tieredlog.rlm.manager import RemoteLogManager

log = logging.getLogger(__name__)

UsageSource = Callable[[], dict[str, TopicUsage]]


def _min_isr(broker: BrokerState, topic: str) -> int:
    t = broker.topics.get(topic)
    try:
        cfg = broker.log_config_for(t.configs) if t is not None else broker.default_log_config
    except Exception:  # noqa: BLE001 - a topic with invalid stored configs runs with the defaults
        cfg = broker.default_log_config
    return int(cfg.min_insync_replicas)


def _cluster(broker: BrokerState) -> tuple[tuple[BrokerInfo, ...], int | None, tuple[ClusterPartition, ...]]:
    """The brokers, the controller and every partition, from the metadata cache in a cluster; alone,
    this broker is all three."""
    node = broker.cluster_node
    if node is None:
        me = BrokerInfo(broker.node_id, broker.advertised_host, broker.advertised_port, None, True, True)
        me_only = (broker.node_id,)
        parts = tuple(
            ClusterPartition(t.name, p, broker.node_id, me_only, me_only, min_isr)
            for t in list(broker.topics.values()) for min_isr in (_min_isr(broker, t.name),) for p in range(t.partitions)
        )
        return (me,), broker.node_id, parts
    md = node.metadata
    listener = broker.config.advertised_listeners[0].name
    brokers = []
    for b in sorted(list(md.brokers.values()), key=lambda b: b.broker_id):
        host, port = b.endpoints.get(listener) or next(iter(b.endpoints.values()), ("", 0))
        brokers.append(BrokerInfo(b.broker_id, host, port, b.rack, b.broker_id == md.controller_id,
                                  b.broker_id == broker.node_id))
    parts_list = []
    for entry in list(md.topics.values()):
        min_isr = _min_isr(broker, entry.name)
        for index, pm in sorted(list(entry.partitions.items())):
            parts_list.append(ClusterPartition(entry.name, index, pm.leader, tuple(pm.replicas), tuple(pm.isr), min_isr))
    return tuple(brokers), md.controller_id, tuple(parts_list)


def _partition(p: Partition, tiered_tier: bool, detail: bool) -> PartitionView:
    """``detail``: with each local segment (a topic page); otherwise their sums only, so an overview of
    a broker with many partitions builds no object per segment on the loop."""
    plog = p.log
    local: list[LocalSegment] = []
    size = pending_bytes = pending = 0
    first_pending: int | None = None
    with plog.local_log.lock:  # the RLM's threads move the remote offset and retention the segments
        segs = plog.segments
        highest_remote = plog.highest_offset_in_remote_storage
        log_start, local_start = plog.log_start_offset, plog.local_log_start_offset
        hw, lso, leo = plog.high_watermark, plog.last_stable_offset, plog.log_end_offset
        tiered = tiered_tier and plog.remote_enabled
        last = len(segs) - 1
        for i, seg in enumerate(segs):
            # a rolled segment ends where the next begins (gaps included), so nothing is read from disk
            end = leo if i == last else segs[i + 1].base_offset
            in_remote = i != last and end - 1 <= highest_remote
            size += seg.size
            if i != last and not in_remote:
                pending_bytes += seg.size
                pending += 1
                first_pending = seg.base_offset if first_pending is None else first_pending
            if detail:
                local.append(LocalSegment(seg.base_offset, end, seg.size, i == last, in_remote))
    followers = tuple(
        FollowerState(rid, st.log_end_offset, rid in p.isr)
        for rid, st in sorted(list(p.remote_replicas.items()))
    ) if p.is_leader else ()
    return PartitionView(
        topic=p.tp.topic, partition=p.tp.partition, is_leader=p.is_leader, leader=p.leader_id,
        leader_epoch=p.leader_epoch, replicas=tuple(p.replicas), isr=tuple(sorted(p.isr)),
        log_start_offset=log_start, local_log_start_offset=local_start, high_watermark=hw,
        last_stable_offset=lso, log_end_offset=leo, highest_offset_in_remote_storage=highest_remote,
        tiered=tiered, local_segments=tuple(local), topic_id=plog.topic_id, followers=followers,
        local_size=size, local_segment_count=len(segs), pending_bytes=pending_bytes, pending_segments=pending,
        first_pending_base=first_pending,
    )


def _topic_names_by_id(broker: BrokerState) -> dict[object, str]:
    return {tid: t.name for tid, t in list(broker.topics_by_id.items())}


def _groups(gc: GroupCoordinator | None, hosted: dict[TopicPartition, PartitionView],
            names: dict[object, str], decode_assignment: AssignmentDecoder | None) -> tuple[GroupView, ...]:
    if gc is None or not gc.active:
        return ()
    state = gc.state
    out = []
    ids = set(state.groups) | set(state.consumer_groups)
    for gid in sorted(ids):
        classic = state.groups.get(gid)
        consumer = state.consumer_groups.get(gid)
        members: list[GroupMember] = []
        if consumer is not None and not consumer.dead:
            protocol, group_state = "consumer", consumer.state.value
            for m in list(consumer.members.values()):
                assigned = tuple(sorted((names.get(t, str(t)), p) for t, ps in m.assigned.items() for p in ps))
                members.append(GroupMember(m.member_id, m.client_id, m.client_host, assigned))
        elif classic is not None:
            protocol, group_state = "classic", classic.state.value
            for cm in list(classic.members.values()):
                decoded = (decode_assignment(cm.assignment)
                           if decode_assignment is not None and classic.protocol_type == "consumer" else None)
                assigned = tuple(sorted((t, p) for t, ps in (decoded or {}).items() for p in ps))
                members.append(GroupMember(cm.member_id, cm.client_id, cm.client_host, assigned))
        else:
            continue
        if group_state == "Dead":
            continue
        offsets = []
        for (topic, partition), om in sorted(list(classic.offsets.items())) if classic is not None else []:
            pv = hosted.get(TopicPartition(topic, partition))
            leader = pv is not None and pv.is_leader
            offsets.append(GroupPartitionLag(topic, partition, om.offset, pv.high_watermark if leader and pv else None,
                                             pv.local_log_start_offset if leader and pv else None))
        out.append(GroupView(gid, protocol, group_state, tuple(members), tuple(offsets)))
    return tuple(out)


def take(broker: BrokerState, prices: Prices, started_ms: int, history: History | None = None,
         detail: Iterable[str] = (), decode_assignment: AssignmentDecoder | None = None) -> Snapshot:
    """ON the event loop: copy what the console shows of ``broker`` (with each local segment of the
    ``detail`` topics)."""
    brokers, controller_id, cluster_parts = _cluster(broker)
    rm = broker.replica_manager
    tier = broker.remote_log_manager is not None
    shown = set(detail)
    views = [_partition(p, tier, p.tp.topic in shown) for p in (list(rm.partitions.values()) if rm is not None else [])]
    hosted = {TopicPartition(v.topic, v.partition): v for v in views}
    rf: dict[str, int] = {}
    for cp in cluster_parts:
        rf[cp.topic] = max(rf.get(cp.topic, 0), len(cp.replicas))
    topics = []
    for t in sorted(list(broker.topics.values()), key=lambda t: t.name):
        tiered = tier and str(t.configs.get("remote.storage.enable", "")).strip().lower() == "true"
        topics.append(TopicView(t.name, t.partitions, rf.get(t.name, 1), tiered, t.name.startswith("__")))
    return Snapshot(
        broker_id=broker.node_id, cluster_id=broker.cluster_id, taken_ms=time.time_ns() // 1_000_000,
        started_ms=started_ms, brokers=brokers, controller_id=controller_id, cluster_partitions=cluster_parts,
        topics=tuple(topics), partitions=tuple(sorted(views, key=lambda v: (v.topic, v.partition))),
        groups=_groups(broker.group_coordinator, hosted, _topic_names_by_id(broker), decode_assignment), remote_tier=tier, prices=prices,
        history=history.samples() if history is not None else (),
    )


def _remote_of(rlm: RemoteLogManager, view: PartitionView) -> PartitionView:
    from tieredlog.rsm.api import TopicIdPartition

    if view.topic_id is None:
        return view
    tip = TopicIdPartition(view.topic_id, view.topic, view.partition)
    try:
        if not rlm.rlmm_ready(tip):
            return dataclasses.replace(view, remote_note="remote log metadata still loading")
        listed = rlm.list_segments(tip)
    except Exception as exc:  # noqa: BLE001 - the page says why instead of failing
        return dataclasses.replace(view, remote_note=f"remote log metadata unavailable: {exc}")
    remote = tuple(sorted(
        (RemoteSegment(str(m.remote_log_segment_id.id), m.start_offset, m.end_offset, m.segment_size_in_bytes,
                       m.state.name, m.max_timestamp_ms) for m in listed),
        key=lambda s: (s.start_offset, s.end_offset)))
    return dataclasses.replace(view, remote_segments=remote)


def _tiering_lag(broker: BrokerState, view: PartitionView, now_ms: int) -> TieringLag:
    oldest_ms = None
    if view.first_pending_base is not None:
        logs = broker.log_manager
        plog = logs.get_log(TopicPartition(view.topic, view.partition)) if logs is not None else None
        seg = next((s for s in (plog.segments if plog is not None else []) if s.base_offset == view.first_pending_base),
                   None)
        if seg is not None:
            try:
                oldest_ms = max(0, now_ms - seg.largest_timestamp)  # a rolled segment: written no more
            except OSError:
                oldest_ms = None  # deleted meanwhile
    return TieringLag(view.pending_bytes, view.pending_segments, oldest_ms)


def add_remote_tier(snapshot: Snapshot, broker: BrokerState, only: Iterable[str] | None = None) -> Snapshot:
    """OFF the event loop: the remote segments and tiering lag of the tiered partitions led here
    (``only``: of these topics; None: of all)."""
    rlm = broker.remote_log_manager
    if rlm is None:
        return snapshot
    wanted = None if only is None else set(only)
    views = []
    for v in snapshot.partitions:
        if v.tiered and v.is_leader and (wanted is None or v.topic in wanted):
            v = _remote_of(rlm, v)
            v = dataclasses.replace(v, tiering_lag=_tiering_lag(broker, v, snapshot.taken_ms))
        views.append(v)
    return dataclasses.replace(snapshot, partitions=tuple(views))


def with_usage(snapshot: Snapshot, usage: UsageSource) -> Snapshot:
    """OFF the event loop: each topic's object-store requests (the counters' lock is the RLM threads')."""
    counts = usage()
    topics = tuple(dataclasses.replace(t, usage=counts.get(t.name, TopicUsage())) for t in snapshot.topics)
    return dataclasses.replace(snapshot, topics=topics)


def rlm_usage() -> dict[str, TopicUsage]:
    """The remote log manager's object-store counts per topic (tieredlog.rlm.metrics)."""
    from tieredlog.rlm.metrics import metrics

    return {topic: TopicUsage(c.get("PUT", 0), c.get("GET", 0), c.get("LIST", 0), c.get("DELETE", 0),
                              c.get("bytes_out", 0), c.get("bytes_in", 0))
            for topic, c in metrics().object_store.snapshot().items()}
