"""Partition reassignment (KIP-455; Kafka's ``KafkaController.onPartitionReassignment``, ZooKeeper mode).

Notation of Kafka's controller: RS = ORS + TRS the replica set while a move runs, ORS the original
replicas, TRS the target replicas, AR = TRS - ORS the adding replicas, RR = ORS - TRS the removing ones.

A move has two phases, both run by ``on_partition_reassignment``:

1. Not complete (some of TRS not in the ISR): /brokers/topics/<t> gets RS with AR and RR, the leader
   epoch is bumped and every replica of RS gets LeaderAndIsr; the AR replicas go NewReplica and start
   fetching from the leader. Then nothing happens until the leader's AlterPartition puts the last of
   TRS in the ISR (or a broker of TRS starts, or a new controller takes over): no polling.
2. Complete: AR goes OnlineReplica; the leader moves to TRS if it is not there (or is not live),
   else its epoch is bumped; RR goes Offline (out of the ISR), then is deleted (StopReplica with
   delete_partition); /brokers/topics/<t> gets TRS alone, LAST: until that write ZooKeeper still
   holds AR and RR, so a controller that fails in between finds the move and finishes it.

A new target for a partition being moved replaces the old one (the original replicas stay the
same); a cancellation is a move back to ORS. /admin/reassign_partitions, written by the legacy
``kafka-reassign-partitions.sh --zookeeper``, is read as one AlterPartitionReassignments request and
deleted once its partitions are accepted: from then on the adding/removing replicas in
/brokers/topics/<t> are the durable record of every move in progress, whichever way it was asked.

Runs on the controller event thread only.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from tieredlog.cluster.errors import ControllerMovedError
from tieredlog.cluster.zk import Watch, ZkClient
from tieredlog.cluster.znodes import REASSIGN_PARTITIONS_PATH, ReplicaAssignment, TopicAssignment
from tieredlog.controller.context import (
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndEpoch,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
)
from tieredlog.controller.election import ElectionStrategy
from tieredlog.controller.request_batch import ControllerBrokerRequestBatch
from tieredlog.controller.state_machines import PartitionStateMachine, ReplicaStateMachine, update_leader_and_isr
from tieredlog.controller.topic_deletion import TopicDeletionManager
from tieredlog.log.types import TopicPartition

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")

ApiError = tuple[ErrorCode, "str | None"]
NO_ERROR: ApiError = (ErrorCode.none, None)


# ---- the replica sets of a move (Kafka's ReplicaAssignment helpers) ------------------------------------

def origin_replicas(a: ReplicaAssignment) -> tuple[int, ...]:
    """ORS: the replicas before the move."""
    return tuple(r for r in a.replicas if r not in a.adding_replicas)


def target_replicas(a: ReplicaAssignment) -> tuple[int, ...]:
    """TRS: the replicas after the move."""
    return tuple(r for r in a.replicas if r not in a.removing_replicas)


def is_being_reassigned(a: ReplicaAssignment) -> bool:
    return bool(a.adding_replicas or a.removing_replicas)


def reassign_to(current: ReplicaAssignment, target: Sequence[int]) -> ReplicaAssignment:
    """The assignment while moving from ``current``'s original replicas to ``target``: RS lists TRS
    first, so the preferred replica is already the target's."""
    origin = origin_replicas(current)
    full = tuple(dict.fromkeys((*target, *origin)))
    return ReplicaAssignment(full, adding_replicas=tuple(r for r in full if r not in origin),
                             removing_replicas=tuple(r for r in full if r not in target))


