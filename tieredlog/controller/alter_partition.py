"""AlterPartition (KIP-497): a partition leader asks the controller to shrink or expand its ISR.

The controller checks that the request comes from the current leader, at the current leader epoch
and partition epoch (the state znode's version), that the broker is the registration the controller
knows (broker epoch), and that every new ISR member is live, not shutting down and (v3) at its current
broker epoch; then writes the ISR conditionally, fenced by the controller epoch, and answers the new
state. ZooKeeper mode keeps the leader epoch: only the partition epoch moves. Runs on the controller
event thread only.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kio.schema.alter_partition.v2.request import PartitionData as AlterPartitionDataV2
from kio.schema.errors import ErrorCode

from tieredlog.cluster.zk import ZkClient
from tieredlog.controller import events as ev
from tieredlog.controller.context import ControllerContext, LeaderAndIsr, LeaderIsrAndEpoch, TopicPartition
from tieredlog.controller.election import NO_LEADER
from tieredlog.controller.request_batch import ControllerBrokerRequestBatch
from tieredlog.controller.state_machines import update_leader_and_isr

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")


class AlterPartitionHandler:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, batch: ControllerBrokerRequestBatch, controller_id: int) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.controller_id = controller_id

    def _prefix(self) -> str:
        return f"[Controller id={self.controller_id} epoch={self.ctx.epoch}] "

    def process(self, request: Any) -> tuple[dict[str, Any], list[TopicPartition]]:
        """The response (AlterPartitionResponse fields) and the partitions whose ISR changed."""
        ctx = self.ctx
        batch = self.batch
        broker_id, broker_epoch = int(request.broker_id), int(request.broker_epoch)
        known_epoch = ctx.live_broker_epochs.get(broker_id)
        if known_epoch is None or (broker_epoch != -1 and broker_epoch != known_epoch):
            log.info("Controller %d: ignoring AlterPartition from broker %d due to stale broker epoch %d (current: %s)",
                     self.controller_id, broker_id, broker_epoch, known_epoch)
            return {"error_code": ErrorCode.stale_broker_epoch, "topics": []}, []
        items = alter_partition_items(request)
        answers: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
        accepted: dict[TopicPartition, LeaderAndIsr] = {}
        keys: dict[TopicPartition, tuple[uuid.UUID, int]] = {}
        for item in items:
            key = (item.topic_id, item.partition_index)
            error = self._check(broker_id, item)
            if isinstance(error, ErrorCode):
                answers[key] = _partition_error(item.partition_index, error)
            elif isinstance(error, LeaderAndIsr):  # already so: answer the current state
                answers[key] = _partition_answer(item.partition_index, error)
            else:
                topic = ctx.topic_name(item.topic_id)
                assert topic is not None
                tp = TopicPartition(topic, item.partition_index)
                current = ctx.leadership[tp].leader_and_isr
                accepted[tp] = LeaderAndIsr(current.leader, current.leader_epoch, tuple(b for b, _ in item.new_isr),
                                            item.leader_recovery_state, current.partition_epoch)
                keys[tp] = key
        finished, conflicts = update_leader_and_isr(self.zk, ctx, accepted)
        for tp, outcome in finished.items():
            key = keys[tp]
            if isinstance(outcome, LeaderAndIsr):
                old = ctx.leadership[tp].leader_and_isr
                ctx.leadership[tp] = LeaderIsrAndEpoch(outcome, ctx.epoch)
                state_change_log.info("%sChanged ISR of partition %s from [%s] to [%s] at the request of leader %d "
                                      "(leader epoch %d, partition epoch %d)", self._prefix(), tp,
                                      ",".join(map(str, old.isr)), ",".join(map(str, outcome.isr)), broker_id,
                                      outcome.leader_epoch, outcome.partition_epoch)
                answers[key] = _partition_answer(key[1], outcome)
            else:
                answers[key] = _partition_error(key[1], ErrorCode.unknown_server_error)
        for tp in conflicts:
            log.info("Controller %d: failed to update ISR of partition %s, bad ZK version", self.controller_id, tp)
            answers[keys[tp]] = _partition_error(tp.partition, ErrorCode.invalid_update_version)
        altered = [tp for tp, o in finished.items() if isinstance(o, LeaderAndIsr)]
        batch.add_update_metadata_request_for_brokers(ctx.live_or_shutting_down_broker_ids, altered)
        topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for item in items:
            topics.setdefault(item.topic_id, []).append(answers[(item.topic_id, item.partition_index)])
        return {"error_code": ErrorCode.none,
                "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()]}, altered

    def _check(self, broker_id: int, item: ev.AlterPartitionItem) -> ErrorCode | LeaderAndIsr | None:
        """The error of one partition, its current state when the request asks for what is already so,
        or None when the new ISR may be written."""
        ctx = self.ctx
        topic = ctx.topic_name(item.topic_id)
        if topic is None:
            return ErrorCode.unknown_topic_id
        info = ctx.leadership.get(TopicPartition(topic, item.partition_index))
        if info is None:
            return ErrorCode.unknown_topic_or_partition
        current = info.leader_and_isr
        new_isr = tuple(b for b, _ in item.new_isr)
        if item.leader_recovery_state == 1 and len(new_isr) > 1:
            return ErrorCode.invalid_request
        if item.partition_epoch > current.partition_epoch or item.leader_epoch > current.leader_epoch:
            return ErrorCode.not_controller  # the leader knows a newer state: this controller may be stale
        if item.leader_epoch < current.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if broker_id != current.leader:
            return ErrorCode.not_leader_or_follower
        if new_isr == current.isr and item.leader_recovery_state == current.leader_recovery_state:
            return current  # a retry of a write that succeeded: idempotent
        if item.partition_epoch < current.partition_epoch:
            return ErrorCode.invalid_update_version
        if item.leader_recovery_state == 1 and current.leader_recovery_state == 0:
            return ErrorCode.invalid_request
        ineligible = [b for b, epoch in item.new_isr
                      if b not in ctx.live_broker_ids or (epoch != -1 and epoch != ctx.live_broker_epochs.get(b))]
        if ineligible:
            log.info("Controller %d: rejecting AlterPartition from broker %d for %s-%d because it specified ineligible "
                     "replicas %s in the new ISR %s", self.controller_id, broker_id, topic, item.partition_index,
                     ineligible, list(new_isr))
            return ErrorCode.ineligible_replica
        return None


def alter_partition_items(request: Any) -> list[ev.AlterPartitionItem]:
    items: list[ev.AlterPartitionItem] = []
    for topic in request.topics:
        for p in topic.partitions:
            if isinstance(p, AlterPartitionDataV2):
                isr: tuple[tuple[int, int], ...] = tuple((int(b), -1) for b in p.new_isr)
            else:
                isr = tuple((int(s.broker_id), int(s.broker_epoch)) for s in p.new_isr_with_epochs)
            items.append(ev.AlterPartitionItem(topic.topic_id, int(p.partition_index), int(p.leader_epoch), isr,
                                               int(p.leader_recovery_state), int(p.partition_epoch)))
    return items


def _partition_error(partition: int, error: ErrorCode) -> dict[str, Any]:
    return {"partition_index": partition, "error_code": error, "leader_id": NO_LEADER, "leader_epoch": -1, "isr": [],
            "leader_recovery_state": 0, "partition_epoch": -1}


def _partition_answer(partition: int, lai: LeaderAndIsr) -> dict[str, Any]:
    return {"partition_index": partition, "error_code": ErrorCode.none, "leader_id": lai.leader,
            "leader_epoch": lai.leader_epoch, "isr": list(lai.isr), "leader_recovery_state": lai.leader_recovery_state,
            "partition_epoch": lai.partition_epoch}
