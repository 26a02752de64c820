"""The controller of Kafka's ZooKeeper mode (see docs/cluster.md).

- ``placement``: replica assignment of new topics and partitions (pure).
- ``election``: the leader election strategies (pure).
- ``context``: ``ControllerContext``, what the controller knows of the cluster.
- ``state_machines``: the replica and partition state machines.
- ``request_batch``: LeaderAndIsr / UpdateMetadata / StopReplica, one of each per broker per event.
- ``channel``: ``ControllerChannelManager``, one sender thread per broker.
- ``topic_deletion``, ``reassignment``: the long-running procedures.
- ``controller``: ``KafkaController``, the event thread that runs it all.
"""

from tieredlog.controller.channel import BrokerRequestSender, ControllerChannelManager
from tieredlog.controller.config import ControllerConfig
from tieredlog.controller.controller import KafkaController
from tieredlog.controller.election import ElectionType
from tieredlog.controller.placement import AdminOperationError, RackAwareMode, assign_replicas

__all__ = [
    "AdminOperationError",
    "BrokerRequestSender",
    "ControllerChannelManager",
    "ControllerConfig",
    "ElectionType",
    "KafkaController",
    "RackAwareMode",
    "assign_replicas",
]
