"""Topic deletion (Kafka's ``TopicDeletionManager``).

A topic queued under /admin/delete_topics is deleted in steps the controller can resume at any point:
its partitions go Offline then NonExistent, every broker learns through UpdateMetadata that the topic
is being deleted (leader -2), and each replica gets StopReplica with delete_partition. A replica that
answers without error is ReplicaDeletionSuccessful; a replica on a dead broker, or one that answers an
error, is ReplicaDeletionIneligible and the topic waits until the broker comes back. Once every replica
is deleted the topic's znodes go: /brokers/topics/<t> with its partitions, /config/topics/<t>, and the
marker last, so a controller that fails in between starts the deletion again.

Runs on the controller event thread only.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from tieredlog.cluster import znodes
from tieredlog.cluster.zk import ZkClient
from tieredlog.controller.context import ControllerContext, PartitionAndReplica, PartitionState, ReplicaState
from tieredlog.controller.request_batch import ControllerBrokerRequestBatch
from tieredlog.controller.state_machines import PartitionStateMachine, ReplicaStateMachine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeletedTopic:
    """A topic whose replicas have all stopped and deleted their logs, as it was configured."""

    name: str
    topic_id: uuid.UUID | None
    partitions: list[int]
    configs: dict[str, str] = field(default_factory=dict)


TopicDeletionListener = Callable[[DeletedTopic], None]


class TopicDeletionManager:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, batch: ControllerBrokerRequestBatch,
                 replica_state_machine: ReplicaStateMachine, partition_state_machine: PartitionStateMachine,
                 delete_topic_enable: bool, controller_id: int,
                 on_topic_deleted: TopicDeletionListener | None = None) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.replicas = replica_state_machine
        self.partitions = partition_state_machine
        self.enabled = delete_topic_enable
        self.controller_id = controller_id
        self.on_topic_deleted = on_topic_deleted

    def _prefix(self) -> str:
        return f"[Topic Deletion Manager {self.controller_id}] "

    def init(self, topics_to_be_deleted: set[str], topics_ineligible: set[str]) -> None:
        if self.enabled:
            self.ctx.topics_to_be_deleted |= topics_to_be_deleted
            self.ctx.topics_ineligible_for_deletion |= topics_ineligible & topics_to_be_deleted
        else:
            # delete.topic.enable=false: the markers are dropped, the topics stay
            for topic in topics_to_be_deleted:
                self.zk.remove_topic_deletion_marker(topic, expected_controller_epoch_zk_version=self.ctx.epoch_zk_version)

    def try_topic_deletion(self) -> None:
        if self.enabled:
            self.resume_deletions()

    def enqueue_topics_for_deletion(self, topics: set[str]) -> None:
        if self.enabled:
            self.ctx.topics_to_be_deleted |= topics
            self.resume_deletions()

    def resume_deletion_for_topics(self, topics: Iterable[str]) -> None:
        queued = set(topics) & self.ctx.topics_to_be_deleted
        if queued:
            self.ctx.topics_ineligible_for_deletion -= queued
            self.resume_deletions()

    def fail_replica_deletion(self, replicas: Iterable[PartitionAndReplica]) -> None:
        failed = [r for r in replicas if self.ctx.is_topic_queued_up_for_deletion(r.topic_partition.topic)]
        if failed:
            topics = {r.topic_partition.topic for r in failed}
            log.debug("%sDeletion failed for replicas %s. Halting deletion for topics %s", self._prefix(),
                      ",".join(map(str, failed)), sorted(topics))
            self.replicas.handle_state_changes(failed, ReplicaState.DELETION_INELIGIBLE)
            self.mark_topic_ineligible_for_deletion(topics, "replica deletion failure")
            self.resume_deletions()

    def complete_replica_deletion(self, replicas: Iterable[PartitionAndReplica]) -> None:
        done = [r for r in replicas if self.ctx.is_topic_queued_up_for_deletion(r.topic_partition.topic)]
        log.debug("%sDeletion successfully completed for replicas %s", self._prefix(), ",".join(map(str, done)))
        self.replicas.handle_state_changes(done, ReplicaState.DELETION_SUCCESSFUL)
        self.resume_deletions()

    def mark_topic_ineligible_for_deletion(self, topics: set[str], reason: str) -> None:
        if self.enabled:
            halted = topics & self.ctx.topics_to_be_deleted
            self.ctx.topics_ineligible_for_deletion |= halted
            if halted:
                log.info("%sHalted deletion of topics %s due to %s", self._prefix(), ",".join(sorted(halted)), reason)

    def is_topic_eligible_for_deletion(self, topic: str) -> bool:
        # a move in progress holds the deletion back whatever cleared the ineligible mark (a broker that
        # started): both would change the same replicas' states and the topic's znode
        return (self.ctx.is_topic_queued_up_for_deletion(topic) and not self.ctx.is_topic_deletion_in_progress(topic)
                and topic not in self.ctx.topics_ineligible_for_deletion
                and not any(tp.topic == topic for tp in self.ctx.partitions_being_reassigned))

    def resume_deletions(self) -> None:
        retry: set[str] = set()
        eligible: set[str] = set()
        for topic in sorted(self.ctx.topics_to_be_deleted):
            if self.ctx.are_all_replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL):
                self._complete_delete_topic(topic)
                log.info("%sDeletion of topic %s successfully completed", self._prefix(), topic)
                continue
            if self.ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_STARTED):
                continue  # waiting for StopReplica answers
            if self.ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_INELIGIBLE):
                retry.add(topic)
            if self.is_topic_eligible_for_deletion(topic):
                log.info("%sDeletion of topic %s (re)started", self._prefix(), topic)
                eligible.add(topic)
        if retry:
            failed = [r for t in sorted(retry) for r in self.ctx.replicas_in_state(t, ReplicaState.DELETION_INELIGIBLE)]
            self.replicas.handle_state_changes(failed, ReplicaState.OFFLINE)
        if eligible:
            self._on_topic_deletion(eligible)

    def _on_topic_deletion(self, topics: set[str]) -> None:
        log.info("%sTopic deletion callback for %s", self._prefix(), ",".join(sorted(topics)))
        unseen = topics - self.ctx.topics_with_deletion_started
        if unseen:
            partitions = [tp for t in sorted(unseen) for tp in self.ctx.partitions_for_topic(t)]
            self.partitions.handle_state_changes(partitions, PartitionState.OFFLINE)
            self.partitions.handle_state_changes(partitions, PartitionState.NON_EXISTENT)
            self.ctx.topics_with_deletion_started |= unseen
        # every broker learns that the topic is going (leader -2), so clients stop using it
        self.batch.add_update_metadata_request_for_brokers(
            self.ctx.live_or_shutting_down_broker_ids, [tp for t in sorted(topics) for tp in self.ctx.partitions_for_topic(t)])
        self._on_partition_deletion(topics)

    def _on_partition_deletion(self, topics: set[str]) -> None:
        dead: list[PartitionAndReplica] = []
        retry: list[PartitionAndReplica] = []
        ineligible: set[str] = set()
        for topic in sorted(topics):
            replicas = self.ctx.replicas_for_topic(topic)
            alive = [r for r in replicas if self.ctx.is_replica_online(r.replica)]
            dead_here = [r for r in replicas if not self.ctx.is_replica_online(r.replica)]
            deleted = set(self.ctx.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL))
            retry += [r for r in alive if r not in deleted]
            dead += dead_here
            if dead_here:
                ineligible.add(topic)
        self.replicas.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
        # StopReplica first stops the followers' fetches, then the deletion itself
        self.replicas.handle_state_changes(retry, ReplicaState.OFFLINE)
        self.replicas.handle_state_changes(retry, ReplicaState.DELETION_STARTED)
        if ineligible:
            self.mark_topic_ineligible_for_deletion(ineligible, "offline replicas")

    def _complete_delete_topic(self, topic: str) -> None:
        replicas = self.ctx.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL)
        self.replicas.handle_state_changes(replicas, ReplicaState.NON_EXISTENT)
        if self.on_topic_deleted is not None:
            # told before the znodes go: the configs say whether the topic had a remote tier to remove
            deleted = DeletedTopic(topic, self.ctx.topic_ids.get(topic),
                                   sorted(tp.partition for tp in self.ctx.partitions_for_topic(topic)),
                                   self.zk.get_topic_config(topic))
            try:
                self.on_topic_deleted(deleted)
            except Exception:
                log.exception("%sTopic deletion listener failed for %s", self._prefix(), topic)
        fence = self.ctx.epoch_zk_version
        self.zk.delete_recursive(znodes.topic_path(topic), expected_controller_epoch_zk_version=fence)
        self.zk.delete_topic_config(topic, expected_controller_epoch_zk_version=fence)
        self.zk.remove_topic_deletion_marker(topic, expected_controller_epoch_zk_version=fence)
        self.ctx.remove_topic(topic)
