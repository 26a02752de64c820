"""Partition reassignment (KIP-455; Kafka's onPartitionReassignment). Runs on the controller event
thread only."""

from __future__ import annotations

import logging
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from tieredlog.cluster.zk import ZkClient
from tieredlog.controller.context import ControllerContext, TopicPartition
from tieredlog.controller.request_batch import ControllerBrokerRequestBatch
from tieredlog.controller.state_machines import PartitionStateMachine, ReplicaStateMachine

log = logging.getLogger(__name__)


class PartitionReassigner:
    def __init__(self, ctx: ControllerContext, zk: ZkClient, batch: ControllerBrokerRequestBatch,
                 replica_state_machine: ReplicaStateMachine, partition_state_machine: PartitionStateMachine,
                 controller_id: int, *, is_topic_queued_for_deletion: Callable[[str], bool]) -> None:
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.replicas = replica_state_machine
        self.partitions = partition_state_machine
        self.controller_id = controller_id
        self.is_topic_queued_for_deletion = is_topic_queued_for_deletion

    def resume_on_failover(self) -> None:
        pass

    def on_brokers_started(self, brokers: set[int]) -> None:
        pass

    def on_isr_change(self, partitions: list[TopicPartition]) -> None:
        pass

    def process_znode(self) -> None:
        pass

    def alter(self, targets: dict[TopicPartition, tuple[int, ...] | None]) -> dict[str, Any]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in sorted(targets):
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition,
                                                      "error_code": ErrorCode.unknown_server_error,
                                                      "error_message": "Partition reassignment is not supported yet"})
        return {"error_code": ErrorCode.none, "error_message": None,
                "responses": [{"name": t, "partitions": p} for t, p in by_topic.items()]}

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
