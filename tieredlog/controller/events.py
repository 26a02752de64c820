"""The events of the controller's queue (Kafka's ControllerEvent types).

ZooKeeper watches, timers, the channel's response callbacks and the broker's request handlers only
put one of these on the queue; the controller event thread processes them one at a time. Events that
carry a ``Future`` are answered on that thread, or rejected with NOT_CONTROLLER when this broker is
not the active controller.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from tieredlog.controller.context import TopicPartition
from tieredlog.controller.election import ElectionType


class ControllerEvent:
    """Base of every event. ``reject`` answers a waiting caller when the event cannot be processed."""

    def reject(self, error: ErrorCode, message: str | None = None) -> None:
        pass


def complete(future: Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


@dataclass
class BecomeController(ControllerEvent):
    epoch: int


@dataclass
class Resign(ControllerEvent):
    pass


@dataclass
class Reconnected(ControllerEvent):
    """The ZooKeeper connection came back: watches must be set again and the znodes read again."""


@dataclass
class BrokerChange(ControllerEvent):
    pass


@dataclass
class TopicChange(ControllerEvent):
    pass


@dataclass
class PartitionModifications(ControllerEvent):
    topic: str


@dataclass
class TopicDeletion(ControllerEvent):
    pass


@dataclass
class PartitionReassignmentZnode(ControllerEvent):
    """/admin/reassign_partitions was created (or changed)."""


@dataclass
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    pass


@dataclass
class TopicDeletionStopReplicaResponseReceived(ControllerEvent):
    broker_id: int
    request_error: int  # top-level error code; -1: no response (the request failed)
    partition_errors: dict[TopicPartition, int]
    deleted_partitions: frozenset[TopicPartition]


@dataclass
class AlterPartitionReceived(ControllerEvent):
    request: Any  # the decoded AlterPartition v2/v3 request entity
    future: Future[dict[str, Any]] = field(default_factory=Future)

    def reject(self, error: ErrorCode, message: str | None = None) -> None:
        complete(self.future, {"error_code": error, "topics": []})


@dataclass
class ControlledShutdownReceived(ControllerEvent):
    broker_id: int
    broker_epoch: int
    future: Future[tuple[int, list[tuple[str, int]]]] = field(default_factory=Future)

    def reject(self, error: ErrorCode, message: str | None = None) -> None:
        complete(self.future, (error.value, []))


@dataclass
class ElectLeadersReceived(ControllerEvent):
    election_type: ElectionType
    partitions: list[TopicPartition] | None  # None: every partition
    future: Future[dict[str, Any]] = field(default_factory=Future)

    def reject(self, error: ErrorCode, message: str | None = None) -> None:
        complete(self.future, {"error_code": error, "replica_election_results": []})


@dataclass
class AlterPartitionReassignmentsReceived(ControllerEvent):
    targets: dict[TopicPartition, tuple[int, ...] | None]  # None: cancel
    future: Future[dict[str, Any]] = field(default_factory=Future)

    def reject(self, error: ErrorCode, message: str | None = None) -> None:
        complete(self.future, {"error_code": error, "error_message": message, "responses": []})


@dataclass
class ListPartitionReassignmentsReceived(ControllerEvent):
    partitions: list[TopicPartition] | None
    future: Future[dict[str, Any]] = field(default_factory=Future)

    def reject(self, error: ErrorCode, message: str | None = None) -> None:
        complete(self.future, {"error_code": error, "error_message": message, "topics": []})


@dataclass
class Barrier(ControllerEvent):
    """Completes once every event queued before it has been processed."""

    future: Future[None] = field(default_factory=Future)

    def reject(self, error: ErrorCode, message: str | None = None) -> None:
        complete(self.future, None)


@dataclass(frozen=True)
class AlterPartitionItem:
    """One partition of an AlterPartition request, whatever its version."""

    topic_id: uuid.UUID
    partition_index: int
    leader_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch; -1 before v3)
    leader_recovery_state: int
    partition_epoch: int
