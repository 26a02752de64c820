"""Cluster administration the controller answers: ElectLeaders (43, KIP-460), AlterPartitionReassignments
(45) and ListPartitionReassignments (46, KIP-455). As in Kafka's ZooKeeper mode, a broker that is not
the active controller answers NOT_CONTROLLER and the client asks the controller Metadata names."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.protocol.api import ALTER_PARTITION_REASSIGNMENTS, ELECT_LEADERS, LIST_PARTITION_REASSIGNMENTS
from tieredlog.server.admin_requests import election_type
from tieredlog.server.context import Handler, RequestContext

if TYPE_CHECKING:
    from tieredlog.controller.controller import KafkaController
    from tieredlog.server.admin_requests import (
        KioAlterPartitionReassignmentsRequest,
        KioElectLeadersRequest,
        KioListPartitionReassignmentsRequest,
    )


class ClusterAdminServer(Protocol):
    """What these handlers need of the broker: the controller (None until this broker is a cluster member)."""

    @property
    def controller(self) -> KafkaController | None: ...


async def handle_elect_leaders(ctx: RequestContext[ClusterAdminServer], req: KioElectLeadersRequest) -> dict:
    controller = ctx.broker.controller
    if controller is None:
        return {"error_code": ErrorCode.not_controller, "replica_election_results": []}
    partitions = None if req.topic_partitions is None else [
        (t.topic, p) for t in req.topic_partitions for p in t.partitions]
    answer = await asyncio.wrap_future(controller.elect_leaders(election_type(req, ctx.api_version), partitions))
    return {"throttle_time": 0, **answer}


async def handle_alter_partition_reassignments(ctx: RequestContext[ClusterAdminServer], req: KioAlterPartitionReassignmentsRequest
                                              ) -> dict:
    controller = ctx.broker.controller
    if controller is None:
        return {"error_code": ErrorCode.not_controller, "responses": []}
    targets: dict[tuple[str, int], Iterable[int] | None] = {
        (t.name, p.partition_index): (None if p.replicas is None else list(p.replicas))
        for t in req.topics for p in t.partitions}
    answer = await asyncio.wrap_future(controller.alter_partition_reassignments(targets))
    return {"throttle_time": 0, **answer}


async def handle_list_partition_reassignments(ctx: RequestContext[ClusterAdminServer], req: KioListPartitionReassignmentsRequest
                                             ) -> dict:
    controller = ctx.broker.controller
    if controller is None:
        return {"error_code": ErrorCode.not_controller, "topics": []}
    partitions = None if req.topics is None else [(t.name, p) for t in req.topics for p in t.partition_indexes]
    answer = await asyncio.wrap_future(controller.list_partition_reassignments(partitions))
    return {"throttle_time": 0, **answer}


def handlers() -> dict[int, Handler[ClusterAdminServer]]:
    return {
        ELECT_LEADERS: handle_elect_leaders,
        ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
        LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    }
