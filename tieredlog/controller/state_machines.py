"""Kafka's ReplicaStateMachine and PartitionStateMachine (ZooKeeper mode).

Each transition is checked against Kafka's table of valid previous states; an invalid one is logged
and skipped. Partition state reaches ZooKeeper only through conditional writes fenced by the
controller epoch (``ControllerMovedError`` stops the controller, ``ZkVersionConflictError`` means read
again and decide again). The requests a transition implies are added to the event's
``ControllerBrokerRequestBatch``; the controller sends them when the event is done.

Every state change is one line on the ``state.change.logger`` logger, prefixed with the controller's
id and epoch, as in Kafka's state-change.log.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Iterable, Mapping, Sequence

from kazoo.exceptions import NodeExistsError

from tieredlog.cluster.errors import ZkVersionConflictError
from tieredlog.cluster.zk import ZkClient
from tieredlog.controller import election
from tieredlog.controller.context import (
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndEpoch,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
)
from tieredlog.controller.election import ElectionStrategy
from tieredlog.controller.request_batch import ControllerBrokerRequestBatch

state_change_log = logging.getLogger("state.change.logger")

VALID_PREVIOUS_PARTITION_STATES: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.OFFLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}

VALID_PREVIOUS_REPLICA_STATES: dict[ReplicaState, frozenset[ReplicaState]] = {
    ReplicaState.NEW: frozenset({ReplicaState.NON_EXISTENT}),
    ReplicaState.ONLINE: frozenset({ReplicaState.NEW, ReplicaState.ONLINE, ReplicaState.OFFLINE,
                                    ReplicaState.DELETION_INELIGIBLE}),
    ReplicaState.OFFLINE: frozenset({ReplicaState.NEW, ReplicaState.ONLINE, ReplicaState.OFFLINE,
                                     ReplicaState.DELETION_INELIGIBLE}),
    ReplicaState.DELETION_STARTED: frozenset({ReplicaState.OFFLINE}),
    ReplicaState.DELETION_SUCCESSFUL: frozenset({ReplicaState.DELETION_STARTED}),
    ReplicaState.DELETION_INELIGIBLE: frozenset({ReplicaState.OFFLINE, ReplicaState.DELETION_STARTED}),
    ReplicaState.NON_EXISTENT: frozenset({ReplicaState.DELETION_SUCCESSFUL}),
}


class StateChangeFailedError(Exception):
    """Kafka's StateChangeFailedException: no leader could be elected, or the state znode is missing
    or was written by a newer controller."""


ElectionOutcome = LeaderAndIsr | Exception


def _prefix(ctx: ControllerContext, controller_id: int) -> str:
    return f"[Controller id={controller_id} epoch={ctx.epoch}] "


def read_partition_states(zk: ZkClient, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, LeaderIsrAndEpoch | None]:
    out: dict[TopicPartition, LeaderIsrAndEpoch | None] = {}
    for tp in partitions:
        got = zk.get_partition_state(tp.topic, tp.partition)
        out[tp] = LeaderIsrAndEpoch.from_znode(*got) if got is not None else None
    return out


def update_leader_and_isr(zk: ZkClient, ctx: ControllerContext, updates: Mapping[TopicPartition, LeaderAndIsr]
                          ) -> tuple[dict[TopicPartition, ElectionOutcome], list[TopicPartition]]:
    """Write each partition's new leadership, conditional on the version it was read at and fenced by
    the controller epoch. Returns (written, with their new partition epoch, or the error; partitions
    someone else wrote meanwhile, to read and decide again). ControllerMovedError propagates."""
    finished: dict[TopicPartition, ElectionOutcome] = {}
    retry: list[TopicPartition] = []
    for tp, lai in updates.items():
        state = LeaderIsrAndEpoch(lai, ctx.epoch).to_znode()
        try:
            version = zk.update_partition_state(tp.topic, tp.partition, state, lai.partition_epoch,
                                                expected_controller_epoch_zk_version=ctx.epoch_zk_version)
        except ZkVersionConflictError:
            retry.append(tp)
            continue
        finished[tp] = replace(lai, partition_epoch=version)
    return finished, retry


class ReplicaStateMachine:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, batch: ControllerBrokerRequestBatch, controller_id: int) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.controller_id = controller_id

    def startup(self) -> None:
        """Every replica on a live broker is Online, the others ineligible for deletion; then each gets
        its leadership through the Online and Offline transitions."""
        online: list[PartitionAndReplica] = []
        offline: list[PartitionAndReplica] = []
        for tp in self.ctx.all_partitions():
            for replica in self.ctx.replica_assignment(tp):
                par = PartitionAndReplica(tp, replica)
                if self.ctx.is_replica_online(replica, include_shutting_down=True):
                    self.ctx.replica_states[par] = ReplicaState.ONLINE
                    online.append(par)
                else:
                    self.ctx.replica_states[par] = ReplicaState.DELETION_INELIGIBLE
                    offline.append(par)
        self.handle_state_changes(online, ReplicaState.ONLINE)
        self.handle_state_changes(offline, ReplicaState.OFFLINE)

    def handle_state_changes(self, replicas: Sequence[PartitionAndReplica], target: ReplicaState) -> None:
        by_broker: dict[int, list[PartitionAndReplica]] = {}
        for r in replicas:
            by_broker.setdefault(r.replica, []).append(r)
        for broker_id, rs in sorted(by_broker.items()):
            self._do_handle_state_changes(broker_id, rs, target)

    def _log(self, replica: int, tp: TopicPartition, current: ReplicaState, target: ReplicaState) -> None:
        state_change_log.info("%sChanged state of replica %d for partition %s from %s to %s",
                              _prefix(self.ctx, self.controller_id), replica, tp, current, target)

    def _do_handle_state_changes(self, broker_id: int, replicas: list[PartitionAndReplica], target: ReplicaState) -> None:
        ctx = self.ctx
        valid: list[PartitionAndReplica] = []
        for r in replicas:
            current = ctx.replica_states.setdefault(r, ReplicaState.NON_EXISTENT)
            if current in VALID_PREVIOUS_REPLICA_STATES[target]:
                valid.append(r)
            else:
                state_change_log.error(
                    "%sController %d epoch %d initiated state change of replica %d for partition %s from %s to %s "
                    "failed: Replica %d for partition %s should be in the %s states before moving to %s state. "
                    "Instead it is in %s state", _prefix(ctx, self.controller_id), self.controller_id, ctx.epoch,
                    broker_id, r.topic_partition, current, target, broker_id, r.topic_partition,
                    ",".join(sorted(str(s) for s in VALID_PREVIOUS_REPLICA_STATES[target])), target, current)
        if target is ReplicaState.NEW:
            for r in valid:
                tp = r.topic_partition
                current = ctx.replica_states[r]
                info = ctx.leadership.get(tp)
                if info is not None:
                    if info.leader_and_isr.leader == broker_id:
                        state_change_log.error("%sReplica %d for partition %s cannot be moved to NewReplica state as it "
                                               "is being requested to become leader", _prefix(ctx, self.controller_id),
                                               broker_id, tp)
                        self._log(broker_id, tp, current, ReplicaState.OFFLINE)
                        ctx.replica_states[r] = ReplicaState.OFFLINE
                        continue
                    self.batch.add_leader_and_isr_request_for_brokers([broker_id], tp, info, is_new=True)
                self._log(broker_id, tp, current, target)
                ctx.replica_states[r] = target
        elif target is ReplicaState.ONLINE:
            for r in valid:
                tp = r.topic_partition
                current = ctx.replica_states[r]
                if current is ReplicaState.NEW:
                    assignment = ctx.full_assignment(tp)
                    if broker_id not in assignment.replicas:
                        ctx.update_assignment(tp, replace(assignment, replicas=assignment.replicas + (broker_id,)))
                else:
                    info = ctx.leadership.get(tp)
                    if info is not None:
                        self.batch.add_leader_and_isr_request_for_brokers([broker_id], tp, info, is_new=False)
                self._log(broker_id, tp, current, target)
                ctx.replica_states[r] = target
        elif target is ReplicaState.OFFLINE:
            for r in valid:
                self.batch.add_stop_replica_request_for_brokers([broker_id], r.topic_partition, delete_partition=False)
            with_leadership = [r.topic_partition for r in valid if r.topic_partition in ctx.leadership]
            updated = self._remove_replicas_from_isr(broker_id, with_leadership)
            for tp, info in updated.items():
                state_change_log.info("%sPartition %s state changed to %s after removing replica %d from the ISR as part "
                                      "of transition to OfflineReplica", _prefix(ctx, self.controller_id), tp, info, broker_id)
                if not ctx.is_topic_queued_up_for_deletion(tp.topic):
                    recipients = [b for b in ctx.replica_assignment(tp) if b != broker_id]
                    self.batch.add_leader_and_isr_request_for_brokers(recipients, tp, info, is_new=False)
                r = PartitionAndReplica(tp, broker_id)
                self._log(broker_id, tp, ctx.replica_states[r], target)
                ctx.replica_states[r] = target
            for r in valid:
                if r.topic_partition not in ctx.leadership:
                    self._log(broker_id, r.topic_partition, ctx.replica_states[r], target)
                    self.batch.add_update_metadata_request_for_brokers(ctx.live_or_shutting_down_broker_ids,
                                                                       [r.topic_partition])
                    ctx.replica_states[r] = target
        elif target is ReplicaState.DELETION_STARTED:
            for r in valid:
                self._log(broker_id, r.topic_partition, ctx.replica_states[r], target)
                ctx.replica_states[r] = target
                self.batch.add_stop_replica_request_for_brokers([broker_id], r.topic_partition, delete_partition=True)
        elif target in (ReplicaState.DELETION_INELIGIBLE, ReplicaState.DELETION_SUCCESSFUL):
            for r in valid:
                self._log(broker_id, r.topic_partition, ctx.replica_states[r], target)
                ctx.replica_states[r] = target
        elif target is ReplicaState.NON_EXISTENT:
            for r in valid:
                tp = r.topic_partition
                self._log(broker_id, tp, ctx.replica_states[r], target)
                assignment = ctx.full_assignment(tp)
                ctx.update_assignment(tp, replace(assignment, replicas=tuple(b for b in assignment.replicas if b != broker_id),
                                                  adding_replicas=tuple(b for b in assignment.adding_replicas if b != broker_id),
                                                  removing_replicas=tuple(b for b in assignment.removing_replicas
                                                                          if b != broker_id)))
                ctx.replica_states.pop(r, None)

    def _remove_replicas_from_isr(self, broker_id: int, partitions: list[TopicPartition]) -> dict[TopicPartition, LeaderIsrAndEpoch]:
        """Take ``broker_id`` out of each partition's ISR (and leadership) in ZooKeeper, reading again
        after a concurrent write. Returns the leadership of every partition that no longer lists it."""
        ctx = self.ctx
        out: dict[TopicPartition, LeaderIsrAndEpoch] = {}
        remaining = list(partitions)
        while remaining:
            states = read_partition_states(self.zk, remaining)
            updates: dict[TopicPartition, LeaderAndIsr] = {}
            for tp, info in states.items():
                if info is None:
                    if not ctx.is_topic_queued_up_for_deletion(tp.topic):
                        state_change_log.error("%sFailed to change state of replica %d for partition %s since the leader "
                                               "and isr path in zookeeper is empty", _prefix(ctx, self.controller_id),
                                               broker_id, tp)
                    continue
                if info.controller_epoch > ctx.epoch:
                    state_change_log.error("%sLeader and isr path of partition %s was written by controller epoch %d: "
                                           "another controller was elected", _prefix(ctx, self.controller_id), tp,
                                           info.controller_epoch)
                    continue
                lai = info.leader_and_isr
                if broker_id not in lai.isr:
                    out[tp] = info
                    ctx.leadership[tp] = info
                    continue
                leader, isr = election.isr_without_replica(lai.leader, lai.isr, broker_id)
                updates[tp] = lai.new_leader_and_isr(leader, isr)
            finished, remaining = update_leader_and_isr(self.zk, ctx, updates)
            for tp, result in finished.items():
                if isinstance(result, LeaderAndIsr):
                    info = LeaderIsrAndEpoch(result, ctx.epoch)
                    ctx.leadership[tp] = info
                    out[tp] = info
        return out


class PartitionStateMachine:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, batch: ControllerBrokerRequestBatch, controller_id: int,
                 unclean_leader_election_enabled: Callable[[str], bool]) -> None:
        """``unclean_leader_election_enabled(topic)``: the topic's config, else the broker's."""
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.controller_id = controller_id
        self.unclean_enabled = unclean_leader_election_enabled

    def startup(self) -> None:
        for tp in self.ctx.all_partitions():
            info = self.ctx.leadership.get(tp)
            if info is None:
                self.ctx.partition_states[tp] = PartitionState.NEW
            elif self.ctx.is_replica_online(info.leader_and_isr.leader, include_shutting_down=True):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
            else:
                self.ctx.partition_states[tp] = PartitionState.OFFLINE
        self.trigger_online_partition_state_change()

    def trigger_online_partition_state_change(self) -> dict[TopicPartition, ElectionOutcome]:
        """Elect a leader for every New or Offline partition not being deleted."""
        partitions = [tp for tp in self.ctx.partitions_in_states(PartitionState.OFFLINE, PartitionState.NEW)
                      if not self.ctx.is_topic_queued_up_for_deletion(tp.topic)]
        return self.handle_state_changes(partitions, PartitionState.ONLINE, ElectionStrategy.OFFLINE)

    def handle_state_changes(self, partitions: Sequence[TopicPartition], target: PartitionState,
                             strategy: ElectionStrategy | None = None, allow_unclean: bool = False
                             ) -> dict[TopicPartition, ElectionOutcome]:
        """Returns the outcome of each election run (Online targets only)."""
        ctx = self.ctx
        valid: list[TopicPartition] = []
        for tp in partitions:
            current = ctx.partition_states.setdefault(tp, PartitionState.NON_EXISTENT)
            if current in VALID_PREVIOUS_PARTITION_STATES[target]:
                valid.append(tp)
            else:
                state_change_log.error(
                    "%sController %d epoch %d failed to change state for partition %s from %s to %s: Partition %s should "
                    "be in one of %s states before moving to %s state. Instead it is in %s state. This may be the result "
                    "of an error.", _prefix(ctx, self.controller_id), self.controller_id, ctx.epoch, tp, current, target,
                    tp, ",".join(sorted(str(s) for s in VALID_PREVIOUS_PARTITION_STATES[target])), target, current)
        if target is PartitionState.NEW:
            for tp in valid:
                state_change_log.info("%sChanged partition %s state from %s to %s with assigned replicas %s",
                                      _prefix(ctx, self.controller_id), tp, ctx.partition_states[tp], target,
                                      ",".join(map(str, ctx.replica_assignment(tp))))
                ctx.partition_states[tp] = target
            return {}
        if target is PartitionState.ONLINE:
            uninitialized = [tp for tp in valid if ctx.partition_states[tp] is PartitionState.NEW]
            to_elect = [tp for tp in valid if ctx.partition_states[tp] in (PartitionState.OFFLINE, PartitionState.ONLINE)]
            results: dict[TopicPartition, ElectionOutcome] = {}
            for tp in self._initialize_leader_and_isr(uninitialized):
                info = ctx.leadership[tp]
                state_change_log.info("%sChanged partition %s from %s to %s with state %s", _prefix(ctx, self.controller_id),
                                      tp, ctx.partition_states[tp], target, info.leader_and_isr)
                ctx.partition_states[tp] = target
                results[tp] = info.leader_and_isr
            if to_elect:
                if strategy is None:
                    raise ValueError("Election strategy is a required field when the target state is OnlinePartition")
                for tp, outcome in self._elect_leader_for_partitions(to_elect, strategy, allow_unclean).items():
                    results[tp] = outcome
                    if isinstance(outcome, LeaderAndIsr):
                        state_change_log.info("%sChanged partition %s from %s to %s with state %s",
                                              _prefix(ctx, self.controller_id), tp, ctx.partition_states[tp], target, outcome)
                        ctx.partition_states[tp] = target
            return results
        for tp in valid:
            state_change_log.info("%sChanged partition %s state from %s to %s", _prefix(ctx, self.controller_id), tp,
                                  ctx.partition_states[tp], target)
            ctx.partition_states[tp] = target
        return {}

    def _initialize_leader_and_isr(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """New partitions: leader the first live assigned replica, ISR every live assigned replica (all
        are empty, so all are in sync); the state znode is created, fenced by the controller epoch."""
        ctx = self.ctx
        done: list[TopicPartition] = []
        for tp in partitions:
            assignment = ctx.replica_assignment(tp)
            live = [r for r in assignment if ctx.is_replica_online(r)]
            if not live:
                state_change_log.error(
                    "%sController %d epoch %d encountered error during state change of partition %s from New to Online, "
                    "assigned replicas are [%s], live brokers are [%s]. No assigned replica is alive.",
                    _prefix(ctx, self.controller_id), self.controller_id, ctx.epoch, tp, ",".join(map(str, assignment)),
                    ",".join(map(str, sorted(ctx.live_broker_ids))))
                continue
            info = LeaderIsrAndEpoch(LeaderAndIsr(live[0], 0, tuple(live)), ctx.epoch)
            try:
                version = self.zk.create_partition_state(tp.topic, tp.partition, info.to_znode(),
                                                         expected_controller_epoch_zk_version=ctx.epoch_zk_version)
            except NodeExistsError:
                state_change_log.error("%sError while moving partition %s to the online state: its state znode already "
                                       "exists", _prefix(ctx, self.controller_id), tp)
                continue
            info = LeaderIsrAndEpoch(replace(info.leader_and_isr, partition_epoch=version), ctx.epoch)
            ctx.leadership[tp] = info
            self.batch.add_leader_and_isr_request_for_brokers(assignment, tp, info, is_new=True)
            done.append(tp)
        return done

    def _elect_leader_for_partitions(self, partitions: list[TopicPartition], strategy: ElectionStrategy,
                                     allow_unclean: bool) -> dict[TopicPartition, ElectionOutcome]:
        results: dict[TopicPartition, ElectionOutcome] = {}
        remaining = partitions
        while remaining:
            finished, remaining = self._do_elect(remaining, strategy, allow_unclean)
            for tp, outcome in finished.items():
                if isinstance(outcome, Exception):
                    state_change_log.error("%sController %d epoch %d failed to change state for partition %s from %s to "
                                           "OnlinePartition: %s", _prefix(self.ctx, self.controller_id), self.controller_id,
                                           self.ctx.epoch, tp, self.ctx.partition_states.get(tp), outcome)
            results.update(finished)
            if remaining:
                state_change_log.info("%sRetrying leader election with strategy %s for partitions %s",
                                      _prefix(self.ctx, self.controller_id), strategy.value, ",".join(map(str, remaining)))
        return results

    def _do_elect(self, partitions: list[TopicPartition], strategy: ElectionStrategy, allow_unclean: bool
                  ) -> tuple[dict[TopicPartition, ElectionOutcome], list[TopicPartition]]:
        ctx = self.ctx
        failed: dict[TopicPartition, ElectionOutcome] = {}
        valid: dict[TopicPartition, LeaderAndIsr] = {}
        for tp, info in read_partition_states(self.zk, partitions).items():
            if info is None:
                failed[tp] = StateChangeFailedError(f"LeaderAndIsr path for partition {tp} is empty")
            elif info.controller_epoch > ctx.epoch:
                failed[tp] = StateChangeFailedError(
                    f"Aborted leader election for partition {tp} since the LeaderAndIsr path was already written by "
                    f"another controller. This probably means that the current controller {self.controller_id} went "
                    f"through a soft failure and another controller was elected with epoch {info.controller_epoch}.")
            else:
                valid[tp] = info.leader_and_isr
        updates: dict[TopicPartition, LeaderAndIsr] = {}
        recipients: dict[TopicPartition, list[int]] = {}
        for tp, lai in valid.items():
            assignment = ctx.full_assignment(tp)
            live = {r for r in assignment.replicas if ctx.is_replica_online(r)}
            if strategy is ElectionStrategy.OFFLINE:
                unclean = False
                if not any(r in live for r in lai.isr):
                    unclean = allow_unclean or self.unclean_enabled(tp.topic)
                result = election.elect_for_offline(assignment.replicas, lai.isr, live, unclean)
                if result.unclean:
                    state_change_log.warning("%sUnclean leader election for partition %s: broker %s becomes leader "
                                             "without being in the ISR [%s]; data may be lost",
                                             _prefix(ctx, self.controller_id), tp, result.leader, ",".join(map(str, lai.isr)))
                targets = sorted(live, key=assignment.replicas.index)
            elif strategy is ElectionStrategy.REASSIGN:
                target_replicas = tuple(r for r in assignment.replicas if r not in assignment.removing_replicas)
                result = election.elect_for_reassignment(target_replicas, lai.isr, live)
                targets = sorted(live, key=assignment.replicas.index)
            elif strategy is ElectionStrategy.PREFERRED:
                result = election.elect_preferred(assignment.replicas, lai.isr, live)
                targets = sorted(live, key=assignment.replicas.index)
            else:
                live_or_shutting = {r for r in assignment.replicas if ctx.is_replica_online(r, include_shutting_down=True)}
                result = election.elect_for_controlled_shutdown(assignment.replicas, lai.isr, live_or_shutting,
                                                                ctx.shutting_down_broker_ids)
                targets = sorted(live_or_shutting, key=assignment.replicas.index)
            if result.leader is None:
                failed[tp] = StateChangeFailedError(
                    f"Failed to elect leader for partition {tp} under strategy {strategy.value}")
                continue
            updates[tp] = lai.new_leader_and_isr(result.leader, result.isr)
            recipients[tp] = targets
        finished, retry = update_leader_and_isr(self.zk, ctx, updates)
        for tp, outcome in finished.items():
            if isinstance(outcome, LeaderAndIsr):
                info = LeaderIsrAndEpoch(outcome, ctx.epoch)
                ctx.leadership[tp] = info
                self.batch.add_leader_and_isr_request_for_brokers(recipients[tp], tp, info, is_new=False)
        finished.update(failed)
        return finished, retry
