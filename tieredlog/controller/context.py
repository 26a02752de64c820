"""What the controller knows of the cluster (Kafka's ``ControllerContext``).

Read from ZooKeeper when this broker becomes the controller and kept current by the controller's
own writes and watches. Owned by the controller event thread: nothing else reads or writes it.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, NamedTuple

from tieredlog.cluster.znodes import BrokerInfo, LeaderIsrAndControllerEpoch, ReplicaAssignment
from tieredlog.log.types import TopicPartition

__all__ = ["ControllerContext", "LeaderAndIsr", "LeaderIsrAndEpoch", "PartitionAndReplica", "PartitionState",
           "ReplicaState", "TopicPartition"]  # TopicPartition: the project's one, re-exported for the controller


class PartitionAndReplica(NamedTuple):
    topic_partition: TopicPartition
    replica: int

    def __str__(self) -> str:
        return f"[Topic={self.topic_partition.topic},Partition={self.topic_partition.partition},Replica={self.replica}]"


class PartitionState(enum.Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"

    def __str__(self) -> str:
        return self.value


class ReplicaState(enum.Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leadership as the controller writes it; ``partition_epoch`` is the version of its
    state znode, the condition of the next write."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    leader_recovery_state: int = 0
    partition_epoch: int = 0

    def new_leader_and_isr(self, leader: int, isr: Iterable[int]) -> "LeaderAndIsr":
        """A new leader or ISR chosen by the controller: the leader epoch goes up by one."""
        return replace(self, leader=leader, isr=tuple(isr), leader_epoch=self.leader_epoch + 1)

    def __str__(self) -> str:
        isr = ", ".join(str(r) for r in self.isr)
        return (f"LeaderAndIsr(leader={self.leader}, leaderEpoch={self.leader_epoch}, isr=List({isr}), "
                f"leaderRecoveryState={'RECOVERING' if self.leader_recovery_state else 'RECOVERED'}, "
                f"partitionEpoch={self.partition_epoch})")


@dataclass(frozen=True)
class LeaderIsrAndEpoch:
    """Kafka's LeaderIsrAndControllerEpoch: the leadership and the epoch of the controller that wrote it."""

    leader_and_isr: LeaderAndIsr
    controller_epoch: int

    @classmethod
    def from_znode(cls, state: LeaderIsrAndControllerEpoch, version: int) -> "LeaderIsrAndEpoch":
        return cls(LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.leader_recovery_state, version),
                   state.controller_epoch)

    def to_znode(self) -> LeaderIsrAndControllerEpoch:
        lai = self.leader_and_isr
        return LeaderIsrAndControllerEpoch(lai.leader, lai.leader_epoch, lai.isr, self.controller_epoch,
                                           lai.leader_recovery_state)

    def __str__(self) -> str:
        return f"(Leader:{self.leader_and_isr.leader},ISR:{','.join(map(str, self.leader_and_isr.isr))}," \
               f"LeaderRecoveryState:RECOVERED,LeaderEpoch:{self.leader_and_isr.leader_epoch}," \
               f"ZkVersion:{self.leader_and_isr.partition_epoch},ControllerEpoch:{self.controller_epoch})"


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    live_broker_epochs: dict[int, int] = field(default_factory=dict)  # broker epoch: czxid of /brokers/ids/<id>
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    all_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    assignments: dict[str, dict[int, ReplicaAssignment]] = field(default_factory=dict)
    leadership: dict[TopicPartition, LeaderIsrAndEpoch] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    replica_states: dict[PartitionAndReplica, ReplicaState] = field(default_factory=dict)
    partitions_being_reassigned: set[TopicPartition] = field(default_factory=set)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_with_deletion_started: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)

    # ---- brokers -----------------------------------------------------------------------------------

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def live_broker_ids(self) -> set[int]:
        """Live brokers that are not shutting down: the ones that may lead or join an ISR."""
        return set(self.live_brokers) - self.shutting_down_broker_ids

    def add_live_brokers(self, brokers: dict[int, tuple[BrokerInfo, int]]) -> None:
        for broker_id, (info, epoch) in brokers.items():
            self.live_brokers[broker_id] = info
            self.live_broker_epochs[broker_id] = epoch

    def remove_live_brokers(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            self.live_brokers.pop(broker_id, None)
            self.live_broker_epochs.pop(broker_id, None)

    def is_replica_online(self, broker_id: int, include_shutting_down: bool = False) -> bool:
        return broker_id in (self.live_or_shutting_down_broker_ids if include_shutting_down else self.live_broker_ids)

    # ---- topics and assignments --------------------------------------------------------------------

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for name, tid in self.topic_ids.items():
            if tid == topic_id:
                return name
        return None

    def all_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t in sorted(self.assignments) for p in sorted(self.assignments[t])]

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def full_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        return self.assignments.get(tp.topic, {}).get(tp.partition, ReplicaAssignment(()))

    def replica_assignment(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.full_assignment(tp).replicas

    def update_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.assignments.setdefault(tp.topic, {})[tp.partition] = assignment
        if assignment.adding_replicas or assignment.removing_replicas:
            self.partitions_being_reassigned.add(tp)
        else:
            self.partitions_being_reassigned.discard(tp)

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replica_assignment(tp)]

    def replicas_on_brokers(self, broker_ids: set[int]) -> list[PartitionAndReplica]:
        return [PartitionAndReplica(tp, r) for tp in self.all_partitions() for r in self.replica_assignment(tp)
                if r in broker_ids]

    def replicas_for_partitions(self, partitions: Iterable[TopicPartition]) -> list[PartitionAndReplica]:
        return [PartitionAndReplica(tp, r) for tp in partitions for r in self.replica_assignment(tp)]

    def replicas_for_topic(self, topic: str) -> list[PartitionAndReplica]:
        return self.replicas_for_partitions(self.partitions_for_topic(topic))

    def partition_leaders_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return sorted(tp for tp, info in self.leadership.items()
                      if info.leader_and_isr.leader == broker_id and len(self.replica_assignment(tp)) > 1)

    def partitions_with_leaders(self) -> list[TopicPartition]:
        return sorted(self.leadership)

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        return sorted(tp for tp, info in self.leadership.items()
                      if not self.is_replica_online(info.leader_and_isr.leader)
                      and not self.is_topic_queued_up_for_deletion(tp.topic))

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_for_topic(topic):
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.partitions_being_reassigned.discard(tp)
            for replica in self.replica_assignment(tp):
                self.replica_states.pop(PartitionAndReplica(tp, replica), None)
        self.assignments.pop(topic, None)
        self.all_topics.discard(topic)
        self.topic_ids.pop(topic, None)
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)

    # ---- states ------------------------------------------------------------------------------------

    def partitions_in_states(self, *states: PartitionState) -> list[TopicPartition]:
        return sorted(tp for tp, s in self.partition_states.items() if s in states)

    def replicas_in_state(self, topic: str, state: ReplicaState) -> list[PartitionAndReplica]:
        return [r for r in self.replicas_for_topic(topic) if self.replica_states.get(r) is state]

    def is_any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(self.replica_states.get(r) is state for r in self.replicas_for_topic(topic))

    def are_all_replicas_in_state(self, topic: str, state: ReplicaState) -> bool:
        return all(self.replica_states.get(r) is state for r in self.replicas_for_topic(topic))

    # ---- topic deletion ----------------------------------------------------------------------------

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def is_topic_deletion_in_progress(self, topic: str) -> bool:
        return self.is_any_replica_in_state(topic, ReplicaState.DELETION_STARTED)

    def leaders(self) -> Iterator[tuple[TopicPartition, LeaderIsrAndEpoch]]:
        return iter(sorted(self.leadership.items()))