class PartitionReassigner:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, batch: ControllerBrokerRequestBatch,
                 replica_state_machine: ReplicaStateMachine, partition_state_machine: PartitionStateMachine,
                 deletion: TopicDeletionManager, controller_id: int, *, znode_watch: Watch) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.replicas = replica_state_machine
        self.partitions = partition_state_machine
        self.deletion = deletion
        self.controller_id = controller_id
        self.znode_watch = znode_watch

    def _prefix(self) -> str:
        return f"[Controller id={self.controller_id} epoch={self.ctx.epoch}] "

    # ---- what starts or resumes a move -------------------------------------------------------------------

    def alter(self, targets: dict[TopicPartition, tuple[int, ...] | None]) -> dict[str, Any]:
        """AlterPartitionReassignments: target replicas per partition, None to cancel."""
        results: dict[TopicPartition, ApiError] = {}
        builds: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in sorted(targets.items()):
            error = self._validate(tp, target, require_live=True)
            if error is not None:
                results[tp] = error
                continue
            built = self._build(tp, target)
            if built is None:
                results[tp] = (ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress.")
            else:
                builds[tp] = built
        results.update(self._trigger(builds))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, (code, message) in sorted(results.items()):
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "error_code": code,
                                                      "error_message": message})
        return {"error_code": ErrorCode.none, "error_message": None,
                "responses": [{"name": t, "partitions": p} for t, p in by_topic.items()]}

    def process_znode(self) -> set[TopicPartition]:
        """/admin/reassign_partitions (re-arming its watch): its partitions as one
        AlterPartitionReassignments request, then the znode goes. Returns the partitions accepted."""
        znode = self.zk.get_partition_reassignment(watch=self.znode_watch)
        if znode is None:
            return set()
        results: dict[TopicPartition, ApiError] = {}
        builds: dict[TopicPartition, ReplicaAssignment] = {}
        for (topic, partition), target in sorted(znode.targets.items()):
            tp = TopicPartition(topic, partition)
            # a tool wrote this without asking anyone: brokers that are not up yet are waited for
            error = self._validate(tp, target, require_live=False)
            if error is None:
                built = self._build(tp, target)
                assert built is not None  # a target is given: never a cancellation
                builds[tp] = built
            else:
                results[tp] = error
        results.update(self._trigger(builds))
        failed = {tp: e for tp, e in results.items() if e[0] is not ErrorCode.none}
        if failed:
            log.warning("Controller %d: failed reassignment through %s: %s", self.controller_id, REASSIGN_PARTITIONS_PATH,
                        ", ".join(f"{tp}: {code.name} ({message})" for tp, (code, message) in sorted(failed.items())))
        log.info("Controller %d: every partition of /admin/reassign_partitions handled; deleting it", self.controller_id)
        self.zk.delete_partition_reassignment(expected_controller_epoch_zk_version=self.ctx.epoch_zk_version)
        return set(results) - set(failed)

    def resume_on_failover(self) -> None:
        """A new controller: what a tool wrote meanwhile, then every move ZooKeeper records."""
        from_znode = self.process_znode()
        self._resume(lambda tp, _: tp not in from_znode)

    def on_brokers_started(self, brokers: set[int]) -> None:
        """A target replica's broker is back: it gets the move's LeaderAndIsr again."""
        self._resume(lambda _, a: any(r in brokers for r in target_replicas(a)))

    def on_isr_change(self, partitions: Iterable[TopicPartition]) -> None:
        """The leader changed the ISR (AlterPartition): the move completes once TRS is in it."""
        for tp in partitions:
            assignment = self.ctx.full_assignment(tp)
            if tp in self.ctx.partitions_being_reassigned and self._is_complete(tp, assignment):
                log.info("Controller %d: target replicas %s have all caught up with the leader for reassigning "
                         "partition %s", self.controller_id, list(target_replicas(assignment)), tp)
                self._run_one(tp, assignment)

    def list(self, partitions: list[TopicPartition] | None) -> dict[str, Any]:
        """The reassignments in progress (all, or those of ``partitions``)."""
        wanted = sorted(self.ctx.partitions_being_reassigned if partitions is None
                        else set(partitions) & self.ctx.partitions_being_reassigned)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in wanted:
            a = self.ctx.full_assignment(tp)
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "replicas": list(a.replicas),
                                                      "adding_replicas": list(a.adding_replicas),
                                                      "removing_replicas": list(a.removing_replicas)})
        return {"error_code": ErrorCode.none, "error_message": None,
                "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()]}

    # ---- validation ----------------------------------------------------------------------------------------

    def _validate(self, tp: TopicPartition, target: tuple[int, ...] | None, *, require_live: bool) -> ApiError | None:
        ctx = self.ctx
        current = ctx.full_assignment(tp)
        if not current.replicas or ctx.is_topic_queued_up_for_deletion(tp.topic):
            return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
        if target is None:
            return None
        if not target:
            return ErrorCode.invalid_replica_assignment, "Empty replica list specified in partition reassignment."
        if len(set(target)) != len(target):
            return (ErrorCode.invalid_replica_assignment,
                    f"Duplicate replica ids in partition reassignment replica list: {list(target)}")
        if any(r < 0 for r in target):
            return ErrorCode.invalid_replica_assignment, f"Invalid broker id in replica list: {list(target)}"
        adding = reassign_to(current, target).adding_replicas
        if require_live and not set(adding) <= ctx.live_broker_ids:
            return (ErrorCode.invalid_replica_assignment,
                    f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
                    f"live broker list: {sorted(ctx.live_broker_ids)}")
        return None

    def _build(self, tp: TopicPartition, target: tuple[int, ...] | None) -> ReplicaAssignment | None:
        """The assignment to move to; a cancellation moves back to the original replicas. None: a
        cancellation with no move to cancel."""
        current = self.ctx.full_assignment(tp)
        if target is None:
            return reassign_to(current, origin_replicas(current)) if is_being_reassigned(current) else None
        return reassign_to(current, target)

    def _trigger(self, builds: dict[TopicPartition, ReplicaAssignment]) -> dict[TopicPartition, ApiError]:
        results: dict[TopicPartition, ApiError] = {}
        for tp, reassignment in sorted(builds.items()):
            results[tp] = NO_ERROR if self._run_one(tp, reassignment) else \
                (ErrorCode.unknown_server_error, "The reassignment failed; see the controller's log.")
        return results

    def _resume(self, should_resume: Callable[[TopicPartition, ReplicaAssignment], bool]) -> None:
        for tp in sorted(self.ctx.partitions_being_reassigned):
            assignment = self.ctx.full_assignment(tp)
            if should_resume(tp, assignment):
                self._run_one(tp, assignment)

    def _run_one(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> bool:
        """One partition's step; a failure is this partition's alone (a moved controller stops all)."""
        try:
            self.on_partition_reassignment(tp, reassignment)
            return True
        except ControllerMovedError:
            raise
        except Exception:
            log.exception("Controller %d: error completing reassignment of partition %s", self.controller_id, tp)
            return False

    # ---- the algorithm -------------------------------------------------------------------------------------

    def on_partition_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        # the topic's replicas are moving: deleting it now would leave some of them behind
        self.deletion.mark_topic_ineligible_for_deletion({tp.topic}, "topic reassignment in progress")
        self._update_current_reassignment(tp, reassignment)
        adding, removing = reassignment.adding_replicas, reassignment.removing_replicas
        if not self._is_complete(tp, reassignment):
            log.info("Controller %d: reassigning partition %s: replicas %s, adding %s, removing %s", self.controller_id,
                     tp, list(reassignment.replicas), list(adding), list(removing))
            self._update_leader_epoch_and_send_request(tp, reassignment)
            self._start_new_replicas(tp, adding)
            return
        self.replicas.handle_state_changes([PartitionAndReplica(tp, r) for r in adding], ReplicaState.ONLINE)
        completed = ReplicaAssignment(target_replicas(reassignment))
        self.ctx.update_assignment(tp, completed)
        self._move_leader_if_required(tp, completed)
        self._stop_removed_replicas(tp, removing)
        self._write_assignment(tp, completed)
        log.info("Controller %d: reassignment of partition %s to %s completed", self.controller_id, tp,
                 list(completed.replicas))
        # the leader, ISR and replicas changed: every broker learns them
        self.batch.add_update_metadata_request_for_brokers(self.ctx.live_or_shutting_down_broker_ids, [tp])
        self.deletion.resume_deletion_for_topics({tp.topic})

    def _update_current_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        current = self.ctx.full_assignment(tp)
        if current == reassignment:
            return
        self._write_assignment(tp, reassignment)
        self.ctx.update_assignment(tp, reassignment)
        # a replaced target or a cancellation: replicas the earlier move added are not wanted any more
        unneeded = [r for r in current.replicas if r not in reassignment.replicas]
        if unneeded:
            self._stop_removed_replicas(tp, unneeded)

    def _is_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        if not is_being_reassigned(assignment):
            return True
        # ZooKeeper, not the cache: the ISR the leader last had accepted
        got = self.zk.get_partition_state(tp.topic, tp.partition)
        return got is not None and set(target_replicas(assignment)) <= set(got[0].isr)

    def _update_leader_epoch(self, tp: TopicPartition) -> LeaderIsrAndEpoch | None:
        """Bump the leader epoch in ZooKeeper, leader and ISR unchanged, so that every replica takes the
        new replica set (a broker ignores a LeaderAndIsr at an epoch it already has)."""
        ctx = self.ctx
        while True:
            got = self.zk.get_partition_state(tp.topic, tp.partition)
            if got is None:
                return None
            info = LeaderIsrAndEpoch.from_znode(*got)
            if info.controller_epoch > ctx.epoch:
                state_change_log.error("%sLeader and isr path of partition %s was written by controller epoch %d: "
                                       "another controller was elected", self._prefix(), tp, info.controller_epoch)
                return None
            lai = info.leader_and_isr
            finished, _ = update_leader_and_isr(self.zk, ctx, {tp: lai.new_leader_and_isr(lai.leader, lai.isr)})
            outcome = finished.get(tp)
            if isinstance(outcome, LeaderAndIsr):
                ctx.leadership[tp] = LeaderIsrAndEpoch(outcome, ctx.epoch)
                state_change_log.info("%sUpdated leader epoch of partition %s to %d for its reassignment", self._prefix(),
                                      tp, outcome.leader_epoch)
                return ctx.leadership[tp]
            # a concurrent write (an ISR change): read again

    def _update_leader_epoch_and_send_request(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        info = self._update_leader_epoch(tp)
        if info is None:
            state_change_log.error("%sFailed to send LeaderAndIsr request with new assigned replica list %s to leader "
                                   "for partition being reassigned %s: the leader and isr path in ZooKeeper is empty or "
                                   "was written by another controller", self._prefix(),
                                   ",".join(map(str, assignment.replicas)), tp)
            return
        # is_new lets an added replica start a fresh log; an original replica must find its own
        self.batch.add_leader_and_isr_request_for_brokers(origin_replicas(assignment), tp, info, is_new=False)
        self.batch.add_leader_and_isr_request_for_brokers(assignment.adding_replicas, tp, info, is_new=True)

    def _start_new_replicas(self, tp: TopicPartition, adding: Sequence[int]) -> None:
        # a move resumed by a new controller finds its added replicas already Online (the replica state
        # machine's startup): they have just been sent the LeaderAndIsr above
        fresh = [PartitionAndReplica(tp, r) for r in adding
                 if self.ctx.replica_states.get(PartitionAndReplica(tp, r), ReplicaState.NON_EXISTENT)
                 is ReplicaState.NON_EXISTENT]
        self.replicas.handle_state_changes(fresh, ReplicaState.NEW)

    def _move_leader_if_required(self, tp: TopicPartition, completed: ReplicaAssignment) -> None:
        ctx = self.ctx
        info = ctx.leadership.get(tp)
        leader = info.leader_and_isr.leader if info is not None else -1
        if leader in completed.replicas and ctx.is_replica_online(leader):
            log.info("Controller %d: leader %d for partition %s being reassigned is already in the new list of "
                     "replicas %s and is alive", self.controller_id, leader, tp, list(completed.replicas))
            self._update_leader_epoch_and_send_request(tp, completed)
            return
        log.info("Controller %d: leader %d for partition %s being reassigned is not in the new list of replicas %s "
                 "or is not alive: re-electing the leader", self.controller_id, leader, tp, list(completed.replicas))
        if ctx.partition_states.get(tp) is PartitionState.NEW:
            return  # never had a leader: the partition state machine elects one when a replica is live
        self.partitions.handle_state_changes([tp], PartitionState.ONLINE, ElectionStrategy.REASSIGN)

    def _stop_removed_replicas(self, tp: TopicPartition, removed: Sequence[int]) -> None:
        """Out of the ISR (Offline: StopReplica, LeaderAndIsr to the others), then deleted from disk."""
        replicas = [PartitionAndReplica(tp, r) for r in removed]
        self.replicas.handle_state_changes(replicas, ReplicaState.OFFLINE)
        self.replicas.handle_state_changes(replicas, ReplicaState.DELETION_STARTED)
        self.replicas.handle_state_changes(replicas, ReplicaState.DELETION_SUCCESSFUL)
        self.replicas.handle_state_changes(replicas, ReplicaState.NON_EXISTENT)

    def _write_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """The topic's assignment in ZooKeeper with ``tp``'s replaced, whatever its version (only the
        controller writes it once the topic exists), fenced by the controller epoch."""
        ctx = self.ctx
        partitions = dict(ctx.assignments.get(tp.topic, {}))
        partitions[tp.partition] = assignment
        self.zk.update_topic_assignment(tp.topic, TopicAssignment(partitions, ctx.topic_ids.get(tp.topic)), -1,
                                        expected_controller_epoch_zk_version=ctx.epoch_zk_version)
        log.info("Controller %d: updated assignment of partition %s to %s (adding %s, removing %s)", self.controller_id,
                 tp, list(assignment.replicas), list(assignment.adding_replicas), list(assignment.removing_replicas))
